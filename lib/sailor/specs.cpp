#include "sailor/specs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/json.h"

namespace fleet::sailor {

namespace {

constexpr int kVersion = 1;

void check_header(const JsonValue& root, const std::string& format) {
  if (root.get<std::string>("format") != format) root.at("format").fail("expected format '" + format + "'");
  if (root.get<int>("version") != kVersion) root.at("version").fail("unsupported version (this build reads 1)");
}

// Physical bounds on every number the planner reads: far beyond any real
// model or cluster, far below values whose sums and products overflow (a
// profile of 1e308 s per layer made the search index past its tables).
constexpr double kMaxSeconds = 1e6;       // one layer's forward, backward or update step
constexpr double kMaxCount = 1e15;        // parameters, bytes of activations or memory
constexpr double kMaxPricePerHour = 1e6;  // dollars per GPU hour
constexpr double kMaxWatts = 1e4;         // one GPU board
constexpr double kMaxPricePerGb = 1e3;    // dollars per GB of egress
constexpr double kMaxBytesPerS = 1e15;    // a link's bandwidth
constexpr int kMaxGpusPerNode = 1024;
constexpr int kMaxQuota = 1 << 20;
constexpr int kMaxBatch = 1 << 24;
// `x` read from `v`, InputError naming it unless lo <= x <= hi.
double within(const JsonValue& v, double x, double lo, double hi, const char* what) {
  if (!(x >= lo && x <= hi)) v.fail(fmt::format("{} {} is outside {:g} to {:g}", what, x, lo, hi));
  return x;
}

std::map<int, double> per_tp(const JsonValue& v) {
  std::map<int, double> out;
  for (const auto& [key, value] : v.members()) {
    int tp = 0;
    try {
      tp = std::stoi(key);
    } catch (const std::exception&) {
      value.fail("TP degree keys must be integers");
    }
    if (tp <= 0) value.fail("TP degree must be positive");
    if (tp > 1024) value.fail("TP degree above 1024");
    out[tp] = within(value, value.as<double>(), 0, kMaxCount, "value");
  }
  if (out.empty()) v.fail("needs at least one TP degree");
  return out;
}

nlohmann::json per_tp_json(const std::map<int, double>& m) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [tp, v] : m) out[std::to_string(tp)] = v;
  return out;
}

double lookup(const std::map<int, double>& m, int tp, int layer, const char* what) {
  auto it = m.find(tp);
  if (it == m.end()) {
    throw InputError("layer " + std::to_string(layer) + " has no " + what + " for TP degree " + std::to_string(tp));
  }
  return it->second;
}

const char* kLinkNames[] = {"same_node", "same_zone", "cross_zone", "cross_region"};

std::optional<LinkClass> link_class_from_name(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kLinkNames[i]) return static_cast<LinkClass>(i);
  }
  return std::nullopt;
}

LinkClass parse_link_class(const JsonValue& v) {
  const std::string name = v.as<std::string>();
  if (auto c = link_class_from_name(name)) return *c;
  v.fail("unknown link class '" + name + "' (same_node, same_zone, cross_zone, cross_region)");
}

BandwidthFit parse_fit(const JsonValue& v) {
  const auto coeffs = v.get<std::vector<double>>("fit");
  if (coeffs.size() != 3) v.at("fit").fail("fit must be [c0, c1, c2]");
  BandwidthFit f{coeffs[0], coeffs[1], coeffs[2], v.get<double>("max_bytes_per_s")};
  if (!(f.max_bytes_per_s > 0)) v.at("max_bytes_per_s").fail("must be positive");
  within(v.at("max_bytes_per_s"), f.max_bytes_per_s, 1, kMaxBytesPerS, "bandwidth");
  for (double c : coeffs)
    if (!std::isfinite(c) || std::abs(c) > 1e9) v.at("fit").fail("fit coefficients must be finite and at most 1e9");
  // bw(x) = c0 x^2 + c1 x + c2 GB/s at x = log2(MB) must be positive at
  // 1 MB, the rate of every smaller message. Far beyond the sizes it was
  // measured at, a fit may turn down (noise in a sweep up to 1 MB makes a
  // parabola): there BandwidthFit::bytes_per_s keeps at least 1 MB/s.
  if (!(f.c2 > 0))
    v.at("fit").fail(fmt::format("the fit gives {:.3g} GB/s for a 1 MB message; a bandwidth must be positive", f.c2));
  return f;
}

nlohmann::json fit_json(const BandwidthFit& f) {
  return {{"fit", {f.c0, f.c1, f.c2}}, {"max_bytes_per_s", f.max_bytes_per_s}};
}

}  // namespace

const char* link_class_name(LinkClass c) { return kLinkNames[static_cast<int>(c)]; }

double ModelSpec::params(int first, int last, int tp) const {
  double sum = 0;
  for (int l = first; l < last; ++l)
    sum += lookup(layers.at(static_cast<std::size_t>(l)).params, tp, l, "parameter count");
  return sum;
}

double ModelSpec::act_memory(int first, int last, int tp) const {
  double sum = 0;
  for (int l = first; l < last; ++l) {
    sum += lookup(layers.at(static_cast<std::size_t>(l)).act_memory, tp, l, "activation memory");
  }
  return sum;
}

double ModelSpec::act_output(int layer, int tp) const {
  return lookup(layers.at(static_cast<std::size_t>(layer)).act_output, tp, layer, "activation output");
}

std::vector<std::string> complete_profiles(ProfileSet& profiles, const ModelSpec& model) {
  std::vector<std::string> notes;
  const std::size_t layers = model.layers.size();
  for (auto& [gpu, entries] : profiles.gpus) {
    std::map<std::size_t, int> filled;  // last measured block -> entries completed from it
    for (auto& [key, times] : entries) {
      const auto [mbs, tp] = key;
      const std::string what = fmt::format("profile of {} (mbs {}, TP {})", gpu, mbs, tp);
      if (times.size() == layers) continue;
      if (times.size() > layers) {
        throw InputError(fmt::format("{} has {} layers, the model '{}' {}", what, times.size(), model.name, layers));
      }
      if (times.size() < 3 || layers < 3) {
        throw InputError(
            fmt::format("{} has {} of the model's {} layers: it needs at least the embedding, one block "
                        "and the head to be completed",
                        what, times.size(), layers));
      }
      // The missing blocks must be copies of a measured one.
      const std::size_t last_measured = times.size() - 2;
      for (std::size_t b = last_measured + 1; b + 1 < layers; ++b) {
        if (model.layers[b].params != model.layers[last_measured].params) {
          throw InputError(
              fmt::format("{} has {} of the model's {} layers, and block {} differs in size from the "
                          "last measured block {}: it cannot be completed",
                          what, times.size(), layers, b, last_measured));
        }
      }
      const LayerTimes head = times.back();
      times.back() = times[last_measured];
      times.resize(layers - 1, times[last_measured]);
      times.push_back(head);
      ++filled[last_measured];
    }
    for (const auto& [last_measured, count] : filled) {
      notes.push_back(
          fmt::format("profile of {}: layers {}-{} not measured in {} of its {} (mbs, TP) entries; they "
                      "take block {}'s figures (a profile shorter than its model may be another model's: check it)",
                      gpu, last_measured + 1, layers - 2, count, entries.size(), last_measured));
    }
  }
  return notes;
}

std::optional<std::string> monotone_in_batch_size(ProfileSet& profiles) {
  std::size_t changed = 0, total = 0;
  std::vector<std::string> types;
  for (auto& [gpu, entries] : profiles.gpus) {
    std::map<int, std::vector<int>> sizes;  // tp -> micro-batch sizes, ascending (entries are ordered by (mbs, tp))
    for (const auto& [key, times] : entries) sizes[key.second].push_back(key.first);
    const std::size_t before = changed;
    for (const auto& [tp, mbs_list] : sizes) {
      // From the largest micro-batch down, so each time becomes the least over all larger ones.
      for (std::size_t i = mbs_list.size(); i-- > 1;) {
        const auto& larger = entries.at({mbs_list[i], tp});
        auto& smaller = entries.at({mbs_list[i - 1], tp});
        bool any = false;
        for (std::size_t l = 0; l < smaller.size() && l < larger.size(); ++l)
          for (std::size_t k = 0; k < 3; ++k)
            if (smaller[l][k] > larger[l][k]) {
              smaller[l][k] = larger[l][k];
              any = true;
            }
        changed += any ? 1 : 0;
      }
      total += mbs_list.size();
    }
    if (changed > before) types.push_back(gpu);
  }
  if (changed == 0) return std::nullopt;
  return fmt::format(
      "profile: {} of {} (GPU, mbs, TP) entries have layers slower than at a larger micro-batch ({}); "
      "the simulator takes the larger one's times for them",
      changed, total, fmt::join(types, ", "));
}

const LayerTimes& ProfileSet::at(const std::string& gpu, int mbs, int tp, int layer) const {
  auto g = gpus.find(gpu);
  if (g == gpus.end()) throw InputError("no profile for GPU type '" + gpu + "'");
  auto e = g->second.find({mbs, tp});
  if (e == g->second.end()) {
    throw InputError("profile of " + gpu + " lacks micro-batch size " + std::to_string(mbs) + " with TP " +
                     std::to_string(tp));
  }
  if (layer < 0 || static_cast<std::size_t>(layer) >= e->second.size()) {
    throw InputError("profile of " + gpu + " (mbs " + std::to_string(mbs) + ", TP " + std::to_string(tp) +
                     ") lacks layer " + std::to_string(layer));
  }
  return e->second[static_cast<std::size_t>(layer)];
}

bool ProfileSet::has(const std::string& gpu, int mbs, int tp) const {
  auto g = gpus.find(gpu);
  return g != gpus.end() && g->second.count({mbs, tp}) != 0;
}

double BandwidthFit::bytes_per_s(double bytes) const {
  // The fits were made for messages of at least ~1 MB; clamp x there so tiny
  // messages do not extrapolate the parabola.
  const double x = std::log2(std::max(bytes / 1e6, 1.0));
  const double gbps = c0 * x * x + c1 * x + c2;
  return std::min(std::max(gbps, 1e-3) * 1e9, max_bytes_per_s);
}

LinkClass ClusterSpec::link_between(const std::string& zone_a, const std::string& zone_b) const {
  if (zone_a == zone_b) return LinkClass::kSameZone;
  auto a = zone_region.find(zone_a), b = zone_region.find(zone_b);
  if (a == zone_region.end()) throw InputError("unknown zone '" + zone_a + "'");
  if (b == zone_region.end()) throw InputError("unknown zone '" + zone_b + "'");
  return a->second == b->second ? LinkClass::kCrossZone : LinkClass::kCrossRegion;
}

const BandwidthFit& ClusterSpec::fit(LinkClass link, const std::string& src_gpu, const std::string& dst_gpu) const {
  if (link == LinkClass::kSameNode) {
    auto it = intra_node.find(src_gpu);
    if (it == intra_node.end()) throw InputError("cluster has no intra-node bandwidth for " + src_gpu);
    return it->second;
  }
  auto it = inter_node.find({link, src_gpu, dst_gpu});
  if (it == inter_node.end()) it = inter_node.find({link, dst_gpu, src_gpu});
  if (it == inter_node.end()) {
    throw InputError(std::string("cluster has no ") + link_class_name(link) + " bandwidth between " + src_gpu +
                     " and " + dst_gpu);
  }
  return it->second;
}

ModelSpec load_model_spec(const std::filesystem::path& path) {
  const JsonDocument doc = load_json_file(path);
  const JsonValue root = doc.root();
  check_header(root, "gpufleet-sailor-model");
  ModelSpec m;
  m.name = root.get<std::string>("name");
  for (const JsonValue& layer : root.at("layers").elements()) {
    layer.reject_unknown_keys({"params", "act_output", "act_memory"});
    m.layers.push_back({per_tp(layer.at("params")), per_tp(layer.at("act_output")), per_tp(layer.at("act_memory"))});
  }
  if (m.layers.empty()) root.at("layers").fail("a model needs at least one layer");
  return m;
}

ProfileSet load_profile_set(const std::filesystem::path& path) {
  const JsonDocument doc = load_json_file(path);
  const JsonValue root = doc.root();
  check_header(root, "gpufleet-sailor-profile");
  ProfileSet p;
  p.model = root.get<std::string>("model");
  for (const auto& [gpu, entries] : root.at("gpus").members()) {
    for (const JsonValue& e : entries.elements()) {
      const int mbs = e.get<int>("mbs"), tp = e.get<int>("tp");
      if (mbs <= 0 || tp <= 0) e.fail("mbs and tp must be positive");
      if (mbs > kMaxBatch || tp > 1024) e.fail("mbs or tp is beyond any real job");
      std::vector<LayerTimes> layers;
      for (const JsonValue& l : e.at("layers").elements()) {
        const auto t = l.as<std::vector<double>>();
        if (t.size() != 3) l.fail("layer times must be [forward_s, backward_s, update_s]");
        for (double x : t) {
          if (!(x >= 0)) l.fail("layer times must be non-negative seconds");
          within(l, x, 0, kMaxSeconds, "layer time (s)");
        }
        layers.push_back({t[0], t[1], t[2]});
      }
      if (!p.gpus[gpu].emplace(std::make_pair(mbs, tp), std::move(layers)).second) e.fail("duplicate (mbs, tp) entry");
    }
  }
  return p;
}

ClusterSpec load_cluster_spec(const std::filesystem::path& path) {
  const JsonDocument doc = load_json_file(path);
  const JsonValue root = doc.root();
  check_header(root, "gpufleet-sailor-cluster");
  ClusterSpec c;
  for (const auto& [name, g] : root.at("gpu_types").members()) {
    g.reject_unknown_keys({"gpus_per_node", "memory_bytes", "price_per_hour", "idle_watts", "busy_watts"});
    GpuType t{g.get<int>("gpus_per_node"), g.get<double>("memory_bytes"), g.get<double>("price_per_hour"), {}};
    if (g.has("idle_watts") != g.has("busy_watts")) g.fail("give both idle_watts and busy_watts, or neither");
    if (g.has("busy_watts")) {
      t.power = {g.get<double>("idle_watts"), g.get<double>("busy_watts")};
      within(g.at("busy_watts"), t.power.busy_watts, 1, kMaxWatts, "power (W)");
      within(g.at("idle_watts"), t.power.idle_watts, 0, t.power.busy_watts, "idle power (W, at most busy_watts)");
    } else if (const auto power = default_gpu_power(name)) {
      t.power = *power;
    }
    if (t.gpus_per_node <= 0) g.at("gpus_per_node").fail("must be positive");
    if (t.gpus_per_node > kMaxGpusPerNode) g.at("gpus_per_node").fail("more GPUs per node than any machine has");
    if (!(t.memory_bytes > 0)) g.at("memory_bytes").fail("must be positive");
    within(g.at("memory_bytes"), t.memory_bytes, 1, kMaxCount, "memory (bytes)");
    if (!(t.price_per_hour >= 0)) g.at("price_per_hour").fail("price cannot be negative");
    within(g.at("price_per_hour"), t.price_per_hour, 0, kMaxPricePerHour, "price ($/h)");
    c.gpu_types[name] = t;
  }
  int total = 0;
  for (const auto& [zone, z] : root.at("zones").members()) {
    z.reject_unknown_keys({"region", "quotas"});
    c.zone_region[zone] = z.get<std::string>("region");
    for (const auto& [gpu, q] : z.at("quotas").members()) {
      if (c.gpu_types.count(gpu) == 0) q.fail("unknown GPU type '" + gpu + "'");
      const int n = q.as<int>();
      if (n <= 0) q.fail("quota must be positive (leave out GPU types a zone does not have)");
      if (n > kMaxQuota) q.fail("quota above " + std::to_string(kMaxQuota) + " GPUs");
      c.quotas[gpu][zone] = n;
      total += n;
    }
  }
  if (total == 0) root.at("zones").fail("no GPUs available in any zone");
  const JsonValue network = root.at("network");
  for (const auto& [gpu, f] : network.at("intra_node").members()) {
    if (c.gpu_types.count(gpu) == 0) f.fail("unknown GPU type '" + gpu + "'");
    c.intra_node[gpu] = parse_fit(f);
  }
  for (const JsonValue& l : network.at("links").elements()) {
    const LinkClass cls = parse_link_class(l.at("class"));
    const std::string src = l.get<std::string>("src"), dst = l.get<std::string>("dst");
    if (c.gpu_types.count(src) == 0) l.at("src").fail("unknown GPU type '" + src + "'");
    if (c.gpu_types.count(dst) == 0) l.at("dst").fail("unknown GPU type '" + dst + "'");
    c.inter_node[{cls, src, dst}] = parse_fit(l);
  }
  for (const auto& [cls, price] : root.at("egress_usd_per_gb").members()) {
    const auto link = link_class_from_name(cls);
    if (!link) price.fail("unknown link class '" + cls + "'");
    const double p = price.as<double>();
    if (!(p >= 0)) price.fail("price cannot be negative");
    c.egress_per_gb[*link] = within(price, p, 0, kMaxPricePerGb, "price ($/GB)");
  }
  return c;
}

const char* training_runtime_name(TrainingRuntime runtime) {
  return runtime == TrainingRuntime::kDeepSpeed ? "deepspeed" : "sailor-run";
}

JobSpec load_job_spec(const std::filesystem::path& path) {
  const JsonDocument doc = load_json_file(path);
  const JsonValue root = doc.root();
  check_header(root, "gpufleet-sailor-job");
  root.reject_unknown_keys(
      {"format", "version", "model", "global_batch", "sequence_length", "optimizer", "precision", "runtime"});
  JobSpec j;
  j.model = root.get<std::string>("model");
  j.global_batch = root.get<int>("global_batch");
  j.sequence_length = root.get<int>("sequence_length");
  j.optimizer = root.get_or<std::string>("optimizer", "adam");
  j.precision = root.get_or<std::string>("precision", "mixed");
  const std::string runtime = root.get_or<std::string>("runtime", "sailor-run");
  if (j.global_batch <= 0) root.at("global_batch").fail("must be positive");
  if (j.global_batch > kMaxBatch) root.at("global_batch").fail("beyond any real job");
  if (j.sequence_length <= 0) root.at("sequence_length").fail("must be positive");
  if (j.sequence_length > kMaxBatch) root.at("sequence_length").fail("beyond any real job");
  if (j.optimizer != "adam") root.at("optimizer").fail("only 'adam' is modelled");
  if (j.precision != "mixed" && j.precision != "fp32") root.at("precision").fail("precision must be 'mixed' or 'fp32'");
  if (runtime == training_runtime_name(TrainingRuntime::kDeepSpeed)) {
    j.runtime = TrainingRuntime::kDeepSpeed;
  } else if (runtime != training_runtime_name(TrainingRuntime::kSailorRun)) {
    root.at("runtime").fail("must be 'sailor-run' or 'deepspeed'");
  }
  return j;
}

nlohmann::json to_json(const ModelSpec& m) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerSpec& l : m.layers) {
    layers.push_back({{"params", per_tp_json(l.params)},
                      {"act_output", per_tp_json(l.act_output)},
                      {"act_memory", per_tp_json(l.act_memory)}});
  }
  return {{"format", "gpufleet-sailor-model"}, {"version", kVersion}, {"name", m.name}, {"layers", layers}};
}

nlohmann::json to_json(const ProfileSet& p) {
  nlohmann::json gpus = nlohmann::json::object();
  for (const auto& [gpu, entries] : p.gpus) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [key, layers] : entries) {
      nlohmann::json times = nlohmann::json::array();
      for (const LayerTimes& t : layers) times.push_back({t[0], t[1], t[2]});
      list.push_back({{"mbs", key.first}, {"tp", key.second}, {"layers", times}});
    }
    gpus[gpu] = list;
  }
  return {{"format", "gpufleet-sailor-profile"}, {"version", kVersion}, {"model", p.model}, {"gpus", gpus}};
}

nlohmann::json to_json(const ClusterSpec& c) {
  nlohmann::json types = nlohmann::json::object(), zones = nlohmann::json::object(), intra = nlohmann::json::object();
  for (const auto& [name, t] : c.gpu_types) {
    types[name] = {
        {"gpus_per_node", t.gpus_per_node}, {"memory_bytes", t.memory_bytes}, {"price_per_hour", t.price_per_hour}};
    if (t.power.known()) {
      types[name]["idle_watts"] = t.power.idle_watts;
      types[name]["busy_watts"] = t.power.busy_watts;
    }
  }
  for (const auto& [zone, region] : c.zone_region) {
    nlohmann::json quotas = nlohmann::json::object();
    for (const auto& [gpu, per_zone] : c.quotas) {
      if (auto it = per_zone.find(zone); it != per_zone.end()) quotas[gpu] = it->second;
    }
    zones[zone] = {{"region", region}, {"quotas", quotas}};
  }
  for (const auto& [gpu, f] : c.intra_node) intra[gpu] = fit_json(f);
  nlohmann::json links = nlohmann::json::array();
  for (const auto& [key, f] : c.inter_node) {
    nlohmann::json l = fit_json(f);
    l["class"] = link_class_name(std::get<0>(key));
    l["src"] = std::get<1>(key);
    l["dst"] = std::get<2>(key);
    links.push_back(l);
  }
  nlohmann::json egress = nlohmann::json::object();
  for (const auto& [cls, price] : c.egress_per_gb) egress[link_class_name(cls)] = price;
  return {{"format", "gpufleet-sailor-cluster"},
          {"version", kVersion},
          {"gpu_types", types},
          {"zones", zones},
          {"network", {{"intra_node", intra}, {"links", links}}},
          {"egress_usd_per_gb", egress}};
}

nlohmann::json to_json(const JobSpec& j) {
  return {{"format", "gpufleet-sailor-job"},
          {"version", kVersion},
          {"model", j.model},
          {"global_batch", j.global_batch},
          {"sequence_length", j.sequence_length},
          {"optimizer", j.optimizer},
          {"precision", j.precision},
          {"runtime", training_runtime_name(j.runtime)}};
}

}  // namespace fleet::sailor
