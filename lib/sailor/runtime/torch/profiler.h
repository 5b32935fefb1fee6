// `sailor-run profile`: measures on this machine what the planner needs to
// plan a model — per layer (the embedding, each block, the head with its
// loss) forward, backward and optimizer-update seconds and the bytes kept
// for backward, per micro-batch size — and writes them as sailor-plan's
// profile.json and model.json. Torch-free header.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fleet::sailor::runtime {

struct ProfileCommand {
  std::filesystem::path model;  ///< model folder (config.json + weights)
  std::string gpu_type;         ///< the name the cluster description gives this device
  std::vector<int> mbs{1, 2, 4};
  std::vector<int> tp{1};
  int seq_len = 0;  ///< 0: min(max_position_embeddings, 1024)
  std::string device = "auto";
  int threads = 0;
  int warmup = 2, repeats = 5;         ///< untimed runs, then the median of these
  double timeout_seconds = 600;        ///< under a launcher: rendezvous, and waiting for the ranks measuring
  std::filesystem::path output;        ///< profile.json
  std::filesystem::path model_output;  ///< model.json (default: beside the profile)
};

/// What `profile_layers` measured, per (TP degree, micro-batch size): the
/// layers' times summed, and the bytes kept for backward per rank (counted
/// by the CPU allocator only; unset on a GPU).
struct ProfileTotals {
  int tp = 1, mbs = 1;
  double forward_s = 0, backward_s = 0, update_s = 0;
  std::optional<double> kept_bytes;
};
struct ProfileResult {
  std::filesystem::path profile, model;  ///< the files written
  int layers = 0;                        ///< per entry (the blocks, the embedding and the head)
  std::vector<ProfileTotals> totals;
  std::string entries_json;  ///< the profile's entries for this device, as written
};

/// Measures every layer's forward, backward and update time (and, on the
/// CPU, the activation memory it keeps) at each micro-batch size and TP
/// degree, and writes profile.json and model.json. Under a launcher every
/// rank takes part and rank 0 writes: the result on rank 0, nothing on the
/// others.
std::optional<ProfileResult> profile_layers(const ProfileCommand& command);

}  // namespace fleet::sailor::runtime
