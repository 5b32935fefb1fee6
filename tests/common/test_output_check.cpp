// Outputs checked before work: writable folders, --force rules, never an input.
#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/output_check.h"
#include "test_util.h"

namespace fleet {
namespace {

std::string refusal(const OutputCheck& check, Existing existing, bool force = false) {
  try {
    check.check(existing, force);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputCheck, AcceptsNewFilesAndFoldersInWritableFolders) {
  testing::TempDir dir;
  write_file_atomically(dir / "in.txt", "x");
  EXPECT_EQ(refusal(OutputCheck().input(dir / "in.txt", "--in").file(dir / "out.txt", "-o"), Existing::kNeedsForce),
            "");
  EXPECT_EQ(refusal(OutputCheck().folder(dir / "model", "-o"), Existing::kNeedsForce), "");
  EXPECT_EQ(refusal(OutputCheck().file("-", "-o").input("-", "--in"), Existing::kReplace), "");
}

TEST(OutputCheck, RefusesWhatCannotBeWritten) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "sub");
  EXPECT_NE(refusal(OutputCheck().file(dir / "missing" / "f", "-o"), Existing::kReplace).find("does not exist"),
            std::string::npos);
  EXPECT_NE(refusal(OutputCheck().file(dir / "sub", "-o"), Existing::kReplace).find("is a folder"), std::string::npos);
  write_file_atomically(dir / "file", "x");
  EXPECT_NE(refusal(OutputCheck().folder(dir / "file", "-o"), Existing::kReplace).find("not a folder"),
            std::string::npos);
  EXPECT_NE(refusal(OutputCheck().folder("-", "-o"), Existing::kReplace).find("standard output"), std::string::npos);
  EXPECT_NE(refusal(OutputCheck().file("-", "--a").file("-", "--b"), Existing::kReplace).find("only one output"),
            std::string::npos);
  EXPECT_NE(refusal(OutputCheck().input("-", "--a").input("-", "--b"), Existing::kReplace).find("only one input"),
            std::string::npos);
}

TEST(OutputCheck, ExistingOutputsFollowTheForceRules) {
  testing::TempDir dir;
  write_file_atomically(dir / "result", "old");
  std::filesystem::create_directory(dir / "empty");
  std::filesystem::create_directory(dir / "full");
  write_file_atomically(dir / "full" / "f", "x");
  EXPECT_NE(refusal(OutputCheck().file(dir / "result", "-o"), Existing::kNeedsForce).find("pass --force"),
            std::string::npos);
  EXPECT_EQ(refusal(OutputCheck().file(dir / "result", "-o"), Existing::kNeedsForce, true), "");
  EXPECT_EQ(refusal(OutputCheck().file(dir / "result", "-o"), Existing::kReplace), "");
  EXPECT_EQ(refusal(OutputCheck().folder(dir / "empty", "-o"), Existing::kNeedsForce), "");
  EXPECT_NE(refusal(OutputCheck().folder(dir / "full", "-o"), Existing::kNeedsForce).find("not empty"),
            std::string::npos);
}

TEST(OutputCheck, NeverReplacesOrEntersAnInputEvenWithForce) {
  testing::TempDir dir;
  std::filesystem::create_directory(dir / "base");
  write_file_atomically(dir / "base" / "model.safetensors", "weights");
  write_file_atomically(dir / "data.txt", "text");
  auto refused = [&](const OutputCheck& c, const char* why) {
    EXPECT_NE(refusal(c, Existing::kNeedsForce, true).find(why), std::string::npos)
        << refusal(c, Existing::kNeedsForce, true);
  };
  refused(OutputCheck().input(dir / "base", "--base").file(dir / "base" / "model.safetensors", "-o"),
          "lies inside the input");
  refused(OutputCheck().input(dir / "data.txt", "--data").file(dir / "data.txt", "-o"), "is also the input");
  refused(OutputCheck().input(dir / "base", "--base").folder(dir / "base", "-o"), "is also the input");
  refused(OutputCheck().input(dir / "base" / "model.safetensors", "--w").folder(dir.path(), "-o"),
          "would remove the input");
  // The same file reached another way: a relative path with "..", a symbolic link.
  std::filesystem::create_symlink(dir / "data.txt", dir / "link.txt");
  refused(OutputCheck().input(dir / "data.txt", "--data").file(dir / "link.txt", "-o"), "is also the input");
  refused(OutputCheck().input(dir / "data.txt", "--data").file(dir / "base" / ".." / "data.txt", "-o"),
          "is also the input");
  refused(OutputCheck().file(dir / "a", "--trace").file(dir / "base" / ".." / "a", "--csv"), "is also the output");
  EXPECT_EQ(
      refusal(OutputCheck().input(dir / "base", "--base").file(dir / "base-copy.h5", "-o"), Existing::kNeedsForce), "");
}

}  // namespace
}  // namespace fleet
