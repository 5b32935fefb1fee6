#include <gtest/gtest.h>

#include <vector>

#include "cli/cli.h"
#include "common/error.h"
#include "common/logging.h"

namespace fleet {
namespace {

int run_tool(Tool& tool, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return tool.run(static_cast<int>(argv.size()), argv.data());
}

TEST(Logging, FlagBeatsQuietBeatsVerboseBeatsEnvironment) {
  EXPECT_EQ(resolve_log_level({0, false, ""}, nullptr), spdlog::level::info);
  EXPECT_EQ(resolve_log_level({0, false, ""}, "error"), spdlog::level::err);
  EXPECT_EQ(resolve_log_level({1, false, ""}, "error"), spdlog::level::debug);
  EXPECT_EQ(resolve_log_level({2, false, ""}, nullptr), spdlog::level::trace);
  EXPECT_EQ(resolve_log_level({2, true, ""}, nullptr), spdlog::level::warn);
  EXPECT_EQ(resolve_log_level({2, true, "critical"}, "debug"), spdlog::level::critical);
  EXPECT_EQ(resolve_log_level({0, false, "WARNING"}, nullptr), spdlog::level::warn);
}

TEST(Logging, BadLevelIsAUsageError) {
  EXPECT_THROW(parse_log_level("loud"), UsageError);
  try {
    resolve_log_level({}, "chatty");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(kLogLevelEnvVar), std::string::npos);
  }
}

TEST(Tool, RunsTheChosenSubcommandAndMapsErrorsToExitCodes) {
  Tool tool("demo-tool", "test tool");
  int value = 0;
  auto* ok = tool.add_command("ok", "succeeds", [&] { return value; });
  ok->add_option("--value", value);
  EXPECT_EQ(run_tool(tool, {"demo-tool", "ok", "--value", "5", "-q"}), 5);  // the action's code
  Tool t2("demo-tool", "x");
  t2.add_command("bad-input", "", []() -> int { throw InputError("bad"); });
  EXPECT_EQ(run_tool(t2, {"demo-tool", "bad-input"}), 2);
  Tool t3("demo-tool", "x");
  t3.add_command("no-plan", "", []() -> int { throw NoSolutionError("none"); });
  EXPECT_EQ(run_tool(t3, {"demo-tool", "no-plan"}), 3);
  Tool t4("demo-tool", "x");
  t4.add_command("crash", "", []() -> int { throw std::runtime_error("boom"); });
  EXPECT_EQ(run_tool(t4, {"demo-tool", "crash"}), 1);
}

TEST(Tool, UsageErrorsExitTwo) {
  Tool tool("demo-tool", "x");
  tool.add_command("ok", "", [] { return 0; });
  EXPECT_EQ(run_tool(tool, {"demo-tool", "--no-such-flag"}), 2);
  Tool t2("demo-tool", "x");
  t2.add_command("ok", "", [] { return 0; });
  EXPECT_EQ(run_tool(t2, {"demo-tool"}), 2);  // subcommand required
  Tool t3("demo-tool", "x");
  t3.add_command("ok", "", [] { return 0; });
  EXPECT_EQ(run_tool(t3, {"demo-tool", "ok", "--log-level", "loud"}), 2);
}

TEST(Tool, HelpAndVersionExitZero) {
  Tool tool("demo-tool", "x");
  tool.set_version_details([] { return std::string("GPUs: none (test)"); });
  EXPECT_EQ(run_tool(tool, {"demo-tool", "--help"}), 0);
  Tool t2("demo-tool", "x");
  t2.set_version_details([] { return std::string("GPUs: none (test)"); });
  EXPECT_EQ(run_tool(t2, {"demo-tool", "--version"}), 0);
  const std::string text = t2.version_text();
  EXPECT_EQ(text.rfind("demo-tool (gpufleet) ", 0), 0u);
  EXPECT_NE(text.find("GPUs: none (test)"), std::string::npos);
}

TEST(Tool, CommonFlagsAreAcceptedAfterTheSubcommand) {
  Tool tool("demo-tool", "x");
  bool ran = false;
  tool.add_command("go", "", [&] {
    ran = true;
    return 0;
  });
  EXPECT_EQ(run_tool(tool, {"demo-tool", "go", "-v", "--log-level", "error"}), 0);
  EXPECT_TRUE(ran);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
}

}  // namespace
}  // namespace fleet
