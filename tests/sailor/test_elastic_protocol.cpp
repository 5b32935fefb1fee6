// The in-place elastic protocol's parts, in one process: the controller's
// store, memberships, the step commit (all ranks apply a step or none), and
// the hand-over schedule over real Gloo groups (one thread per member).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "sailor/runtime/launcher.h"
#include "sailor/runtime/torch/control_store.h"
#include "sailor/runtime/torch/elastic.h"
#include "sailor/runtime/torch/elastic_worker.h"

namespace fleet::sailor::runtime {
namespace {

using namespace std::chrono_literals;

// A served store and workers of it, as the launcher starts them (one
// process here: the environment is set for each worker in turn).
struct ElasticFixture {
  std::unique_ptr<ControlStore> store = ControlStore::serve(free_local_port(), 30s);

  std::unique_ptr<ElasticWorker> worker(int id) {
    ::setenv("SAILOR_CONTROL", fmt::format("127.0.0.1:{}", store->port()).c_str(), 1);
    ::setenv("SAILOR_WORKER_ID", std::to_string(id).c_str(), 1);
    ::setenv("SAILOR_GENERATION", "0", 1);
    auto w = ElasticWorker::from_environment(20s);
    ::unsetenv("SAILOR_CONTROL");
    ::unsetenv("SAILOR_WORKER_ID");
    ::unsetenv("SAILOR_GENERATION");
    return w;
  }
};

TEST(ElasticProtocol, MembershipRoundTripsAndPlacesWorkers) {
  Membership m;
  m.generation = 3;
  m.training = {4, 1};
  m.others = {7, 2};
  m.leaving = {2};
  m.plan = {{"stages", nlohmann::json::array()}};
  const Membership back = Membership::from_json(3, m.to_json());
  EXPECT_FALSE(back.save_only);
  m.save_only = true;
  EXPECT_TRUE(Membership::from_json(3, m.to_json()).save_only);
  EXPECT_EQ(back.training, m.training);
  EXPECT_EQ(back.others, m.others);
  EXPECT_EQ(back.leaving, m.leaving);
  EXPECT_EQ(back.rank_of(1), 1);
  EXPECT_EQ(back.rank_of(7), -1);
  EXPECT_EQ(back.member_rank_of(7), 2);
  EXPECT_EQ(back.member_rank_of(2), 3);
  EXPECT_EQ(back.member_rank_of(9), -1);
  EXPECT_EQ(back.members(), 4);
}

TEST(ElasticProtocol, ASavePlanSpreadsTheLayersOverTheWorkersLeft) {
  Plan last;
  last.mbs = 2;
  last.global_batch = 16;
  last.stages = {{0, 10, 2, {{"A100", "z1", 3}, {"A100", "z1", 4}}}};
  const Plan three = save_plan_for_workers(last, 10, 3);
  ASSERT_EQ(three.stages.size(), 3u);
  EXPECT_EQ(three.mbs, 2);
  EXPECT_EQ(three.global_batch, 16);
  int next = 0;
  for (const Stage& s : three.stages) {
    EXPECT_EQ(s.first_layer, next);
    EXPECT_GE(s.last_layer - s.first_layer, 3);  // 10 layers over 3 workers: 3, 3, 4
    EXPECT_EQ(s.tp, 1);
    ASSERT_EQ(s.replicas.size(), 1u);
    EXPECT_EQ(s.replicas[0].gpu, "A100");
    EXPECT_EQ(s.replicas[0].node, -1);
    next = s.last_layer;
  }
  EXPECT_EQ(next, 10);
  // More workers than layers: one stage per layer, the rest idle.
  EXPECT_EQ(save_plan_for_workers(last, 4, 9).gpus(), 4);
  EXPECT_THROW(save_plan_for_workers(Plan{}, 4, 2), UsageError);
}

TEST(ElasticProtocol, BoundsAreCheckedWhereTheyAreRead) {
  EXPECT_EQ(search_options("cost", 2.5, 0, 4).objective, Objective::kCost);
  EXPECT_EQ(search_options("throughput", 0, 3, 0).min_throughput, 3);
  EXPECT_THROW(search_options("speed", 0, 0, 0), UsageError);
  EXPECT_THROW(search_options("cost", -1, 0, 0), UsageError);
  EXPECT_THROW(search_options("cost", 0, std::nan(""), 0), UsageError);
  EXPECT_THROW(search_options("cost", 0, 0, -2), UsageError);
  const SearchOptions energy = search_options("energy", 0, 0, 0, 5e5);
  EXPECT_EQ(energy.objective, Objective::kEnergy);
  EXPECT_EQ(energy.max_energy_per_iteration, 5e5);
  EXPECT_THROW(search_options("energy", 0, 0, 0, -1), UsageError);
}

TEST(ElasticProtocol, HostPortIsCheckedAndAMissingControllerIsOneClearError) {
  EXPECT_EQ(parse_host_port("node-3:29400"), std::make_pair(std::string("node-3"), 29400));
  EXPECT_THROW(parse_host_port("node-3"), UsageError);
  EXPECT_THROW(parse_host_port(":29400"), UsageError);
  EXPECT_THROW(parse_host_port("node:0"), UsageError);
  EXPECT_THROW(parse_host_port("node:29400x"), UsageError);
  const auto started = std::chrono::steady_clock::now();
  try {
    ControlStore::connect("127.0.0.1", free_local_port(), 10s);
    FAIL() << "connected to nothing";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("nothing accepts connections"), std::string::npos) << e.what();
  }
  // Refused at once, not after c10d's retries until the timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST(ElasticProtocol, StoreCountersAndValues) {
  ElasticFixture f;
  auto client = ControlStore::connect("127.0.0.1", f.store->port(), 10s);
  EXPECT_FALSE(client->get("k").has_value());
  f.store->set("k", "v");
  EXPECT_EQ(client->get("k"), std::optional<std::string>("v"));
  EXPECT_EQ(client->add("n", 2), 2);
  EXPECT_EQ(f.store->add("n", 3), 5);
}

TEST(ElasticProtocol, EveryRankCommitsAStepThatAllFinished) {
  ElasticFixture f;
  auto a = f.worker(0), b = f.worker(1);
  auto later = std::async(std::launch::async, [&] { return b->commit(0, 7, 2); });
  EXPECT_TRUE(a->commit(0, 7, 2));
  EXPECT_TRUE(later.get());
  // The next step's commit drops the previous one's keys.
  auto next = std::async(std::launch::async, [&] { return b->commit(0, 8, 2); });
  EXPECT_TRUE(a->commit(0, 8, 2));
  EXPECT_TRUE(next.get());
  EXPECT_FALSE(f.store->get("gen/0/commit/7/decision").has_value());
}

TEST(ElasticProtocol, NoRankCommitsAStepTheGenerationAbandoned) {
  ElasticFixture f;
  auto a = f.worker(0), b = f.worker(1);
  // Rank a waits for b, which never comes before the controller moves on.
  auto waiting = std::async(std::launch::async, [&] { return a->commit(0, 4, 3); });
  std::this_thread::sleep_for(50ms);
  f.store->set(control_keys::kGeneration, "1");
  EXPECT_FALSE(waiting.get());
  // b reaches the count afterwards: the decision stands, nobody applies the step.
  f.store->add("gen/0/commit/4/count", 1);
  EXPECT_FALSE(b->commit(0, 4, 3));
}

TEST(ElasticProtocol, AMemberLostWhileGroupsConnectEndsTheGenerationNotTheTimeout) {
  ElasticFixture f;
  auto a = f.worker(0);
  // Member 1 counts itself in, then dies before its Gloo group connects.
  f.store->add("gen/0/x/arrived", 1);  // c10d's PrefixStore joins prefix and key with '/'

  auto building = std::async(std::launch::async, [&] {
    Communicator comm(WorldInfo{0, 2, 0, "127.0.0.1", f.store->port(), "elastic"}, "gen/0/x", 20s, &a->interrupt());
  });
  std::this_thread::sleep_for(100ms);
  f.store->set(control_keys::kGeneration, "1");  // the controller saw the loss
  // Without the interrupt the build would wait the whole 20 s and fail as a RuntimeFailure.
  ASSERT_EQ(building.wait_for(15s), std::future_status::ready);
  try {
    building.get();
    ADD_FAILURE() << "the group was built without member 1";
  } catch (const PeerLost& e) {
    EXPECT_NE(std::string(e.what()).find("while its groups were being connected"), std::string::npos) << e.what();
  }
}

TEST(ElasticProtocol, HandOverFillsEveryNeedFromTheNewestHolders) {
  ElasticFixture f;
  constexpr int kMembers = 3;
  Membership members;
  members.generation = 1;
  members.training = {0, 1, 2};
  f.store->set(control_keys::generation_prefix(1) + "members", members.to_json());
  f.store->set(control_keys::kGeneration, "1");
  std::vector<std::unique_ptr<ElasticWorker>> workers;
  for (int w = 0; w < kMembers; ++w) {
    workers.push_back(f.worker(w));
    ASSERT_EQ(workers.back()->next_generation(0)->training, members.training);
  }
  auto a = torch::arange(6, torch::kFloat32).view({2, 3}), b = torch::full({4}, 2.5f);
  // Member 0 holds a and b at step 5; member 1 a stale a (step 4); member 2 nothing.
  std::vector<HeldState> held(kMembers);
  held[0].step = 5;
  held[0].tensors = {{"a", a}, {"b", b}};
  held[1].step = 4;
  held[1].tensors = {{"a", torch::zeros({2, 3})}};
  std::vector<std::vector<HandOverTarget>> targets(kMembers);
  targets[0] = {{"a", torch::empty({2, 3}), {}}};
  targets[1] = {{"a", torch::empty({2, 3}), {}}, {"b", torch::empty({4}), {}}};
  targets[2] = {{"b", torch::empty({4}), {}}};
  auto run = [&](const std::string& prefix) {
    std::vector<std::future<std::optional<std::int64_t>>> done;
    for (int m = 0; m < kMembers; ++m)
      done.push_back(std::async(std::launch::async, [&, m] {
        Communicator comm(WorldInfo{m, kMembers, 0, "127.0.0.1", f.store->port(), "elastic"}, prefix, 20s,
                          &workers[m]->interrupt());
        return hand_over_state(comm, held[m], targets[m]);
      }));
    std::vector<std::optional<std::int64_t>> steps;
    for (auto& d : done) steps.push_back(d.get());
    return steps;
  };
  for (const auto& step : run("gen/1/a/")) EXPECT_EQ(step, std::optional<std::int64_t>(5));
  EXPECT_TRUE(torch::equal(targets[0][0].tensor, a));
  EXPECT_TRUE(torch::equal(targets[1][0].tensor, a));
  EXPECT_TRUE(torch::equal(targets[1][1].tensor, b));
  EXPECT_TRUE(torch::equal(targets[2][0].tensor, b));

  // Tensor-parallel slices: v [4, 2] split by rows over members 1 and 2 (a
  // TP degree of 2); w whole on member 0. Member 0 needs v whole (put
  // together from both slices), member 1 rows 2-3 of w (cut from the whole),
  // member 2 rows 1-2 of v (one from member 1, one of its own).
  const auto v = torch::arange(8, torch::kFloat32).view({4, 2}),
             w = torch::arange(8, 16).to(torch::kFloat32).view({4, 2});
  for (auto& h : held) h = HeldState{};
  held[0].step = held[1].step = held[2].step = 9;
  held[0].tensors = {{"w", w}};
  held[1].tensors = {{"v", v.narrow(0, 0, 2)}};
  held[1].slices = {{"v", {0, 0, 2, 4}}};
  held[2].tensors = {{"v", v.narrow(0, 2, 2)}};
  held[2].slices = {{"v", {0, 2, 2, 4}}};
  targets[0] = {{"v", torch::zeros({4, 2}), {}}};
  targets[1] = {{"w", torch::zeros({2, 2}), {0, 2, 2, 4}}};
  targets[2] = {{"v", torch::zeros({2, 2}), {0, 1, 2, 4}}};
  for (const auto& step : run("gen/1/tp/")) EXPECT_EQ(step, std::optional<std::int64_t>(9));
  EXPECT_TRUE(torch::equal(targets[0][0].tensor, v));
  EXPECT_TRUE(torch::equal(targets[1][0].tensor, w.narrow(0, 2, 2)));
  EXPECT_TRUE(torch::equal(targets[2][0].tensor, v.narrow(0, 1, 2)));

  // A part nobody holds: every member gets nothing (the checkpoint's turn).
  targets[2].push_back({"c", torch::empty({1}), {}});
  for (const auto& step : run("gen/1/b/")) EXPECT_FALSE(step.has_value());
  held[2] = HeldState{};  // rows 2-3 of v lost with their holder
  held[2].step = 9;
  targets[2].pop_back();
  for (const auto& step : run("gen/1/c/")) EXPECT_FALSE(step.has_value());
}

}  // namespace
}  // namespace fleet::sailor::runtime
