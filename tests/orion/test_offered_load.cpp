// Open-loop clients: the offered-load verdict ("overloaded") and the
// throughput comparison over the same arrivals; closed-loop latencies that
// include the wait for the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "orion/offered_load.h"
#include "orion/report.h"
#include "orion/simulator.h"
#include "sim_fixtures.h"

namespace fleet::orion {
namespace {

using testing::client;
using testing::kernel;

// A lone FIFO client: arrivals (us), fixed service time; its completion
// times and latencies (ms) as the simulator records them.
struct Fifo {
  std::vector<double> done_us, latencies_ms;
};
Fifo serve_fifo(const std::vector<double>& arrivals_us, double service_us) {
  Fifo f;
  double free_us = 0;
  for (double a : arrivals_us) {
    free_us = std::max(a, free_us) + service_us;
    f.done_us.push_back(free_us);
    f.latencies_ms.push_back((free_us - a) / 1000.0);
  }
  return f;
}

// Poisson arrivals from a fixed generator: the same numbers on every
// machine (exponential from the top 53 bits, not a library distribution).
std::vector<double> poisson_arrivals_us(std::mt19937_64& rng, double mean_gap_us, int n) {
  std::vector<double> out;
  double t = 0;
  for (int i = 0; i < n; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    t += -std::log1p(-u) * mean_gap_us;
    out.push_back(t);
  }
  return out;
}

TEST(OfferedLoad, IsArrivalRateTimesServiceTime) {
  std::vector<double> every_10ms;
  for (int i = 0; i < 40; ++i) every_10ms.push_back(10'000.0 * i);
  const Fifo half = serve_fifo(every_10ms, 5'000);
  EXPECT_NEAR(offered_load(half.done_us, half.latencies_ms), 0.5, 1e-12);
  const Fifo twice = serve_fifo(every_10ms, 20'000);  // the queue grows by one request every 20 ms
  EXPECT_NEAR(offered_load(twice.done_us, twice.latencies_ms), 2.0, 1e-12);
  EXPECT_TRUE(overloaded_beyond_chance(2.0, 40));
  EXPECT_FALSE(overloaded_beyond_chance(0.5, 40));
  // Too few requests to tell, or nothing measured.
  EXPECT_EQ(offered_load(std::span(twice.done_us).first(2), std::span(twice.latencies_ms).first(2)), -1);
  EXPECT_FALSE(overloaded_beyond_chance(100.0, 5));
  EXPECT_FALSE(overloaded_beyond_chance(-1, 1000));
}

TEST(OfferedLoad, ACloseToFullButStableClientIsRarelyCalledOverloaded) {
  // Poisson arrivals, fixed service time, 400 runs each: what the verdict
  // says against the true load.
  std::mt19937_64 rng(20261205);
  auto share_called_overloaded = [&](double load, int requests) {
    int called = 0;
    for (int run = 0; run < 400; ++run) {
      const Fifo f = serve_fifo(poisson_arrivals_us(rng, 1000.0 / load, requests), 1000.0);
      called += overloaded_beyond_chance(offered_load(f.done_us, f.latencies_ms), requests) ? 1 : 0;
    }
    return called / 400.0;
  };
  for (int requests : {10, 50, 200}) {
    SCOPED_TRACE(requests);
    EXPECT_LE(share_called_overloaded(0.9, requests), 0.02);
    EXPECT_EQ(share_called_overloaded(0.5, requests), 0.0);
  }
  EXPECT_GE(share_called_overloaded(1.5, 200), 0.98);
  EXPECT_GE(share_called_overloaded(3.0, 50), 0.98);
}

TEST(OfferedLoadOutcome, AnOverloadedClientsLatenciesAreNotComparedItsThroughputIs) {
  // 10 ms requests: at 300 requests/s three times what one GPU serves, at
  // 30 a third of it.
  for (const double rate : {300.0, 30.0}) {
    SCOPED_TRACE(rate);
    Workload w =
        testing::workload({client("serve", {kernel(10'000, 40, KernelClass::kCompute)}, false, false, 200, rate),
                           client("train", {kernel(5'000, 80, KernelClass::kMemory)}, false, true, 0)});
    const SimResult dedicated = simulate(w, "dedicated");
    const SimResult shared = simulate(w, "streams");
    const bool overloaded = rate > 100;
    EXPECT_EQ(dedicated.clients[0].overloaded, overloaded);
    EXPECT_NEAR(dedicated.clients[0].offered_load, rate / 100.0, overloaded ? 0.6 : 0.08);
    EXPECT_EQ(dedicated.clients[1].offered_load, -1);  // closed loop: no arrivals of its own
    const auto rows = compare_to_dedicated({dedicated, shared}, dedicated);
    const nlohmann::json json = comparison_to_json(rows)["rows"];
    for (int row : {0, 2}) {
      EXPECT_EQ(rows[row].outcome, overloaded ? "overloaded" : "ok");
      EXPECT_EQ(json[row]["p99_vs_dedicated"].is_null(), overloaded);
      EXPECT_TRUE(json[row]["throughput_vs_dedicated"].is_number());
      EXPECT_TRUE(json[row]["offered_load"].is_number());
    }
    EXPECT_TRUE(json[1]["offered_load"].is_null());
    const std::string table = format_comparison_table(rows);
    EXPECT_EQ(table.find("overload") != std::string::npos, overloaded) << table;
  }
}

TEST(OfferedLoadOutcome, AnOpenLoopClientIsComparedWithItselfOverTheSameArrivals) {
  // A short window (an HP training job of 25 iterations of 1 ms) beside a
  // server of 0.2 ms requests at 500 requests/s: the window holds about a
  // dozen arrivals, and how many depends on the seed. Against the dedicated
  // run's own window (all 400 requests) the server's throughput would come
  // out above its dedicated one for some seeds; against the dedicated run's
  // completions over the same window, never.
  double largest_against_own_window = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    Workload w = testing::workload({client("train", {kernel(1'000, 80, KernelClass::kCompute)}, true, true, 25),
                                    client("serve", {kernel(200, 20, KernelClass::kMemory)}, false, false, 400, 500)},
                                   seed);
    const SimResult dedicated = simulate(w, "dedicated");
    for (const std::string policy : {"streams", "mps", "orion"}) {
      SCOPED_TRACE(policy);
      const SimResult r = simulate(w, policy);
      const auto rows = compare_to_dedicated({r}, dedicated);
      if (rows[1].outcome != "ok") continue;
      EXPECT_LE(rows[1].throughput_vs_dedicated, 1.0 + 1e-9);
      largest_against_own_window =
          std::max(largest_against_own_window, r.clients[1].throughput_per_s / dedicated.clients[1].throughput_per_s);
    }
  }
  EXPECT_GT(largest_against_own_window, 1.1);
}

TEST(OfferedLoadOutcome, AnOpenLoopClientsTailIsComparedOverTheSameRequests) {
  // An HP server whose arrivals come spaced out (10 ms apart) and then in a
  // burst (0.2 ms apart, for 1 ms requests): alone, its tail is the burst's
  // queue. Beside a training job that ends before the burst, the window
  // holds the spaced-out requests only; against the whole dedicated run
  // their tail would look several times better than alone.
  ClientSpec hp = client("serve", {kernel(1'000, 10, KernelClass::kCompute)}, true, false, 80);
  hp.arrivals.kind = ArrivalKind::kTrace;
  hp.arrivals.trace_gaps_s.assign(40, 0.010);
  hp.arrivals.trace_gaps_s.resize(80, 0.0002);
  Workload w = testing::workload({client("train", {kernel(2'000, 80, KernelClass::kMemory)}, false, true, 150), hp});
  const SimResult dedicated = simulate(w, "dedicated");
  for (const std::string policy : {"streams", "orion"}) {
    SCOPED_TRACE(policy);
    const SimResult r = simulate(w, policy);
    const ClientResult& serve = r.clients[1];
    ASSERT_LT(serve.completed_in_window, 45);  // the window closed before the burst was served
    ASSERT_GE(serve.completed_in_window, 20);
    const auto rows = compare_to_dedicated({r}, dedicated);
    ASSERT_EQ(rows[1].outcome, "ok");
    EXPECT_LT(serve.p99_ms / dedicated.clients[1].p99_ms, 0.2);  // against every request alone
    EXPECT_GE(rows[1].p99_vs_dedicated, 1.0 - 1e-9);             // against the same requests alone
  }
}

TEST(OfferedLoadOutcome, AClosedLoopWithHostGapsAloneRunsAtOneCyclePerCycleTimeHoweverTheWindowFalls) {
  // 2 ms iterations and 18 ms of host time after each: 50 cycles a second.
  // A window that closes in a gap must not count that cycle as whole, nor
  // one that closes mid-iteration miss the part done.
  Workload w = testing::workload({client("train", {kernel(2'000, 80, KernelClass::kCompute)}, false, true, 0)});
  w.clients[0].gap_us = 18'000;
  for (const double stop_s : {0.1015, 0.111, 0.119, 0.2, 0.3219}) {
    SCOPED_TRACE(stop_s);
    w.max_duration_s = stop_s;
    const ClientResult r = simulate(w, "streams").clients[0];
    EXPECT_NEAR(r.throughput_per_s, 50.0, 1e-6);
  }
}

TEST(OfferedLoadOutcome, UnderTemporalSharingAClosedLoopsWaitForTheGpuIsPartOfItsIterationTime) {
  // Two gapless training loops of 1 ms and 2 ms iterations take turns: each
  // iteration, as its job sees it, lasts 3 ms; iteration time and throughput
  // then tell the same story (up to the iteration waiting when the window
  // closes, which has done no work yet: one in the 48 measured). Before,
  // each iteration counted from when it got the GPU: 1 and 2 ms, at a third
  // and two thirds of the throughput those imply.
  Workload w = testing::workload({client("a", {kernel(1'000, 80, KernelClass::kCompute)}, false, true, 50),
                                  client("b", {kernel(2'000, 80, KernelClass::kCompute)}, false, true, 50)});
  w.clients[0].warmup = w.clients[1].warmup = 2;
  const SimResult r = simulate(w, "temporal");
  for (const ClientResult& c : r.clients) {
    SCOPED_TRACE(c.name);
    EXPECT_NEAR(c.p50_ms, 3.0, 1e-9);
    EXPECT_NEAR(c.throughput_per_s * c.mean_ms / 1000.0, 1.0, 0.01);
  }
}

TEST(OfferedLoadOutcome, ARequestStillWaitingWhenTheWindowClosesHoldsTheTailUp) {
  // A training job (BE) of three 50 ms iterations with 100 ms of host time
  // between them; an HP server of 1 ms requests that arrive in the job's
  // gaps (served at once), and one more 1 ms into its last iteration.
  // Under temporal sharing that request waits for the whole iteration and
  // is still waiting, 49 ms old, when the job's end closes the window.
  // Left out, the 18 requests of 1 ms would make a p99 of 1 ms.
  ClientSpec hp = client("serve", {kernel(1'000, 10, KernelClass::kCompute)}, true, false, 20);
  hp.arrivals.kind = ArrivalKind::kTrace;
  hp.arrivals.trace_gaps_s = {0.060};
  hp.arrivals.trace_gaps_s.resize(9, 0.010);                                        // 60-140 ms
  hp.arrivals.trace_gaps_s.push_back(0.070);                                        // 210 ms
  hp.arrivals.trace_gaps_s.resize(18, 0.010);                                       // 210-290 ms
  hp.arrivals.trace_gaps_s.insert(hp.arrivals.trace_gaps_s.end(), {0.011, 0.060});  // 301 ms, then after the window
  ClientSpec be = client("train", {kernel(50'000, 80, KernelClass::kMemory)}, false, true, 3);
  be.gap_us = 100'000;
  Workload w = testing::workload({be, hp});
  const SimResult dedicated = simulate(w, "dedicated");
  const SimResult r = simulate(w, "temporal");
  const ClientResult& serve = r.clients[1];
  EXPECT_NEAR(serve.window_end_us, 350'000, 1.0);
  ASSERT_EQ(serve.completed_in_window, 18);
  EXPECT_EQ(serve.in_flight_at_window_end, 1);
  // 18 requests of 1 ms and one of at least 49 ms: the p99 of the 19
  // (rank 17.82) is at least 1 + 0.82 x 48 ms.
  EXPECT_NEAR(serve.p99_ms, 1.0 + 0.82 * 48.0, 1e-6);
  EXPECT_NEAR(serve.p50_ms, 1.0, 1e-6);
  const auto rows = compare_to_dedicated({r}, dedicated);
  ASSERT_EQ(rows[1].outcome, "ok");
  EXPECT_GT(rows[1].p99_vs_dedicated, 30.0);
  EXPECT_EQ(comparison_to_json(rows)["rows"][1]["in_flight_at_window_end"], 1);
  // Alone, nothing waits: the dedicated figures are the requests' own.
  EXPECT_NEAR(dedicated.clients[1].p99_ms, 1.0, 1e-6);
}

TEST(OfferedLoadOutcome, AClosedLoopRequestKeptFromTheGpuWhenTheWindowClosesCounts) {
  // A closed-loop HP client: 1 ms requests, 29 ms of host time between
  // them. Beside it under temporal sharing, a training job of three 50 ms
  // iterations with 100 ms gaps, which closes the window when its last
  // iteration ends at 351 ms. The HP client's request issued at 321 ms has
  // been kept from the GPU for 30 ms by then: it has not started, so it is
  // in no latency yet, but it is the client's tenth request.
  ClientSpec hp = client("serve", {kernel(1'000, 10, KernelClass::kCompute)}, true, false, 100);
  hp.gap_us = 29'000;
  ClientSpec be = client("train", {kernel(50'000, 80, KernelClass::kMemory)}, false, true, 3);
  be.gap_us = 100'000;
  const SimResult r = simulate(testing::workload({be, hp}), "temporal");
  const ClientResult& serve = r.clients[1];
  EXPECT_NEAR(serve.window_end_us, 351'000, 1e-6);
  // Nine requests done: seven of 1 ms, one issued at 30 ms that waited for
  // the first iteration (1-51 ms: 22 ms), one issued at 171 ms that waited
  // for the second (151-201 ms: 31 ms).
  ASSERT_EQ(serve.completed_in_window, 9);
  EXPECT_EQ(serve.in_flight_at_window_end, 1);
  // Its 30 ms so far count: mean (7 + 22 + 31 + 30) / 10, not 60 / 9.
  EXPECT_NEAR(serve.mean_ms, 9.0, 1e-6);
  EXPECT_NEAR(serve.p50_ms, 1.0, 1e-6);
  // p99 of the ten (rank 8.91) lies between 30 and 31 ms.
  EXPECT_NEAR(serve.p99_ms, 30.0 + 0.91, 1e-6);
}

}  // namespace
}  // namespace fleet::orion
