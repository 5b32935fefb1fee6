// The live scheduler's protocol and decisions, in one process: ClientGate
// objects play the client processes, a LiveScheduler polled by the test
// plays the scheduler, both on an in-memory segment. The constructed
// situations are those of the simulator's policy tests.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>

#include "orion/device_spec.h"
#include "orion/kernel_name.h"
#include "orion/live/client_gate.h"
#include "orion/live/live_report.h"
#include "orion/live/live_scheduler.h"
#include "test_util.h"

namespace fleet::orion::live {
namespace {

KernelRecord record(const std::string& name, std::int64_t sms, double duration_us, KernelClass cls,
                    std::int64_t grid = 0) {
  KernelRecord r;
  r.name = name;
  r.sm_usage = sms;
  r.duration_ns = duration_us * 1000;
  r.profile = cls;
  r.grid_blocks = grid;
  return r;
}

LiveConfig two_clients(const std::string& policy) {
  LiveConfig c;
  c.device = device_by_name("a100");
  c.policy = policy;
  LiveClient hp{"hp", true, false, KernelProfile{}};
  hp.profile->kernels = {record("hp_gemm", 108, 1000, KernelClass::kCompute),
                         record("hp_copy", 20, 1000, KernelClass::kMemory)};
  LiveClient be{"be", false, true, KernelProfile{}};
  // be_big: one wave of 400 us, more than the HP request (2 ms alone) can
  // ever spare within orion's default bound (1.15x: 300 us at its start).
  be.profile->kernels = {record("be_big", 100, 400, KernelClass::kCompute),
                         record("be_small", 4, 10, KernelClass::kMemory)};
  c.clients = {hp, be};
  // Held launches stay held however long a loaded machine takes to poll;
  // the tests of the bounded wait set it.
  c.max_be_wait_us = 0;
  return c;
}

// A dead process id: a child that has exited and been reaped.
int dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

struct Fixture {
  explicit Fixture(const std::string& policy, LiveConfig config = {}) : segment(Segment::in_memory()) {
    segment.header()->scheduler_pid = getpid();
    if (config.clients.empty()) config = two_clients(policy);
    scheduler = std::make_unique<LiveScheduler>(segment.header(), config);
    EXPECT_TRUE(hp.connect(segment.header(), 0, kRoleHighPriority));
    EXPECT_TRUE(be.connect(segment.header(), 1, kRoleBestEffort));
    scheduler->poll();
  }
  // Begins an HP request, launches the profiled kernel `name` in it and
  // lets the scheduler see both; returns the launch (not completed).
  LaunchEntry* hp_request_with(const char* name) {
    hp.marker(kRequestBegin);
    LaunchEntry* e = hp.before_launch(hp.intern_name(name), LaunchGeometry{});
    hp.after_launch(e, true);
    scheduler->poll();
    return e;
  }
  // Polls about `ms` milliseconds, less once `flag` is set; returns it.
  bool poll_until(const std::atomic<bool>& flag, int ms) {
    for (int i = 0; i < ms * 10 && !flag; ++i) {
      scheduler->poll();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return flag;
  }
  Segment segment;
  std::unique_ptr<LiveScheduler> scheduler;
  ClientGate hp, be;
};

// Starts a BE launch on its own thread (it may block) and polls the
// scheduler until the launch is posted.
// An HP launch on its own thread: temporal sharing may hold it.
struct HpLaunch {
  explicit HpLaunch(Fixture& f)
      : thread([this, &f] {
          entry = f.hp.before_launch(f.hp.intern_name("hp_gemm"), LaunchGeometry{});
          returned = true;
        }) {}
  ~HpLaunch() {
    if (thread.joinable()) thread.join();
  }
  LaunchEntry* entry = nullptr;
  std::atomic<bool> returned{false};
  std::thread thread;  // last: starts once the members above exist
};

struct PendingLaunch {
  PendingLaunch(Fixture& f, const char* name) : fixture(f) {
    const std::uint32_t index = f.be.intern_name(name);
    thread = std::thread([this, index] {
      entry = fixture.be.before_launch(index, LaunchGeometry{1, 128, 0});
      returned = true;
    });
    for (int i = 0; i < 10000 && !returned; ++i) {
      fixture.scheduler->poll();
      if (fixture.scheduler->stats()[1].kernels > launches_before) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // Polls until the launch is released (true) or `ms` pass (false).
  bool released_within(int ms) {
    for (int i = 0; i < ms * 10 && !returned; ++i) {
      fixture.scheduler->poll();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return returned;
  }
  ~PendingLaunch() {
    if (thread.joinable()) thread.join();
  }
  Fixture& fixture;
  std::int64_t launches_before = fixture.scheduler->stats()[1].kernels;
  std::atomic<bool> returned{false};
  LaunchEntry* entry = nullptr;
  std::thread thread;
};

TEST(KernelNameKey, MangledDemangledAndBaseNamesMeet) {
  EXPECT_EQ(kernel_name_key("_ZN2at6native29vectorized_elementwise_kernelILi4EfEEviT0_"),
            "at::native::vectorized_elementwise_kernel");
  EXPECT_EQ(kernel_name_key("void at::native::vectorized_elementwise_kernel<4, float>(int, float)"),
            "at::native::vectorized_elementwise_kernel");
  EXPECT_EQ(kernel_name_key("void at::native::(anonymous namespace)::max_pool_forward_nchw<float>(int)"),
            "at::native::(anonymous namespace)::max_pool_forward_nchw");
  EXPECT_EQ(kernel_name_key("volta_sgemm_128x64_nn"), "volta_sgemm_128x64_nn");
}

TEST(LiveScheduler, HighPriorityLaunchNeverWaitsEvenWithoutAScheduler) {
  Fixture f("orion");
  // Nobody polls: an HP launch still goes straight through.
  LaunchEntry* e = f.hp.before_launch(f.hp.intern_name("hp_gemm"), LaunchGeometry{1000, 256, 0});
  ASSERT_NE(e, nullptr);
  f.hp.after_launch(e, true);
  EXPECT_EQ(e->state.load(), kLaunched);
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[0].kernels, 1);
  f.hp.completed(e);
  f.scheduler->poll();
  EXPECT_EQ(e->state.load(), kFree);
}

TEST(ClientGate, HpLaunchesInsideARequestCompleteAtItsEndMarker) {
  Fixture f("orion");
  const std::uint32_t name = f.hp.intern_name("hp_gemm");
  // Outside a request: tracked with an event as usual.
  LaunchEntry* before = f.hp.before_launch(name, LaunchGeometry{});
  f.hp.after_launch(before, true);
  EXPECT_FALSE(f.hp.defer_completion(before));
  f.hp.completed(before);

  f.hp.marker(kRequestBegin);
  LaunchEntry* a = f.hp.before_launch(name, LaunchGeometry{});
  f.hp.after_launch(a, true);
  LaunchEntry* b = f.hp.before_launch(name, LaunchGeometry{});
  f.hp.after_launch(b, true);
  EXPECT_TRUE(f.hp.defer_completion(a));
  EXPECT_TRUE(f.hp.defer_completion(b));
  f.scheduler->poll();
  EXPECT_EQ(a->state.load(), kLaunched);  // in flight for the scheduler: the request is active
  PendingLaunch big(f, "be_big");
  EXPECT_FALSE(big.released_within(20));
  f.hp.marker(kRequestEnd);  // reports both complete
  EXPECT_TRUE(big.released_within(2000));
  EXPECT_EQ(a->state.load(), kFree);
  EXPECT_EQ(b->state.load(), kFree);
  f.be.after_launch(big.entry, true);
  EXPECT_FALSE(f.be.defer_completion(big.entry));  // best-effort launches are always tracked
  f.be.completed(big.entry);
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[0].requests, 1);
}

TEST(ClientGate, DeferredLaunchesStayWellInsideTheRing) {
  Fixture f("mps");
  const std::uint32_t name = f.hp.intern_name("hp_copy");
  f.hp.marker(kRequestBegin);
  std::size_t deferred = 0;
  std::vector<LaunchEntry*> tracked;
  for (std::size_t i = 0; i < ClientGate::kMaxDeferred + 10; ++i) {
    LaunchEntry* e = f.hp.before_launch(name, LaunchGeometry{});
    f.hp.after_launch(e, true);
    if (f.hp.defer_completion(e))
      ++deferred;
    else
      tracked.push_back(e);
  }
  EXPECT_EQ(deferred, ClientGate::kMaxDeferred);
  EXPECT_LT(ClientGate::kMaxDeferred, static_cast<std::size_t>(kRingEntries));
  for (LaunchEntry* e : tracked) f.hp.completed(e);
  f.hp.marker(kRequestEnd);
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[0].kernels, static_cast<std::int64_t>(ClientGate::kMaxDeferred + 10));
}

TEST(LiveScheduler, OrionHoldsALargeBestEffortKernelDuringAnHpRequest) {
  Fixture f("orion");
  LaunchEntry* h = f.hp_request_with("hp_gemm");
  {
    PendingLaunch big(f, "be_big");  // a 400 us wave: beyond the HP request's spare time
    EXPECT_FALSE(big.released_within(30));
    f.hp.completed(h);
    f.hp.marker(kRequestEnd);
    EXPECT_TRUE(big.released_within(2000));
    ASSERT_NE(big.entry, nullptr);
    EXPECT_EQ(big.entry->state.load(), kReleased);
    f.be.after_launch(big.entry, true);
    f.be.completed(big.entry);
  }
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[1].held, 1);
  EXPECT_EQ(f.scheduler->stats()[0].requests, 1);
}

TEST(LiveScheduler, OrionLetsAComplementarySmallKernelRunBesideHp) {
  LiveConfig config = two_clients("orion");
  config.policy_options.sm_threshold = 10;
  // A fixed slack: the spare time of the default bound shrinks as the
  // request's kernel takes longer than its profile, which here it does for
  // as long as the test runs.
  config.policy_options.hp_slowdown_limit = 0;
  Fixture f("orion", config);
  LaunchEntry* h = f.hp_request_with("hp_gemm");  // compute-bound
  PendingLaunch small(f, "be_small");             // 4 SMs, memory-bound
  EXPECT_TRUE(small.released_within(2000));
  f.be.completed(small.entry);
  f.hp.completed(h);
}

TEST(LiveScheduler, OrionHoldsBestEffortWorkOnceTheHpRequestHasNoTimeToSpare) {
  // The HP request takes 2 ms alone; within orion's default bound (1.15x)
  // it may lose 300 us. Its first kernel is still running 3 ms after the
  // request began: nothing is spare, so even a 10 us BE kernel waits for
  // the request to end. With a fixed slack (--hp-slowdown 0) it would go.
  Fixture f("orion");
  const auto begun = std::chrono::steady_clock::now();
  LaunchEntry* h = f.hp_request_with("hp_copy");  // memory-bound
  while (std::chrono::steady_clock::now() - begun < std::chrono::milliseconds(3)) f.scheduler->poll();
  {
    PendingLaunch small(f, "be_small");  // 4 SMs, 10 us
    EXPECT_FALSE(small.released_within(20));
    f.hp.completed(h);
    f.hp.marker(kRequestEnd);
    EXPECT_TRUE(small.released_within(2000));
    f.be.after_launch(small.entry, true);
    f.be.completed(small.entry);
  }
  LiveConfig fixed = two_clients("orion");
  fixed.policy_options.hp_slowdown_limit = 0;
  Fixture g("orion", fixed);
  LaunchEntry* k = g.hp_request_with("hp_copy");
  PendingLaunch small(g, "be_small");
  EXPECT_TRUE(small.released_within(2000));  // 20 us (same class: twice) within the 50 us slack
  g.be.after_launch(small.entry, true);
  g.be.completed(small.entry);
  g.hp.completed(k);
}

TEST(LiveScheduler, OrionLetsBestEffortWorkRunBesideAnHpRequestWhoseProgressItCannotSee) {
  // An HP request of one 20 s kernel, limit 1.01: it may lose 200 ms. Its
  // kernel reports no completion inside the request, so 250 ms in, the
  // scheduler cannot tell how far it got. Counted as if none of it had run,
  // nothing would be spare; but nothing it was charged for has been lost,
  // and it cannot be late before 20 s: a small BE kernel goes beside it.
  LiveConfig config = two_clients("orion");
  config.clients[0].profile->kernels = {record("hp_gemm", 108, 20e6, KernelClass::kCompute)};
  config.policy_options.hp_slowdown_limit = 1.01;
  Fixture f("orion", config);
  const auto begun = std::chrono::steady_clock::now();
  LaunchEntry* h = f.hp_request_with("hp_gemm");
  while (std::chrono::steady_clock::now() - begun < std::chrono::milliseconds(250)) f.scheduler->poll();
  PendingLaunch small(f, "be_small");
  const bool beside = small.released_within(2000);
  EXPECT_TRUE(beside);
  f.hp.completed(h);
  f.hp.marker(kRequestEnd);
  if (!beside) {
    EXPECT_TRUE(small.released_within(2000));  // after the request, so that the test ends
  }
  f.be.after_launch(small.entry, true);
  f.be.completed(small.entry);
}

TEST(LiveScheduler, OrionChargesWithTheContentionModelItIsGiven) {
  // An HP request of one 10 s memory kernel on 20 SMs, limit 1 + 1e-7: it
  // may lose 1 us (and, so long, is never late for a slow machine). A 10 us memory kernel on 4 SMs beside it needs no SM it
  // needs, and by the default model the two fit in the memory bandwidth
  // (load 0.93 x 24/108 < 1): it costs nothing and goes. With a model in
  // which a memory kernel on all SMs would use 10x the bandwidth (load 2.2)
  // it costs 5.5 us, more than the request may lose: it waits.
  for (const bool heavy : {false, true}) {
    LiveConfig config = two_clients("orion");
    config.clients[0].profile->kernels = {record("hp_copy", 20, 10e6, KernelClass::kMemory)};
    config.policy_options.hp_slowdown_limit = 1 + 1e-7;
    if (heavy) config.contention.memory_use[1] = 10;  // index 1: memory-bound kernels
    Fixture f("orion", config);
    LaunchEntry* h = f.hp_request_with("hp_copy");
    PendingLaunch small(f, "be_small");
    const bool beside = small.released_within(heavy ? 20 : 2000);
    EXPECT_EQ(beside, !heavy);
    f.hp.completed(h);
    f.hp.marker(kRequestEnd);
    if (!beside) {
      EXPECT_TRUE(small.released_within(2000));  // after the request
    }
    f.be.after_launch(small.entry, true);
    f.be.completed(small.entry);
  }
}

TEST(LiveScheduler, OrionReleasesABestEffortLaunchHeldForTheMaximumWait) {
  // An HP request that never ends holds a large BE kernel; after the wait
  // (5 ms here) it goes anyway, counted as forced.
  LiveConfig config = two_clients("orion");
  config.max_be_wait_us = 5000;
  Fixture f("orion", config);
  LaunchEntry* h = f.hp_request_with("hp_gemm");
  {
    PendingLaunch big(f, "be_big");
    EXPECT_TRUE(big.released_within(20000));
    EXPECT_GE(big.entry->release_ns - big.entry->post_ns, 5'000'000);
    f.be.after_launch(big.entry, true);
    f.be.completed(big.entry);
  }
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[1].forced, 1);
  EXPECT_EQ(f.scheduler->stats()[1].held, 1);
  f.hp.completed(h);
}

TEST(LiveScheduler, TemporalSharingGivesABestEffortRequestHeldTooLongTheNextBoundary) {
  // The HP client runs request after request. A BE request kept waiting for
  // the wait (5 ms) goes at the next boundary, before the HP's next
  // request, which waits for it in turn.
  LiveConfig config = two_clients("temporal");
  config.max_be_wait_us = 5000;
  Fixture f("temporal", config);
  f.hp.marker(kRequestBegin);
  LaunchEntry* first = nullptr;
  {
    HpLaunch launch(f);
    ASSERT_TRUE(f.poll_until(launch.returned, 2000));  // the GPU was free: the HP owns it
    launch.thread.join();
    first = launch.entry;
  }
  f.be.marker(kRequestBegin);
  PendingLaunch be_kernel(f, "be_small");
  const auto posted = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - posted < std::chrono::milliseconds(6)) f.scheduler->poll();
  EXPECT_FALSE(be_kernel.returned);  // the HP's request is open: temporal sharing holds it
  // The HP ends its request and at once begins the next one.
  f.hp.after_launch(first, true);
  f.hp.completed(first);
  f.hp.marker(kRequestEnd);
  f.hp.marker(kRequestBegin);
  HpLaunch second(f);
  const bool be_went_first = be_kernel.released_within(2000);
  EXPECT_TRUE(be_went_first);
  if (be_went_first) {
    EXPECT_FALSE(f.poll_until(second.returned, 30));  // the BE request has the GPU now
  }
  // Whoever went first finishes; then the other goes (without the rule the
  // HP's second request would keep the BE launch waiting: end it too).
  if (!be_went_first) {
    f.poll_until(second.returned, 2000);
    f.hp.after_launch(second.entry, true);
    f.hp.completed(second.entry);
    f.hp.marker(kRequestEnd);
    f.poll_until(be_kernel.returned, 2000);
  }
  f.be.after_launch(be_kernel.entry, true);
  f.be.completed(be_kernel.entry);
  f.be.marker(kRequestEnd);
  EXPECT_TRUE(f.poll_until(second.returned, 2000));
  second.thread.join();
  if (be_went_first) {
    f.hp.after_launch(second.entry, true);
    f.hp.completed(second.entry);
  }
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[1].forced, 1);
}

TEST(LiveScheduler, MpsReleasesEverythingAtOnce) {
  Fixture f("mps");
  f.hp.marker(kRequestBegin);
  LaunchEntry* h = f.hp.before_launch(f.hp.intern_name("hp_gemm"), LaunchGeometry{});
  f.hp.after_launch(h, true);
  PendingLaunch big(f, "be_big");
  EXPECT_TRUE(big.released_within(2000));
  EXPECT_EQ(f.scheduler->stats()[1].held, 0);
  f.be.completed(big.entry);
  f.hp.completed(h);
  EXPECT_EQ(f.segment.header()->hp_waits, 0u);
  EXPECT_EQ(f.segment.header()->boost_hp_streams, 0u);
}

TEST(LiveScheduler, ReefNeedsAShorterSmallerKernelThanHps) {
  Fixture f("reef");
  LaunchEntry* h = f.hp_request_with("hp_copy");  // 20 SMs, 1 ms
  {
    PendingLaunch small(f, "be_small");  // 4 SMs, 10 us: fits beside
    EXPECT_TRUE(small.released_within(2000));
    f.be.completed(small.entry);
  }
  PendingLaunch big(f, "be_big");  // 100 SMs: must wait for the request to end
  EXPECT_FALSE(big.released_within(30));
  f.hp.completed(h);
  f.hp.marker(kRequestEnd);
  EXPECT_TRUE(big.released_within(2000));
  f.be.completed(big.entry);
}

TEST(LiveScheduler, TemporalSharingMakesTheHpClientWaitForTheGpu) {
  Fixture f("temporal");
  EXPECT_EQ(f.segment.header()->hp_waits, 1u);
  f.be.marker(kRequestBegin);
  PendingLaunch be_kernel(f, "be_small");
  ASSERT_TRUE(be_kernel.released_within(2000));
  // HP now has to wait until the BE request ends.
  HpLaunch hp(f);
  EXPECT_FALSE(f.poll_until(hp.returned, 30));
  f.be.completed(be_kernel.entry);
  f.be.marker(kRequestEnd);
  EXPECT_TRUE(f.poll_until(hp.returned, 2000));
  hp.thread.join();
  f.hp.completed(hp.entry);
}

TEST(LiveScheduler, TemporalSharingGivesAWaitingHpTheGpuBetweenBestEffortRequests) {
  // The BE client ends a request and at once begins the next: both markers
  // are in the ring before the scheduler looks. An HP launch that was
  // waiting goes first; the BE's next request waits for it.
  Fixture f("temporal");
  f.be.marker(kRequestBegin);
  PendingLaunch first(f, "be_small");
  ASSERT_TRUE(first.released_within(2000));
  HpLaunch hp(f);
  std::atomic<bool>& hp_returned = hp.returned;
  // Wait for the state: the scheduler has seen the HP launch and holds it
  // (a generous deadline only so that a broken build cannot hang).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (f.scheduler->stats()[0].kernels == 0 && std::chrono::steady_clock::now() < deadline) {
    f.scheduler->poll();
    std::this_thread::yield();
  }
  ASSERT_EQ(f.scheduler->stats()[0].kernels, 1);
  EXPECT_FALSE(hp_returned);
  f.be.completed(first.entry);
  f.be.marker(kRequestEnd);
  f.be.marker(kRequestBegin);
  PendingLaunch second(f, "be_small");
  // Whichever goes first, the other must not: poll until one is released.
  while (!hp_returned && !second.returned && std::chrono::steady_clock::now() < deadline) {
    f.scheduler->poll();
    std::this_thread::yield();
  }
  const bool hp_first = hp_returned, be_first = second.returned;
  EXPECT_TRUE(hp_first && !be_first) << "the BE's next request ran before the waiting HP launch";
  if (!hp_first) {
    // Let the BE's request end so that the HP launch is released and the test ends.
    ASSERT_TRUE(second.released_within(20000));
    f.be.completed(second.entry);
    f.be.marker(kRequestEnd);
    while (!hp_returned && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(60)) f.scheduler->poll();
  }
  hp.thread.join();
  f.hp.completed(hp.entry);
  if (hp_first) {
    EXPECT_TRUE(second.released_within(20000));
    f.be.completed(second.entry);
  }
}

TEST(LiveScheduler, TickTockNeedsProfiles) {
  LiveConfig config = two_clients("tick-tock");
  config.clients[0].profile.reset();
  Segment segment = Segment::in_memory();
  EXPECT_NE(fleet::testing::error_of([&] { LiveScheduler s(segment.header(), config); }).find("profile"),
            std::string::npos);
}

TEST(LiveScheduler, UnknownKernelsAreJudgedByTheirLaunchGeometry) {
  LiveConfig config = two_clients("orion");
  config.policy_options.sm_threshold = 10;
  Fixture f("orion", config);
  LaunchEntry* h = f.hp_request_with("not_profiled");
  // 10000 blocks of 1024 threads need every SM: held during the request.
  const std::uint32_t name = f.be.intern_name("also_not_profiled");
  std::atomic<bool> returned{false};
  LaunchEntry* e = nullptr;
  std::thread t([&] {
    e = f.be.before_launch(name, LaunchGeometry{10000, 1024, 0});
    returned = true;
  });
  for (int i = 0; i < 300; ++i) {
    f.scheduler->poll();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_FALSE(returned);
  f.hp.completed(h);
  f.hp.marker(kRequestEnd);
  for (int i = 0; i < 20000 && !returned; ++i) {
    f.scheduler->poll();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  t.join();
  f.be.completed(e);
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[0].unmatched, 1);
  EXPECT_EQ(f.scheduler->stats()[1].unmatched, 1);
}

TEST(LiveScheduler, AClientThatFindsTheSchedulerGoneSaysSoOnce) {
  // A client that starts after the scheduler died (its segment file left
  // behind by a kill -9) runs ungated with one notice naming why.
  fleet::testing::TempDir dir;
  const std::string path = (dir / "segment").string();
  Segment segment = Segment::create(path);
  segment.header()->scheduler_pid = dead_pid();
  ::setenv(kEnvSegment, path.c_str(), 1);
  ::setenv(kEnvRole, "be", 1);
  ::unsetenv(kEnvQuiet);
  ::testing::internal::CaptureStderr();
  ClientGate gate;
  EXPECT_FALSE(gate.connect_from_environment());
  EXPECT_FALSE(gate.connect_from_environment());  // once
  const std::string said = ::testing::internal::GetCapturedStderr();
  ::unsetenv(kEnvSegment);
  ::unsetenv(kEnvRole);
  EXPECT_EQ(said, "orion: the scheduler is not running; running ungated from now on\n");
}

TEST(LiveScheduler, ClientsRunUngatedWhenTheSchedulerIsGone) {
  Segment segment = Segment::in_memory();
  segment.header()->scheduler_pid = dead_pid();
  ClientGate be;
  EXPECT_FALSE(be.connect(segment.header(), 1, kRoleBestEffort));
  EXPECT_EQ(be.before_launch(0, LaunchGeometry{}), nullptr);  // returns at once, ungated

  // A scheduler that dies while a launch waits: the launch goes ahead.
  Fixture f("orion");
  f.hp_request_with("hp_gemm");  // an HP request in flight holds the big BE kernel
  PendingLaunch big(f, "be_big");
  EXPECT_FALSE(big.released_within(20));
  f.segment.header()->scheduler_pid = dead_pid();
  big.thread.join();
  EXPECT_TRUE(big.returned);
  EXPECT_EQ(big.entry, nullptr);
  EXPECT_FALSE(f.be.gated());
}

TEST(LiveScheduler, ADeadClientsSlotIsFreedAndItsWorkForgotten) {
  Fixture f("orion");
  f.hp_request_with("hp_gemm");
  ClientSlot* hp_slot = nullptr;
  for (ClientSlot& s : f.segment.header()->slots) {
    if (s.state.load() == kSlotActive && s.role == kRoleHighPriority) hp_slot = &s;
  }
  ASSERT_NE(hp_slot, nullptr);
  hp_slot->pid = dead_pid();  // as if the HP process died with its kernel in flight
  EXPECT_EQ(f.scheduler->reap_dead_clients(), 1);
  EXPECT_EQ(hp_slot->state.load(), kSlotFree);
  EXPECT_EQ(f.scheduler->stats()[0].lost_processes, 1);
  // Its request never ended: kept as begun, and left when the slot was freed.
  EXPECT_EQ(f.scheduler->stats()[0].requests, 0);
  ASSERT_EQ(f.scheduler->stats()[0].unfinished_requests.size(), 1u);
  const LiveClientStats::Unfinished u = f.scheduler->stats()[0].unfinished_requests[0];
  EXPECT_GE(u.begin_ns, f.scheduler->stats()[0].first_ns);
  EXPECT_GE(u.left_ns, u.begin_ns);
  // Its kernel and request were still running: the command was at work
  // until it was found gone, not only until its last launch.
  EXPECT_EQ(f.scheduler->stats()[0].last_ns, u.left_ns);
  // With the HP kernel forgotten, a large BE kernel is not held.
  PendingLaunch big(f, "be_big");
  EXPECT_TRUE(big.released_within(2000));
  f.be.completed(big.entry);
}

// BE kernels longer than Orion's DUR_THRESHOLD (2.5 % of the 2 ms HP
// request): only one may be outstanding at a time.
LiveConfig long_best_effort_kernels(double release_ahead_us) {
  LiveConfig c = two_clients("orion");
  c.clients[1].profile->kernels = {record("be_long", 100, 1000, KernelClass::kCompute)};
  c.release_ahead_us = release_ahead_us;
  return c;
}

// Two long BE kernels, the second posted `pause` after the first was
// released: only the first's completion releases the second.
void expect_release_on_completion(Fixture& f, std::chrono::milliseconds pause) {
  PendingLaunch first(f, "be_long");
  ASSERT_TRUE(first.released_within(2000));
  f.be.after_launch(first.entry, true);
  std::this_thread::sleep_for(pause);
  PendingLaunch second(f, "be_long");
  EXPECT_FALSE(second.released_within(30));
  f.be.completed(first.entry);
  EXPECT_TRUE(second.released_within(2000));
  f.be.after_launch(second.entry, true);
  f.be.completed(second.entry);
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[1].released_ahead, 0);
}

TEST(LiveScheduler, WithoutReleaseAheadTheNextLongKernelWaitsForACompletion) {
  Fixture f("orion", long_best_effort_kernels(0));
  expect_release_on_completion(f, std::chrono::milliseconds(0));
}

// Two long BE kernels, the second posted while the first runs: with a lead
// of a minute, the first (1 ms) is due to end well within it, so the second
// is released before the first completes. Returns the releases counted ahead.
std::int64_t release_two_before_a_completion(Fixture& f) {
  PendingLaunch first(f, "be_long");
  if (!first.released_within(2000)) {
    ADD_FAILURE() << "the first kernel was not released";
    return -1;
  }
  f.be.after_launch(first.entry, true);
  PendingLaunch second(f, "be_long");
  EXPECT_TRUE(second.released_within(2000));  // the first has not completed
  EXPECT_EQ(first.entry->state.load(), kReleased);
  f.be.after_launch(second.entry, true);
  f.be.completed(first.entry);
  f.be.completed(second.entry);
  f.scheduler->poll();
  return f.scheduler->stats()[1].released_ahead;
}

TEST(LiveScheduler, ReleaseAheadQueuesTheNextKernelBeforeTheCompletionArrives) {
  Fixture f("orion", long_best_effort_kernels(60e6));
  EXPECT_EQ(release_two_before_a_completion(f), 1);
  EXPECT_EQ(f.scheduler->stats()[1].held, 0);
}

TEST(LiveScheduler, ReleaseAheadCountsOnlyReleasesThePolicyWouldHaveHeld) {
  // Under mps every kernel goes at once: released before the first
  // completes, the second is not "ahead".
  LiveConfig config = long_best_effort_kernels(60e6);
  config.policy = "mps";
  Fixture f("mps", config);
  EXPECT_EQ(release_two_before_a_completion(f), 0);
  EXPECT_EQ(f.scheduler->stats()[1].kernels, 2);
}

TEST(LiveScheduler, ReleaseAheadWakesTheSchedulerAtTheLead) {
  // 10 s kernels with a 5 s lead: the scheduler, idle otherwise, must wake
  // 5 s after the first kernel's release to queue the held second one.
  LiveConfig config = long_best_effort_kernels(5e6);
  config.clients[1].profile->kernels[0].duration_ns = 10e9;
  Fixture f("orion", config);
  const std::int64_t before = monotonic_ns();
  PendingLaunch first(f, "be_long");
  ASSERT_TRUE(first.released_within(2000));
  const std::int64_t after = monotonic_ns();
  f.be.after_launch(first.entry, true);
  EXPECT_EQ(f.scheduler->next_deadline_ns(monotonic_ns()), 0);  // nothing held: nothing to wake for
  PendingLaunch second(f, "be_long");
  const std::int64_t wake = f.scheduler->next_deadline_ns(monotonic_ns());
  EXPECT_GE(wake, before + 5'000'000'000);
  EXPECT_LE(wake, after + 5'000'000'000);
  f.be.completed(first.entry);
  EXPECT_TRUE(second.released_within(2000));
  f.be.after_launch(second.entry, true);
  f.be.completed(second.entry);
}

TEST(LiveScheduler, ReleaseAheadStopsWhileAKernelOverrunsItsProfile) {
  // A 1 ms lead on 1 ms kernels; the first then runs 20 ms, far past its profile.
  Fixture f("orion", long_best_effort_kernels(1000));
  expect_release_on_completion(f, std::chrono::milliseconds(20));
}

TEST(LiveScheduler, TheRingWrapsAroundWithoutLosingLaunches) {
  Fixture f("mps");
  const std::uint32_t name = f.be.intern_name("be_small");
  std::atomic<bool> done{false};
  std::thread client([&] {
    for (std::uint32_t i = 0; i < 3 * kRingEntries; ++i) {
      LaunchEntry* e = f.be.before_launch(name, LaunchGeometry{});
      ASSERT_NE(e, nullptr);
      f.be.after_launch(e, true);
      f.be.completed(e);
    }
    done = true;
  });
  while (!done) f.scheduler->poll();
  client.join();
  f.scheduler->poll();
  EXPECT_EQ(f.scheduler->stats()[1].kernels, 3 * static_cast<std::int64_t>(kRingEntries));
}

constexpr std::int64_t kS = 1'000'000'000;

// An HP command and a BE command that outlives it, as two clients' statistics.
struct WindowClients {
  LiveClientStats hp, be;
};

WindowClients window_clients() {
  LiveClientStats hp, be;
  hp.name = "hp";
  hp.high_priority = true;
  be.name = "be0";
  // HP: events from 0 to 10 s, a request ending every second.
  hp.first_ns = 1;
  hp.last_ns = 10 * kS;
  for (int t = 1; t <= 10; ++t) {
    hp.request_end_ns.push_back(t * kS);
    hp.latencies_ms.push_back(5);
  }
  // BE: from 1 s to 21 s (it ran on alone, as with --wait-be), a request
  // every 2 s, 400 ms long beside the HP command and 100 ms after it.
  be.first_ns = kS;
  be.last_ns = 21 * kS;
  for (int t = 3; t <= 21; t += 2) {
    be.request_end_ns.push_back(t * kS);
    be.latencies_ms.push_back(t <= 10 ? 400 : 100);
  }
  hp.requests = 10;
  be.requests = 10;
  return {hp, be};
}

TEST(LiveReport, ThroughputAndLatenciesAreCountedInTheWindowEveryClientRanIn) {
  const auto [hp, be] = window_clients();
  // A command that never used CUDA has no events and no say in the window.
  const std::vector<LiveClientStats> stats{hp, be, LiveClientStats{}};
  EXPECT_NEAR(common_window(stats, 0).per_s, 10.0 / 10.0, 1e-9);
  EXPECT_EQ(common_window(stats, 1).completed, 4);  // 3, 5, 7, 9 s end inside [1 s, 10 s]
  EXPECT_NEAR(common_window(stats, 1).per_s, 4.0 / 9.0, 1e-9);
  EXPECT_EQ(common_window(stats, 1).latencies_ms, std::vector<double>(4, 400));
  EXPECT_EQ(common_window(stats, 2).completed, 0);
  EXPECT_EQ(common_window(stats, 2).per_s, 0);
  // The report's latencies are those of the window: the BE's median is its
  // 400 ms beside the HP command, not the 100 ms of most of its requests.
  const nlohmann::json be_row = report_json(stats, "orion")["rows"][1];
  EXPECT_EQ(be_row["requests"], 10);
  EXPECT_NEAR(be_row["p50_ms"].get<double>(), 400, 1e-9);
  EXPECT_NEAR(be_row["p99_ms"].get<double>(), 400, 1e-9);
  // The processes of one command post to rings of their own, so its request
  // ends need not come in order: the window is decided by time.
  LiveClientStats two_processes = be;
  std::swap(two_processes.request_end_ns[1], two_processes.request_end_ns[6]);
  std::swap(two_processes.latencies_ms[1], two_processes.latencies_ms[6]);
  EXPECT_EQ(common_window({hp, two_processes}, 1).completed, 4);
  EXPECT_EQ(common_window({hp, two_processes}, 1).latencies_ms, std::vector<double>(4, 400));
  // The HP command ended the window: nothing to tell.
  EXPECT_EQ(early_window_end_notice(stats), "");
  // A BE command that died at 4 s ends it for the HP command too, and the
  // user is told how much of the HP command's work the figures leave out.
  LiveClientStats died = be;
  died.last_ns = 4 * kS;
  EXPECT_EQ(common_window({hp, died}, 0).completed, 4);
  EXPECT_EQ(early_window_end_notice({hp, died}),
            "be0 ended first, 4.0 s after the start: the report covers the window all commands ran in "
            "(hp: 4 of 10 requests in it, be0: 1 of 10 requests in it)");
  // Alone, a client's window is its own span.
  EXPECT_NEAR(common_window({be}, 0).per_s, 10.0 / 20.0, 1e-9);
  EXPECT_EQ(early_window_end_notice({be}), "");
  // A client that began after another had stopped has an empty window.
  LiveClientStats late = be;
  late.first_ns = 12 * kS;
  EXPECT_EQ(common_window({hp, late}, 1).per_s, 0);
  EXPECT_TRUE(common_window({hp, late}, 1).latencies_ms.empty());
}

TEST(LiveReport, RequestsInFlightAtTheWindowEndHoldTheTailUp) {
  const auto [hp, be] = window_clients();
  // A BE request that began at 8.5 s and ended at 11 s was 1.5 s into its
  // run when the HP command's end closed the window: it is not in the
  // window's latencies, but it holds their tail up (p99 of 400, 400, 400,
  // 400 and at least 1500 ms: rank 3.96).
  LiveClientStats held = be;
  held.latencies_ms[4] = 2500;
  const CommonWindow held_window = common_window({hp, held}, 1);
  EXPECT_EQ(held_window.completed, 4);
  EXPECT_EQ(held_window.in_flight_ages_ms, std::vector<double>{1500});
  const nlohmann::json held_row = report_json({hp, held}, "orion")["rows"][1];
  EXPECT_NEAR(held_row["p99_ms"].get<double>(), 400 + 0.96 * 1100, 1e-6);
  EXPECT_NEAR(held_row["p50_ms"].get<double>(), 400, 1e-9);
  EXPECT_EQ(held_row["in_flight_at_window_end"], 1);
  EXPECT_EQ(report_json({hp, be}, "orion")["rows"][1]["in_flight_at_window_end"], 0);
  // Requests with no end marker, their process gone: one begun at 9 s and
  // stopped at 10.2 s, after the HP command's end closed the window, had
  // run 1 s by then; one begun at 2 s whose process left at 2.5 s was
  // abandoned inside the window and proves nothing about it.
  LiveClientStats stopped = be;
  stopped.unfinished_requests = {{2 * kS, 2 * kS + kS / 2}, {9 * kS, 10 * kS + kS / 5}};
  EXPECT_EQ(common_window({hp, stopped}, 1).in_flight_ages_ms, std::vector<double>{1000});
  EXPECT_EQ(report_json({hp, stopped}, "orion")["rows"][1]["in_flight_at_window_end"], 1);
}

TEST(LiveReport, CommandsWithoutOrWithFewRequestsAreNamedNotGivenFigures) {
  LiveClientStats hp, marked_late, unmarked;
  hp.name = "hp";
  hp.high_priority = true;
  hp.first_ns = 1;
  hp.last_ns = 10 * kS;
  for (int t = 1; t <= 10; ++t) {
    hp.request_end_ns.push_back(t * kS);
    hp.latencies_ms.push_back(t);
  }
  hp.requests = 10;
  // Six requests, but only two of them end before the HP command stopped.
  marked_late.name = "be0";
  marked_late.first_ns = kS;
  marked_late.last_ns = 30 * kS;
  for (int t : {5, 9, 14, 18, 22, 26}) {
    marked_late.request_end_ns.push_back(t * kS);
    marked_late.latencies_ms.push_back(t < 10 ? 4000 : 3000);
  }
  marked_late.requests = 6;
  // A training job that posts no markers: kernels only.
  unmarked.name = "be1";
  unmarked.first_ns = kS;
  unmarked.last_ns = 10 * kS;
  unmarked.kernels = 900;
  const nlohmann::json rows = report_json({hp, marked_late, unmarked}, "orion")["rows"];
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["outcome"], "ok");
  EXPECT_EQ(rows[0]["completed_in_window"], 10);
  EXPECT_NEAR(rows[0]["p50_ms"].get<double>(), 5.5, 1e-9);
  EXPECT_NEAR(rows[0]["p99_ms"].get<double>(), 9.91, 1e-9);
  EXPECT_EQ(rows[1]["outcome"], "too few");
  EXPECT_EQ(rows[1]["requests"], 6);
  EXPECT_EQ(rows[1]["completed_in_window"], 2);
  EXPECT_NEAR(rows[1]["throughput_per_s"].get<double>(), 2.0 / 9.0, 1e-9);
  EXPECT_NEAR(rows[1]["p50_ms"].get<double>(), 4000, 1e-9);  // the two in the window
  EXPECT_EQ(rows[2]["outcome"], "no requests");
  EXPECT_TRUE(rows[2]["p99_ms"].is_null());
  EXPECT_TRUE(rows[2]["throughput_per_s"].is_null());
  EXPECT_NEAR(rows[2]["kernels_per_s"].get<double>(), 100.0, 1e-9);
  // The table shows what the JSON holds, "-" for what it leaves null.
  const std::string table = report_table(report_json({hp, marked_late, unmarked}, "orion"));
  std::istringstream lines(table);
  std::string header, line_hp, line_late, line_unmarked;
  std::getline(lines, header);
  std::getline(lines, line_hp);
  std::getline(lines, line_late);
  std::getline(lines, line_unmarked);
  EXPECT_NE(header.find("outcome"), std::string::npos);
  EXPECT_NE(line_hp.find(" 9.91 "), std::string::npos) << line_hp;
  EXPECT_NE(line_late.find("too few"), std::string::npos) << line_late;
  EXPECT_NE(line_unmarked.find("no requests"), std::string::npos) << line_unmarked;
  EXPECT_EQ(line_unmarked.find("0.00"), std::string::npos) << line_unmarked;
}

TEST(LiveReport, RunsAloneComeFirstAndTheSharedRunIsComparedWithThem) {
  // Requests ending every `every` seconds from 1 s to 10 s, each `ms` long.
  auto client = [&](const char* name, bool hp, int every, double ms) {
    LiveClientStats s;
    s.name = name;
    s.high_priority = hp;
    s.first_ns = 1;
    s.last_ns = 10 * kS;
    for (int t = every; t <= 10; t += every) {
      s.request_end_ns.push_back(t * kS);
      s.latencies_ms.push_back(ms);
    }
    s.requests = static_cast<std::int64_t>(s.latencies_ms.size());
    return s;
  };
  const std::vector<LiveClientStats> shared{client("hp", true, 1, 12), client("be0", false, 2, 300)};
  const std::vector<LiveClientStats> alone{client("hp", true, 1, 8), client("be0", false, 1, 100)};
  const nlohmann::json rows = report_json(shared, "orion", alone)["rows"];
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["policy"], "alone");
  EXPECT_EQ(rows[1]["policy"], "alone");
  EXPECT_EQ(rows[2]["policy"], "orion");
  EXPECT_FALSE(rows[0].contains("p99_vs_alone"));
  EXPECT_NEAR(rows[2]["p99_vs_alone"].get<double>(), 12.0 / 8.0, 1e-9);
  EXPECT_NEAR(rows[2]["throughput_vs_alone"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(rows[3]["p99_vs_alone"].get<double>(), 3.0, 1e-9);
  EXPECT_NEAR(rows[3]["throughput_vs_alone"].get<double>(), 0.5, 1e-9);
  const std::string table = report_table(report_json(shared, "orion", alone));
  EXPECT_NE(table.find("p99/alone"), std::string::npos);
  EXPECT_NE(table.find("\n\norion"), std::string::npos) << table;  // a blank line between the runs
  // A run alone with too few requests gives no ratios.
  const std::vector<LiveClientStats> short_alone{client("hp", true, 1, 8), client("be0", false, 3, 100)};
  const nlohmann::json few = report_json(shared, "orion", short_alone)["rows"];
  EXPECT_EQ(few[1]["outcome"], "too few");
  EXPECT_EQ(few[3]["outcome"], "too few");
  EXPECT_TRUE(few[3]["p99_vs_alone"].is_null());
  EXPECT_TRUE(few[3]["throughput_vs_alone"].is_null());
  EXPECT_EQ(few[2]["outcome"], "ok");
}

}  // namespace
}  // namespace fleet::orion::live
