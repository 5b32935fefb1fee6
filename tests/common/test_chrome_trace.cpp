#include <gtest/gtest.h>

#include <cmath>

#include "common/chrome_trace.h"
#include "common/error.h"
#include "common/json.h"
#include "test_util.h"

namespace fleet {
namespace {

TEST(ChromeTrace, WritesEventsPerfettoUnderstands) {
  testing::TempDir dir;
  ChromeTrace trace;
  trace.set_process_name(1, "pipeline");
  trace.set_thread_name(1, 0, "stage 0 / replica 0", 0);
  trace.add_complete(1, 0, "forward mb0", "compute", 0.0, 1250.5, {{"layers", "0-12"}});
  trace.add_instant(1, 0, "replan", "elastic", 2000);
  trace.add_counter(1, "memory", 10, "GiB", 25.5);
  trace.write(dir / "t.json");

  const JsonDocument doc = load_json_file(dir / "t.json");
  const auto events = doc.root().at("traceEvents").elements();
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(doc.root().get<std::string>("displayTimeUnit"), "ms");
  const JsonValue fwd = events[3];
  EXPECT_EQ(fwd.get<std::string>("ph"), "X");
  EXPECT_DOUBLE_EQ(fwd.get<double>("dur"), 1250.5);
  EXPECT_EQ(fwd.at("args").get<std::string>("layers"), "0-12");
  EXPECT_EQ(events[0].at("args").get<std::string>("name"), "pipeline");
  EXPECT_EQ(events[2].get<std::string>("name"), "thread_sort_index");
  EXPECT_DOUBLE_EQ(events[5].at("args").get<double>("GiB"), 25.5);
}

TEST(ChromeTrace, RejectsBadTimes) {
  ChromeTrace trace;
  EXPECT_THROW(trace.add_complete(0, 0, "x", "c", 0, -1), InputError);
  EXPECT_THROW(trace.add_complete(0, 0, "x", "c", NAN, 1), InputError);
}

}  // namespace
}  // namespace fleet
