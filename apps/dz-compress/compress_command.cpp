#include "dz-compress/compress_command.h"

#include <iostream>

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
    report << out.dump(2) << "\n";
  } else {
    report << fmt::format("wrote {}: {} bytes ({:.2f}x smaller than the fp16 model), {:.1f} s\n", r.output.string(),
                          r.bytes, 2 * params / static_cast<double>(r.bytes), r.seconds);
  }
  return 0;
}

}  // namespace fleet::deltazip
