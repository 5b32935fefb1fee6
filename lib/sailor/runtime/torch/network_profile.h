// `sailor-run profile-net` (run on 2+ ranks): the achieved bandwidth of
// point-to-point sends through c10d over a sweep of message sizes, fitted to
// the curve sailor-plan's cluster.json uses for a link class,
// GB/s = c0 x^2 + c1 x + c2 with x = log2(MB), and written as a cluster.json
// describing this machine (or these machines). Torch-free header.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fleet::sailor::runtime {

struct NetworkProfileCommand {
  std::string gpu_type;  ///< the device name the cluster uses (as in `sailor-run profile`)
  std::string link_class =
      "same_node";  ///< which link the ranks' connection is: same_node, same_zone, cross_zone, cross_region
  double min_bytes = 4096, max_bytes = 64.0 * (1 << 20);
  int repeats = 5;
  double memory_bytes = 0;  ///< device memory for cluster.json (0: this machine's RAM)
  double price_per_hour = 0;
  double timeout_seconds = 300;
  std::filesystem::path output;  ///< cluster.json (rank 0 writes it)
};

/// What rank 0 of `profile_network` measured and wrote.
struct NetworkProfileResult {
  std::vector<double> fit;  ///< c0, c1, c2 of GB/s = c0 x^2 + c1 x + c2, x = log2 MB
  double max_bytes_per_s = 0;
  std::string cluster_json;  ///< the cluster.json written
};

/// Sends messages of each size between the ranks, fits the curve and writes
/// cluster.json: the result on rank 0, nothing on the others.
std::optional<NetworkProfileResult> profile_network(const NetworkProfileCommand& command);

/// Least-squares fit of y = c0 x^2 + c1 x + c2 (three or more points).
std::vector<double> fit_quadratic(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace fleet::sailor::runtime
