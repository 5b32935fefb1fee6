// Simulator invariants, calibration against Orion's kernel-pair measurements,
// workload loading, and the Orion target on the reference workload.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "common/atomic_file.h"
#include "common/chrome_trace.h"
#include "common/error.h"
#include "orion/kernel_profile.h"
#include "orion/report.h"
#include "orion/simulator.h"
#include "sim_fixtures.h"
#include "test_util.h"

namespace fleet::orion {
namespace {

using testing::client;
using testing::kernel;

const std::filesystem::path kExamples = std::filesystem::path(FLEET_SOURCE_DIR) / "examples" / "orion";

TEST(Simulator, LoneKernelTakesItsProfiledTime) {
  Workload w = testing::workload({client("solo", {kernel(123, 40, KernelClass::kCompute)}, true, false, 1)});
  EXPECT_DOUBLE_EQ(simulate(w, "streams").clients[0].latencies_ms.at(0), 0.123);
  w.launch_overhead_us = 5;
  EXPECT_NEAR(simulate(w, "orion").clients[0].latencies_ms.at(0), 0.128, 1e-12);
  w.clients[0].high_priority = false;
  EXPECT_THROW(simulate(w, "orion"), InputError);  // orion protects an HP client; there is none
}

TEST(Simulator, AClientsOwnLaunchOverheadPacesItsLaunchesOnly) {
  // Ten 1 us kernels: launch-bound. The HP client launches one per 20 us (a
  // Python framework), the BE client at the workload's 5 us.
  std::vector<SimKernel> tiny(10, kernel(1, 1, KernelClass::kCompute));
  Workload w = testing::workload({client("be", tiny, false, false, 3), client("hp", tiny, true, false, 3)});
  w.launch_overhead_us = 5;
  w.clients[1].launch_overhead_us = 20;
  const SimResult r = simulate(w, "dedicated");
  ASSERT_EQ(r.clients[0].latencies_ms.size(), 3u);
  ASSERT_EQ(r.clients[1].latencies_ms.size(), 3u);
  for (double l : r.clients[0].latencies_ms) EXPECT_NEAR(l, (10 * 5 + 1) * 1e-3, 1e-12);
  for (double l : r.clients[1].latencies_ms) EXPECT_NEAR(l, (10 * 20 + 1) * 1e-3, 1e-12);
  w.clients[1].launch_overhead_us = -1;  // back to the workload's
  const SimResult defaults = simulate(w, "dedicated");
  ASSERT_EQ(defaults.clients[1].latencies_ms.size(), 3u);
  for (double l : defaults.clients[1].latencies_ms) EXPECT_NEAR(l, (10 * 5 + 1) * 1e-3, 1e-12);
}

TEST(Simulator, AManyWaveKernelTakesItsProfiledTimeAndTwiceThatOnHalfTheSms) {
  // 8000 SM units on 80 SMs: 100 waves, simulated as 32 (each unit standing
  // for several consecutive blocks); alone it still takes its solo time.
  Workload w = testing::workload({client("solo", {kernel(1000, 8000, KernelClass::kMemory)}, false, false, 1)});
  EXPECT_NEAR(simulate(w, "streams").clients[0].latencies_ms.at(0), 1.0, 1e-9);
  w.clients[0].mps_active_thread_percentage = 50;  // 40 SMs: twice the waves
  EXPECT_NEAR(simulate(w, "mps").clients[0].latencies_ms.at(0), 2.0, 1e-9);
  SimOptions fine;
  fine.model.max_waves = 1000;  // every wave simulated: the same times
  EXPECT_NEAR(simulate(w, "mps", fine).clients[0].latencies_ms.at(0), 2.0, 1e-9);
}

TEST(Simulator, WithoutAnHpClientStreamsAndMpsDifferOnlyByMpsShares) {
  // Stream priority orders an HP stream first; with best-effort clients only
  // the two baselines place the same blocks at the same times, until a
  // client is given an MPS share (orion-run says so in its log).
  Workload w = testing::workload(
      {client("a", {kernel(1000, 120, KernelClass::kCompute), kernel(400, 60, KernelClass::kMemory)}, false, true, 30),
       client("b", {kernel(700, 100, KernelClass::kMemory)}, false, true, 0)});
  EXPECT_EQ(simulate(w, "streams").clients[0].latencies_ms, simulate(w, "mps").clients[0].latencies_ms);
  w.clients[1].mps_active_thread_percentage = 25;
  EXPECT_NE(simulate(w, "streams").clients[0].latencies_ms, simulate(w, "mps").clients[0].latencies_ms);
}

TEST(Simulator, InOrderKernelsOfOneClientAddUp) {
  Workload w = testing::workload({client("seq",
                                         {kernel(10, 80, KernelClass::kCompute), kernel(20, 5, KernelClass::kMemory),
                                          kernel(30, 500, KernelClass::kUnknown)},
                                         false, false, 3)});
  const SimResult r = simulate(w, "mps");
  ASSERT_EQ(r.clients[0].latencies_ms.size(), 3u);
  for (double l : r.clients[0].latencies_ms) EXPECT_NEAR(l, 0.060, 1e-12);
  EXPECT_EQ(r.kernels, 9u);
}

TEST(Simulator, HighPriorityAloneEqualsDedicated) {
  const KernelProfile profile = read_kernel_profile(kExamples / "profiles" / "resnet50_4_fwd.csv");
  Workload w = testing::workload({client("hp", {}, true, false, 300, 20)});
  w.clients[0].kernels = to_sim_kernels(profile, w.device);
  const SimResult dedicated = simulate(w, "dedicated");
  for (const char* policy : {"orion", "streams", "mps", "reef", "temporal"}) {
    EXPECT_EQ(simulate(w, policy).clients[0].latencies_ms, dedicated.clients[0].latencies_ms) << policy;
  }
}

TEST(Simulator, SameSeedSameResultOtherSeedOtherArrivals) {
  Workload w =
      testing::workload({client("be", {kernel(200, 80, KernelClass::kCompute)}, false, true, 0),
                         client("hp", {kernel(300, 60, KernelClass::kMemory), kernel(100, 80, KernelClass::kCompute)},
                                true, false, 200, 500)},
                        7);
  const SimResult a = simulate(w, "orion"), b = simulate(w, "orion");
  EXPECT_EQ(a.clients[1].latencies_ms, b.clients[1].latencies_ms);
  EXPECT_EQ(a.clients[0].completed, b.clients[0].completed);
  w.seed = 8;
  EXPECT_NE(simulate(w, "orion").clients[1].latencies_ms, a.clients[1].latencies_ms);
}

TEST(Simulator, StreamsStayInOrderAndNothingExceedsTheSms) {
  Workload w = testing::workload(
      {client("a", {kernel(50, 392, KernelClass::kCompute), kernel(20, 10, KernelClass::kMemory)}, false, true, 40),
       client("b", {kernel(30, 120, KernelClass::kMemory), kernel(40, 60, KernelClass::kCompute)}, false, true, 40),
       client("c", {kernel(25, 80, KernelClass::kUnknown)}, false, true, 40)});
  ChromeTrace trace;
  simulate(w, "mps", {}, &trace);
  std::map<int, double> last_end;
  int counters = 0, most_sms = 0;
  const nlohmann::json events = trace.to_json()["traceEvents"];
  for (const auto& e : events) {
    if (e["ph"] == "C") {  // SMs holding blocks
      most_sms = std::max(most_sms, e["args"]["sms"].get<int>());
      ++counters;
    }
    if (e["ph"] != "X" || e["cat"] == "request") continue;
    const int tid = e["tid"];
    const double start = e["ts"], end = start + e["dur"].get<double>();
    EXPECT_GE(start, last_end[tid] - 1e-9) << "stream " << tid << " overlaps itself";
    last_end[tid] = end;
  }
  EXPECT_GT(counters, 1);
  EXPECT_EQ(most_sms, 80);  // busy, never above the device's SMs
  EXPECT_EQ(last_end.size(), 3u);
}

// Orion's measurements on a V100 (kernel pairs in two streams vs one after the
// other): Conv2d+BatchNorm2d 1.52 vs 2.15 ms, Conv2d+Conv2d 2.63 vs 2.59 ms,
// BatchNorm2d+BatchNorm2d 1.65 vs 1.78 ms. Solo times follow from the
// sequential numbers: Conv 1.295 ms, BN 0.89 ms.
double pair_makespan_ms(const SimKernel& a, const SimKernel& b) {
  Workload w = testing::workload({client("a", {a}, false, false, 1), client("b", {b}, false, false, 1)});
  return simulate(w, "mps").simulated_s * 1e3;
}

TEST(Simulator, BestEffortClientsTakeTurns) {
  // Two closed-loop jobs under temporal sharing: neither starves the other.
  Workload w = testing::workload({client("a", {kernel(100, 80, KernelClass::kCompute)}, false, true, 50),
                                  client("b", {kernel(100, 80, KernelClass::kCompute)}, false, true, 0)});
  const SimResult r = simulate(w, "temporal");
  EXPECT_NEAR(static_cast<double>(r.clients[1].completed), 50.0, 1.0);
  EXPECT_NEAR(r.clients[0].throughput_per_s, r.clients[1].throughput_per_s, 0.05 * r.clients[0].throughput_per_s);
}

TEST(Simulator, CalibratedToOrionsKernelPairs) {
  const SimKernel conv = kernel(1295, 80, KernelClass::kCompute);
  const SimKernel bn = kernel(890, 80, KernelClass::kMemory);
  EXPECT_NEAR(pair_makespan_ms(conv, bn), 1.52, 0.152);
  EXPECT_NEAR(pair_makespan_ms(conv, conv), 2.63, 0.263);
  EXPECT_NEAR(pair_makespan_ms(bn, bn), 1.65, 0.165);
  // The shape that matters: a compute+memory pair overlaps well, same-class pairs barely.
  EXPECT_LT(pair_makespan_ms(conv, bn) / (1.295 + 0.89), 0.75);
  EXPECT_GT(pair_makespan_ms(conv, conv) / (2 * 1.295), 0.97);
}

TEST(Simulator, ContentionSpeedsFollowTheModel) {
  const SimKernel conv = kernel(1000, 80, KernelClass::kCompute), bn = kernel(1000, 80, KernelClass::kMemory);
  std::vector<double> speeds;
  contention_speeds({{&conv, 80}}, 80, {}, speeds);
  EXPECT_DOUBLE_EQ(speeds[0], 1.0);
  contention_speeds({{&conv, 40}}, 80, {}, speeds);
  EXPECT_DOUBLE_EQ(speeds[0], 1.0);  // half the SMs it needs: twice the waves, not a slower block
  contention_speeds({{&conv, 80}, {&conv, 80}}, 80, {}, speeds);
  EXPECT_NEAR(speeds[0], 0.5 / 1.015, 1e-12);
  contention_speeds({{&conv, 80}, {&bn, 8}}, 80, {}, speeds);
  EXPECT_NEAR(speeds[0], 1 / 1.02, 1e-12);  // a small memory kernel costs the compute kernel 2%
}

TEST(ContentionModel, TheExampleFileHoldsTheDefaults) {
  // examples/orion/contention-v100.json documents the built-in constants:
  // the two must not drift apart.
  const ContentionModel file = load_contention_model(kExamples / "contention-v100.json"), built_in;
  for (int c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(file.compute_use[c], built_in.compute_use[c]) << c;
    EXPECT_DOUBLE_EQ(file.memory_use[c], built_in.memory_use[c]) << c;
    EXPECT_DOUBLE_EQ(file.default_unit_share[c], built_in.default_unit_share[c]) << c;
  }
  EXPECT_DOUBLE_EQ(file.same_class_penalty, built_in.same_class_penalty);
}

TEST(ContentionModel, AFileReplacesWhatItNamesAndRefusesNonsense) {
  fleet::testing::TempDir dir;
  auto load = [&](const std::string& body) {
    write_file_atomically(dir / "c.json", R"({"format": "gpufleet-orion-contention", "version": 1)" + body + "}");
    return load_contention_model(dir / "c.json");
  };
  const ContentionModel m = load(R"(, "memory_use": {"memory": 0.5}, "same_class_penalty": 0.1)");
  EXPECT_DOUBLE_EQ(m.memory_use[1], 0.5);
  EXPECT_DOUBLE_EQ(m.memory_use[2], ContentionModel{}.memory_use[2]);
  EXPECT_DOUBLE_EQ(m.same_class_penalty, 0.1);
  // Two batch norms now fit in the bandwidth: only the penalty slows them.
  const SimKernel bn = kernel(1000, 80, KernelClass::kMemory);
  std::vector<double> speeds;
  contention_speeds({{&bn, 80}, {&bn, 80}}, 80, m, speeds);
  EXPECT_NEAR(speeds[0], 1 / 1.1, 1e-12);
  auto error = [&](const std::string& body) {
    try {
      load(body);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(R"(, "memory_use": {"compute": -0.1})").find("/memory_use/compute: must be between 0 and 1"),
            std::string::npos);
  EXPECT_NE(error(R"(, "compute_use": {"tensor": 1})").find("unknown field 'tensor'"), std::string::npos);
  EXPECT_NE(error(R"(, "unit_share": {"unknown": 0})").find("/unit_share/unknown"), std::string::npos);
  EXPECT_NE(error(R"(, "same_class_penalty": "high")").find("/same_class_penalty"), std::string::npos);
  EXPECT_NE(error(R"(, "memory_use": 0.9)").find("/memory_use: expected an object"), std::string::npos);
  write_file_atomically(dir / "c.json", R"({"format": "gpufleet-orion-workload", "version": 1})");
  EXPECT_THROW(load_contention_model(dir / "c.json"), InputError);
  write_file_atomically(dir / "c.json", "{\"format\": ");
  EXPECT_THROW(load_contention_model(dir / "c.json"), InputError);
}

TEST(Simulator, OrionMeetsItsTargetOnTheReferenceWorkload) {
  Workload w = load_workload(kExamples / "rnet50_inf_train.json");
  for (ClientSpec& c : w.clients) {
    if (c.requests > 0) c.requests = 600;
  }
  const SimResult dedicated = simulate(w, "dedicated");
  const SimResult orion = simulate(w, "orion");
  const SimResult mps = simulate(w, "mps");
  const SimResult temporal = simulate(w, "temporal");
  const SimResult streams = simulate(w, "streams");
  const SimResult reef = simulate(w, "reef");
  const std::size_t hp = 1, be = 0;
  ASSERT_TRUE(w.clients[hp].high_priority);
  // Each request is held to about 1.15x its time alone; the tail target is 1.2x.
  EXPECT_LE(orion.clients[hp].p99_ms, 1.2 * dedicated.clients[hp].p99_ms);
  EXPECT_GE(orion.clients[be].throughput_per_s, 0.70 * dedicated.clients[be].throughput_per_s);
  EXPECT_GT(orion.busy_fraction, dedicated.busy_fraction);
  // The baselines behave differently: without stream priorities (mps) HP
  // kernels wait behind whole BE kernels, with them (streams) behind one
  // wave, and reef resets BE work; temporal sharing has the worst tail.
  const double mps_p99 = mps.clients[hp].p99_ms / dedicated.clients[hp].p99_ms;
  EXPECT_GE(mps_p99, 1.3);
  EXPECT_LE(mps_p99, 2.5);
  EXPECT_GT(mps.clients[hp].p99_ms, 1.2 * streams.clients[hp].p99_ms);
  EXPECT_GT(streams.clients[hp].p99_ms, 1.2 * reef.clients[hp].p99_ms);
  for (const SimResult* r : {&orion, &mps, &streams, &reef}) {
    EXPECT_GT(temporal.clients[hp].p99_ms, 3 * r->clients[hp].p99_ms) << r->policy;
  }
  EXPECT_GE(orion.clients[be].throughput_per_s, 0.99 * temporal.clients[be].throughput_per_s);
}

TEST(Simulator, OrionsSlowdownLimitTradesTheHpTailForBestEffortWork) {
  // ResNet50 inference (HP, 15 requests/s) beside ResNet50 training (BE).
  // A fixed slack of DUR_THRESHOLD (2.5 % of the HP request) lets BE
  // kernels run beside few HP requests; with each request's spare time
  // within the default limit (1.15x its time alone) they run beside more
  // of them, the BE gains over temporal sharing and the HP tail stays
  // within 1.2x; a looser limit moves both further.
  Workload w = load_workload(kExamples / "rnet50_inf_train.json");
  for (ClientSpec& c : w.clients) {
    if (c.requests > 0) c.requests = 600;
  }
  SimOptions fixed, loose;
  fixed.policy.hp_slowdown_limit = 0;
  loose.policy.hp_slowdown_limit = 1.3;
  const SimResult dedicated = simulate(w, "dedicated"), temporal = simulate(w, "temporal");
  const SimResult strict = simulate(w, "orion", fixed), tuned = simulate(w, "orion"),
                  relaxed = simulate(w, "orion", loose);
  const std::size_t hp = 1, be = 0;
  EXPECT_GT(tuned.hp_corun_fraction, 1.5 * strict.hp_corun_fraction);
  EXPECT_GT(tuned.clients[be].throughput_per_s, strict.clients[be].throughput_per_s);
  EXPECT_GT(tuned.clients[be].throughput_per_s, 1.01 * temporal.clients[be].throughput_per_s);
  EXPECT_LE(tuned.clients[hp].p99_ms, 1.2 * dedicated.clients[hp].p99_ms);
  EXPECT_GT(relaxed.clients[be].throughput_per_s, tuned.clients[be].throughput_per_s);
  EXPECT_GT(relaxed.clients[hp].p99_ms, tuned.clients[hp].p99_ms);
  EXPECT_EQ(temporal.hp_corun_fraction, 0);  // one request at a time: nothing beside the HP
}

TEST(Simulator, AnArrivalPastTheHpClientsLastRequestSparesNothing) {
  // Orion gives an HP request no more spare time than the next request,
  // already waiting, can lose. Past the client's last request the next
  // arrival of its trace never runs: a last request with such an arrival
  // right behind it must get the same spare time, so the same run, as one
  // whose next arrival is far away. Two requests, at 0 and 10 us, of one
  // 500 us kernel on the whole GPU, beside a BE job of short memory-bound
  // kernels; the trace's third arrival is 590 us or 10 s.
  auto run = [](double third_gap_s) {
    ClientSpec hp = client("hp", {kernel(500, 80, KernelClass::kCompute)}, true, false, 2);
    hp.arrivals.kind = ArrivalKind::kTrace;
    hp.arrivals.trace_gaps_s = {0, 10e-6, third_gap_s};
    ClientSpec be = client("be", std::vector<SimKernel>(8, kernel(12, 20, KernelClass::kMemory)), false, true, 0);
    return simulate(testing::workload({be, hp}), "orion");
  };
  const SimResult near = run(580e-6), far = run(10);
  ASSERT_EQ(near.clients[1].latencies_ms.size(), 2u);
  EXPECT_GT(near.hp_corun_fraction, 0);  // BE work ran beside the HP requests
  EXPECT_EQ(near.clients[1].latencies_ms, far.clients[1].latencies_ms);
  EXPECT_EQ(near.kernels, far.kernels);
  EXPECT_EQ(near.hp_corun_fraction, far.hp_corun_fraction);
}

TEST(Simulator, AHeldBestEffortKernelIsAdmittedAtItsDeadlineAtAnyTime) {
  // BERT training (BE) beside closed-loop ResNet101 training (HP) under
  // reef: BE kernels are held and admitted after max_be_wait_us (100 ms).
  // 16.8 s into the run, (since + wait) - since rounded below the wait, so
  // the run woke at the deadline forever ("no simulated time passes").
  fleet::testing::TempDir dir;
  write_file_atomically(dir / "w.json", R"([
    {"arch": "bert", "kernel_file": "/x/bert_8_fb1", "num_kernels": 4777, "num_iters": 200,
     "args": {"batchsize": 8, "rps": 0, "uniform": false, "dummy_data": false, "train": true}},
    {"arch": "resnet101", "kernel_file": "/x/resnet101_32_fb1", "num_kernels": 1847, "num_iters": 200,
     "args": {"model_name": "resnet101", "batchsize": 32, "rps": 0, "uniform": false, "dummy_data": true,
              "train": true}}])");
  const Workload w = load_workload(dir / "w.json", {kExamples / "profiles"});
  SimOptions options;
  options.max_events_without_time = 100000;  // fail fast where it would spin
  for (const char* policy : {"reef", "orion"}) {
    for (double wait_ms : {50.0, 100.0}) {
      options.max_be_wait_us = wait_ms * 1e3;
      const SimResult r = simulate(w, policy, options);
      EXPECT_GT(r.clients[1].latencies_ms.size(), 100u) << policy << " " << wait_ms;
    }
  }
}

TEST(Workload, ReadsOrionsConfigs) {
  const Workload w = load_workload(kExamples / "fig7_rnet_rnet.json", {kExamples / "profiles"});
  ASSERT_EQ(w.clients.size(), 2u);
  EXPECT_EQ(w.device.name, "v100-16");
  EXPECT_FALSE(w.clients[0].high_priority);
  EXPECT_TRUE(w.clients[0].training);
  EXPECT_EQ(w.clients[0].kernels.size(), 946u);        // resnet50_32_fb1
  EXPECT_EQ(w.clients[0].first_kernels.size(), 624u);  // resnet50_32_fb0
  EXPECT_TRUE(w.clients[1].high_priority);
  EXPECT_EQ(w.clients[1].arrivals.kind, ArrivalKind::kPoisson);
  EXPECT_DOUBLE_EQ(w.clients[1].arrivals.rate_per_s, 15);
  EXPECT_EQ(w.clients[1].requests, 9200);
}

TEST(Workload, AProfileIsUsedOnlyOnTheGpuItWasMeasuredOn) {
  fleet::testing::TempDir dir;
  KernelProfile p = read_kernel_profile(kExamples / "profiles" / "resnet50_4_fwd.csv");
  p.device = "h200";
  write_kernel_profile(dir / "p.csv", p);
  auto workload_on = [&](const std::string& device) {
    write_file_atomically(dir / "w.json", R"({"format": "gpufleet-orion-workload", "version": 1, "device": ")" +
                                              device +
                                              R"(", "clients": [{"name": "x", "profile": "p.csv", )"
                                              R"("priority": "high", "kind": "inference", )"
                                              R"("arrivals": {"type": "poisson", "rate": 5}, "requests": 10}]})");
    return dir / "w.json";
  };
  EXPECT_EQ(load_workload(workload_on("h200")).clients[0].kernels.size(), 175u);
  EXPECT_NE(fleet::testing::error_of([&] {
              load_workload(workload_on("v100"));
            }).find("p.csv was measured on h200, not on v100-16: its kernel durations hold on that GPU only"),
            std::string::npos);
  // Orion's own profiles do not say where they were measured: used as they are.
  EXPECT_EQ(read_kernel_profile(kExamples / "profiles" / "resnet50_4_fwd.csv").device, "");
  // Orion's config format has no device: a V100, or the GPU its profiles record.
  auto orion_config = [&](const std::string& be_profile, const std::string& hp_profile = "p.csv") {
    write_file_atomically(dir / "c.json", R"([{"arch": "a", "kernel_file": ")" + be_profile +
                                              R"(", "num_iters": 5, "args": {"rps": 0}},
                                              {"arch": "b", "kernel_file": ")" +
                                              hp_profile + R"(", "num_iters": 5, "args": {"rps": 10}}])");
    return dir / "c.json";
  };
  EXPECT_EQ(load_workload(orion_config("p.csv")).device.name, "h200");
  p.device = "h100";
  write_kernel_profile(dir / "q.csv", p);
  EXPECT_NE(fleet::testing::error_of([&] {
              load_workload(orion_config("q.csv"));
            }).find("p.csv was measured on h200, not on h100"),
            std::string::npos);
  std::filesystem::copy_file(kExamples / "profiles" / "resnet50_4_fwd.csv", dir / "orion.csv");
  EXPECT_EQ(load_workload(orion_config("orion.csv", "orion.csv")).device.name, "v100-16");
  EXPECT_NE(fleet::testing::error_of([&] {
              load_workload(orion_config("orion.csv"));
            }).find("p.csv was measured on h200, not on v100-16"),
            std::string::npos);
}

TEST(Workload, ArrivalProcesses) {
  ArrivalSpec poisson{ArrivalKind::kPoisson, 100, {}};
  const auto a = generate_arrivals(poisson, 20000, 3);
  EXPECT_NEAR(a.back() / 20000, 0.01, 0.0005);  // mean gap 1 / rate
  EXPECT_EQ(a, generate_arrivals(poisson, 20000, 3));
  // Uniform: one period apart, from a first arrival drawn within the first
  // period (where the client's process happened to start), so that two
  // clients' arrivals do not coincide by construction.
  const auto u = generate_arrivals({ArrivalKind::kUniform, 4, {}}, 1'000'000, 1);
  EXPECT_GE(u[0], 0.0);
  EXPECT_LT(u[0], 0.25);
  EXPECT_DOUBLE_EQ(u[1] - u[0], 0.25);
  EXPECT_EQ(u, generate_arrivals({ArrivalKind::kUniform, 4, {}}, 1'000'000, 1));
  // No drift over a million periods, with a period that binary fractions do
  // not hold exactly (adding 0.01 a million times is off by 1.7e-7 s).
  const auto u100 = generate_arrivals({ArrivalKind::kUniform, 100, {}}, 1'000'000, 1);
  EXPECT_NEAR(u100.back() - u100.front(), 999'999 * 0.01, 1e-9);
  std::vector<double> phases;
  for (std::uint64_t seed = 1; seed <= 8; ++seed)
    phases.push_back(generate_arrivals({ArrivalKind::kUniform, 4, {}}, 1, seed)[0]);
  std::sort(phases.begin(), phases.end());
  EXPECT_EQ(std::unique(phases.begin(), phases.end()), phases.end());
  EXPECT_LT(phases.front(), 0.125);  // spread over the period, not bunched at one end
  EXPECT_GT(phases.back(), 0.125);
  const auto t = generate_arrivals({ArrivalKind::kTrace, 0, {0.1, 0.3}}, 3, 1);
  EXPECT_NEAR(t[2], 0.5, 1e-12);
  EXPECT_TRUE(generate_arrivals({}, 10, 1).empty());
}

TEST(Workload, BadWorkloadsNameTheField) {
  fleet::testing::TempDir dir;
  std::filesystem::copy_file(kExamples / "profiles" / "resnet50_4_fwd.csv", dir / "p.csv");
  auto error_for = [&](const std::string& clients, const std::string& device = "v100") {
    write_file_atomically(dir / "w.json", R"({"format": "gpufleet-orion-workload", "version": 1, "device": ")" +
                                              device + R"(", "clients": )" + clients + "}");
    try {
      load_workload(dir / "w.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string good =
      R"({"name": "x", "profile": "p.csv", "priority": "high", "kind": "inference", "arrivals": {"type": "poisson", "rate": 5}, "requests": 10})";
  EXPECT_EQ(error_for("[" + good + "]"), "no error");
  EXPECT_NE(error_for("[" + good + "]", "tpu").find("/device: unknown device 'tpu'"), std::string::npos);
  std::string bad = good;
  bad.replace(bad.find("\"high\""), 6, "\"urgent\"");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/priority: priority must be"), std::string::npos);
  bad = good;
  bad.replace(bad.find("p.csv"), 5, "missing.csv");
  EXPECT_NE(error_for("[" + bad + "]").find("kernel profile 'missing.csv' not found"), std::string::npos);
  bad = good;
  bad.replace(bad.find("\"rate\": 5"), 9, "\"rate\": -5");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/arrivals/rate: rate must be positive"), std::string::npos);
  bad = good;
  bad.replace(bad.find("{\"type\": \"poisson\", \"rate\": 5}"), 30, "{\"type\": \"trace\", \"file\": \"gaps.json\"}");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/arrivals/file: arrival trace"), std::string::npos)
      << error_for("[" + bad + "]");
  write_file_atomically(dir / "gaps.json", "[0.01, 0.02]");
  EXPECT_EQ(error_for("[" + bad + "]"), "no error");
  std::string other = good;
  other.replace(other.find("\"x\""), 3, "\"y\"");
  EXPECT_NE(error_for("[" + good + ", " + other + "]").find("at most one client may have high priority"),
            std::string::npos);
  other.replace(other.find("\"high\""), 6, "\"best-effort\"");
  EXPECT_EQ(error_for("[" + good + ", " + other + "]"), "no error");
  EXPECT_NE(error_for("[" + other + ", " + other + "]").find("/clients/1/name: client name 'y' is used twice"),
            std::string::npos);
  bad = good;
  bad.replace(bad.find("\"x\""), 3, "\" \"");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/name: a client's name must not be empty"), std::string::npos);
  bad = good;
  bad.replace(bad.find("\"requests\": 10"), 14, "\"requestz\": 10");
  EXPECT_NE(error_for("[" + bad + "]").find("unknown field 'requestz'"), std::string::npos);
  bad = good;
  bad.replace(bad.find("\"requests\": 10"), 14, "\"requests\": 10, \"gap_ms\": 3");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/gap_ms: gap_ms is the host time between a closed-loop"),
            std::string::npos);
  bad = good;
  bad.replace(bad.find("\"requests\": 10"), 14, "\"requests\": 10, \"mps_active_thread_percentage\": 0");
  EXPECT_NE(
      error_for("[" + bad + "]")
          .find("/clients/0/mps_active_thread_percentage: mps_active_thread_percentage must be above 0 and at most "
                "100"),
      std::string::npos);
  bad = good;
  bad.replace(bad.find("\"requests\": 10"), 14, "\"requests\": 10, \"launch_overhead_us\": -3");
  EXPECT_NE(error_for("[" + bad + "]").find("/clients/0/launch_overhead_us: launch_overhead_us must be 0 to 1e6"),
            std::string::npos);
  std::string closed = good;
  closed.replace(closed.find("{\"type\": \"poisson\", \"rate\": 5}"), 30, "{\"type\": \"closed\"}, \"gap_ms\": -1");
  EXPECT_NE(error_for("[" + closed + "]").find("/clients/0/gap_ms: gap_ms must be 0 to 1e6"), std::string::npos)
      << error_for("[" + closed + "]");
}

}  // namespace
}  // namespace fleet::orion

namespace fleet::orion {
namespace {

TEST(SimulatorBounds, WorkThatTakesNoTimeStopsWithAnError) {
  using testing::client;
  using testing::kernel;
  // Zero-duration kernels, no launch overhead, closed loop: every request ends the instant it starts.
  Workload w = testing::workload({client("hp", {kernel(0, 10, KernelClass::kCompute)}, true, false, 1000000),
                                  client("be", {kernel(0, 10, KernelClass::kMemory)}, false, true, 0)});
  SimOptions options;
  options.max_events_without_time = 10000;
  EXPECT_NE(fleet::testing::error_of<RuntimeFailure>([&] { simulate(w, "orion", options); }).find("no simulated time"),
            std::string::npos);
}

TEST(SimulatorBounds, ArrivalsAreDrawnLazily) {
  using testing::client;
  using testing::kernel;
  // 2e4 requests per second: drawn one at a time, whatever the horizon would have been.
  Workload w = testing::workload({client("hp", {kernel(20, 10, KernelClass::kCompute)}, true, false, 5000, 2e4),
                                  client("be", {kernel(100, 40, KernelClass::kMemory)}, false, true, 0)});
  const SimResult r = simulate(w, "orion");
  EXPECT_EQ(r.clients[0].completed, 5000);
  // The stream gives the same times as the listed arrivals.
  ArrivalStream stream(w.clients[0].arrivals, 9);
  const auto listed = generate_arrivals(w.clients[0].arrivals, 100, 9);
  for (double t : listed) EXPECT_DOUBLE_EQ(stream.next(), t);
}

TEST(SimulatorBounds, AbsurdRatesDurationsAndNegativeRpsAreRefused) {
  fleet::testing::TempDir dir;
  std::ofstream(dir / "k.csv") << "Name,Profile,Memory_footprint,SM_usage,Duration\nk,1,0,10,1000\n";
  std::ofstream(dir / "huge.csv") << "Name,Profile,Memory_footprint,SM_usage,Duration\nk,1,0,10,1e308\n";
  auto ours = [&](const std::string& profile, const std::string& arrivals) {
    std::ofstream(dir / "w.json") << R"({"format": "gpufleet-orion-workload", "version": 1, "device": "v100",
      "clients": [{"name": "hp", "profile": ")"
                                  << profile << R"(", "priority": "high", "kind": "inference", "arrivals": )"
                                  << arrivals << R"(, "requests": 100}]})";
    return fleet::testing::error_of([&] { load_workload(dir / "w.json"); });
  };
  EXPECT_NE(ours("k.csv", R"({"type": "poisson", "rate": 1e-300})").find("more than 1e6 simulated seconds"),
            std::string::npos);
  EXPECT_NE(ours("k.csv", R"({"type": "poisson", "rate": 1e300})").find("at most 1e7 per second"), std::string::npos);
  EXPECT_NE(ours("huge.csv", R"({"type": "closed"})").find("outside 0 to 1e12 ns"), std::string::npos);
  EXPECT_EQ(ours("k.csv", R"({"type": "poisson", "rate": 50})"), "no error");

  std::ofstream(dir / "orion.json") << R"([{"arch": "resnet50", "kernel_file": "k", "num_kernels": 1, "num_iters": 10,
              "args": {"model_name": "resnet50", "batchsize": 4, "rps": -5, "uniform": false, "train": false}}])";
  EXPECT_NE(fleet::testing::error_of([&] { load_workload(dir / "orion.json"); }).find("rps must be 0"),
            std::string::npos);
  // Orion's counts must agree with the profile and be positive, not be ignored.
  auto orion_config =
      [&](const std::string& fields) {
        std::ofstream(dir / "orion.json")
            << R"([{"arch": "resnet50", "kernel_file": "k", )" << fields
            << R"(, "args": {"model_name": "resnet50", "batchsize": 4, "rps": 5, "train": false}}])";
        return fleet::testing::error_of([&] { load_workload(dir / "orion.json"); });
      };
  EXPECT_EQ(orion_config(R"("num_kernels": 1, "num_iters": 10)"), "no error");
  EXPECT_NE(orion_config(R"("num_kernels": 7, "num_iters": 10)").find("num_kernels is 7 but k lists 1 kernels"),
            std::string::npos);
  EXPECT_NE(orion_config(R"("num_kernels": 1, "num_iters": -3)").find("num_iters must be positive"), std::string::npos);
}

}  // namespace
}  // namespace fleet::orion

namespace fleet::orion {
namespace {

TEST(SimulatorOutcomes, BestEffortNeverStarvesBehindAClosedLoopHpClient) {
  using testing::client;
  using testing::kernel;
  // HP trains in a closed loop with no gap between iterations, so an HP
  // request is always active; the BE kernel needs more SMs than orion's
  // threshold for training HP clients (half the largest BE kernel's need).
  Workload w = testing::workload({client("hp", {kernel(1000, 80, KernelClass::kCompute)}, true, true, 3000),
                                  client("be", {kernel(1000, 80, KernelClass::kCompute)}, false, true, 0)});
  SimOptions never;
  never.max_be_wait_us = 0;
  const SimResult starved = simulate(w, "orion", never);
  EXPECT_EQ(starved.clients[1].completed, 0);
  const SimResult dedicated = simulate(w, "dedicated");
  const auto rows = compare_to_dedicated({starved}, dedicated);
  EXPECT_EQ(rows[1].outcome, "starved");
  EXPECT_NE(format_comparison_table(rows).find("starved"), std::string::npos);
  EXPECT_TRUE(comparison_to_json(rows)["rows"][1]["throughput_vs_dedicated"].is_null());

  SimOptions bounded;
  bounded.max_be_wait_us = 100'000;
  const SimResult fed = simulate(w, "orion", bounded);
  EXPECT_GT(fed.clients[1].completed, 10);
  EXPECT_GT(fed.clients[1].forced_admissions, 0);
  EXPECT_EQ(compare_to_dedicated({fed}, dedicated)[1].outcome, "ok");
}

TEST(SimulatorOutcomes, NoPolicyStarvesABestEffortJobBesideAnHpJobThatNeverPauses) {
  using testing::client;
  using testing::kernel;
  // HP trains in a closed loop of 150 ms iterations with no gap; the BE
  // iteration is 40 kernels of 5 ms, each of two 2.5 ms waves: longer than
  // any co-run slack, so orion and reef hold every one of them, and
  // temporal sharing gives the GPU to the HP at every boundary. Held a
  // wait (100 ms), a BE client is served to the end of its iteration (and
  // under temporal sharing has the next boundary), so each policy gives it
  // at least an iteration per second of simulated time.
  std::vector<SimKernel> hp_iteration(30, kernel(5000, 80, KernelClass::kCompute));
  std::vector<SimKernel> be_iteration(40, kernel(5000, 160, KernelClass::kCompute));
  Workload w =
      testing::workload({client("hp", hp_iteration, true, true, 60), client("be", be_iteration, false, true, 0)});
  w.clients[0].warmup = 0;
  for (const char* policy : {"temporal", "streams", "mps", "reef", "tick-tock", "orion"}) {
    const SimResult r = simulate(w, policy);
    EXPECT_FALSE(r.clients[1].starved) << policy;
    EXPECT_GE(r.clients[1].throughput_per_s, 1.0) << policy;
    EXPECT_GE(r.clients[0].throughput_per_s, 1.0) << policy;
  }
  // Without the wait: temporal sharing and orion leave it nothing.
  SimOptions never;
  never.max_be_wait_us = 0;
  EXPECT_EQ(simulate(w, "temporal", never).clients[1].completed, 0);
  EXPECT_EQ(simulate(w, "orion", never).clients[1].completed, 0);
  // Under temporal sharing the aged BE iteration goes at the boundary: the
  // two jobs take turns, each iteration counted as a forced admission.
  const SimResult turns = simulate(w, "temporal");
  EXPECT_GT(turns.clients[1].forced_admissions, 10);
  EXPECT_NEAR(turns.clients[1].throughput_per_s, turns.clients[0].throughput_per_s, 0.5);
}

TEST(SimulatorOutcomes, OrionTunesTheSmThresholdOfATrainingHpClientOnline) {
  // MobileNetV2 training as the HP client beside ResNet50 training as BE.
  Workload w = load_workload(kExamples / "rnet50_train_train.json", {kExamples});
  w.clients[1].high_priority = true;
  w.clients[1].requests = 200;
  w.clients[1].warmup = 20;
  w.clients[0].requests = 0;  // until the HP client is done
  const double dedicated = simulate(w, "dedicated").clients[1].mean_ms;
  // The SM threshold's search alone: a fixed co-run slack (with a
  // slowdown limit the spare-time rule would move the BE work too).
  SimOptions fixed_slack;
  fixed_slack.policy.hp_slowdown_limit = 0;
  auto run = [&](double limit_ms) {
    SimOptions o = fixed_slack;
    o.policy.hp_limit_ms = limit_ms;
    return simulate(w, "orion", o);
  };
  auto threshold = [](const SimResult& r) {
    const auto at = r.policy_summary.find("SM threshold ");
    return at == std::string::npos ? -1 : std::stoi(r.policy_summary.substr(at + 13));
  };
  const SimResult fixed = simulate(w, "orion", fixed_slack);
  EXPECT_EQ(fixed.policy_summary, "");  // no target: Orion's fixed default
  // A target below even the dedicated time drives the threshold down (fewer
  // BE kernels beside HP work); a loose one drives it up from Orion's default.
  const SimResult tight = run(dedicated * 0.9), loose = run(dedicated * 10);
  std::int64_t be_max = 0;
  for (const SimKernel& k : w.clients[0].kernels) be_max = std::max(be_max, k.sm_usage);
  EXPECT_GE(threshold(tight), 0) << tight.policy_summary;
  EXPECT_LT(threshold(tight), be_max / 8) << tight.policy_summary;
  EXPECT_GT(threshold(loose), be_max / 2) << loose.policy_summary;
  EXPECT_LE(tight.clients[1].mean_ms, loose.clients[1].mean_ms);
  EXPECT_LE(tight.clients[0].throughput_per_s, loose.clients[0].throughput_per_s);
}

TEST(SimulatorOutcomes, TheThresholdSearchLeavesTheHpClientsWarmUpOut) {
  using testing::client;
  using testing::kernel;
  // An HP training job of 10 ms iterations whose first (warm-up) iteration
  // is a 1 us kernel, against a target of 9.5 ms that no iteration meets: the
  // search must go down all the way. Counting the warm-up iteration, the
  // first ten would average 9 ms, "faster than the target", and the
  // bisection could never again go below its starting point.
  Workload w = testing::workload({client("hp", {kernel(10'000, 80, KernelClass::kCompute)}, true, true, 300),
                                  client("be", {kernel(1'000, 160, KernelClass::kCompute)}, false, true, 0)});
  w.clients[0].first_kernels = {kernel(1, 80, KernelClass::kCompute)};
  w.clients[0].warmup = 1;
  SimOptions o;
  o.policy.hp_limit_ms = 9.5;
  const SimResult r = simulate(w, "orion", o);
  EXPECT_EQ(r.policy_summary, "SM threshold 0 after 7 tuning step(s) against an HP iteration target of 9.5 ms");
}

TEST(SimulatorOutcomes, AClosedLoopHpClientsHostGapLetsBestEffortWorkRun) {
  using testing::client;
  using testing::kernel;
  // As above (BE needs more SMs than the threshold), without the bounded wait.
  Workload w = testing::workload({client("hp", {kernel(1000, 80, KernelClass::kCompute)}, true, true, 300),
                                  client("be", {kernel(1000, 80, KernelClass::kCompute)}, false, true, 0)});
  SimOptions never;
  never.max_be_wait_us = 0;
  EXPECT_EQ(simulate(w, "orion", never).clients[1].completed, 0);
  w.clients[0].gap_us = 2000;  // 2 ms of host work after each 1 ms HP iteration
  const SimResult r = simulate(w, "orion", never);
  EXPECT_GT(r.clients[1].completed, 100);
  // Each HP iteration still takes its 1 ms (its kernel starts in a gap or waits
  // for at most one BE kernel); the run spans 300 iterations plus their gaps.
  EXPECT_NEAR(r.simulated_s, 300 * 3e-3, 300 * 1e-3);
  EXPECT_LE(r.clients[0].p50_ms, 2.0 + 1e-9);
}

TEST(SimulatorOutcomes, ReefResetsRunningBestEffortKernelsWhenAnHpRequestArrives) {
  // Long BE kernels on every SM; short HP requests arrive now and then.
  Workload w = testing::workload({client("be", {kernel(5000, 80, KernelClass::kCompute)}, false, true, 0),
                                  client("hp", {kernel(200, 80, KernelClass::kCompute)}, true, false, 200, 50.0)});
  const SimResult streams = simulate(w, "streams"), reef = simulate(w, "reef");
  EXPECT_EQ(streams.clients[0].preempted, 0);
  EXPECT_GT(reef.clients[0].preempted, 50);
  EXPECT_GT(reef.clients[0].preempted_work_ms, 0.0);
  // The HP request no longer shares the GPU with a 5 ms BE kernel; the BE client pays with lost work.
  EXPECT_LT(reef.clients[1].p99_ms, 0.6 * streams.clients[1].p99_ms);
  EXPECT_LT(reef.clients[0].throughput_per_s, streams.clients[0].throughput_per_s);
}

TEST(SimulatorOutcomes, MpsSharesLimitEachClientsSms) {
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: a kernel needing all 80 SMs gets 40
  // under a 50 % share, so it takes twice as long (twice the waves); streams
  // and other policies ignore the share (one context).
  Workload w = testing::workload({client("solo", {kernel(1000, 80, KernelClass::kCompute)}, true, false, 1)});
  w.clients[0].mps_active_thread_percentage = 50;
  EXPECT_DOUBLE_EQ(simulate(w, "mps").clients[0].latencies_ms.at(0), 2.0);
  EXPECT_DOUBLE_EQ(simulate(w, "streams").clients[0].latencies_ms.at(0), 1.0);
  EXPECT_DOUBLE_EQ(simulate(w, "dedicated").clients[0].latencies_ms.at(0), 1.0);
  // A 30-SM kernel is untouched by a 50 % share (40 SMs); 25 % (20 SMs) needs two waves.
  w.clients[0].kernels = {kernel(1000, 30, KernelClass::kCompute)};
  EXPECT_DOUBLE_EQ(simulate(w, "mps").clients[0].latencies_ms.at(0), 1.0);
  w.clients[0].mps_active_thread_percentage = 25;
  EXPECT_DOUBLE_EQ(simulate(w, "mps").clients[0].latencies_ms.at(0), 2.0);
  // Two clients split 50/50: mps now differs from streams, where they share every SM.
  Workload pair = testing::workload({client("be", {kernel(400, 80, KernelClass::kMemory)}, false, true, 0),
                                     client("hp", {kernel(300, 80, KernelClass::kCompute)}, true, false, 300, 200.0)});
  const SimResult shared = simulate(pair, "mps");
  const std::vector<double> streams = simulate(pair, "streams").clients[1].latencies_ms;
  for (ClientSpec& c : pair.clients) c.mps_active_thread_percentage = 50;
  const SimResult split = simulate(pair, "mps");
  EXPECT_GT(split.clients[1].p50_ms, 1.5 * shared.clients[1].p50_ms);
  EXPECT_EQ(simulate(pair, "streams").clients[1].latencies_ms, streams);
}

// Block-level dispatch: a best-effort kernel of 800 SM units (10 waves of
// 100 us on 80 SMs, blocks that fill their SM) is running when a one-wave HP
// kernel arrives at 250 us. With stream priority the HP kernel takes the SMs
// the BE kernel's third wave frees at 300 us; without (MPS) room goes first
// come, first served, so it waits for the BE kernel's last wave.
TEST(SimulatorOutcomes, WithoutStreamPriorityAnHpKernelWaitsForEveryBestEffortWave) {
  Workload w = testing::workload({client("be", {kernel(1000, 800, KernelClass::kUnknown)}, false, false, 1),
                                  client("hp", {kernel(50, 80, KernelClass::kUnknown)}, true, false, 1)});
  w.clients[1].arrivals.kind = ArrivalKind::kTrace;
  w.clients[1].arrivals.trace_gaps_s = {250e-6};
  const SimResult streams = simulate(w, "streams"), mps = simulate(w, "mps");
  EXPECT_NEAR(streams.clients[1].latencies_ms.at(0), 0.100, 1e-9);  // waits 50 us, runs 50 us
  EXPECT_NEAR(streams.clients[0].latencies_ms.at(0), 1.050, 1e-9);  // BE loses the 50 us
  EXPECT_NEAR(mps.clients[1].latencies_ms.at(0), 0.800, 1e-9);      // waits 750 us
  EXPECT_NEAR(mps.clients[0].latencies_ms.at(0), 1.000, 1e-9);
  // Blocks that leave room (a known class holds half an SM here) let the HP
  // kernel in beside them at once, whatever the priority.
  w.clients[0].kernels[0].cls = KernelClass::kMemory;
  w.clients[1].kernels[0].cls = KernelClass::kCompute;
  // (Both at full speed but for the shared bandwidth: 0.93 + 0.3 of it.)
  EXPECT_NEAR(simulate(w, "mps").clients[1].latencies_ms.at(0), 0.050 * 1.23, 1e-9);
}

TEST(SimulatorOutcomes, ThroughputIsMeasuredOverTheCommonWindow) {
  using testing::client;
  using testing::kernel;
  // A BE client whose one iteration takes most of the run must not look
  // faster than alone because its window ends at its own completion.
  Workload w = testing::workload({client("hp", {kernel(100, 10, KernelClass::kCompute)}, true, false, 400, 200),
                                  client("be", {kernel(1'500'000, 80, KernelClass::kMemory)}, false, true, 0)});
  const SimResult r = simulate(w, "mps");
  const SimResult dedicated = simulate(w, "dedicated");
  const auto rows = compare_to_dedicated({r}, dedicated);
  EXPECT_LT(r.clients[1].completed, kMinCompletedForRatios);
  EXPECT_EQ(rows[1].outcome, r.clients[1].completed == 0 ? "starved" : "too few");
  EXPECT_LE(r.clients[1].throughput_per_s, 1.0 / 1.5 + 1e-9);  // at most one 1.5 s iteration per 1.5 s
}

TEST(SimulatorOutcomes, AClientWhoseWorkEndsEarlyIsNotChargedForTheRestOfTheRun) {
  using testing::client;
  using testing::kernel;
  // An HP training job of 60 iterations (about 0.1 s) beside a BE server
  // whose arrivals last 4 s: the window ends when the training job is done.
  // A closed loop without host gaps runs its iterations back to back, so
  // its throughput is exactly 1 / its mean iteration time, however slowed.
  Workload w = testing::workload(
      {client("train", {kernel(1'000, 40, KernelClass::kCompute), kernel(500, 60, KernelClass::kMemory)}, true, true,
              60),
       client("serve", {kernel(300, 30, KernelClass::kMemory)}, false, false, 2'000, 500)});
  w.clients[0].warmup = 2;
  const SimResult dedicated = simulate(w, "dedicated");
  for (const std::string policy : {"mps", "streams", "temporal"}) {
    SCOPED_TRACE(policy);
    const SimResult r = simulate(w, policy);
    const ClientResult& train = r.clients[0];
    ASSERT_EQ(train.completed, 58);
    EXPECT_EQ(train.completed_in_window, 58);
    EXPECT_NEAR(train.throughput_per_s * train.mean_ms / 1000.0, 1.0, 1e-9);
    const ClientResult& serve = r.clients[1];
    EXPECT_GT(r.simulated_s, 3.0);  // the server ran on long after the window
    EXPECT_LT(serve.completed_in_window, serve.completed / 10);
    const auto rows = compare_to_dedicated({r}, dedicated);
    EXPECT_EQ(rows[0].outcome, "ok");
    EXPECT_NEAR(rows[0].throughput_vs_dedicated, dedicated.clients[0].mean_ms / train.mean_ms, 1e-9);
    // Temporal sharing hands the GPU to the gapless HP loop first, so the
    // server completes nothing until the training job is done: starved in
    // the window, though it completes every request afterwards.
    EXPECT_EQ(serve.completed, 2'000);
    EXPECT_EQ(rows[1].outcome, policy == "temporal" ? "starved" : "ok");
    // Its latency figures are those of the same window: most of its
    // requests ran after the training job, alone, and would pull its mean
    // towards the dedicated one; the starved server has none to show.
    double mean_of_all = 0;
    for (double ms : serve.latencies_ms) mean_of_all += ms / static_cast<double>(serve.latencies_ms.size());
    const nlohmann::json serve_row = comparison_to_json(rows)["rows"][1];
    if (policy == "temporal") {
      EXPECT_EQ(serve.mean_ms, 0);
      EXPECT_TRUE(serve_row["p99_ms"].is_null());
      EXPECT_GT(mean_of_all, 1.0);  // what the row would say otherwise
    } else {
      EXPECT_GT(serve.mean_ms, 1.01 * mean_of_all);
      EXPECT_NEAR(serve_row["mean_ms"].get<double>(), serve.mean_ms, 1e-12);
    }
  }
}

TEST(SimulatorOutcomes, TheIterationInProgressWhenTheWindowClosesCountsByItsWorkDone) {
  using testing::client;
  using testing::kernel;
  // A training loop of 400 ms iterations (ten 40 ms kernels, the last of
  // two waves) with no host gaps, stopped mid-kernel: a gapless closed loop
  // runs at exactly one iteration per 400 ms, which counting finished
  // iterations only would give as 2 per 0.99 s.
  std::vector<SimKernel> iteration(9, kernel(40'000, 80, KernelClass::kCompute));
  iteration.push_back(kernel(40'000, 160, KernelClass::kCompute));
  Workload w = testing::workload({client("train", iteration, false, true, 0)});
  for (const double stop_s : {0.99, 0.77, 2.05}) {
    SCOPED_TRACE(stop_s);
    w.max_duration_s = stop_s;
    const SimResult r = simulate(w, "streams");
    EXPECT_NEAR(r.simulated_s, stop_s, 1e-9);
    EXPECT_EQ(r.clients[0].completed_in_window, static_cast<std::int64_t>(stop_s / 0.4));
    EXPECT_NEAR(r.clients[0].throughput_per_s, 2.5, 1e-9);
  }
}

TEST(SimulatorOutcomes, ALongRunReportsItsProgressInTheBoundedClientsRequests) {
  using testing::client;
  using testing::kernel;
  // 4000 requests of a bounded server beside an unbounded training job; log
  // lines as often as the simulator looks at the clock (every few thousand
  // events), each counting the server's finished requests.
  Workload w = testing::workload({client("serve", {kernel(100, 40, KernelClass::kCompute)}, true, false, 4'000, 2'000),
                                  client("train", {kernel(300, 80, KernelClass::kMemory)}, false, true, 0)});
  SimOptions o;
  o.progress_style = ProgressStyle::kLogLines;
  o.progress_interval = std::chrono::milliseconds(0);
  std::vector<std::string> lines;
  o.progress_sink = [&](const std::string& line) { lines.push_back(line); };
  simulate(w, "mps", o);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.front().rfind("mps: ", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind("mps: 4000/4000 requests (100%)", 0), 0u) << lines.back();
  // Only the workload's time limit bounds it: simulated milliseconds.
  w.clients[0].requests = 0;
  w.max_duration_s = 1.5;
  lines.clear();
  o.progress_label = "time-bound";
  simulate(w, "streams", o);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("time-bound: 1500/1500 simulated ms (100%)", 0), 0u) << lines.back();
  // The default interval (10 s) is longer than these runs: nothing shown.
  o.progress_interval = std::chrono::milliseconds(10'000);
  lines.clear();
  simulate(w, "streams", o);
  EXPECT_TRUE(lines.empty());
}

TEST(SimulatorOutcomes, EachDedicatedRowShowsItsOwnGpusBusyFraction) {
  using testing::client;
  using testing::kernel;
  // A server of 10 ms requests arriving every 40 ms beside a gapless
  // training loop: alone, the server's GPU is busy about a quarter of the
  // time and the training job's all the time; the shared runs show the one
  // GPU they share.
  Workload w = testing::workload({client("serve", {kernel(10'000, 40, KernelClass::kCompute)}, true, false, 50, 25),
                                  client("train", {kernel(5'000, 80, KernelClass::kMemory)}, false, true, 0)});
  w.clients[0].arrivals.kind = ArrivalKind::kUniform;
  const SimResult dedicated = simulate(w, "dedicated");
  const auto rows = compare_to_dedicated({dedicated}, dedicated);
  EXPECT_NEAR(rows[0].busy_fraction, 0.25, 0.01);
  EXPECT_NEAR(rows[1].busy_fraction, 1.0, 1e-9);
  const SimResult shared = simulate(w, "mps");
  for (const auto& row : compare_to_dedicated({shared}, dedicated)) {
    EXPECT_EQ(row.busy_fraction, shared.busy_fraction);
    EXPECT_EQ(row.sm_utilization, shared.sm_utilization);
  }
}

TEST(SimulatorOutcomes, AJobWithoutARequestCountIsRunAloneLongEnoughForItsBaseline) {
  using testing::client;
  using testing::kernel;
  // The HP server is done in about 0.1 s, in which the training job alone
  // would not complete one 400 ms iteration: its dedicated run goes on to
  // kMinDedicatedRequests measured iterations.
  Workload w = testing::workload(
      {client("serve", {kernel(10'000, 40, KernelClass::kCompute)}, true, false, 10),
       client("train", std::vector<SimKernel>(10, kernel(40'000, 80, KernelClass::kMemory)), false, true, 0)});
  w.clients[1].warmup = 1;
  const SimResult dedicated = simulate(w, "dedicated");
  EXPECT_EQ(dedicated.clients[0].completed, 10);
  EXPECT_EQ(dedicated.clients[1].completed, kMinDedicatedRequests);
  EXPECT_EQ(dedicated.clients[1].completed_in_window, kMinDedicatedRequests);
  EXPECT_NEAR(dedicated.clients[1].throughput_per_s, 2.5, 1e-9);
  EXPECT_NEAR(dedicated.clients[1].p99_ms, 400, 1e-6);
  const auto rows = compare_to_dedicated({dedicated}, dedicated);
  EXPECT_EQ(rows[1].outcome, "ok");
  // An open-loop client keeps the bounded clients' time (the same arrivals
  // as the shared runs); its ratios need enough requests in both runs.
  SimResult shared = dedicated, short_baseline = dedicated;
  shared.policy = "mps";
  shared.clients[1].completed_in_window = 12;
  short_baseline.clients[1].completed_in_window = kMinCompletedForRatios - 1;
  EXPECT_EQ(compare_to_dedicated({shared}, short_baseline)[1].outcome, "too few");
  EXPECT_EQ(compare_to_dedicated({shared}, dedicated)[1].outcome, "ok");
}

}  // namespace
}  // namespace fleet::orion

namespace fleet::orion {
namespace {

TEST(SimulatorBounds, HugeInputFilesAreRefusedBeforeReading) {
  fleet::testing::TempDir dir;
  // Sparse files: their size is what is checked, nothing is read or allocated.
  std::ofstream(dir / "huge.csv").close();
  std::filesystem::resize_file(dir / "huge.csv", 300ull << 20);
  EXPECT_NE(fleet::testing::error_of([&] { read_kernel_profile(dir / "huge.csv"); }).find("at most 32 MiB"),
            std::string::npos);
  std::ofstream(dir / "huge.json").close();
  std::filesystem::resize_file(dir / "huge.json", 20ull << 20);
  EXPECT_NE(fleet::testing::error_of([&] { load_workload(dir / "huge.json"); }).find("at most 16 MiB"),
            std::string::npos);
}

}  // namespace
}  // namespace fleet::orion
