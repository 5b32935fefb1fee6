#include "orion-profile/profile_commands.h"

#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/file_io.h"
#include "common/json.h"
#include "common/output_check.h"
#include "common/stats.h"
#include "orion/device_spec.h"
#include "orion/kernel_profile.h"
#include "orion/ncu_import.h"

namespace fleet::orion {

int run_import_ncu(const ImportNcuOptions& options) {
  OutputCheck().input(options.input, "input").file(options.output, "--output").check(Existing::kReplace);
  const DeviceSpec& device = device_by_name(options.device);
  const KernelProfile profile = import_ncu_csv(read_file(options.input), options.input.string(), device);
  write_kernel_profile(options.output, profile);
  spdlog::info("imported {} kernels ({:.3f} ms) from {} into {}", profile.kernels.size(),
               profile.total_duration_ns() / 1e6, options.input.string(), options.output.string());
  return 0;
}

int run_summarize(const SummarizeOptions& options) {
  const KernelProfile profile = read_kernel_profile(options.profile);
  const double total_ns = profile.total_duration_ns();
  double by_class[3] = {0, 0, 0};
  int count_by_class[3] = {0, 0, 0};
  std::vector<double> sms;
  for (const KernelRecord& k : profile.kernels) {
    const int c = static_cast<int>(k.profile) + 1;
    by_class[c] += k.duration_ns;
    ++count_by_class[c];
    sms.push_back(static_cast<double>(k.sm_usage));
  }
  const Summary sm = summarize(sms);
  const char* names[3] = {"unknown", "memory", "compute"};
  if (options.json) {
    nlohmann::json out = {{"profile", options.profile.string()},
                          {"device", profile.device.empty() ? nlohmann::json() : nlohmann::json(profile.device)},
                          {"kernels", profile.kernels.size()},
                          {"total_ms", total_ns / 1e6}};
    for (int c = 0; c < 3; ++c) {
      out["classes"][names[c]] = {{"kernels", count_by_class[c]},
                                  {"ms", by_class[c] / 1e6},
                                  {"fraction", total_ns > 0 ? by_class[c] / total_ns : 0}};
    }
    out["sm_usage"] = {{"min", sm.min}, {"p50", sm.p50}, {"p90", sm.p90},
                       {"p99", sm.p99}, {"max", sm.max}, {"mean", sm.mean}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("profile:     {}\nmeasured on: {}\nkernels:     {}\ntotal time:  {:.3f} ms\n",
                           options.profile.string(), profile.device.empty() ? "(not recorded)" : profile.device,
                           profile.kernels.size(), total_ns / 1e6);
  std::cout << "time per class:\n";
  for (int c : {2, 1, 0}) {
    std::cout << fmt::format("  {:<8} {:>6} kernels {:>10.3f} ms {:>6.1f}%\n", names[c], count_by_class[c],
                             by_class[c] / 1e6, total_ns > 0 ? 100.0 * by_class[c] / total_ns : 0.0);
  }
  std::cout << fmt::format("SMs needed:  min {:.0f}, p50 {:.0f}, p90 {:.0f}, p99 {:.0f}, max {:.0f}, mean {:.1f}\n",
                           sm.min, sm.p50, sm.p90, sm.p99, sm.max, sm.mean);
  return 0;
}

}  // namespace fleet::orion
