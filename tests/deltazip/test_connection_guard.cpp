// dz-serve's per-client connection cap and request deadlines.
#include <gtest/gtest.h>

#include "deltazip/serve/connection_guard.h"

namespace fleet::deltazip {
namespace {

using Clock = ConnectionGuard::Clock;

TEST(ConnectionGuard, AClientPastItsCapIsRefusedUntilOneOfItsConnectionsCloses) {
  ConnectionGuard guard(2, 0);
  auto a = guard.admit("10.0.0.1:1000", "10.0.0.1");
  auto b = guard.admit("10.0.0.1:1001", "10.0.0.1");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(guard.admit("10.0.0.1:1002", "10.0.0.1"), nullptr);
  auto other = guard.admit("10.0.0.2:1000", "10.0.0.2");  // another client has its own places
  EXPECT_NE(other, nullptr);
  EXPECT_EQ(guard.open_from("10.0.0.1"), 2);
  a.reset();
  EXPECT_EQ(guard.open_from("10.0.0.1"), 1);
  EXPECT_NE(guard.admit("10.0.0.1:1003", "10.0.0.1"), nullptr);  // admitted, and closed again at once
  b.reset();
  other.reset();
  EXPECT_EQ(guard.open_from("10.0.0.1"), 0);
  EXPECT_EQ(guard.open_from("10.0.0.2"), 0);
}

TEST(ConnectionGuard, NoCapAdmitsEveryConnection) {
  ConnectionGuard guard(0, 0);
  std::vector<std::unique_ptr<ConnectionGuard::Ticket>> held;
  for (int i = 0; i < 1000; ++i) held.push_back(guard.admit("c:" + std::to_string(i), "c"));
  for (const auto& t : held) EXPECT_NE(t, nullptr);
  EXPECT_EQ(guard.open_from("c"), 1000);
}

TEST(ConnectionGuard, ARequestHasADeadlineUntilItArrives) {
  ConnectionGuard guard(0, 5);
  auto t = guard.admit("h:1", "h");
  EXPECT_EQ(t->deadline(), Clock::time_point::max());  // between requests the keep-alive wait applies instead
  const auto before = Clock::now();
  t->request_started();
  const auto deadline = t->deadline();
  EXPECT_GE(deadline, before + std::chrono::seconds(5));
  EXPECT_LE(deadline, Clock::now() + std::chrono::seconds(5));
  guard.request_arrived("h:1");
  EXPECT_EQ(t->deadline(), Clock::time_point::max());
  guard.request_arrived("h:unknown");  // a connection the guard does not know: nothing happens
  t->request_started();                // the next request on the connection
  EXPECT_NE(t->deadline(), Clock::time_point::max());
}

TEST(ConnectionGuard, NoTimeoutMeansNoDeadline) {
  ConnectionGuard guard(0, 0);
  auto t = guard.admit("h:1", "h");
  t->request_started();
  EXPECT_EQ(t->deadline(), Clock::time_point::max());
}

}  // namespace
}  // namespace fleet::deltazip
