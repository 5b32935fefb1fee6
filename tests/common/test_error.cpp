#include <gtest/gtest.h>

#include "common/error.h"

namespace fleet {
namespace {

TEST(Error, FormatsContextInOneLine) {
  InputError e("unknown dtype 'Q8'", ErrorContext{"model.safetensors", "lm_head.weight", 24});
  EXPECT_STREQ(e.what(), "model.safetensors: lm_head.weight: at byte 24: unknown dtype 'Q8'");
  EXPECT_EQ(e.message(), "unknown dtype 'Q8'");
  EXPECT_EQ(e.context().file, "model.safetensors");
  EXPECT_EQ(*e.context().offset, 24u);
}

TEST(Error, LeavesOutEmptyParts) {
  EXPECT_STREQ(IoError("cannot open", {"a.json", "", std::nullopt}).what(), "a.json: cannot open");
  EXPECT_STREQ(UsageError("bad flag").what(), "bad flag");
  EXPECT_STREQ(InputError("x", {"", "/a/b", std::nullopt}).what(), "/a/b: x");
}

TEST(Error, ExitCodesFollowTheConvention) {
  EXPECT_EQ(exit_code_for(UsageError("u")), ExitCode::kUsage);
  EXPECT_EQ(exit_code_for(InputError("i")), ExitCode::kUsage);
  EXPECT_EQ(exit_code_for(IoError("o")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(RuntimeFailure("r")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(NoSolutionError("n")), ExitCode::kNoSolution);
  EXPECT_EQ(exit_code_for(std::runtime_error("plain")), ExitCode::kFailure);
  EXPECT_EQ(static_cast<int>(ExitCode::kNoSolution), 3);
}

TEST(Error, ErrnoMessageNamesTheCall) {
  EXPECT_EQ(errno_message("open", ENOENT), "open: No such file or directory");
}

}  // namespace
}  // namespace fleet
