// The runtime's torch-free parts: where a rank sits in a plan, how a global
// batch splits into replicas and micro-batches, the 1F1B order against
// schedules written out by hand, and reading the launch environment.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "sailor/runtime/layout.h"
#include "sailor/pipeline_schedule.h"
#include "sailor/runtime/world.h"
#include "test_util.h"

namespace fleet::sailor::runtime {
namespace {

Plan two_stage_plan(int dp, int split, int layers) {
  Plan plan;
  plan.mbs = 2;
  plan.global_batch = 10;
  for (auto [first, last] : {std::pair{0, split}, std::pair{split, layers}}) {
    Stage s;
    s.first_layer = first;
    s.last_layer = last;
    s.replicas.assign(static_cast<std::size_t>(dp), Replica{"cpu", "local", 0});
    plan.stages.push_back(s);
  }
  return plan;
}

TEST(Layout, RanksStageMajorAndBatchSplits) {
  const auto layout = layout_from_plan(two_stage_plan(2, 3, 8), 8);
  EXPECT_EQ(layout.world_size(), 4);
  EXPECT_EQ(layout.place(0).stage, 0);
  EXPECT_EQ(layout.place(1).replica, 1);
  EXPECT_EQ(layout.place(2).stage, 1);
  EXPECT_EQ(layout.place(3).replica, 1);
  EXPECT_EQ(layout.rank_of(1, 1), 3);
  EXPECT_THROW(layout.place(4), UsageError);
  // 10 sequences over 2 replicas, micro-batches of 2: 5 each, the last micro-batch of 1.
  EXPECT_EQ(layout.replica_sequences(1), (std::pair<std::int64_t, std::int64_t>{5, 10}));
  EXPECT_EQ(layout.micro_batches(0), 3);
  EXPECT_EQ(layout.micro_batch(1, 2), (std::pair<std::int64_t, std::int64_t>{9, 10}));
  // Every sequence of the global batch is trained on exactly once.
  std::map<std::int64_t, int> seen;
  for (int r = 0; r < 2; ++r)
    for (int m = 0; m < layout.micro_batches(r); ++m)
      for (auto [a, b] = layout.micro_batch(r, m); a < b; ++a) ++seen[a];
  EXPECT_EQ(seen.size(), 10u);
  for (auto [seq, n] : seen) EXPECT_EQ(n, 1) << seq;
  EXPECT_NO_THROW(check_world_size(layout, 4));
  auto message = testing::error_of<UsageError>([&] { check_world_size(layout, 3); });
  EXPECT_NE(message.find("needs 4 ranks but 3 were started"), std::string::npos) << message;
}

TEST(Layout, RefusesPlansThatDoNotFitTheModel) {
  auto message = testing::error_of([&] { layout_from_plan(two_stage_plan(1, 3, 8), 10); });
  EXPECT_NE(message.find("cover layers [0, 8) but the model has 10"), std::string::npos) << message;
  auto gap = two_stage_plan(1, 3, 8);
  gap.stages[1].first_layer = 4;
  message = testing::error_of([&] { layout_from_plan(gap, 8); });
  EXPECT_NE(message.find("stages must be contiguous"), std::string::npos) << message;
  auto uneven = two_stage_plan(2, 3, 8);
  uneven.stages[1].replicas.pop_back();
  EXPECT_THROW(layout_from_plan(uneven, 8), InputError);
  auto tp = two_stage_plan(1, 3, 8);
  tp.stages[0].tp = 2;  // a TP degree per stage: ranks 0-1 hold stage 0, rank 2 stage 1
  const auto per_stage = layout_from_plan(tp, 8);
  EXPECT_EQ(per_stage.world_size(), 3);
  EXPECT_EQ(per_stage.place(2).stage, 1);
  EXPECT_EQ(per_stage.rank_of(1, 0, 0), 2);
  tp.stages[1].tp = 2;
  const auto layout = layout_from_plan(tp, 8);
  EXPECT_EQ(layout.world_size(), 4);
  EXPECT_EQ(layout.place(3).tp_rank, 1);
  EXPECT_EQ(layout.place(3).stage, 1);
  EXPECT_EQ(layout.rank_of(1, 0, 1), 3);
  auto mixed = two_stage_plan(2, 3, 8);
  mixed.stages[1].replicas[1].tp = 2;  // as SAILOR's planner may choose
  message = testing::error_of([&] { layout_from_plan(mixed, 8); });
  EXPECT_NE(message.find("replicas of stage 1 of the plan differ in tensor parallelism"), std::string::npos) << message;
}

// Schedules as Megatron-LM's 1F1B runs them, written out by hand.
TEST(Schedule, OneForwardOneBackward) {
  using K = PipelineOp::Kind;
  auto text = [](const std::vector<PipelineOp>& ops) {
    std::string s;
    for (const auto& op : ops) s += (op.kind == K::kForward ? "F" : "B") + std::to_string(op.micro) + " ";
    return s;
  };
  EXPECT_EQ(text(one_f_one_b(0, 4, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  EXPECT_EQ(text(one_f_one_b(1, 4, 6)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
  EXPECT_EQ(text(one_f_one_b(3, 4, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  EXPECT_EQ(text(one_f_one_b(0, 4, 2)), "F0 F1 B0 B1 ");  // fewer micro-batches than stages
  EXPECT_EQ(text(one_f_one_b(0, 1, 3)), "F0 B0 F1 B1 F2 B2 ");
  // Activations alive on stage i never exceed P - i.
  for (int stage = 0; stage < 4; ++stage) {
    int alive = 0, peak = 0;
    for (const auto& op : one_f_one_b(stage, 4, 8)) {
      alive += op.kind == K::kForward ? 1 : -1;
      peak = std::max(peak, alive);
    }
    EXPECT_EQ(peak, 4 - stage);
    EXPECT_EQ(alive, 0);
  }
}

TEST(World, TorchrunSlurmAndNothing) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  auto single = world_from_environment(env({}));
  EXPECT_EQ(single.world_size, 1);
  EXPECT_FALSE(single.distributed());
  auto torchrun = world_from_environment(
      env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(torchrun.rank, 3);
  EXPECT_EQ(torchrun.local_rank, 1);
  EXPECT_EQ(torchrun.master_addr, "n1");
  EXPECT_EQ(torchrun.master_port, 1234);
  auto slurm = world_from_environment(env({{"SLURM_PROCID", "5"},
                                           {"SLURM_NTASKS", "8"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_JOB_NODELIST", "gpu[03-05,09],cpu1"},
                                           {"SLURM_JOB_ID", "4242"}}));
  EXPECT_EQ(slurm.source, "slurm");
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.world_size, 8);
  EXPECT_EQ(slurm.master_addr, "gpu03");
  EXPECT_EQ(slurm.master_port, 24242);
  EXPECT_EQ(first_slurm_host("node7"), "node7");
  EXPECT_EQ(first_slurm_host("a[1-2],b[3]"), "a1");
  // Several range lists in one name, as Slurm writes them for racks of nodes.
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[01-02]"), "rack1-n01");
  EXPECT_EQ(first_slurm_host("gpu[007,009-010].cluster,cpu1"), "gpu007.cluster");
  for (const char* bad : {"", "[1-3]", "n[1-3", "n[x]", "n]1[", "n[]", "n[1-2][3"})
    EXPECT_THROW(first_slurm_host(bad), UsageError) << bad;
  EXPECT_THROW(world_from_environment(env({{"RANK", "4"}, {"WORLD_SIZE", "4"}})), UsageError);
  EXPECT_THROW(world_from_environment(env({{"RANK", "0"}})), UsageError);
  EXPECT_THROW(world_from_environment(env({{"RANK", "0"}, {"WORLD_SIZE", "two"}})), UsageError);
  EXPECT_THROW(world_from_environment(env({{"SLURM_PROCID", "0"}})), UsageError);
}

}  // namespace
}  // namespace fleet::sailor::runtime
