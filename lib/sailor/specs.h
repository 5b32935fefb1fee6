// The planner's inputs: model, per-layer profiles, cluster (GPUs, zones,
// quotas, prices, network) and job. JSON formats in docs/formats.md.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sailor/gpu_power.h"

namespace fleet::sailor {

/// One layer's size, per tensor-parallel degree (the split is not always even).
struct LayerSpec {
  std::map<int, double> params;      ///< parameters held by one TP rank
  std::map<int, double> act_output;  ///< floats sent to the next layer, per sequence, per rank
  std::map<int, double> act_memory;  ///< floats kept for backward, per sequence, per rank
};

/// A model as the planner sees it: its layers in order (embedding first, head last).
struct ModelSpec {
  std::string name;
  std::vector<LayerSpec> layers;

  /// Parameters of layers [first, last) on one rank of a `tp`-way split;
  /// InputError when a layer lacks that TP degree.
  double params(int first, int last, int tp) const;
  /// Activation memory floats per sequence of layers [first, last) per rank.
  double act_memory(int first, int last, int tp) const;
  /// Floats per sequence that layer `layer` sends onward, per rank.
  double act_output(int layer, int tp) const;
};

/// Forward, backward and optimizer-update seconds of one layer.
using LayerTimes = std::array<double, 3>;

/// Measured per-layer times per GPU type, micro-batch size and TP degree.
struct ProfileSet {
  std::string model;
  std::map<std::string, std::map<std::pair<int, int>, std::vector<LayerTimes>>> gpus;  ///< gpu -> (mbs, tp) -> layers

  /// Times of one layer; InputError naming the missing GPU, mbs, tp or layer.
  const LayerTimes& at(const std::string& gpu, int mbs, int tp, int layer) const;
  /// True when (gpu, mbs, tp) was profiled.
  bool has(const std::string& gpu, int mbs, int tp) const;
};

/// Makes every profile entry cover the model's layers. An entry with fewer
/// layers than the model (SAILOR measured some models only partly) is read
/// as embedding, the blocks it measured, head; the missing blocks take the
/// last measured block's figures, which holds because a transformer's
/// blocks are identical (checked on the model's sizes). Returns one line per
/// entry completed, naming the layers filled. InputError when an entry
/// cannot be completed: more layers than the model, no measured block, or
/// blocks of different sizes.
std::vector<std::string> complete_profiles(ProfileSet& profiles, const ModelSpec& model);

/// Makes every profiled layer time non-increasing towards smaller
/// micro-batches: a layer never takes longer on less data on the same GPU
/// and TP degree, so each (forward, backward, update) time becomes the least
/// over the same or larger profiled micro-batch sizes. Per-layer timings of
/// small batches are inflated by launch and timing overhead that a running
/// pipeline hides (SAILOR's GH200 profile has OPT-350 at mbs 1 24 % slower
/// than at mbs 2). Returns a line saying what changed, if anything did.
std::optional<std::string> monotone_in_batch_size(ProfileSet& profiles);

/// One kind of GPU: node size, memory, price and power.
struct GpuType {
  int gpus_per_node = 1;
  double memory_bytes = 0;
  double price_per_hour = 0;  ///< $ per GPU-hour
  GpuPower power;             ///< cluster.json's idle_watts / busy_watts, else the built-in default; unknown: 0
};

/// Achieved bandwidth of a link: GB/s = c0 x^2 + c1 x + c2 with x = log2(MB), capped.
struct BandwidthFit {
  double c0 = 0, c1 = 0, c2 = 0;
  double max_bytes_per_s = 0;
  /// Bytes per second for a message of `bytes`.
  double bytes_per_s(double bytes) const;
};

/// How two GPUs are connected.
enum class LinkClass { kSameNode, kSameZone, kCrossZone, kCrossRegion };
/// "same_node", "same_zone", "cross_zone", "cross_region".
const char* link_class_name(LinkClass c);

/// GPU types, zones grouped into regions with quotas, network fits and egress prices.
struct ClusterSpec {
  std::map<std::string, GpuType> gpu_types;
  std::map<std::string, std::string> zone_region;            ///< zone -> region
  std::map<std::string, std::map<std::string, int>> quotas;  ///< gpu -> zone -> GPUs available
  std::map<std::string, BandwidthFit> intra_node;            ///< gpu -> fit inside one node
  std::map<std::tuple<LinkClass, std::string, std::string>, BandwidthFit> inter_node;  ///< (class, src, dst)
  std::map<LinkClass, double> egress_per_gb;  ///< $ per GB leaving a zone, by class

  /// The class of a link between two zones (same_zone when equal).
  LinkClass link_between(const std::string& zone_a, const std::string& zone_b) const;
  /// The fit for a link; InputError when the cluster has none for it.
  const BandwidthFit& fit(LinkClass link, const std::string& src_gpu, const std::string& dst_gpu) const;
};

/// The runtime that trains a plan; the simulator follows its schedule
/// (docs/sailor-model.md, "Time").
enum class TrainingRuntime {
  /// sailor-run: gradient buckets all-reduced while the last micro-batch's
  /// backward runs; a stage's sends do not hold up its receiver's compute.
  kSailorRun,
  /// DeepSpeed's pipeline engine, SAILOR's runtime: the all-reduce is a step
  /// of its own after the last backward, and every send and receive blocks
  /// both stages until the transfer is done.
  kDeepSpeed,
};

/// "sailor-run" or "deepspeed".
const char* training_runtime_name(TrainingRuntime runtime);

/// The training job.
struct JobSpec {
  std::string model;
  int global_batch = 0;
  int sequence_length = 0;
  std::string optimizer = "adam";
  std::string precision = "mixed";                        ///< mixed (fp16/bf16 compute, fp32 master) or fp32
  TrainingRuntime runtime = TrainingRuntime::kSailorRun;  ///< what will train the plan
  /// Bytes per activation/gradient element on the wire: 2 for mixed precision, 4 for fp32.
  int wire_bytes() const { return precision == "fp32" ? 4 : 2; }
};

ModelSpec load_model_spec(const std::filesystem::path& path);
ProfileSet load_profile_set(const std::filesystem::path& path);
ClusterSpec load_cluster_spec(const std::filesystem::path& path);
JobSpec load_job_spec(const std::filesystem::path& path);

nlohmann::json to_json(const ModelSpec& model);
nlohmann::json to_json(const ProfileSet& profiles);
nlohmann::json to_json(const ClusterSpec& cluster);
nlohmann::json to_json(const JobSpec& job);

}  // namespace fleet::sailor
