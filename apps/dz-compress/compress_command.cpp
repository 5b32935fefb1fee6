#include "dz-compress/compress_command.h"

#include <iostream>
#include <map>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/json.h"

namespace fleet::deltazip {

int run_compress(const CompressCommand& command, bool json) {
  CompressCommand c = command;
  c.compare_with_rtn = c.compare_with_rtn || json;
  const CompressResult r = compress_delta(c);
  std::ostream& report = is_stdio(r.output) ? std::cerr : std::cout;  // "-o -": stdout carries the container
  const double params = static_cast<double>(r.parameters);
  if (json) {
    const auto optional = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
    nlohmann::json out = {{"output", r.output.string()},
                          {"bytes", r.bytes},
                          {"seconds", r.seconds},
                          {"seconds_per_million_parameters", r.seconds / (params / 1e6)},
                          {"weighted_error", optional(r.weighted_error)},
                          {"weighted_error_rtn", optional(r.weighted_error_rtn)},
                          {"settings", parse_json(r.settings_json, "settings").json()}};
    if (r.budget_bytes > 0) {
      nlohmann::json allocation = nlohmann::json::object();
      for (const auto& [layer, form] : r.allocation) allocation[layer] = form;
      out["budget_bytes"] = r.budget_bytes;
      out["allocation"] = allocation;
    }
    report << out.dump(2) << "\n";
  } else {
    report << fmt::format("wrote {}: {} bytes ({:.2f}x smaller than the fp16 model), {:.1f} s\n", r.output.string(),
                          r.bytes, 2 * params / static_cast<double>(r.bytes), r.seconds);
    if (r.budget_bytes > 0) {
      std::map<std::string, int> layers;
      for (const auto& [layer, form] : r.allocation) ++layers[form];
      std::string forms;
      for (const auto& [form, n] : layers) forms += fmt::format("{}{} x {}", forms.empty() ? "" : ", ", n, form);
      report << fmt::format("budget {} bytes; linear layers: {}\n", r.budget_bytes, forms);
    }
  }
  return 0;
}

}  // namespace fleet::deltazip
