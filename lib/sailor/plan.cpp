#include "sailor/plan.h"

#include <map>
#include <tuple>

#include "common/error.h"
#include "common/json.h"

namespace fleet::sailor {

int Plan::gpus() const {
  int n = 0;
  for (const Stage& s : stages)
    for (const Replica& r : s.replicas) n += s.tp_of(r);
  return n;
}

namespace {

Plan load_native(const JsonValue& root, const JobSpec& job) {
  if (root.get<int>("version") != 1) root.at("version").fail("unsupported version (this build reads 1)");
  Plan p;
  p.mbs = root.get<int>("mbs");
  p.global_batch = root.get_or<int>("global_batch", job.global_batch);
  for (const JsonValue& s : root.at("stages").elements()) {
    Stage st;
    const auto layers = s.get<std::vector<int>>("layers");
    if (layers.size() != 2) s.at("layers").fail("layers must be [first, last) of the stage");
    st.first_layer = layers[0];
    st.last_layer = layers[1];
    st.tp = s.get<int>("tp");
    for (const JsonValue& r : s.at("replicas").elements()) {
      // Left out, node and tp mean "packed by the planner" and "the stage's";
      // given, they must be real.
      if (auto node = r.find("node"); node && node->as<int>() < 0)
        node->fail("a node index is 0 or more (leave it out to let the nodes be packed)");
      if (auto tp = r.find("tp"); tp && tp->as<int>() < 1)
        tp->fail("a TP degree is 1 or more (leave it out for the stage's)");
      st.replicas.push_back(
          {r.get<std::string>("gpu"), r.get<std::string>("zone"), r.get_or<int>("node", -1), r.get_or<int>("tp", 0)});
    }
    p.stages.push_back(std::move(st));
  }
  return p;
}

Plan load_sailor_layout(const JsonValue& root, const JobSpec& job) {
  Plan p;
  p.mbs = root.get<int>("mbs");
  // SAILOR's validation plans name their global batch ("gbs"); its planner's leave it to the job.
  p.global_batch = root.get_or<int>("gbs", job.global_batch);
  const JsonValue pipeline = root.at("pipeline_list").at(0);
  const auto layer_lists = pipeline.at("layers_per_stage").elements();
  const auto tmp = pipeline.at("tmp_per_stage").elements();
  if (layer_lists.size() != tmp.size()) pipeline.fail("layers_per_stage and tmp_per_stage differ in length");
  if (pipeline.has("num_stages") && pipeline.get<std::size_t>("num_stages") != layer_lists.size()) {
    pipeline.at("num_stages")
        .fail("num_stages is " + std::to_string(pipeline.get<std::size_t>("num_stages")) +
              " but layers_per_stage lists " + std::to_string(layer_lists.size()) + " stages");
  }
  if (pipeline.has("dp")) {
    // SAILOR writes the data-parallel degree per stage; it must match the replicas listed.
    const JsonValue dp = pipeline.at("dp");
    const auto per_stage =
        dp.is_array() ? dp.as<std::vector<std::size_t>>() : std::vector<std::size_t>(tmp.size(), dp.as<std::size_t>());
    if (per_stage.size() != tmp.size())
      dp.fail("dp lists " + std::to_string(per_stage.size()) + " stages, not " + std::to_string(tmp.size()));
    for (std::size_t i = 0; i < tmp.size(); ++i) {
      if (per_stage[i] != tmp[i].elements().size()) {
        dp.fail("stage " + std::to_string(i) + " has dp " + std::to_string(per_stage[i]) + " but tmp_per_stage lists " +
                std::to_string(tmp[i].elements().size()) + " replicas");
      }
    }
  }
  for (std::size_t i = 0; i < layer_lists.size(); ++i) {
    Stage st;
    const auto layers = layer_lists[i].as<std::vector<int>>();
    if (layers.empty()) layer_lists[i].fail("a stage needs at least one layer");
    for (std::size_t k = 1; k < layers.size(); ++k) {
      if (layers[k] != layers[k - 1] + 1) layer_lists[i].fail("a stage's layers must be consecutive");
    }
    st.first_layer = layers.front();
    st.last_layer = layers.back() + 1;
    st.tp = -1;
    for (const JsonValue& replica : tmp[i].elements()) {
      // [[ [gpu_type, gpus_per_node, zone], ... ], tp]; SAILOR gives each replica its own TP degree.
      const JsonValue vm = replica.at(0).at(0);
      const int tp = replica.at(1).as<int>();
      if (tp < 1) replica.at(1).fail("a TP degree is 1 or more");
      if (st.tp == -1) st.tp = tp;
      st.replicas.push_back({vm.at(0).as<std::string>(), vm.at(2).as<std::string>(), -1, tp == st.tp ? 0 : tp});
    }
    p.stages.push_back(std::move(st));
  }
  return p;
}

[[noreturn]] void fail_stage(std::size_t stage, const std::string& message) {
  throw InputError(message, {"", "stage " + std::to_string(stage), std::nullopt});
}

}  // namespace

Plan load_plan(const std::filesystem::path& path, const JobSpec& job) {
  const JsonDocument doc = load_json_file(path);
  return plan_from_json(doc.root(), job);
}

Plan plan_from_json(const JsonValue& root, const JobSpec& job) {
  Plan plan;
  if (root.has("pipeline_list")) {
    plan = load_sailor_layout(root, job);
  } else {
    if (root.get<std::string>("format") != "gpufleet-sailor-plan") {
      root.at("format").fail("expected format 'gpufleet-sailor-plan' (or SAILOR's pipeline_list layout)");
    }
    plan = load_native(root, job);
  }
  if (plan.mbs < 1) root.at("mbs").fail("the micro-batch size is 1 or more");
  if (plan.global_batch < 1)
    (root.has("global_batch") ? root.at("global_batch") : root.at("mbs")).fail("the global batch is 1 or more");
  // A global batch of 33 cannot be cut into micro-batches of 8: the plan
  // would train 40 sequences a step and be priced for them.
  if (plan.global_batch % plan.mbs != 0)
    root.at("mbs").fail("the global batch of " + std::to_string(plan.global_batch) + " is not a whole number of " +
                        "micro-batches of " + std::to_string(plan.mbs));
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const Stage& s : plan.stages) {
    nlohmann::json replicas = nlohmann::json::array();
    for (const Replica& r : s.replicas) {
      nlohmann::json replica = {{"gpu", r.gpu}, {"zone", r.zone}};
      if (r.node >= 0) replica["node"] = r.node;  // left out: packed when the plan is used
      if (s.tp_of(r) != s.tp) replica["tp"] = s.tp_of(r);
      replicas.push_back(replica);
    }
    stages.push_back({{"layers", {s.first_layer, s.last_layer}}, {"tp", s.tp}, {"replicas", replicas}});
  }
  return {{"format", "gpufleet-sailor-plan"},
          {"version", 1},
          {"mbs", plan.mbs},
          {"global_batch", plan.global_batch},
          {"stages", stages}};
}

nlohmann::json plan_to_sailor_json(const Plan& plan, const ClusterSpec& cluster) {
  nlohmann::json layers = nlohmann::json::array(), tmp = nlohmann::json::array(), dp = nlohmann::json::array();
  for (const Stage& s : plan.stages) {
    nlohmann::json ids = nlohmann::json::array();
    for (int l = s.first_layer; l < s.last_layer; ++l) ids.push_back(l);
    layers.push_back(ids);
    nlohmann::json replicas = nlohmann::json::array();
    for (const Replica& r : s.replicas) {
      const int per_node = cluster.gpu_types.count(r.gpu) ? cluster.gpu_types.at(r.gpu).gpus_per_node : s.tp_of(r);
      replicas.push_back({nlohmann::json::array({nlohmann::json::array({r.gpu, per_node, r.zone})}), s.tp_of(r)});
    }
    tmp.push_back(replicas);
    dp.push_back(s.replicas.size());
  }
  return {
      {"pipeline_list",
       nlohmann::json::array(
           {{{"num_stages", plan.stages.size()}, {"layers_per_stage", layers}, {"tmp_per_stage", tmp}, {"dp", dp}}})},
      {"mbs", plan.mbs}};
}

void validate_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster) {
  if (plan.stages.empty()) throw InputError("plan has no stages");
  if (plan.mbs <= 0) throw InputError("micro-batch size must be positive");
  if (plan.global_batch <= 0) throw InputError("global batch must be positive");
  int expected_first = 0;
  const std::size_t dp = plan.stages.front().replicas.size();
  std::map<std::pair<std::string, std::string>, int> used;
  std::map<std::tuple<std::string, std::string, int>, int> used_on_node;
  auto quota_of = [&](const std::string& gpu, const std::string& zone) {
    const auto q = cluster.quotas.find(gpu);
    return (q != cluster.quotas.end() && q->second.count(zone)) ? q->second.at(zone) : 0;
  };
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const Stage& s = plan.stages[i];
    if (s.first_layer != expected_first || s.last_layer <= s.first_layer) {
      fail_stage(i, "layers [" + std::to_string(s.first_layer) + ", " + std::to_string(s.last_layer) +
                        ") do not continue from layer " + std::to_string(expected_first));
    }
    expected_first = s.last_layer;
    if (s.replicas.empty()) fail_stage(i, "stage has no replicas");
    if (s.replicas.size() != dp) fail_stage(i, "every stage must have the same number of data-parallel replicas");
    for (const Replica& r : s.replicas) {
      const int tp = s.tp_of(r);
      if (tp != 1 && tp != 2 && tp != 4 && tp != 8) fail_stage(i, "TP degree must be 1, 2, 4 or 8");
      auto type = cluster.gpu_types.find(r.gpu);
      if (type == cluster.gpu_types.end()) fail_stage(i, "unknown GPU type '" + r.gpu + "'");
      if (cluster.zone_region.count(r.zone) == 0) fail_stage(i, "unknown zone '" + r.zone + "'");
      if (tp > type->second.gpus_per_node) {
        fail_stage(i, "TP " + std::to_string(tp) + " does not fit in a node of " +
                          std::to_string(type->second.gpus_per_node) + " " + r.gpu);
      }
      used[{r.gpu, r.zone}] += tp;
      if (r.node < -1) fail_stage(i, "node index " + std::to_string(r.node) + " is negative");
      if (r.node >= 0) {
        // Nodes of a type in a zone are numbered 0.. within its quota.
        const int per_node = type->second.gpus_per_node;
        const int nodes = (quota_of(r.gpu, r.zone) + per_node - 1) / per_node;
        if (r.node >= nodes) {
          fail_stage(i, "replica on node " + std::to_string(r.node) + " of " + r.gpu + " in " + r.zone +
                            ", but the quota there makes " + std::to_string(nodes) + " node(s), numbered from 0");
        }
        if ((used_on_node[{r.gpu, r.zone, r.node}] += tp) > per_node) {
          fail_stage(i, "node " + std::to_string(r.node) + " of " + r.gpu + " in " + r.zone +
                            " would hold more than its " + std::to_string(per_node) + " GPUs");
        }
      }
    }
  }
  if (expected_first != static_cast<int>(model.layers.size())) {
    throw InputError("stages cover layers [0, " + std::to_string(expected_first) + ") but the model has " +
                     std::to_string(model.layers.size()));
  }
  for (const auto& [key, n] : used) {
    const int quota = quota_of(key.first, key.second);
    if (n > quota) {
      throw InputError("plan uses " + std::to_string(n) + " " + key.first + " in " + key.second + " but the quota is " +
                       std::to_string(quota));
    }
  }
}

void pack_nodes(Plan& plan, const ClusterSpec& cluster) {
  struct Fill {
    int node = -1;
    int free = 0;
  };
  std::map<std::pair<std::string, std::string>, Fill> fill;
  for (Stage& s : plan.stages) {
    for (Replica& r : s.replicas) {
      if (r.node >= 0) continue;
      Fill& f = fill[{r.gpu, r.zone}];
      if (f.free < s.tp_of(r)) {
        ++f.node;
        f.free = cluster.gpu_types.at(r.gpu).gpus_per_node;
      }
      r.node = f.node;
      f.free -= s.tp_of(r);
    }
  }
}

}  // namespace fleet::sailor
