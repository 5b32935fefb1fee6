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

TEST(Error, InputQuotedInAnErrorStaysOnOneLine) {
  // A field name or value with a newline (found by the input fuzzers) must not split the error line.
  EXPECT_STREQ(InputError("unknown field '\name'", {"w.json", "/clients/0/\name", std::nullopt}).what(),
               "w.json: /clients/0/\\name: unknown field '\\name'");
  EXPECT_STREQ(InputError(std::string("a\r\tb\x1b\x7f\0", 7)).what(), "a\\r\\tb\\x1b\\x7f\\x00");
  EXPECT_STREQ(InputError("caf\xc3\xa9").what(), "caf\xc3\xa9");  // UTF-8 stays as it is
}

TEST(Error, ErrnoMessageNamesTheCall) { EXPECT_EQ(errno_message("open", ENOENT), "open: No such file or directory"); }

}  // namespace
}  // namespace fleet
