#include "deltazip/container_summary.h"

#include <fmt/format.h>

#include "deltazip/container.h"

namespace fleet::deltazip {
namespace {

// The class of a model tensor, by its name.
const char* tensor_class(const std::string& name) {
  if (name.find("_proj.weight") != std::string::npos) return "linear layers";
  if (name == "lm_head.weight") return "LM head";
  if (name.find("embed_tokens") != std::string::npos) return "embedding";
  if (name.find("norm") != std::string::npos) return "norms";
  return "other";
}

}  // namespace

double ContainerSummary::bits_per_weight(std::uint64_t bytes, std::int64_t elements) {
  return elements ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0;
}

ContainerSummary::Total ContainerSummary::linear() const {
  const auto it = classes.find("linear layers");
  return it == classes.end() ? Total{} : it->second;
}

ContainerSummary summarize_container(const std::filesystem::path& path) {
  DeltaReader reader(path);
  ContainerSummary s;
  s.file = path;
  s.file_bytes = reader.file_bytes();
  s.base_identity = reader.header().base_identity;
  s.settings_json = reader.header().settings_json;
  for (const auto& n : reader.packed_names()) {
    const PackedMatrix p = reader.packed(n);
    s.tensors.push_back(
        {n, fmt::format("{}-bit {}{}", p.bits, p.sparsity.to_string(), p.has_codebook() ? " codebook" : ""),
         reader.elements(n), reader.stored_bytes(n)});
  }
  for (const auto& n : reader.low_rank_names()) {
    const LowRankMatrix m = reader.low_rank(n);
    s.tensors.push_back({n,
                         m.up.bits == m.down.bits ? fmt::format("{}-bit rank {}", m.up.bits, m.rank())
                                                  : fmt::format("{}/{}-bit rank {}", m.up.bits, m.down.bits, m.rank()),
                         reader.elements(n), reader.stored_bytes(n)});
  }
  for (const auto& n : reader.dense_names())
    s.tensors.push_back({n, reader.dense(n).form, reader.elements(n), reader.stored_bytes(n)});
  for (const auto& t : s.tensors) {
    ContainerSummary::Total& c = s.classes[tensor_class(t.name)];
    c.elements += t.elements;
    c.bytes += t.bytes;
    s.all.elements += t.elements;
    s.all.bytes += t.bytes;
  }
  return s;
}

}  // namespace fleet::deltazip
