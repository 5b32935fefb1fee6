// One rank's part of a training job: its stage's layers (its slice of them
// under tensor parallelism), parameters and gradient buckets, its process
// groups, and the 1F1B step with the gradient sums over the replicas.
// Include only from torch targets.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/json.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_parallel.h"
#include "model/torch/training_parts.h"
#include "sailor/runtime/layout.h"
#include "sailor/runtime/retired_groups.h"
#include "sailor/runtime/torch/communicator.h"

namespace fleet::sailor::runtime {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using Clock = std::chrono::steady_clock;

inline constexpr const char* kTiedName = "model.embed_tokens.weight";
inline constexpr std::int64_t kBucketBytes = 25ll << 20;  // gradient all-reduce bucket, as DDP's default

// Where each step's time went, on this rank; with `tracing`, also each span
// (microseconds from the step's start) for --trace.
struct StepTimes {
  double compute = 0, send = 0, recv = 0, allreduce = 0;
  Clock::time_point step_start = Clock::now();
  bool tracing = false;
  nlohmann::json spans = nlohmann::json::array();

  // Adds the time since `since` to `bucket`.
  void add(double& bucket, Clock::time_point since, const std::string& name, const char* category) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - since).count();
    bucket += seconds;
    if (tracing)
      spans.push_back({{"name", name},
                       {"cat", category},
                       {"ts", std::chrono::duration<double, std::micro>(since - step_start).count()},
                       {"dur", seconds * 1e6}});
  }
};

// One rank's part of the job: its stage's layers (its slice of them under
// tensor parallelism), parameters and optimizer, its groups, and the 1F1B step.
class StageRunner {
 public:
  StageRunner(const Layout& layout, int rank, Communicator* comm, model::LlamaModel& model,
              const model::TrainingData& data, const model::TrainOptions& options, torch::Device device);

  const NamedTensors& parameters() const { return params_; }
  const Layout::Place& place() const { return place_; }
  bool writes_checkpoint() const { return place_.replica == 0 && place_.tp_rank == 0; }
  /// Replica 0's ranks take part in a checkpoint (its TP ranks gather their slices).
  bool gathers_checkpoint() const { return place_.replica == 0; }

  /// The whole tensor of a parameter or optimizer moment from this rank's
  /// slice of it, as a float32 CPU copy: a collective of the TP group.
  torch::Tensor gather_whole(const std::string& name, const torch::Tensor& t);

  /// This rank's slice of a stored whole tensor (resuming under TP).
  torch::Tensor slice_of(const std::string& name, const torch::Tensor& whole) const;
  bool holds_tied_copy() const { return tied_copy_; }

  // Runs the step's forwards and backwards and sums the gradients over the
  // replicas. Returns this rank's share of the loss (non-zero on the last stage only).
  double run_step(std::int64_t step, StepTimes& times);

  // Σ g² of this rank's parameters that count towards the global norm (a
  // tied copy counts once, on the embedding's stage), from the exact sums.
  double gradient_sum_of_squares() const;

  // An elastic generation ended with work of these groups still in flight:
  // destroying a Gloo group waits for that work, so `retired` destroys them
  // on its own thread.
  void retire_groups(RetiredGroups& retired);
  /// The part of the whole tensor `name` (a parameter or its moment) this
  /// rank holds: dim < 0 for the whole.
  model::ShardSpec slice_spec(const std::string& name) const;

  /// Sets the parameters from a model folder or checkpoint (this rank's slices).
  void load_parameters(const std::filesystem::path& dir);

  // After the optimizer step: the head's copy of a tied embedding follows it.
  void after_update();

 private:
  // The rank of neighbouring stage `stage` (same replica) this rank receives from.
  int neighbour_rank(int stage) const;
  // The ranks of neighbouring stage `stage` (same replica) that receive from this rank.
  std::vector<int> ranks_fed_by_me(int stage) const;

  void build_groups();

  // One step's micro-batches in flight (stage_runner.cpp).
  struct StepState;
  // Micro-batch `micro`'s forward: its input (sampled or received), this
  // stage's layers, the loss on the last stage, the activation sent onward.
  void forward_micro_batch(int micro, StepState& st, StepTimes& times);
  // Its backward: the gradient (the loss's, or received), the gradients
  // accumulated, the input's gradient sent back.
  void backward_micro_batch(int micro, StepState& st, StepTimes& times);

  // Gradients add up in float64, in buckets of about kBucketBytes, last
  // layers first (the order backward produces them). A float64 sum of a few
  // float32 terms is exact, so it does not depend on the order the terms
  // come in: every layout gets the same gradients for the same micro-batches.
  void build_buckets();

  // Moves this micro-batch's gradients into the float64 sums (those the
  // overlap hooks have already added are only released).
  void accumulate_gradients();

  // Hooks that, during the step's last backward, add each gradient to its
  // float64 sum the moment autograd produces it and start the bucket's
  // all-reduce when the bucket is complete, while backward goes on. Every
  // replica of a stage runs the same graph, so buckets start in the same order.
  void register_overlap_hooks();

  void start_overlap();

  void contributed(std::size_t bucket);

  // Sums the gradients over the replicas (and the two copies of a tied
  // embedding over their stages), then hands them to the optimizer as float32.
  void reduce_gradients();

  const Layout& layout_;
  Layout::Place place_;
  StageLayers stage_;
  Communicator* comm_;
  model::LlamaModel& model_;
  const model::TrainingData& data_;
  const model::TrainOptions& options_;
  torch::Device device_;
  torch::Device sum_device_{torch::kCPU};  // where the float64 gradient sums live
  bool is_first_ = true, is_last_ = true, tied_copy_ = false;
  NamedTensors params_;
  torch::Tensor local_head_copy_;  // a tied head's copy on the embedding's own stage
  std::unique_ptr<TensorParallelGroupAdapter> tp_group_;
  std::unique_ptr<Group> dp_group_, embedding_group_;
  std::vector<torch::Tensor> flat_grads_;  // float64 sums, one per bucket
  std::vector<torch::Tensor> grad_views_;  // per parameter, into flat_grads_
  std::vector<std::size_t> bucket_of_;     // per parameter
  // Overlap of the last backward with the all-reduce (see register_overlap_hooks).
  bool overlap_ = false, head_added_by_hook_ = false;
  std::vector<char> added_by_hook_;
  std::vector<int> pending_;
  std::vector<c10::intrusive_ptr<c10d::Work>> bucket_works_;
};

}  // namespace fleet::sailor::runtime
