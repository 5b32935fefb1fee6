// A worker's side of in-place elastic recovery (docs/training-runtime.md,
// "In-place recovery"): the generations the controller publishes in its
// store, a thread that heartbeats and notices a new generation (raising the
// communication interrupt so no wait outlives its generation), the per-step
// commit that keeps every survivor's state at the same step, and the
// peer-to-peer hand-over of parameters and optimizer state to a new layout.
// Include only from libtorch targets.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/torch/tensor_parallel.h"
#include "sailor/runtime/torch/communicator.h"
#include "sailor/runtime/torch/control_store.h"

namespace fleet::sailor::runtime {

/// What a worker still holds when its generation ends: its parameters and
/// optimizer moments as of a committed step — whole, or the slice its
/// tensor-parallel rank kept (`slices`; a name without one is whole).
struct HeldState {
  std::int64_t step = -1;  ///< -1: nothing
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, model::ShardSpec> slices;
  nlohmann::json history = nlohmann::json::array();
};

/// A tensor a training rank of the new layout needs filled: whole, or the
/// slice `spec` of the whole (its tensor-parallel part).
struct HandOverTarget {
  std::string name;
  torch::Tensor tensor;
  model::ShardSpec spec;  ///< dim < 0: the whole tensor
};

class ElasticWorker {
 public:
  /// A worker of an in-place elastic job (SAILOR_CONTROL set by the
  /// launcher), or nothing. Connects to the controller's store.
  static std::unique_ptr<ElasticWorker> from_environment(std::chrono::milliseconds timeout);
  ~ElasticWorker();
  ElasticWorker(const ElasticWorker&) = delete;
  ElasticWorker& operator=(const ElasticWorker&) = delete;

  int worker_id() const { return worker_; }
  /// The first generation this worker is a member of: the one it was
  /// started for (SAILOR_GENERATION), or, for a worker that registered
  /// itself (no SAILOR_WORKER_ID: an srun step), the first that lists it.
  Membership first_membership();
  const std::string& address() const { return host_; }
  int port() const { return port_; }
  c10::intrusive_ptr<c10d::Store> store() const { return store_; }
  /// Raised once the controller has moved past this worker's generation.
  Interrupt& interrupt() { return *interrupt_.load(); }

  /// The membership of generation `generation` (waits until it is published).
  Membership membership(int generation);
  /// Waits for a generation after `generation`, then watches it. Nothing
  /// when the job ended first; RuntimeFailure when it stopped without a plan.
  std::optional<Membership> next_generation(int generation);
  /// Tells the controller this worker lost a peer in `generation`.
  void report_failure(int generation);

  /// The step-commit of the training ranks of `generation`: true when every
  /// one of the `ranks` finished `step`'s gradients (apply the update),
  /// false when the generation ended first (nobody applies it).
  bool commit(int generation, std::int64_t step, int ranks);
  /// The controller asks the training ranks to stop at the next step boundary.
  bool stop_requested(int generation);
  /// Rank 0, after stopping at a boundary: the step and the workers that asked to leave.
  void report_boundary(int generation, std::int64_t step, const std::vector<int>& leaving);
  /// Training rank 0 once the state is in place: how long the hand-over took and where the state came from.
  void report_ready(int generation, double seconds, const std::string& from);
  /// Rank 0 of a save-only generation: the step it wrote as a checkpoint (-1: nothing held it whole).
  void report_saved(int generation, std::int64_t step);
  /// Rank 0 when training is over (spares may leave).
  void report_done();

 private:
  ElasticWorker(int worker, int generation, std::string host, int port, std::chrono::milliseconds timeout);
  void watch(int generation);
  std::string get(const std::string& key);
  bool wait_key(const std::string& key, bool interruptible);

  int worker_;
  int first_generation_;  ///< -1: the first generation that lists this worker
  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  // The current generation's interrupt. Groups of an ended generation may
  // still hold theirs while they are destroyed (retired_groups.h), so every
  // interrupt lives as long as the worker.
  std::atomic<Interrupt*> interrupt_{nullptr};
  std::vector<std::unique_ptr<Interrupt>> interrupts_;
  std::atomic<int> watched_{0};
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

/// Fills `targets` (this rank's new parameters and moments) from the
/// members that hold them at the newest committed step, point to point over
/// `members` (every member of the generation calls it; spares and leaving
/// workers with no targets). A slice may be cut from a whole tensor or put
/// together from the slices of another tensor-parallel degree. Returns that
/// step, or nothing when some part a rank needs is held by nobody (then
/// every member gets nothing, and the training ranks reload the checkpoint).
/// On return no member uses `members` any more: it can be destroyed.
std::optional<std::int64_t> hand_over_state(Communicator& members, const HeldState& held,
                                            const std::vector<HandOverTarget>& targets);

}  // namespace fleet::sailor::runtime
