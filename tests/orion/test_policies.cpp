// Each policy's admission decisions on constructed situations.
#include <gtest/gtest.h>

#include "common/error.h"
#include "orion/policy.h"
#include "sim_fixtures.h"

namespace fleet::orion {
namespace {

using testing::kernel;

struct PolicyFixture : ::testing::Test {
  SimKernel hp_conv = kernel(500, 98, KernelClass::kCompute);
  SimKernel be_small_memory = kernel(50, 20, KernelClass::kMemory);
  SimKernel be_small_compute = kernel(50, 20, KernelClass::kCompute);
  SimKernel be_big_memory = kernel(50, 392, KernelClass::kMemory);
  SimKernel be_unknown = kernel(50, 20, KernelClass::kUnknown);
  Workload w = testing::workload({testing::client("be", {be_small_memory}, false, true, 0),
                                  testing::client("hp", {hp_conv}, true, false, 10, 10)});
  // An HP request of a 200 us memory kernel on 30 SMs, then a 300 us compute kernel on all 80.
  Workload two = testing::workload(
      {testing::client("be", {be_small_memory}, false, true, 0),
       testing::client("hp", {kernel(200, 30, KernelClass::kMemory), kernel(300, 80, KernelClass::kCompute)}, true,
                       false, 10, 10)});

  SchedulerView hp_running() const {
    SchedulerView v;
    v.device_sms = 80;
    v.hp_client = 1;
    v.hp_request_active = true;
    v.hp_current = &hp_conv;
    v.hp_current_done = false;
    v.hp_request_solo_us = 6400;  // DUR_THRESHOLD = 160 us
    return v;
  }
};

TEST_F(PolicyFixture, OrionLetsBestEffortWavesUseTheHpRequestsSpareTime) {
  // The HP request alone: one 500 us kernel on all 80 SMs (no launch
  // overhead); within the default limit (1.15x) it may take 575 us. At its
  // start 75 us are spare. A BE wave beside it holds SMs the HP kernel needs
  // (1 wave) and slows it by 1 - 1/load, the load from the default
  // contention model: compute use 1.0 x 80/80 + the BE's use x 20/80.
  auto orion = make_policy("orion", w);
  SchedulerView v = hp_running();
  v.hp_request_start_us = 0;
  v.now_us = 0;
  auto fits = [&](double us, int sms, KernelClass cls) { return orion->admit(v, 0, 0, 1, kernel(us, sms, cls)); };
  EXPECT_TRUE(orion->admit(v, 1, 0, 1, hp_conv));     // HP always
  EXPECT_TRUE(fits(71, 20, KernelClass::kMemory));    // load 1.05: 71 x 1.048 = 74.4 <= 75
  EXPECT_FALSE(fits(72, 20, KernelClass::kMemory));   // 75.4 > 75
  EXPECT_TRUE(fits(62, 20, KernelClass::kCompute));   // same class, load 1.25: 62 x 1.2 = 74.4
  EXPECT_FALSE(fits(63, 20, KernelClass::kCompute));  // 75.6
  EXPECT_TRUE(fits(66, 20, KernelClass::kUnknown));   // load 1.15: 74.6
  EXPECT_FALSE(fits(67, 20, KernelClass::kUnknown));  // 75.7
  // A kernel of several waves keeps SMs from the HP for one wave at a time:
  // 392 SMs on 80 are 5 waves of 80 SMs (load 1.23: x 1.187), 63 us each
  // here, 64 there.
  EXPECT_TRUE(fits(315, 392, KernelClass::kMemory));
  EXPECT_FALSE(fits(320, 392, KernelClass::kMemory));
  // 50 us later the HP kernel still runs: the request has lost 50 us.
  v.now_us = 50;
  EXPECT_TRUE(fits(23, 20, KernelClass::kMemory));   // 24.1 <= 25
  EXPECT_FALSE(fits(24, 20, KernelClass::kMemory));  // 25.1
  // Its kernel done at 520 us, 55 us left of the bound: past the profile's
  // last kernel (live, a request may run more than profiled) a wave is
  // charged whole, for any class.
  v.now_us = 520;
  v.hp_kernels_done = 1;
  v.hp_current_done = true;
  EXPECT_TRUE(fits(55, 20, KernelClass::kCompute));
  EXPECT_FALSE(fits(60, 20, KernelClass::kCompute));
  // Past the bound nothing goes; with no HP request, anything.
  v.now_us = 600;
  EXPECT_FALSE(fits(1, 1, KernelClass::kMemory));
  v.hp_request_active = false;
  EXPECT_TRUE(fits(5000, 392, KernelClass::kCompute));
}

TEST_F(PolicyFixture, OrionBoundsTheLatencyFromArrivalAndSparesTheRequestWaitingBehind) {
  // HP requests of one 500 us kernel, limit 1.15. A arrives at 0; B at 10,
  // so on a GPU of its own B would wait for A and end at 1000: its bound is
  // 10 + 1.15 x 990 = 1148.5. A took 100 us longer beside BE work, so B
  // starts at 600: 1148.5 - 600 - 500 = 48.5 us spare (counted from its
  // start, as before, it would have 75). A memory wave beside it costs
  // 1.048x its length (as in the test above).
  auto orion = make_policy("orion", w);
  SchedulerView v = hp_running();
  v.hp_request_arrival_us = v.hp_request_start_us = v.now_us = 0;
  ASSERT_TRUE(orion->admit(v, 1, 0, 1, hp_conv));  // A
  v.hp_request_arrival_us = 10;
  v.hp_request_start_us = v.now_us = 600;
  ASSERT_TRUE(orion->admit(v, 1, 0, 1, hp_conv));  // B
  auto fits = [&](double us) { return orion->admit(v, 0, 0, 1, kernel(us, 20, KernelClass::kMemory)); };
  EXPECT_TRUE(fits(46));   // 48.2 <= 48.5
  EXPECT_FALSE(fits(47));  // 49.2
  // C arrived at 590 and waits behind B: alone it would end at 1500, its
  // bound 590 + 1.15 x 910 = 1636.5; it can end at 600 + 500 + 500 = 1600
  // at best, so B may lose 36.5 us only.
  v.hp_next_arrival_us = 590;
  EXPECT_TRUE(fits(34));   // 35.6
  EXPECT_FALSE(fits(35));  // 36.7
  // BE work already released may still hold SMs B needs: 10 us less.
  v.be_outstanding_kernels = 1;
  v.be_outstanding_us = 10;
  EXPECT_TRUE(fits(25));   // 26.2 <= 26.5
  EXPECT_FALSE(fits(26));  // 27.2
  // A live scheduler knows no arrivals: the bound counts from the start.
  v.hp_request_arrival_us = v.hp_next_arrival_us = -1;
  v.be_outstanding_kernels = 0;
  v.be_outstanding_us = 0;
  EXPECT_TRUE(fits(71));  // 74.4 <= 75
  EXPECT_FALSE(fits(72));
}

TEST_F(PolicyFixture, OrionCountsWhatItReleasesAgainstTheBoundWhereTheRequestsProgressIsUnknown) {
  // Live, the HP kernels of a marked request report no completions. The
  // request: a 200 us memory kernel on 30 SMs, then a 300 us compute kernel
  // on all 80; alone 500 us, 575 within the bound: it may lose 75 us. Not
  // knowing which kernel runs, a BE wave is charged as beside the one it
  // costs most: a 30 us memory wave on 20 SMs beside the compute kernel
  // holds SMs it needs (1 wave) and slows it (load 1.05): 31.4 us.
  auto orion = make_policy("orion", two);
  SchedulerView v = hp_running();
  v.hp_progress_known = false;
  v.hp_request_start_us = v.now_us = 0;
  auto fits = [&](double us, int sms = 20) { return orion->admit(v, 0, 0, 1, kernel(us, sms, KernelClass::kMemory)); };
  // Admitted and released, as a scheduler does: the release is charged.
  auto release = [&](double us) {
    const SimKernel k = kernel(us, 20, KernelClass::kMemory);
    const bool admitted = orion->admit(v, 0, 0, 1, k);
    if (admitted) orion->on_release(v, 0, k);
    return admitted;
  };
  // Known to run its first kernel, a 190 us wave on 50 SMs would cost nothing;
  // here it may be beside the second.
  EXPECT_FALSE(fits(190, 50));
  // Asking is not releasing (the live scheduler asks again to tell a
  // release ahead): nothing is charged.
  EXPECT_TRUE(fits(30));
  EXPECT_TRUE(fits(30));
  EXPECT_TRUE(fits(30));
  EXPECT_TRUE(release(30));   // 31.4 of 75
  EXPECT_TRUE(release(30));   // 62.9 of 75
  EXPECT_FALSE(release(30));  // 94.3
  EXPECT_TRUE(release(10));   // 73.3
  // The next request starts afresh, less the BE work already on the GPU.
  v.hp_request_start_us = v.now_us = 1000;
  v.be_outstanding_kernels = 1;
  v.be_outstanding_us = 10;
  EXPECT_TRUE(release(30));   // 10 + 31.4
  EXPECT_TRUE(release(30));   // 72.9
  EXPECT_FALSE(release(10));  // 83.3
  // A request still running 560 us after its start cannot end before now:
  // 15 us are left of its bound, 5 of them once the BE work on the GPU is
  // counted, whatever it was charged so far.
  v.hp_request_start_us = 2000;
  v.now_us = 2560;
  v.be_outstanding_us = 0;
  EXPECT_TRUE(release(10));  // 10.5 <= 15
  v.be_outstanding_us = 10;
  EXPECT_FALSE(release(10));  // 10.5 > 5
  EXPECT_TRUE(release(4));    // 4.2
  // Known progress: the spare time from what is left to run, as before.
  v.hp_progress_known = true;
  v.hp_request_start_us = v.now_us = 3000;
  v.be_outstanding_kernels = 0;
  v.be_outstanding_us = 0;
  EXPECT_TRUE(fits(190, 50));
}

TEST_F(PolicyFixture, OrionChargesOnlyContentionForSmsTheHpKernelsDueLeaveFree) {
  // HP request: a 200 us memory kernel on 30 SMs, then a 300 us compute
  // kernel on all 80; alone 500 us, 575 within the bound: 75 us spare.
  auto orion = make_policy("orion", two);
  SchedulerView v = hp_running();
  v.hp_request_start_us = 0;
  v.now_us = 0;
  auto fits = [&](double us, int sms, KernelClass cls) { return orion->admit(v, 0, 0, 1, kernel(us, sms, cls)); };
  // 50 SMs are free beside the first kernel: a wave that ends before the
  // second is due costs the HP nothing (load 0.3 x 30/80 + 0.93 x 50/80 < 1).
  EXPECT_TRUE(fits(190, 50, KernelClass::kMemory));
  // A wave that reaches into the second kernel's time holds SMs it needs.
  EXPECT_FALSE(fits(210, 50, KernelClass::kMemory));
  // On 60 SMs, 10 of them are the first kernel's: a sixth of the wave, and
  // the memory contention (load 1.05), 190 x (1/6 + 0.04) = 40 us: fits; a
  // 500 us wave reaches the second kernel.
  EXPECT_TRUE(fits(190, 60, KernelClass::kMemory));
  EXPECT_FALSE(fits(500, 60, KernelClass::kMemory));
}

TEST_F(PolicyFixture, OrionFallsBackToAFixedSlackWithoutARequestStartOrALimit) {
  // No request start known (a live HP command without request markers), or
  // no limit: a fixed slack of DUR_THRESHOLD, 160 us of the 6.4 ms request.
  PolicyOptions fixed;
  fixed.hp_slowdown_limit = 0;
  for (const PolicyOptions& options : {PolicyOptions{}, fixed}) {
    auto orion = make_policy("orion", w, options);
    SchedulerView v = hp_running();
    if (options.hp_slowdown_limit == 0) {
      v.hp_request_start_us = 0;
      v.now_us = 1e6;  // far past any bound: the limit is off
    }
    EXPECT_TRUE(orion->admit(v, 0, 0, 1, kernel(150, 20, KernelClass::kMemory)));
    EXPECT_FALSE(orion->admit(v, 0, 0, 1, kernel(170, 20, KernelClass::kMemory)));
    EXPECT_TRUE(orion->admit(v, 0, 0, 1, kernel(80, 20, KernelClass::kCompute)));
    EXPECT_FALSE(orion->admit(v, 0, 0, 1, kernel(90, 20, KernelClass::kCompute)));
  }
}

TEST_F(PolicyFixture, OrionCapsOutstandingBestEffortWork) {
  auto orion = make_policy("orion", w);
  SchedulerView v = hp_running();
  v.be_outstanding_kernels = 2;
  v.be_outstanding_us = 100;
  EXPECT_TRUE(orion->admit(v, 0, 0, 1, be_small_memory));  // 150 <= 160
  v.be_outstanding_us = 120;
  EXPECT_FALSE(orion->admit(v, 0, 0, 1, be_small_memory));  // 170 > 160
  v.hp_request_active = false;
  EXPECT_FALSE(orion->admit(v, 0, 0, 1, be_small_memory));  // the cap holds between requests too
  v.be_outstanding_kernels = 0;
  v.be_outstanding_us = 0;
  EXPECT_TRUE(orion->admit(v, 0, 0, 1, kernel(900, 10, KernelClass::kMemory)));  // a long kernel may go alone
}

TEST_F(PolicyFixture, OrionSmThresholdOption) {
  PolicyOptions options;
  options.sm_threshold = 10;
  auto orion = make_policy("orion", w, options);
  EXPECT_FALSE(orion->admit(hp_running(), 0, 0, 1, be_small_memory));  // 20 SMs > 10
}

TEST_F(PolicyFixture, ReefAdmitsOnlyShorterAndSmallerKernels) {
  auto reef = make_policy("reef", w);
  SchedulerView v = hp_running();
  EXPECT_TRUE(reef->admit(v, 0, 0, 1, be_small_compute));                        // 50 us <= 500, 20 <= 98 SMs
  EXPECT_FALSE(reef->admit(v, 0, 0, 1, kernel(600, 20, KernelClass::kMemory)));  // longer
  EXPECT_FALSE(reef->admit(v, 0, 0, 1, be_big_memory));                          // larger
  v.hp_current_done = true;
  EXPECT_FALSE(reef->admit(v, 0, 0, 1, be_small_compute));  // no HP kernel to hide behind
  v.hp_request_active = false;
  EXPECT_TRUE(reef->admit(v, 0, 0, 1, be_big_memory));
}

TEST_F(PolicyFixture, ReefBoundsTheBestEffortKernelsInFlight) {
  PolicyOptions options;
  options.reef_queue_depth = 2;
  auto reef = make_policy("reef", w, options);
  SchedulerView idle;  // no HP request: REEF's normal mode
  idle.hp_client = 1;
  idle.be_outstanding_kernels = 1;
  EXPECT_TRUE(reef->admit(idle, 0, 0, 1, be_big_memory));
  idle.be_outstanding_kernels = 2;
  EXPECT_FALSE(reef->admit(idle, 0, 0, 1, be_big_memory));  // the device queue is full
  EXPECT_TRUE(reef->admit(idle, 1, 0, 1, hp_conv));         // HP kernels are never bounded
  options.reef_queue_depth = 0;
  EXPECT_THROW(make_policy("reef", w, options), InputError);
}

TEST_F(PolicyFixture, BaselinesAdmitEverything) {
  for (const char* name : {"streams", "mps", "temporal"}) {
    auto p = make_policy(name, w);
    EXPECT_TRUE(p->admit(hp_running(), 0, 0, 1, be_big_memory)) << name;
  }
  EXPECT_TRUE(make_policy("streams", w)->priority_streams());
  EXPECT_FALSE(make_policy("mps", w)->priority_streams());
  EXPECT_TRUE(make_policy("temporal", w)->exclusive_requests());
  EXPECT_THROW(make_policy("fifo", w), InputError);
}

TEST_F(PolicyFixture, APolicyListRunsInTheOrderGivenAndAllSkipsWhatDoesNotApply) {
  EXPECT_EQ(select_policies("orion", w), (std::vector<std::string>{"orion"}));
  EXPECT_EQ(select_policies("dedicated", w), std::vector<std::string>{});
  EXPECT_EQ(select_policies("mps,temporal,orion", w), (std::vector<std::string>{"mps", "temporal", "orion"}));
  EXPECT_EQ(select_policies("dedicated,reef", w), (std::vector<std::string>{"reef"}));
  // tick-tock needs training jobs only; this workload serves its HP client.
  EXPECT_EQ(select_policies("all", w), (std::vector<std::string>{"temporal", "streams", "mps", "reef", "orion"}));
  for (const char* bad : {"mps,mps", "mps,", ",mps", "mps,,orion", "all,mps", "mps,fifo", "mps,tick-tock", ""}) {
    EXPECT_THROW(select_policies(bad, w), InputError) << bad;
  }
  Workload best_effort_only = testing::workload({testing::client("be", {be_small_memory}, false, true, 0)});
  EXPECT_THROW(select_policies("mps,orion", best_effort_only), InputError);  // orion protects an HP client
  EXPECT_EQ(select_policies("all", best_effort_only),
            (std::vector<std::string>{"temporal", "streams", "mps", "tick-tock"}));
}

TEST(TickTock, JobsNeverRunTheSameHalfAtOnce) {
  const SimKernel k = kernel(10, 10, KernelClass::kCompute);
  Workload w = testing::workload(
      {testing::client("a", {k, k, k, k}, false, true, 5), testing::client("b", {k, k, k, k}, false, true, 5)});
  auto tt = make_policy("tick-tock", w);
  SchedulerView v;
  EXPECT_TRUE(tt->admit(v, 0, 0, 4, k));   // a takes the forward half
  EXPECT_FALSE(tt->admit(v, 1, 0, 4, k));  // b must wait for it
  EXPECT_TRUE(tt->admit(v, 0, 1, 4, k));
  tt->on_complete(0, 1, 4);                // a finished its forward half
  EXPECT_TRUE(tt->admit(v, 1, 0, 4, k));   // b's forward beside...
  EXPECT_TRUE(tt->admit(v, 0, 2, 4, k));   // ...a's backward
  EXPECT_FALSE(tt->admit(v, 1, 2, 4, k));  // not both backward
  Workload mixed =
      testing::workload({testing::client("a", {k}, false, true, 5), testing::client("i", {k}, true, false, 5)});
  EXPECT_THROW(make_policy("tick-tock", mixed), InputError);
}

}  // namespace
}  // namespace fleet::orion
