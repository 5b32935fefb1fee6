#include "sailor/runtime/torch/network_profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "sailor/runtime/torch/communicator.h"
#include "sailor/runtime/world.h"
#include "sailor/specs.h"

namespace fleet::sailor::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

}  // namespace

std::vector<double> fit_quadratic(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 3) throw InputError("a quadratic fit needs three or more points");
  // Normal equations of [x^2 x 1] (3x3), solved by Gaussian elimination with pivoting.
  double a[3][4] = {};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double row[3] = {x[i] * x[i], x[i], 1.0};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) a[r][c] += row[r] * row[c];
      a[r][3] += row[r] * y[i];
    }
  }
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    std::swap(a[col], a[pivot]);
    if (std::abs(a[col][col]) < 1e-300) throw InputError("the message sizes do not determine a quadratic fit");
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int c = col; c < 4; ++c) a[r][c] -= f * a[col][c];
    }
  }
  return {a[0][3] / a[0][0], a[1][3] / a[1][1], a[2][3] / a[2][2]};
}

std::optional<NetworkProfileResult> profile_network(const NetworkProfileCommand& c) {
  const WorldInfo world = world_from_environment();
  if (!world.distributed())
    throw UsageError(
        "profile-net measures the link between ranks: start it on 2 or more, e.g. "
        "sailor-run launch --nprocs 2 -- profile-net ...");
  if (c.gpu_type.empty()) throw UsageError("--gpu-type names the devices as the cluster description does");
  const std::vector<std::string> classes{"same_node", "same_zone", "cross_zone", "cross_region"};
  if (std::find(classes.begin(), classes.end(), c.link_class) == classes.end())
    throw UsageError("--link-class must be same_node, same_zone, cross_zone or cross_region");
  if (!(c.min_bytes >= 1) || !(c.max_bytes >= c.min_bytes * 4))
    throw UsageError("--max-bytes must be at least 4 x --min-bytes (three sizes for the fit)");
  if (world.rank == 0) OutputCheck().file(c.output, "-o").check(Existing::kReplace);
  Communicator comm(world, std::chrono::milliseconds(static_cast<std::int64_t>(c.timeout_seconds * 1000)));

  // Ping-pong between rank 0 and rank 1: half a round trip is one send.
  std::vector<double> sizes, x, gbps;
  for (double bytes = c.min_bytes; bytes <= c.max_bytes * 1.0001; bytes *= 4) sizes.push_back(std::floor(bytes));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto buffer = torch::zeros({static_cast<std::int64_t>(sizes[i] / 4)}, torch::kFloat32);
    std::vector<double> one_way;
    for (int r = -1; r < c.repeats; ++r) {  // r = -1: warm-up
      comm.world().barrier();
      const auto t = Clock::now();
      const int tag = static_cast<int>(i) * 1000 + r + 1;
      if (world.rank == 0) {
        comm.world().send(buffer, 1, tag)->wait();
        comm.world().recv(buffer, 1, tag);
      } else if (world.rank == 1) {
        comm.world().recv(buffer, 0, tag);
        comm.world().send(buffer, 0, tag)->wait();
      }
      if (r >= 0) one_way.push_back(std::chrono::duration<double>(Clock::now() - t).count() / 2);
    }
    if (world.rank != 0) continue;
    std::sort(one_way.begin(), one_way.end());
    const double seconds = one_way[one_way.size() / 2];
    sizes[i] = static_cast<double>(buffer.nbytes());
    x.push_back(std::log2(sizes[i] / 1e6));
    gbps.push_back(sizes[i] / seconds / 1e9);
    spdlog::info("{:>10.0f} bytes: {:.3f} GB/s ({:.1f} us one way)", sizes[i], gbps.back(), seconds * 1e6);
  }
  comm.world().barrier();
  if (world.rank != 0) return std::nullopt;

  const auto fit = fit_quadratic(x, gbps);
  const double max_rate = *std::max_element(gbps.begin(), gbps.end()) * 1e9;
  nlohmann::json link = {{"fit", fit}, {"max_bytes_per_s", max_rate}};
  nlohmann::json network = {{"intra_node", nlohmann::json::object()}, {"links", nlohmann::json::array()}};
  if (c.link_class == "same_node") {
    network["intra_node"][c.gpu_type] = link;
  } else {
    link["class"] = c.link_class;
    link["src"] = c.gpu_type;
    link["dst"] = c.gpu_type;
    network["links"].push_back(link);
  }
  const double memory = c.memory_bytes > 0 ? c.memory_bytes : physical_memory_bytes();
  const int per_node = c.link_class == "same_node" ? world.world_size : 1;
  nlohmann::json cluster = {
      {"format", "gpufleet-sailor-cluster"},
      {"version", 1},
      {"gpu_types",
       {{c.gpu_type, {{"gpus_per_node", per_node}, {"memory_bytes", memory}, {"price_per_hour", c.price_per_hour}}}}},
      {"zones", {{"local", {{"region", "local"}, {"quotas", {{c.gpu_type, world.world_size}}}}}}},
      {"network", network},
      {"egress_usd_per_gb", {{"same_zone", 0}, {"cross_zone", 0}, {"cross_region", 0}}},
      {"measured", {{"bytes", sizes}, {"gb_per_s", gbps}}}};
  write_file_atomically(c.output, cluster.dump(2) + "\n");
  return NetworkProfileResult{fit, max_rate, cluster.dump(2)};
}

}  // namespace fleet::sailor::runtime
