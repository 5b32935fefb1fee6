// Training plans: pipeline stages with their layer ranges, tensor-parallel
// degree and data-parallel replicas (each on a GPU type, zone and node).
// Our JSON layout and SAILOR's original plan layout both load.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json.h"
#include "sailor/specs.h"

namespace fleet::sailor {

/// One data-parallel replica of a stage: TP GPUs of one type in one node.
struct Replica {
  std::string gpu;
  std::string zone;
  int node = -1;  ///< node index among that GPU type's nodes in that zone; -1: assigned by pack_nodes
  int tp = 0;     ///< its own TP degree (SAILOR's plans mix them within a stage); 0: the stage's
};

/// A pipeline stage: layers [first_layer, last_layer).
struct Stage {
  int first_layer = 0;
  int last_layer = 0;
  int tp = 1;  ///< TP degree of every replica that gives none of its own
  std::vector<Replica> replicas;

  int tp_of(const Replica& r) const { return r.tp > 0 ? r.tp : tp; }
  /// True when every replica runs the stage's TP degree.
  bool uniform_tp() const {
    for (const Replica& r : replicas)
      if (tp_of(r) != tp) return false;
    return true;
  }
};

/// A whole plan.
struct Plan {
  int mbs = 1;
  int global_batch = 0;
  std::vector<Stage> stages;

  /// Data-parallel degree (replicas per stage; equal for every stage).
  int dp() const { return stages.empty() ? 0 : static_cast<int>(stages.front().replicas.size()); }
  /// GPUs used.
  int gpus() const;
};

/// Loads our layout ({"format": "gpufleet-sailor-plan", ...}) or SAILOR's
/// ({"pipeline_list": [...], "mbs": ...}; the global batch then comes from the job).
Plan load_plan(const std::filesystem::path& path, const JobSpec& job);
/// The same from a JSON value already read (a plan inside another file).
Plan plan_from_json(const JsonValue& root, const JobSpec& job);
/// Our layout.
nlohmann::json plan_to_json(const Plan& plan);
/// SAILOR's layout: pipeline_list[0] with num_stages, layers_per_stage (layer
/// index lists), tmp_per_stage ([[[gpu, gpus_per_node, zone]], tp] per replica), dp; and mbs.
nlohmann::json plan_to_sailor_json(const Plan& plan, const ClusterSpec& cluster);

/// Checks a plan against the model and cluster: contiguous layers covering
/// the model, TP in {1, 2, 4, 8} within a node, equal DP per stage, known
/// GPU types and zones, quotas respected, mbs dividing the batch sensibly.
/// InputError naming the stage and replica otherwise.
void validate_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster);

/// Assigns nodes to replicas without one: GPUs of a type in a zone are
/// packed into nodes in stage order, a TP group never straddling two nodes.
void pack_nodes(Plan& plan, const ClusterSpec& cluster);

}  // namespace fleet::sailor
