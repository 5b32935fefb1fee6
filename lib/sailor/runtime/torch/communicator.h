// The job's communication over libtorch's distributed layer (c10d): a
// TCPStore for rendezvous (rank 0 serves it), Gloo process groups on CPU
// over any subset of ranks, each on its own store prefix so a generation of
// groups can be torn down and rebuilt inside a running process. Include only
// from libtorch targets.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include "common/error.h"
#include "model/torch/tensor_parallel.h"
#include "sailor/runtime/world.h"

namespace fleet::sailor::runtime {

// libtorch 2.x moved the collectives from ProcessGroup into Backend; the
// backends (Gloo, NCCL) derive from the one this build has.
#if TORCH_VERSION_MAJOR >= 2
using GroupBackend = c10d::Backend;
#else
using GroupBackend = c10d::ProcessGroup;
#endif

/// A collective or transfer that cannot finish: a peer is gone, or the
/// elastic controller started a new generation while this rank waited.
class PeerLost : public RuntimeFailure {
 public:
  using RuntimeFailure::RuntimeFailure;
};

/// Lets another thread end this rank's waits (elastic jobs: the controller
/// started a new generation, so the peers waited for may never come).
/// Collectives are waited for in short slices; point-to-point transfers in
/// flight are aborted. A raised interrupt stays raised.
class Interrupt {
 public:
  void raise();
  bool raised() const { return raised_.load(); }
  /// Waits for `work`; PeerLost when it fails or the interrupt is raised first.
  void wait(const c10::intrusive_ptr<c10d::Work>& work);

 private:
  std::atomic<bool> raised_{false};
  std::mutex mutex_;
  std::vector<c10::intrusive_ptr<c10d::Work>> transfers_;  // point-to-point waits in progress
};

/// A TCPStore that serves (`server`) or reaches host:port, without waiting
/// for workers; RuntimeFailure naming `what` ("the rendezvous", "the
/// elastic controller's store") when that fails within `timeout`.
c10::intrusive_ptr<c10d::TCPStore> open_store(const std::string& what, const std::string& host, int port, bool server,
                                              std::chrono::milliseconds timeout);

/// A write to a dead peer's socket fails instead of killing this process (SIGPIPE ignored).
void ignore_broken_pipes();

/// Waits for `work`, through `interrupt` when there is one; a failure becomes PeerLost.
void wait_for(const c10::intrusive_ptr<c10d::Work>& work, Interrupt* interrupt);

/// A process group over some ranks of the job. Ranks are global ranks.
class Group {
 public:
  Group(c10::intrusive_ptr<GroupBackend> backend, std::vector<int> ranks, int my_rank, Interrupt* interrupt = nullptr);
  /// Members in group order.
  const std::vector<int>& ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }

  /// Sums `tensor` over the group in place (nothing for one member).
  void all_reduce_sum(torch::Tensor& tensor);
  /// The element-wise maximum over the group, in place.
  void all_reduce_max(torch::Tensor& tensor);
  /// Starts summing `tensor` in place; wait() on the result.
  c10::intrusive_ptr<c10d::Work> all_reduce_sum_async(torch::Tensor& tensor);
  /// Starts sending `tensor` to global rank `to`, matched by `tag`.
  c10::intrusive_ptr<c10d::Work> send(torch::Tensor& tensor, int to, int tag);
  /// Receives into `tensor` from global rank `from` (waits).
  void recv(torch::Tensor& tensor, int from, int tag);
  /// Waits until every member got here.
  void barrier();
  /// Waits for a transfer or collective this group started.
  void wait(const c10::intrusive_ptr<c10d::Work>& work) { wait_for(work, interrupt_); }

 private:
  int local(int global_rank) const;
  c10::intrusive_ptr<GroupBackend> backend_;
  std::vector<int> ranks_;
  Interrupt* interrupt_ = nullptr;
};

/// A process group as the model's tensor-parallel collectives.
class TensorParallelGroupAdapter final : public model::TensorParallelGroup {
 public:
  TensorParallelGroupAdapter(std::unique_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(torch::Tensor& t) override { group_->all_reduce_sum(t); }
  void all_reduce_max(torch::Tensor& t) override { group_->all_reduce_max(t); }

 private:
  std::unique_ptr<Group> group_;
  int rank_;
};

class Communicator {
 public:
  /// Joins the rendezvous of `world` (rank 0 serves the store). RuntimeFailure
  /// when the master cannot be reached or not every rank arrives within `timeout`.
  Communicator(const WorldInfo& world, std::chrono::milliseconds timeout);
  /// Joins `world` through the store served at its master address (the
  /// elastic controller), every key under `prefix`, over a connection of its
  /// own (an abandoned wait never holds up the caller's). Every wait,
  /// building groups included, ends early when `interrupt` is raised.
  Communicator(const WorldInfo& world, const std::string& prefix, std::chrono::milliseconds timeout,
               Interrupt* interrupt);

  int rank() const { return world_.rank; }
  int size() const { return world_.world_size; }

  /// A new group over `ranks` (sorted, containing this rank), its store keys
  /// under `name`: every member must call it with the same arguments.
  std::unique_ptr<Group> group(const std::string& name, std::vector<int> ranks);
  /// Every rank: this communicator's world group.
  Group& world() { return *world_group_; }

  /// Publishes `value` under `key` for this rank and returns every rank's value, in rank order.
  std::vector<std::string> all_gather_strings(const std::string& key, const std::string& value);

 private:
  void open_device_and_world();
  WorldInfo world_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::unique_ptr<Group> world_group_;
  Interrupt* interrupt_ = nullptr;
};

}  // namespace fleet::sailor::runtime
