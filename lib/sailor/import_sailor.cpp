#include "sailor/import_sailor.h"

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/json.h"

namespace fleet::sailor {

namespace {

namespace fs = std::filesystem;

// $ per GPU-hour that the SAILOR paper used (GCP us-central1, on demand).
const std::map<std::string, double> kPaperPrices = {{"A100-40", 3.67}, {"V100-16", 2.80}, {"GH-96", 11.06}};

int parse_int_key(const std::string& key, const JsonValue& where) {
  try {
    std::size_t used = 0;
    const int v = std::stoi(key, &used);
    if (used == key.size()) return v;
  } catch (const std::exception&) {
  }
  where.fail("expected an integer key, got '" + key + "'");
}

BandwidthFit fit_from_sailor(const JsonValue& entry) {
  // [[c0, c1, c2], max_bytes_per_s]
  const auto coeffs = entry.at(0).as<std::vector<double>>();
  if (coeffs.size() != 3) entry.at(0).fail("expected [c0, c1, c2]");
  return {coeffs[0], coeffs[1], coeffs[2], entry.at(1).as<double>()};
}

ModelSpec import_model(const fs::path& file, const std::string& name) {
  const JsonDocument doc = load_json_file(file);
  const JsonValue m = doc.root().at(name);
  ModelSpec out;
  out.name = name;
  for (const auto& [tp_key, layers] : m.members()) {
    const int tp = parse_int_key(tp_key, layers);
    for (const auto& [layer_key, info] : layers.members()) {
      const int layer = parse_int_key(layer_key, info);
      if (layer < 0 || layer > 100000) info.fail("layer index out of range");
      if (out.layers.size() <= static_cast<std::size_t>(layer)) out.layers.resize(static_cast<std::size_t>(layer) + 1);
      LayerSpec& l = out.layers[static_cast<std::size_t>(layer)];
      l.params[tp] = info.get<double>("params_floats");
      l.act_output[tp] = info.get<double>("act_output_floats");
      l.act_memory[tp] = info.get<double>("act_mem_floats");
    }
  }
  for (std::size_t i = 0; i < out.layers.size(); ++i) {
    if (out.layers[i].params.empty()) m.fail("layer " + std::to_string(i) + " is missing");
  }
  return out;
}

ProfileSet import_profiles(const fs::path& dir, const std::string& model) {
  ProfileSet out;
  out.model = model;
  const fs::path root = dir / "profiles" / model;
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw InputError("no profiles for model '" + model + "'", {root.string(), "", std::nullopt});
  for (const auto& entry : fs::directory_iterator(root)) {
    const fs::path file = entry.path() / "profile.json";
    if (!fs::is_regular_file(file, ec)) continue;
    const std::string gpu = entry.path().filename().string();
    const JsonDocument doc = load_json_file(file);
    for (const auto& [mbs_key, by_tp] : doc.root().members()) {
      const int mbs = parse_int_key(mbs_key, by_tp);
      for (const auto& [tp_key, layers] : by_tp.members()) {
        const int tp = parse_int_key(tp_key, layers);
        std::vector<LayerTimes> times(layers.size());
        for (const auto& [layer_key, t] : layers.members()) {
          const int layer = parse_int_key(layer_key, t);
          if (layer < 0 || static_cast<std::size_t>(layer) >= times.size()) t.fail("layer index out of range");
          const auto v = t.as<std::vector<double>>();
          if (v.size() != 3) t.fail("expected [forward_s, backward_s, update_s]");
          times[static_cast<std::size_t>(layer)] = {v[0], v[1], v[2]};
        }
        out.gpus[gpu][{mbs, tp}] = std::move(times);
      }
    }
  }
  if (out.gpus.empty()) throw InputError("no profile.json files", {root.string(), "", std::nullopt});
  return out;
}

}  // namespace

std::string region_of_zone(const std::string& zone) {
  const auto dash = zone.rfind('-');
  return dash == std::string::npos ? zone : zone.substr(0, dash);
}

namespace {

// GPU types: memory and node size from the cluster config, prices from the paper or --price.
void import_gpu_types(const ImportOptions& opt, ClusterSpec& cluster) {
  std::map<std::string, double> prices = kPaperPrices;
  for (const auto& [gpu, p] : opt.prices) prices[gpu] = p;
  const JsonDocument basic_doc = load_json_file(opt.source / "configs" / "basic_cluster_config.json");
  for (const auto& [gpu, spec] : basic_doc.root().members()) {
    if (!spec.is_object()) continue;  // "zone": "..."
    if (prices.count(gpu) == 0) {
      spdlog::info("skipping GPU type {}: no price known (give one with --price {}=USD)", gpu, gpu);
      continue;
    }
    if (prices[gpu] < 0) throw UsageError("price of " + gpu + " cannot be negative");
    cluster.gpu_types[gpu] = {spec.get<int>("gpus_per_node"), spec.get<double>("mem_per_gpu"), prices[gpu],
                              default_gpu_power(gpu).value_or(GpuPower{})};
  }
}

// Quotas per zone, plus any given on the command line.
void import_quotas(const ImportOptions& opt, ClusterSpec& cluster) {
  const JsonDocument quotas = load_json_file(opt.source / "configs" / "quotas.json");
  auto add_quota = [&](const std::string& gpu, const std::string& zone, int n) {
    if (cluster.gpu_types.count(gpu) == 0) return;
    if (n <= 0) return;
    cluster.quotas[gpu][zone] = n;
    cluster.zone_region[zone] = region_of_zone(zone);
  };
  for (const auto& [gpu, zones] : quotas.root().members()) {
    for (const auto& [zone, n] : zones.members()) add_quota(gpu, zone, n.as<int>());
  }
  for (const auto& [gpu, zones] : opt.extra_quotas) {
    if (cluster.gpu_types.count(gpu) == 0) throw UsageError("--quota names unknown or unpriced GPU type '" + gpu + "'");
    for (const auto& [zone, n] : zones) {
      if (n <= 0) throw UsageError("--quota for " + gpu + " in " + zone + " must be positive");
      add_quota(gpu, zone, n);
    }
  }
  if (cluster.quotas.empty()) throw InputError("no priced GPU type has a quota in any zone");
}

LinkClass link_between(const std::string& a, const std::string& b) {
  if (a == b) return LinkClass::kSameZone;
  return region_of_zone(a) == region_of_zone(b) ? LinkClass::kCrossZone : LinkClass::kCrossRegion;
}

// Network: a representative fit per link class and GPU pair (one GPU per
// node on each side), taken from the first zone that has it.
void import_network(const ImportOptions& opt, ClusterSpec& cluster) {
  const JsonDocument intra = load_json_file(opt.source / "providers" / "intra_node_bandwidths.json");
  for (const auto& [gpu, t] : cluster.gpu_types) {
    if (!intra.root().has(gpu)) continue;
    const JsonValue per_count = intra.root().at(gpu);
    const std::string key = per_count.has(std::to_string(t.gpus_per_node)) ? std::to_string(t.gpus_per_node)
                                                                           : per_count.members().back().first;
    cluster.intra_node[gpu] = fit_from_sailor(per_count.at(key));
  }
  const JsonDocument mz = load_json_file(opt.source / "providers" / "multizone_bandwidths_het.json");
  for (const auto& [src_zone, by_gpu] : mz.root().members()) {
    for (const auto& [src_gpu, by_count] : by_gpu.members()) {
      if (cluster.gpu_types.count(src_gpu) == 0 || !by_count.has("1")) continue;
      for (const auto& [dst_zone, dst_by_gpu] : by_count.at("1").members()) {
        const LinkClass link = link_between(src_zone, dst_zone);
        for (const auto& [dst_gpu, dst_by_count] : dst_by_gpu.members()) {
          if (cluster.gpu_types.count(dst_gpu) == 0 || !dst_by_count.has("1")) continue;
          cluster.inter_node.emplace(std::make_tuple(link, src_gpu, dst_gpu), fit_from_sailor(dst_by_count.at("1")));
        }
      }
    }
  }
  // Egress $/GB by link class, from the zone-to-zone price matrix.
  const JsonDocument cost = load_json_file(opt.source / "providers" / "communication_cost.json");
  for (const auto& [a, row] : cost.root().members()) {
    for (const auto& [b, price] : row.members()) {
      const double p = price.as<double>();
      if (p < 0) price.fail("price cannot be negative");
      double& slot = cluster.egress_per_gb[link_between(a, b)];
      slot = std::max(slot, p);
    }
  }
}

// Job: the model's training config when there is one.
JobSpec import_job(const ImportOptions& opt) {
  JobSpec job;
  job.model = opt.model;
  job.global_batch = opt.global_batch;
  job.sequence_length = opt.sequence_length;
  // SAILOR's runtime, where its profiles and runs were measured, is DeepSpeed's pipeline engine.
  job.runtime = TrainingRuntime::kDeepSpeed;
  for (const auto& entry : fs::directory_iterator(opt.source / "configs")) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("training_config_") || entry.path().extension() != ".json") continue;
    const JsonDocument cfg = load_json_file(entry.path());
    if (cfg.root().get_or<std::string>("model", "") != opt.model) continue;
    if (job.global_batch == 0) job.global_batch = cfg.root().get<int>("global_batch_size");
    if (job.sequence_length == 0) job.sequence_length = cfg.root().get<int>("sequence_length");
  }
  if (job.global_batch <= 0 || job.sequence_length <= 0) {
    throw UsageError("no training config for " + opt.model + ": give --global-batch and --seq-len");
  }
  return job;
}

}  // namespace

ImportedInputs import_sailor(const ImportOptions& opt) {
  ImportedInputs out;
  out.model = import_model(opt.source / "llm_info.json", opt.model);
  out.profiles = import_profiles(opt.source, opt.model);
  for (const std::string& note : complete_profiles(out.profiles, out.model)) spdlog::warn("{}", note);
  import_gpu_types(opt, out.cluster);
  import_quotas(opt, out.cluster);
  import_network(opt, out.cluster);
  out.job = import_job(opt);
  return out;
}

}  // namespace fleet::sailor
