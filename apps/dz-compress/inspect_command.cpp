#include "dz-compress/inspect_command.h"

#include <iostream>

#include <fmt/format.h>

#include "common/json.h"
#include "deltazip/container_summary.h"

namespace fleet::deltazip {
namespace {

using Summary = ContainerSummary;

double ratio(double fp16_bytes, std::uint64_t bytes) { return bytes ? fp16_bytes / static_cast<double>(bytes) : 0.0; }

nlohmann::json summary_json(const Summary& s) {
  const auto bpw = &Summary::bits_per_weight;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : s.tensors)
    tensors.push_back({{"name", t.name},
                       {"kind", t.form},
                       {"elements", t.elements},
                       {"bytes", t.bytes},
                       {"bits_per_weight", bpw(t.bytes, t.elements)}});
  nlohmann::json by_class = nlohmann::json::object();
  for (const auto& [name, t] : s.classes) {
    if (t.elements == 0) continue;
    by_class[name] = {{"elements", t.elements},
                      {"bytes", t.bytes},
                      {"bits_per_weight", bpw(t.bytes, t.elements)},
                      {"share_of_file", static_cast<double>(t.bytes) / static_cast<double>(s.file_bytes)}};
  }
  const Summary::Total linear = s.linear();
  return {{"file", s.file.string()},
          {"file_bytes", s.file_bytes},
          {"base_identity", s.base_identity},
          {"settings", parse_json(s.settings_json, s.file.string() + ":settings").json()},
          {"tensors", tensors},
          {"classes", by_class},
          {"linear",
           {{"elements", linear.elements},
            {"bytes", linear.bytes},
            {"bits_per_weight", bpw(linear.bytes, linear.elements)},
            {"ratio_vs_fp16_delta", ratio(2.0 * static_cast<double>(linear.elements), linear.bytes)}}},
          {"total",
           {{"elements", s.all.elements},
            {"bytes", s.all.bytes},
            {"bits_per_weight", bpw(s.all.bytes, s.all.elements)},
            {"ratio_vs_fp16_model", ratio(2.0 * static_cast<double>(s.all.elements), s.file_bytes)}}}};
}

std::string summary_table(const Summary& s) {
  const auto bpw = &Summary::bits_per_weight;
  const std::string settings = parse_json(s.settings_json, s.file.string() + ":settings").json().dump();
  std::string out = fmt::format("{}: {} bytes, base identity {}\nsettings: {}\n", s.file.string(), s.file_bytes,
                                s.base_identity, settings);
  out += fmt::format("{:<44} {:<24} {:>12} {:>12} {:>8}\n", "tensor", "stored as", "weights", "bytes", "bits/w");
  for (const auto& t : s.tensors)
    out += fmt::format("{:<44} {:<24} {:>12} {:>12} {:>8.3f}\n", t.name, t.form, t.elements, t.bytes,
                       bpw(t.bytes, t.elements));
  out += fmt::format("{:<16} {:>12} {:>12} {:>8} {:>8}\n", "class", "weights", "bytes", "bits/w", "of file");
  for (const auto& [name, t] : s.classes) {
    if (t.elements == 0) continue;
    out += fmt::format("{:<16} {:>12} {:>12} {:>8.3f} {:>7.1f}%\n", name, t.elements, t.bytes, bpw(t.bytes, t.elements),
                       100.0 * static_cast<double>(t.bytes) / static_cast<double>(s.file_bytes));
  }
  const Summary::Total linear = s.linear();
  const double linear_bpw = bpw(linear.bytes, linear.elements);
  out += fmt::format("linear layers: {:.3f} bits/weight, {:.2f}x smaller than their fp16 delta\n", linear_bpw,
                     linear.bytes ? 16.0 / linear_bpw : 0.0);
  out += fmt::format("whole file: {:.3f} bits/weight, {:.2f}x smaller than the fp16 model\n",
                     bpw(s.file_bytes, s.all.elements), ratio(2.0 * static_cast<double>(s.all.elements), s.file_bytes));
  return out;
}

}  // namespace

int run_inspect(const InspectCommand& c) {
  const Summary s = summarize_container(c.delta);
  std::cout << (c.json ? summary_json(s).dump(2) + "\n" : summary_table(s));
  return 0;
}

}  // namespace fleet::deltazip
