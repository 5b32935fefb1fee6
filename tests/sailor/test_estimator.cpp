// The plan simulator against hand-computed iteration times, memory and cost.
#include <gtest/gtest.h>

#include "common/chrome_trace.h"
#include "sailor_fixtures.h"

namespace fleet::sailor {
namespace {

using testing::make_plan;
using testing::tiny_inputs;

Estimate run(Plan plan, const PlannerInputs& in) {
  validate_plan(plan, in.model, in.cluster);
  pack_nodes(plan, in.cluster);
  return estimate_plan(plan, in);
}

TEST(Estimator, HomogeneousPipelineByHand) {
  const PlannerInputs in = tiny_inputs();
  // Two stages of two layers on "fast" GPUs, both in node 0 (TP 1 packs them together).
  const Estimate e = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}}), in);
  EXPECT_EQ(e.microbatches, 8);
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(e.stages[0].compute_s, 0.06);
  // 1000 floats x mbs 2 x 2 bytes over the 100 GB/s intra-node link, there and back.
  EXPECT_DOUBLE_EQ(e.stages[0].send_s, 2 * 4000 / 100e9);
  const double send = 2 * 4000 / 100e9;
  const double expected = 7 * (0.06 + send) + (0.06 + send + 0.06) + 0.002;
  EXPECT_NEAR(e.iteration_s, expected, 1e-12);
  EXPECT_NEAR(e.compute_usd, 2 * 3.6 / 3600 * expected, 1e-15);
  EXPECT_EQ(e.egress_usd, 0.0);
  // Memory of stage 0: 2e6 params x (6 + 6 + 8) B, activations 4000 floats x mbs 2 x 2 in flight x 4.32 B.
  const MemoryBreakdown& m = e.stages[0].memory[0];
  EXPECT_DOUBLE_EQ(m.weights, 12e6);
  EXPECT_DOUBLE_EQ(m.gradients, 12e6);
  EXPECT_DOUBLE_EQ(m.optimizer, 16e6);
  EXPECT_DOUBLE_EQ(m.activations, 4000.0 * 2 * 2 * 4.32);
  EXPECT_DOUBLE_EQ(m.total(), 40e6 + 69120 + 4.46e9);
  EXPECT_TRUE(e.fits);
}

TEST(Estimator, EnergyIsIdlePowerThroughoutPlusBusyPowerWhileComputing) {
  PlannerInputs in = tiny_inputs();
  in.cluster.gpu_types["fast"].power = {50, 400};
  in.cluster.gpu_types["slow"].power = {30, 250};
  // Two stages: fast then slow, one replica each; 8 micro-batches.
  const Estimate e = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"slow", "z1a"}}}), in);
  ASSERT_TRUE(e.energy_known);
  // Busy: 8 x (forward + backward of two layers) + the update of two layers (no all-reduce with one replica).
  const double fast_busy = 8 * 0.06 + 0.002, slow_busy = 8 * 0.12 + 0.004;
  EXPECT_NEAR(e.busy_gpu_s, fast_busy + slow_busy, 1e-12);
  const double expected = (50 + 30) * e.iteration_s + fast_busy * (400 - 50) + slow_busy * (250 - 30);
  EXPECT_NEAR(e.energy_j, expected, 1e-9);
  // A GPU type whose power is unknown leaves the energy unknown.
  in.cluster.gpu_types["slow"].power = {};
  const Estimate unknown = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"slow", "z1a"}}}), in);
  EXPECT_FALSE(unknown.energy_known);
  EXPECT_TRUE(estimate_to_json(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"slow", "z1a"}}}), unknown)
                  .at("energy_j_per_iteration")
                  .is_null());
}

TEST(Estimator, TheRuntimesWorkPerMicroBatchAddsOncePerSlotOfTheCriticalPath) {
  PlannerInputs in = tiny_inputs();
  const Plan plan = make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1a"}}});
  const double without = run(plan, in).iteration_s;
  in.calibration.microbatch_overhead_s = 0.003;
  // 8 micro-batches through 2 stages: 7 steady-state slots + one pass through both stages.
  EXPECT_NEAR(run(plan, in).iteration_s - without, 0.003 * (7 + 2), 1e-12);
}

TEST(Estimator, DeepSpeedsBlockingTransfersHoldBothStages) {
  PlannerInputs in = tiny_inputs();
  // Stage 1 on the slow GPUs paces the pipeline (0.12 s against 0.06 s).
  const Plan plan = make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"slow", "z2a"}}});
  const Estimate async = run(plan, in);
  in.job.runtime = TrainingRuntime::kDeepSpeed;
  const Estimate blocking = run(plan, in);
  // 4000 B each way over the 1 GB/s cross-region link; with DeepSpeed stage 1
  // also waits out those transfers (activations in, gradients out): its slot
  // grows by stage 0's send time, once per slot of the critical path (7
  // steady-state slots and its own in the pass through both stages).
  const double send = 2 * 4000 / 1e9;
  EXPECT_DOUBLE_EQ(blocking.stages[0].send_s, send);
  EXPECT_NEAR(blocking.iteration_s - async.iteration_s, 8 * send, 1e-12);
}

TEST(Estimator, ReplicasOfAStageMayDifferInTensorParallelism) {
  const PlannerInputs in = tiny_inputs();
  // Stage 0: replica 0 at TP 1, replica 1 at TP 2 (0.5e6 params per layer and rank); stage 1 at TP 1.
  Plan plan = make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}, {"fast", "z1a"}}, {{"fast", "z1a"}, {"fast", "z1a"}}});
  plan.stages[0].replicas[1].tp = 2;
  EXPECT_EQ(plan.gpus(), 5);
  const Estimate e = run(plan, in);
  const auto& m = e.stages[0].memory;
  EXPECT_DOUBLE_EQ(m[0].weights, 2e6 * 6);
  EXPECT_DOUBLE_EQ(m[1].weights, 1e6 * 6);
  // Activations kept at TP 2: 2 layers x 1000 floats (2000 at TP 1), mbs 2, 2 in flight.
  EXPECT_DOUBLE_EQ(m[1].activations, 2 * 1000.0 * 2 * 2 * 4.32);
  // The ring is paced by the replica with the largest shard (TP 1): 2e6 params x 2 B per link.
  EXPECT_DOUBLE_EQ(e.stages[0].allreduce_s, 4e6 / 100e9);
  // Both kinds take the same profiled times here: the straggler is either.
  EXPECT_DOUBLE_EQ(e.stages[0].compute_s, 0.06);
  // Our layout writes the odd replica's degree and reads it back.
  const Plan back = plan_from_json(parse_json(plan_to_json(plan).dump(), "plan").root(), in.job);
  EXPECT_EQ(back.stages[0].tp_of(back.stages[0].replicas[1]), 2);
  EXPECT_EQ(back.stages[0].tp_of(back.stages[0].replicas[0]), 1);
  EXPECT_TRUE(back.stages[1].uniform_tp());
}

TEST(Estimator, SlowReplicaIsTheStraggler) {
  const PlannerInputs in = tiny_inputs();
  const Estimate e =
      run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}, {"slow", "z1a"}}, {{"fast", "z1a"}, {"fast", "z1a"}}}), in);
  EXPECT_EQ(e.microbatches, 4);
  EXPECT_DOUBLE_EQ(e.stages[0].compute_s, 0.12);  // the slow replica
  // Replica 1 sends slow -> fast: different nodes, same zone, 10 GB/s.
  const double send = 2 * 4000 / 10e9;
  EXPECT_DOUBLE_EQ(e.stages[0].send_s, send);
  // Stage 0 gradients: 2e6 params x 2 B, ring of 2 moves 4e6 B per link at 10 GB/s; hidden under the 0.08 s backward.
  EXPECT_DOUBLE_EQ(e.stages[0].allreduce_s, 4e6 / 10e9);
  EXPECT_DOUBLE_EQ(e.stages[0].allreduce_exposed_s, 0.0);
  const double expected = 3 * (0.12 + send) + (0.12 + send + 0.06) + 0.004;
  EXPECT_NEAR(e.iteration_s, expected, 1e-12);
  EXPECT_NEAR(e.compute_usd, (3 * 3.6 + 1.8) / 3600 * expected, 1e-15);
}

TEST(Estimator, CrossZoneAndCrossRegionSendsCostEgress) {
  const PlannerInputs in = tiny_inputs();
  const Estimate zone = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z1b"}}}), in);
  EXPECT_DOUBLE_EQ(zone.stages[0].send_s, 2 * 4000 / 5e9);
  EXPECT_NEAR(zone.egress_usd, 2 * 4000.0 * 8 / 1e9 * 0.01, 1e-18);  // both directions, 8 micro-batches
  const Estimate region = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"fast", "z2a"}}}), in);
  EXPECT_DOUBLE_EQ(region.stages[0].send_s, 2 * 4000 / 1e9);
  EXPECT_NEAR(region.egress_usd, 2 * 4000.0 * 8 / 1e9 * 0.02, 1e-18);
  EXPECT_GT(region.iteration_s, zone.iteration_s);
  EXPECT_NEAR(region.usd_per_iteration(), region.compute_usd + region.egress_usd, 1e-18);
}

TEST(Estimator, ExposedAllReduceAcrossRegions) {
  PlannerInputs in = tiny_inputs();
  // One stage, two replicas an ocean apart: 4 layers x 1e6 params x 2 B = 8e6 B per link at 1 GB/s = 8 ms,
  // against a 0.08 s backward: hidden. With 1 MB/s it is exposed.
  const Estimate hidden = run(make_plan(1, 16, {4}, {{{"fast", "z1a"}, {"fast", "z2a"}}}), in);
  EXPECT_DOUBLE_EQ(hidden.stages[0].allreduce_s, 8e6 / 1e9);
  EXPECT_DOUBLE_EQ(hidden.stages[0].allreduce_exposed_s, 0.0);
  EXPECT_NEAR(hidden.egress_usd, 2 * 8e6 / 1e9 * 0.02, 1e-15);  // each replica sends 8e6 B across
  // A runtime that all-reduces after the last backward (DeepSpeed's pipeline engine) exposes all of it.
  PlannerInputs after = in;
  after.job.runtime = TrainingRuntime::kDeepSpeed;
  const Estimate serial = run(make_plan(1, 16, {4}, {{{"fast", "z1a"}, {"fast", "z2a"}}}), after);
  EXPECT_DOUBLE_EQ(serial.stages[0].allreduce_exposed_s, 8e6 / 1e9);
  EXPECT_NEAR(serial.iteration_s - hidden.iteration_s, 8e6 / 1e9, 1e-12);
  in.cluster.inter_node[{LinkClass::kCrossRegion, "fast", "fast"}] = testing::constant_gbps(0.001);
  const Estimate exposed = run(make_plan(1, 16, {4}, {{{"fast", "z1a"}, {"fast", "z2a"}}}), in);
  EXPECT_DOUBLE_EQ(exposed.stages[0].allreduce_exposed_s, 8.0 - 0.08);
  EXPECT_NEAR(exposed.iteration_s - hidden.iteration_s, 8.0 - 0.08, 1e-9);
}

TEST(Estimator, OneFOneBKeepsPMinusIMicroBatchesInFlight) {
  const PlannerInputs in = tiny_inputs();
  const auto replicas = std::vector<std::vector<std::pair<std::string, std::string>>>(4, {{"fast", "z1a"}});
  const Estimate many = run(make_plan(2, 16, {1, 1, 1, 1}, replicas), in);  // 8 micro-batches
  for (int i = 0; i < 4; ++i) EXPECT_EQ(many.stages[static_cast<std::size_t>(i)].in_flight, 4 - i);
  EXPECT_DOUBLE_EQ(many.stages[0].memory[0].activations, 2000.0 * 2 * 4 * 4.32);
  const Estimate few = run(make_plan(2, 4, {1, 1, 1, 1}, replicas), in);  // 2 micro-batches
  EXPECT_EQ(few.stages[0].in_flight, 2);
  EXPECT_EQ(few.stages[3].in_flight, 1);
}

TEST(Estimator, MemoryThatDoesNotFitIsReported) {
  PlannerInputs in = tiny_inputs();
  in.cluster.gpu_types["slow"].memory_bytes = 1e9;  // below the runtime overhead alone
  const Estimate e = run(make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}}, {{"slow", "z1a"}}}), in);
  EXPECT_FALSE(e.fits);
}

class EstimatorTrace : public ::testing::TestWithParam<TrainingRuntime> {};

TEST_P(EstimatorTrace, HasARowPerReplicaAndEveryPhaseAndEndsWithTheIteration) {
  PlannerInputs in = tiny_inputs();
  in.job.runtime = GetParam();
  in.calibration.microbatch_overhead_s = 0.003;
  Plan plan = make_plan(2, 16, {2, 2}, {{{"fast", "z1a"}, {"slow", "z1b"}}, {{"fast", "z1a"}, {"fast", "z1a"}}});
  validate_plan(plan, in.model, in.cluster);
  pack_nodes(plan, in.cluster);
  const Estimate e = estimate_plan(plan, in);
  ChromeTrace trace;
  trace_plan(plan, e, trace);
  const nlohmann::json events = trace.to_json()["traceEvents"];
  std::map<int, std::map<std::string, int>> per_row;
  double last_end = 0;
  for (const auto& ev : events) {
    if (ev["ph"] != "X") continue;
    ++per_row[ev["tid"].get<int>()][ev["cat"].get<std::string>()];
    last_end = std::max(last_end, ev["ts"].get<double>() + ev["dur"].get<double>());
  }
  ASSERT_EQ(per_row.size(), 4u);  // 2 stages x 2 replicas
  const bool blocking = GetParam() == TrainingRuntime::kDeepSpeed;
  for (const auto& [tid, cats] : per_row) {
    EXPECT_EQ(cats.at("forward"), 4);
    EXPECT_EQ(cats.at("backward"), 4);
    EXPECT_EQ(cats.at("overhead"), 8);  // the runtime's work, before each forward and backward
    EXPECT_EQ(cats.at("update"), 1);
    EXPECT_EQ(cats.count("allreduce"), 1u);
    // Each stage sends 4 activations or 4 gradients; with blocking transfers it also receives 4.
    EXPECT_EQ(cats.at("send"), blocking ? 8 : 4);
  }
  // The drawn schedule ends near the closed-form iteration time (the trace
  // places each operation; the closed form puts every send of the slowest
  // stage on the critical path, so it is the longer here, where sends are
  // large; on the example plans the two agree within 1.5 %, test_inputs.cpp).
  EXPECT_NEAR(last_end / 1e6, e.iteration_s, 0.1 * e.iteration_s);
}

INSTANTIATE_TEST_SUITE_P(Runtimes, EstimatorTrace,
                         ::testing::Values(TrainingRuntime::kSailorRun, TrainingRuntime::kDeepSpeed));

}  // namespace
}  // namespace fleet::sailor
