#include "sailor/runtime/layout.h"

#include <fmt/format.h>

#include "common/error.h"

namespace fleet::sailor::runtime {

int Layout::world_size() const {
  int total = 0;
  for (const auto& s : stages) total += dp * s.tp;
  return total;
}

Layout::Place Layout::place(int rank) const {
  int offset = 0;
  for (int s = 0; s < pipeline_stages(); ++s) {
    const int ranks = dp * stages[static_cast<std::size_t>(s)].tp;
    if (rank >= offset && rank < offset + ranks) {
      const int tp = stages[static_cast<std::size_t>(s)].tp;
      return {s, (rank - offset) / tp, (rank - offset) % tp};
    }
    offset += ranks;
  }
  throw UsageError(fmt::format("rank {} is beyond the {} ranks of the layout", rank, world_size()));
}

int Layout::rank_of(int stage, int replica, int tp_rank) const {
  int offset = 0;
  for (int s = 0; s < stage; ++s) offset += dp * stages[static_cast<std::size_t>(s)].tp;
  return offset + replica * stages[static_cast<std::size_t>(stage)].tp + tp_rank;
}

std::pair<std::int64_t, std::int64_t> Layout::replica_sequences(int replica) const {
  // As even as integers allow: replica r gets [G r / D, G (r + 1) / D).
  return {global_batch * replica / dp, global_batch * (replica + 1) / dp};
}

int Layout::micro_batches(int replica) const {
  auto [begin, end] = replica_sequences(replica);
  return static_cast<int>((end - begin + mbs - 1) / mbs);
}

std::pair<std::int64_t, std::int64_t> Layout::micro_batch(int replica, int micro) const {
  auto [begin, end] = replica_sequences(replica);
  const std::int64_t first = begin + mbs * micro;
  return {first, std::min(first + mbs, end)};
}

std::string Layout::describe() const {
  std::string text = fmt::format("PP={}", pipeline_stages());
  for (const auto& s : stages)
    text += fmt::format(" [{},{})", s.first, s.last) + (s.tp > 1 ? fmt::format("xTP{}", s.tp) : "");
  return text + fmt::format(" x DP={}, mbs {}, global batch {}", dp, mbs, global_batch);
}

Layout layout_from_plan(const Plan& plan, int model_layers) {
  if (plan.stages.empty()) throw InputError("the plan has no stages");
  if (plan.mbs < 1) throw InputError("the plan's micro-batch size must be positive");
  if (plan.global_batch < 1) throw InputError("the plan has no global batch");
  Layout layout;
  layout.mbs = plan.mbs;
  layout.global_batch = plan.global_batch;
  layout.dp = plan.dp();
  int expected_first = 0;
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& s = plan.stages[i];
    if (s.first_layer != expected_first || s.last_layer <= s.first_layer)
      throw InputError(
          fmt::format("stage {} of the plan holds layers [{}, {}), but the previous stage ends at {}: "
                      "stages must be contiguous",
                      i, s.first_layer, s.last_layer, expected_first));
    if (static_cast<int>(s.replicas.size()) != layout.dp)
      throw InputError(fmt::format("stage {} of the plan has {} replicas, stage 0 has {}: every stage needs the same",
                                   i, s.replicas.size(), layout.dp));
    if (s.tp < 1) throw InputError(fmt::format("stage {} of the plan has tensor parallelism {}", i, s.tp));
    if (!s.uniform_tp())
      throw InputError(
          fmt::format("the replicas of stage {} of the plan differ in tensor parallelism: sailor-run "
                      "runs one TP degree for all replicas so far",
                      i));
    layout.stages.push_back({s.first_layer, s.last_layer, s.tp});
    expected_first = s.last_layer;
  }
  if (expected_first != model_layers)
    throw InputError(
        fmt::format("the plan's stages cover layers [0, {}) but the model has {} (embedding, {} blocks, "
                    "head): was the plan made for another model?",
                    expected_first, model_layers, model_layers - 2));
  if (layout.dp < 1) throw InputError("the plan's stages have no replicas");
  return layout;
}

Layout data_parallel_layout(int world_size, int model_layers, std::int64_t mbs, std::int64_t global_batch) {
  Layout layout;
  layout.stages.push_back({0, model_layers, 1});
  layout.dp = world_size;
  layout.mbs = mbs;
  layout.global_batch = global_batch;
  return layout;
}

void check_world_size(const Layout& layout, int world_size) {
  if (layout.world_size() != world_size)
    throw UsageError(fmt::format("the layout {} needs {} ranks but {} were started", layout.describe(),
                                 layout.world_size(), world_size));
  if (layout.global_batch < layout.dp)
    throw UsageError(fmt::format("a global batch of {} sequences cannot feed {} data-parallel replicas",
                                 layout.global_batch, layout.dp));
}

}  // namespace fleet::sailor::runtime
