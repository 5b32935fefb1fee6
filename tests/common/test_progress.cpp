#include <gtest/gtest.h>

#include "common/progress.h"

namespace fleet {
namespace {

TEST(Progress, DurationFormat) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(65), "1:05");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, BarShowsCountsRateAndEta) {
  const ProgressState s{"layers", "layers", 25, 100, 5.0};  // 5 layers/s, 75 left
  const std::string bar = render_progress_bar(s, 60);
  EXPECT_LE(bar.size(), 60u);
  EXPECT_NE(bar.find("25/100"), std::string::npos) << bar;
  EXPECT_NE(bar.find("5 layers/s"), std::string::npos) << bar;
  EXPECT_NE(bar.find("ETA 0:15"), std::string::npos) << bar;
  EXPECT_NE(bar.find("[#"), std::string::npos) << bar;
  EXPECT_EQ(render_progress_line(s), "layers: 25/100 layers (25%), 5 layers/s ETA 0:15");
}

TEST(Progress, FinishedAndUnknownTotals) {
  EXPECT_EQ(render_progress_line({"done", "steps", 10, 10, 2.0}), "done: 10/10 steps (100%), 5 steps/s in 0:02");
  EXPECT_EQ(render_progress_line({"stream", "tokens", 300, 0, 3.0}), "stream: 300 tokens, 100 tokens/s");
}

TEST(Progress, LogLinesAreRateLimitedByTheClock) {
  auto now = Progress::Clock::time_point{};
  Progress p("work", 10, "items", ProgressStyle::kLogLines);
  p.set_clock([&] { return now; });
  p.set_log_interval(std::chrono::seconds(10));
  int lines = 0;
  p.set_sink([&](const std::string&) { ++lines; });
  for (int i = 0; i < 12; ++i) {  // 36 s in steps of 3 s, past the total
    now += std::chrono::seconds(3);
    p.advance();
  }
  EXPECT_EQ(lines, 3);  // at 12 s, 24 s and 36 s
  p.finish();
  p.finish();  // idempotent
  EXPECT_EQ(lines, 4);
}

TEST(Progress, WorkTooShortToShowProgressFinishesSilently) {
  auto now = Progress::Clock::time_point{};
  int lines = 0;
  auto run = [&](std::chrono::seconds step) {
    Progress p("work", 3, "items", ProgressStyle::kLogLines);
    p.set_clock([&] { return now; });
    p.set_sink([&](const std::string&) { ++lines; });
    for (int i = 0; i < 3; ++i) {
      now += step;
      p.advance();
    }
    p.finish_if_shown();
  };
  run(std::chrono::seconds(1));  // 3 s: under the 10 s interval
  EXPECT_EQ(lines, 0);
  run(std::chrono::seconds(4));  // a line at 12 s, then the final one
  EXPECT_EQ(lines, 2);
}

}  // namespace
}  // namespace fleet
