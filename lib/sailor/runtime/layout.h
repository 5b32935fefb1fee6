// How a training job's ranks map onto a plan: pipeline stages (layer ranges
// in the planner's numbering: 0 the embedding, 1..L the blocks, L+1 the
// head), data-parallel replicas of each stage and tensor-parallel ranks of
// each replica; and how a step's global batch is split between replicas and
// micro-batches. Ranks are numbered stage by stage, replica by replica, TP
// rank fastest. No libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sailor/plan.h"

namespace fleet::sailor::runtime {

struct StageLayers {
  int first = 0, last = 0;  ///< planner layers [first, last)
  int tp = 1;
};

struct Layout {
  std::vector<StageLayers> stages;
  int dp = 1;                     ///< replicas of every stage
  std::int64_t mbs = 1;           ///< sequences per micro-batch
  std::int64_t global_batch = 1;  ///< sequences per optimizer step over all replicas

  struct Place {
    int stage = 0, replica = 0, tp_rank = 0;
  };

  int pipeline_stages() const { return static_cast<int>(stages.size()); }
  /// Ranks the layout needs.
  int world_size() const;
  /// Where `rank` sits; UsageError beyond world_size().
  Place place(int rank) const;
  /// The rank at a place.
  int rank_of(int stage, int replica, int tp_rank = 0) const;
  /// Sequences [begin, end) of the global batch that `replica` trains on.
  std::pair<std::int64_t, std::int64_t> replica_sequences(int replica) const;
  /// Micro-batches of `replica` per step: ceil(its sequences / mbs).
  int micro_batches(int replica) const;
  /// Sequences [begin, end) of micro-batch `micro` of `replica`.
  std::pair<std::int64_t, std::int64_t> micro_batch(int replica, int micro) const;
  /// "PP=2 [0,3) [3,6) x DP=2, mbs 2, global batch 8".
  std::string describe() const;
};

/// The layout of a plan for a model of `model_layers` planner layers
/// (blocks + 2). InputError naming the stage when the stages do not cover
/// the model exactly, or replicas or TP degrees differ between stages.
Layout layout_from_plan(const Plan& plan, int model_layers);

/// Plain data parallelism over `world_size` ranks, each holding the whole model.
Layout data_parallel_layout(int world_size, int model_layers, std::int64_t mbs, std::int64_t global_batch);

/// UsageError when `layout` needs another number of ranks than `world_size`.
void check_world_size(const Layout& layout, int world_size);

}  // namespace fleet::sailor::runtime
