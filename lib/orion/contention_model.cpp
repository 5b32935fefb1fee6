#include "orion/contention_model.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/json.h"

namespace fleet::orion {

namespace {

// Reads {"unknown": x, "memory": y, "compute": z}, each optional, into a
// per-class array, each value in [lo, hi].
void read_by_class(const JsonValue& root, std::string_view key, double (&out)[3], double lo, double hi) {
  const std::optional<JsonValue> v = root.find(key);
  if (!v) return;
  if (!v->is_object()) v->fail("expected an object of per-class values (unknown, memory, compute)");
  v->reject_unknown_keys({"unknown", "memory", "compute"});
  const char* names[3] = {"unknown", "memory", "compute"};
  for (int c = 0; c < 3; ++c) {
    const std::optional<JsonValue> x = v->find(names[c]);
    if (!x) continue;
    const double value = x->as<double>();
    if (!(std::isfinite(value) && value >= lo && value <= hi)) {
      x->fail(fmt::format("must be between {:g} and {:g}", lo, hi));
    }
    out[c] = value;
  }
}

}  // namespace

ContentionModel load_contention_model(const std::filesystem::path& path) {
  // A handful of constants: anything large is not such a file.
  const JsonDocument doc = parse_json(read_file(path, 1u << 20), path.string());
  const JsonValue& root = doc.root();
  if (!root.is_object()) root.fail("expected a JSON object");
  root.reject_unknown_keys(
      {"format", "version", "device", "source", "compute_use", "memory_use", "same_class_penalty", "unit_share"});
  if (root.get<std::string>("format") != "gpufleet-orion-contention") {
    root.at("format").fail("expected format 'gpufleet-orion-contention'");
  }
  if (root.get<std::int64_t>("version") != 1) root.at("version").fail("unsupported version (this build reads 1)");
  ContentionModel m;
  // Uses above 1 would mean one kernel needs more than the device has.
  read_by_class(root, "compute_use", m.compute_use, 0, 1);
  read_by_class(root, "memory_use", m.memory_use, 0, 1);
  // A unit holds something of its SM, at most all of it.
  read_by_class(root, "unit_share", m.default_unit_share, 0.01, 1);
  if (const std::optional<JsonValue> p = root.find("same_class_penalty")) {
    const double value = p->as<double>();
    if (!(std::isfinite(value) && value >= 0 && value <= 1)) p->fail("must be between 0 and 1");
    m.same_class_penalty = value;
  }
  return m;
}

}  // namespace fleet::orion
