// `sailor-run profile`: measures on this machine what the planner needs to
// plan a model — per layer (the embedding, each block, the head with its
// loss) forward, backward and optimizer-update seconds and the bytes kept
// for backward, per micro-batch size — and writes them as sailor-plan's
// profile.json and model.json. Torch-free header.
#pragma once

#include <filesystem>
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
  bool json = false;
};

int run_profile(const ProfileCommand& command);

}  // namespace fleet::sailor::runtime
