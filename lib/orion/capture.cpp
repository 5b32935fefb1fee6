#include "orion/capture.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_io.h"
#include "orion/kernel_name.h"
#include "orion/ncu_import.h"
#include "orion/occupancy.h"

namespace fleet::orion {
namespace {

std::int64_t product3(const nlohmann::json& v, const char* field, std::size_t line, const std::string& file) {
  if (!v.is_array() || v.size() != 3) throw InputError(fmt::format("{}:{}: '{}' must be [x, y, z]", file, line, field));
  std::int64_t p = 1;
  for (const auto& d : v) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 1 || d.get<std::int64_t>() > (1ll << 31)) {
      throw InputError(fmt::format("{}:{}: '{}' entries must be positive integers", file, line, field));
    }
    p *= d.get<std::int64_t>();
  }
  return p;
}

std::int64_t non_negative(const nlohmann::json& o, const char* field, std::size_t line, const std::string& file) {
  if (!o.contains(field)) return 0;
  const auto& v = o[field];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
    throw InputError(fmt::format("{}:{}: '{}' must be a non-negative integer", file, line, field));
  }
  return v.get<std::int64_t>();
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

double kernel_time_ns(const KernelProfile& profile) {
  double total = 0;
  for (const KernelRecord& k : profile.kernels) total += k.duration_ns;
  return total;
}

}  // namespace

CaptureRecords read_capture_records(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  const std::string file = path.string();
  CaptureRecords r;
  std::size_t line_no = 0, start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json o = nlohmann::json::parse(line, nullptr, false);
    if (o.is_discarded() || !o.is_object() || !o.contains("kind") || !o["kind"].is_string()) {
      throw InputError(fmt::format("{}:{}: not a capture record (a JSON object with \"kind\")", file, line_no));
    }
    const std::string kind = o["kind"];
    if (kind == "device") {
      r.device_name = o.value("name", "");
      r.device_sms = static_cast<int>(non_negative(o, "sms", line_no, file));
    } else if (kind == "marker") {
      const std::string what = o.value("what", "");
      if (what != "begin" && what != "end")
        throw InputError(fmt::format("{}:{}: marker 'what' must be begin or end", file, line_no));
      r.markers.emplace_back(static_cast<std::uint64_t>(non_negative(o, "t", line_no, file)), what == "begin");
    } else if (kind == "kernel") {
      CapturedKernel k;
      if (!o.contains("name") || !o["name"].is_string())
        throw InputError(fmt::format("{}:{}: kernel without a name", file, line_no));
      k.name = o["name"];
      k.grid_blocks = product3(o.value("grid", nlohmann::json()), "grid", line_no, file);
      k.threads_per_block = static_cast<int>(product3(o.value("block", nlohmann::json()), "block", line_no, file));
      k.registers_per_thread = static_cast<int>(non_negative(o, "registers", line_no, file));
      k.static_shared_bytes = non_negative(o, "static_shared", line_no, file);
      k.dynamic_shared_bytes = non_negative(o, "dynamic_shared", line_no, file);
      k.start_ns = static_cast<std::uint64_t>(non_negative(o, "start", line_no, file));
      k.end_ns = static_cast<std::uint64_t>(non_negative(o, "end", line_no, file));
      k.stream = static_cast<std::uint32_t>(non_negative(o, "stream", line_no, file));
      if (k.end_ns < k.start_ns) throw InputError(fmt::format("{}:{}: kernel ends before it starts", file, line_no));
      r.kernels.push_back(std::move(k));
    }  // other kinds are for later versions: skipped
  }
  std::sort(r.kernels.begin(), r.kernels.end(),
            [](const CapturedKernel& a, const CapturedKernel& b) { return a.start_ns < b.start_ns; });
  std::sort(r.markers.begin(), r.markers.end());
  return r;
}

const DeviceSpec& device_for_name(const std::string& cupti_name, int sms) {
  std::string upper = cupti_name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const char* model : {"H200", "H100", "V100"}) {
    if (upper.find(model) != std::string::npos) return device_by_name(model);
  }
  if (upper.find("A100") != std::string::npos)
    return device_by_name(upper.find("80GB") != std::string::npos ? "a100-80" : "a100-40");
  throw InputError(
      fmt::format("no device table for '{}' ({} SMs); pass --device with one of the known ones", cupti_name, sms));
}

namespace {

// The GPU the durations were measured on: CUPTI's, or --device for a GPU
// without a table of its own; a --device that names another known GPU than
// the one the program ran on would label its durations wrongly.
const DeviceSpec& capture_device(const CaptureRecords& records, const std::string& option) {
  if (option == "auto") return device_for_name(records.device_name, records.device_sms);
  const DeviceSpec& chosen = device_by_name(option);
  if (records.device_name.empty()) return chosen;
  const DeviceSpec* ran = nullptr;
  try {
    ran = &device_for_name(records.device_name, records.device_sms);
  } catch (const InputError&) {
    return chosen;  // no table for it: --device stands in
  }
  if (ran->name != chosen.name) {
    throw InputError(fmt::format("--device {}: the program ran on '{}' ({}); its kernel durations are that GPU's",
                                 chosen.name, records.device_name, ran->name));
  }
  return chosen;
}

}  // namespace

std::optional<double> launch_bound_overhead_us(const KernelProfile& profile, const std::vector<double>& walls_ns) {
  if (walls_ns.empty() || profile.kernels.empty()) return std::nullopt;
  const double wall = median(walls_ns), kernels = kernel_time_ns(profile);
  if (!(wall > kLaunchBoundFactor * kernels)) return std::nullopt;
  // The simulator launches kernel i at (i + 1) x L after the request begins:
  // a launch-bound request ends at N x L plus its last kernel.
  return (wall - profile.kernels.back().duration_ns) / static_cast<double>(profile.kernels.size()) / 1e3;
}

namespace {

using KernelSequence = std::vector<const CapturedKernel*>;

// Marked iterations: kernels that start between a begin and the next end,
// with each iteration's time between its markers.
std::pair<std::vector<KernelSequence>, std::vector<std::uint64_t>> marked_iterations(const CaptureRecords& records) {
  std::vector<KernelSequence> iterations;
  std::vector<std::uint64_t> walls_ns;
  bool open = false;
  std::uint64_t opened_at = 0;
  std::size_t next = 0;
  for (const auto& [t, begin] : records.markers) {
    if (begin) {
      open = true;
      opened_at = t;
      continue;
    }
    if (!open) continue;
    KernelSequence it;
    while (next < records.kernels.size() && records.kernels[next].start_ns < opened_at) ++next;
    for (std::size_t i = next; i < records.kernels.size() && records.kernels[i].start_ns <= t; ++i) {
      it.push_back(&records.kernels[i]);
    }
    if (!it.empty()) {
      iterations.push_back(std::move(it));
      walls_ns.push_back(t - opened_at);
    }
    open = false;
  }
  return {std::move(iterations), std::move(walls_ns)};
}

// The iterations the profile is the median of: after --skip, those with the
// last one's kernel sequence (every kernel once when nothing is marked);
// their walls in `used_walls_ns`.
std::vector<KernelSequence> iterations_to_use(const CaptureRecords& records, const CaptureOptions& options,
                                              const std::vector<KernelSequence>& iterations,
                                              const std::vector<std::uint64_t>& walls_ns,
                                              std::vector<double>& used_walls_ns) {
  std::vector<KernelSequence> used;
  if (iterations.empty()) {
    KernelSequence all;
    for (const CapturedKernel& k : records.kernels) all.push_back(&k);
    if (!all.empty()) used.push_back(std::move(all));
  } else {
    const std::size_t skip = options.skip ? static_cast<std::size_t>(std::max(0, *options.skip))
                                          : std::min<std::size_t>(1, iterations.size() - 1);
    if (skip >= iterations.size())
      throw InputError("--skip " + std::to_string(skip) + " leaves none of the capture's " +
                       std::to_string(iterations.size()) + " marked iteration(s); skip fewer, or capture more");
    const auto& last = iterations.back();
    auto same_sequence = [&](const KernelSequence& it) {
      if (it.size() != last.size()) return false;
      for (std::size_t i = 0; i < it.size(); ++i) {
        if (it[i]->name != last[i]->name) return false;
      }
      return true;
    };
    for (std::size_t i = skip; i < iterations.size(); ++i) {
      if (!same_sequence(iterations[i])) continue;
      used.push_back(iterations[i]);
      used_walls_ns.push_back(static_cast<double>(walls_ns[i]));
    }
  }
  if (used.empty())
    throw InputError("the capture has no kernels" +
                     std::string(records.markers.empty() ? "" : " inside its marked iterations"));
  return used;
}

// Kernel classes (compute- or memory-bound) by name from an ncu export.
std::map<std::string, KernelClass> classes_from_ncu(const std::optional<std::filesystem::path>& ncu_file,
                                                    const DeviceSpec& device) {
  std::map<std::string, KernelClass> classes;
  if (!ncu_file) return classes;
  const KernelProfile ncu = import_ncu_csv(read_file(*ncu_file), ncu_file->string(), device);
  for (const KernelRecord& k : ncu.kernels) {
    if (k.profile != KernelClass::kUnknown) classes[kernel_name_key(k.name)] = k.profile;
  }
  return classes;
}

// Kernel `i` of the iterations: its median duration, launch shape and SM need.
KernelRecord median_kernel(const std::vector<KernelSequence>& used, std::size_t i, const DeviceSpec& device) {
  const CapturedKernel& k = *used.back()[i];
  std::vector<double> durations;
  for (const auto& it : used) durations.push_back(static_cast<double>(it[i]->end_ns - it[i]->start_ns));
  KernelRecord r;
  r.name = k.name;
  r.duration_ns = median(durations);
  r.grid_blocks = k.grid_blocks;
  r.threads_per_block = k.threads_per_block;
  r.registers_per_thread = k.registers_per_thread;
  r.static_shared_bytes = k.static_shared_bytes;
  r.dynamic_shared_bytes = k.dynamic_shared_bytes;
  LaunchConfig launch{k.grid_blocks, k.threads_per_block, k.registers_per_thread, k.static_shared_bytes,
                      k.dynamic_shared_bytes};
  r.sm_usage = compute_occupancy(launch, device).sms_needed;
  return r;
}

}  // namespace

KernelProfile profile_from_capture(const CaptureRecords& records, const CaptureOptions& options, std::string* summary) {
  const DeviceSpec& device = capture_device(records, options.device);
  const auto [iterations, walls_ns] = marked_iterations(records);
  std::vector<double> used_walls_ns;
  const auto used = iterations_to_use(records, options, iterations, walls_ns, used_walls_ns);
  const auto classes = classes_from_ncu(options.ncu, device);
  KernelProfile profile;
  profile.device = device.name;
  std::size_t classified = 0;
  for (std::size_t i = 0; i < used.back().size(); ++i) {
    KernelRecord r = median_kernel(used, i, device);
    if (auto c = classes.find(kernel_name_key(r.name)); c != classes.end()) {
      r.profile = c->second;
      ++classified;
    }
    profile.kernels.push_back(std::move(r));
  }
  if (summary != nullptr) {
    *summary = fmt::format("{} kernels per iteration on {}; {} ({} kernels recorded); {} of them classified{}",
                           profile.kernels.size(), device.name,
                           iterations.empty()
                               ? std::string("no cuProfilerStart/Stop markers: every kernel once")
                               : fmt::format("median over {} of {} marked iterations", used.size(), iterations.size()),
                           records.kernels.size(), classified, options.ncu ? " from the ncu export" : " (no --ncu)");
    if (const auto launch_us = launch_bound_overhead_us(profile, used_walls_ns)) {
      *summary += fmt::format(
          "; launch-bound: an iteration takes {:.3f} ms between its markers, its kernels {:.3f} ms, so about {:.1f} us "
          "of CPU per launch (the client's launch_overhead_us when simulating it)",
          median(used_walls_ns) / 1e6, kernel_time_ns(profile) / 1e6, *launch_us);
    }
  }
  return profile;
}

}  // namespace fleet::orion
