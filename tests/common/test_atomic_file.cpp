#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/temporary_folder.h"
#include "test_util.h"

namespace fleet {
namespace {

TEST(AtomicFile, WritesAndReplaces) {
  testing::TempDir dir;
  write_file_atomically(dir / "out.txt", "first");
  EXPECT_EQ(read_file(dir / "out.txt"), "first");
  write_file_atomically(dir / "out.txt", "second, longer");
  EXPECT_EQ(read_file(dir / "out.txt"), "second, longer");
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"out.txt"});
}

TEST(AtomicFile, FailureMidwayKeepsThePreviousFileAndLeavesNoTemporary) {
  testing::TempDir dir;
  write_file_atomically(dir / "result.json", "previous result");
  EXPECT_THROW(write_file_atomically(dir / "result.json",
                                     [](AtomicFileWriter& w) {
                                       w.write(std::string(1 << 20, 'x'));  // a megabyte already written
                                       throw RuntimeFailure("simulated failure while writing");
                                     }),
               RuntimeFailure);
  EXPECT_EQ(read_file(dir / "result.json"), "previous result");
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"result.json"});
}

TEST(AtomicFile, TemporaryFileLivesBesideTheTargetUntilCommit) {
  testing::TempDir dir;
  {
    AtomicFileWriter w(dir / "a.bin");
    EXPECT_EQ(w.temp_path().parent_path(), dir.path());
    w.write("partial");
    EXPECT_TRUE(std::filesystem::exists(w.temp_path()));
    EXPECT_FALSE(std::filesystem::exists(dir / "a.bin"));
  }  // destroyed without commit
  EXPECT_TRUE(testing::list_dir(dir.path()).empty());
}

TEST(AtomicFile, CommitAfterAnotherLibraryWroteByName) {
  testing::TempDir dir;
  AtomicFileWriter w(dir / "lib.out");
  w.close_fd();
  FILE* f = std::fopen(w.temp_path().c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("written by name", f);
  std::fclose(f);
  w.commit();
  EXPECT_EQ(read_file(dir / "lib.out"), "written by name");
}

TEST(AtomicFile, ResultHasUmaskPermissions) {
  testing::TempDir dir;
  const mode_t old = ::umask(022);
  write_file_atomically(dir / "p", "x");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "p").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, ClearErrorsForImpossibleTargets) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "sub");
  try {
    write_file_atomically(dir / "sub", "x");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos);
  }
  EXPECT_THROW(write_file_atomically(dir / "missing" / "f.txt", "x"), UsageError);
  EXPECT_TRUE(std::filesystem::is_directory(dir / "sub"));
}

TEST(FileIo, MapsAndReads) {
  testing::TempDir dir;
  write_file_atomically(dir / "m", "hello");
  MappedFile map(dir / "m");
  ASSERT_EQ(map.size(), 5u);
  EXPECT_EQ(static_cast<char>(map.bytes()[4]), 'o');
  MappedFile moved = std::move(map);
  EXPECT_EQ(moved.size(), 5u);
  write_file_atomically(dir / "empty", "");
  EXPECT_EQ(MappedFile(dir / "empty").size(), 0u);
  EXPECT_THROW(MappedFile(dir / "absent"), InputError);
}

TEST(FileIo, ReadsAtMostTheCap) {
  testing::TempDir dir;
  write_file_atomically(dir / "small", std::string(1 << 20, 'x'));
  EXPECT_EQ(read_file(dir / "small", 1 << 20).size(), 1u << 20);
  write_file_atomically(dir / "large", std::string((1 << 20) + 1, 'x'));
  try {
    read_file(dir / "large", 1 << 20);
    FAIL() << "a file over the cap was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 1 MiB"), std::string::npos) << e.what();
  }
  // A pipe has no size to check first: the read itself stops at the cap
  // (without one, an endless writer would fill memory).
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  std::signal(SIGPIPE, SIG_IGN);  // the writer finds the pipe closed once the read gives up
  std::thread writer([fd = ends[1]] {
    const std::string block(65536, 'y');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  });
  const std::string through_pipe = "/proc/self/fd/" + std::to_string(ends[0]);
  try {
    read_file(through_pipe, 1 << 20);
    ADD_FAILURE() << "an endless pipe was read to its end";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is more than 1 MiB"), std::string::npos) << e.what();
  }
  ::close(ends[0]);
  writer.join();
  // A device is refused before anything is read: /dev/zero never ends.
  try {
    read_file("/dev/zero");
    FAIL() << "/dev/zero was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/zero: is a device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fleet

namespace fleet {
namespace {

TEST(AtomicDirectory, ReplacesAWholeFolderOrNothing) {
  testing::TempDir dir;
  const auto target = dir.path() / "model";
  write_directory_atomically(target, [](const std::filesystem::path& tmp) {
    write_file_atomically(tmp / "a.txt", "first");
    write_file_atomically(tmp / "b.txt", "first");
  });
  EXPECT_EQ(read_file(target / "a.txt"), "first");
  // A failure halfway leaves the previous folder as it was and no temporary behind.
  EXPECT_THROW(write_directory_atomically(target,
                                          [](const std::filesystem::path& tmp) {
                                            write_file_atomically(tmp / "a.txt", "second");
                                            throw IoError("disk full");
                                          }),
               IoError);
  EXPECT_EQ(read_file(target / "a.txt"), "first");
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"model"});
  write_directory_atomically(target,
                             [](const std::filesystem::path& tmp) { write_file_atomically(tmp / "a.txt", "second"); });
  EXPECT_EQ(read_file(target / "a.txt"), "second");
  EXPECT_FALSE(std::filesystem::exists(target / "b.txt"));
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"model"});
  EXPECT_THROW(write_directory_atomically(dir.path() / "missing" / "x", [](const std::filesystem::path&) {}),
               UsageError);
}

TEST(TemporaryFolder, IsPrivateUnderTmpdirAndGoesWithEverythingInIt) {
  testing::TempDir outer;
  const char* saved = std::getenv("TMPDIR");
  const std::string previous = saved != nullptr ? saved : "";
  ::setenv("TMPDIR", outer.path().c_str(), 1);
  std::filesystem::path made;
  {
    TemporaryFolder folder("fleet-unit");
    made = folder.path();
    EXPECT_EQ(made.parent_path(), outer.path());
    EXPECT_EQ(made.filename().string().rfind("fleet-unit-", 0), 0u) << made;
    struct stat st {};
    ASSERT_EQ(::stat(made.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::filesystem::create_directories(made / "sub");
    write_file_atomically(made / "sub" / "file", "data");
    TemporaryFolder second("fleet-unit");
    EXPECT_NE(second.path(), made);
  }
  if (saved != nullptr)
    ::setenv("TMPDIR", previous.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  EXPECT_FALSE(std::filesystem::exists(made));
  EXPECT_TRUE(testing::list_dir(outer.path()).empty());
}
}  // namespace
}  // namespace fleet
