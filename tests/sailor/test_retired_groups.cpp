// RetiredGroups destroys what it is given on a thread of its own: retiring
// an object whose destructor blocks (as a Gloo group's does while its work
// with a lost peer is in flight) must not block the caller, and everything
// retired is destroyed by the time the holder is.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "sailor/runtime/retired_groups.h"

namespace fleet::sailor::runtime {
namespace {

// Blocks in its destructor until `release` is set (or a minute passes, so a
// broken holder fails the test instead of hanging it), and records how.
struct BlockingGroup {
  BlockingGroup(std::shared_future<void> r, std::atomic<int>* d, std::atomic<bool>* in_time, std::thread::id* on)
      : release(std::move(r)), destroyed(d), released_in_time(in_time), destroyed_on(on) {}
  BlockingGroup(const BlockingGroup&) = delete;
  BlockingGroup& operator=(const BlockingGroup&) = delete;
  std::shared_future<void> release;
  std::atomic<int>* destroyed;
  std::atomic<bool>* released_in_time;
  std::thread::id* destroyed_on;
  ~BlockingGroup() {
    *released_in_time = release.wait_for(std::chrono::minutes(1)) == std::future_status::ready;
    *destroyed_on = std::this_thread::get_id();
    ++*destroyed;
  }
};

TEST(RetiredGroups, RetiringDoesNotWaitForADestructorThatBlocks) {
  std::promise<void> release;
  std::atomic<int> destroyed{0};
  std::atomic<bool> released_in_time{false};
  std::thread::id destroyed_on;
  {
    RetiredGroups retired;
    retired.retire(
        std::make_unique<BlockingGroup>(release.get_future().share(), &destroyed, &released_in_time, &destroyed_on));
    // Had retire() destroyed it here, the destructor would still be waiting
    // for the release below (and give up after a minute, failing the test).
    EXPECT_EQ(destroyed.load(), 0);
    EXPECT_EQ(retired.pending(), 1u);
    release.set_value();
  }  // the holder's destructor waits for the destroying thread
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_TRUE(released_in_time.load());
  EXPECT_NE(destroyed_on, std::this_thread::get_id());
}

TEST(RetiredGroups, EverythingRetiredIsDestroyedAndEmptyPointersAreIgnored) {
  auto counter = std::make_shared<int>(0);
  std::weak_ptr<int> watch = counter;
  {
    RetiredGroups retired;
    retired.retire(std::unique_ptr<int>());
    for (int i = 0; i < 5; ++i) retired.retire(std::make_unique<std::shared_ptr<int>>(counter));
    counter.reset();
  }
  EXPECT_TRUE(watch.expired());  // every copy of the shared pointer was destroyed
}

TEST(RetiredGroups, AHolderThatRetiredNothingStartsNoThread) {
  RetiredGroups retired;
  EXPECT_EQ(retired.pending(), 0u);
}

}  // namespace
}  // namespace fleet::sailor::runtime
