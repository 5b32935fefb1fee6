#include "orion/workload.h"

#include <algorithm>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"

namespace fleet::orion {

std::vector<SimKernel> to_sim_kernels(const KernelProfile& profile, const DeviceSpec& device) {
  // Durations do not carry over between GPUs (nor do SM needs): a profile
  // that says where it was measured is used on that GPU only.
  if (!profile.device.empty() && profile.device != device.name) {
    throw InputError(profile.source + " was measured on " + profile.device + ", not on " + device.name +
                     ": its kernel durations hold on that GPU only (use device " + profile.device +
                     ", or profile the program on " + device.name + ")");
  }
  std::vector<SimKernel> out;
  out.reserve(profile.kernels.size());
  for (const KernelRecord& k : profile.kernels) {
    SimKernel s;
    s.duration_us = k.duration_ns / 1000.0;
    s.sm_usage = k.sm_usage;
    s.sm_need = static_cast<int>(std::clamp<std::int64_t>(k.sm_usage, 1, device.sm_count));
    s.cls = k.profile;
    if (k.grid_blocks > 0 && k.threads_per_block > 0) {
      const LaunchConfig launch{k.grid_blocks, k.threads_per_block, k.registers_per_thread, k.static_shared_bytes,
                                k.dynamic_shared_bytes};
      try {
        s.sm_share = resident_share(launch, device);
      } catch (const InputError& e) {
        throw InputError("kernel '" + k.name + "' of " + profile.source + " cannot run on " + device.name + ": " +
                         e.message());
      }
    }
    out.push_back(s);
  }
  return out;
}

namespace {

// An arrival trace (a JSON list of gaps in seconds) is cycled, so a few
// thousand gaps carry all it can say: at most 16 MiB of text is read (its
// JSON tree takes ten times that), and at most kMaxTraceGaps gaps kept.
constexpr std::uintmax_t kMaxTraceBytes = 16ull << 20;
constexpr std::size_t kMaxTraceGaps = 1'000'000;

std::vector<double> read_arrival_trace(const std::filesystem::path& path) {
  const JsonDocument doc = parse_json(read_file(path, kMaxTraceBytes), path.string());
  const JsonValue root = doc.root();
  if (root.is_array() && root.elements().size() > kMaxTraceGaps)
    root.fail("an arrival trace of " + std::to_string(root.elements().size()) + " gaps; at most " +
              std::to_string(kMaxTraceGaps) + " are read");
  return root.as<std::vector<double>>();
}

// Finds an input named in a workload: in the given folders by file name, as
// given, or beside the workload; `extension` is added when missing (Orion
// writes profile paths without ".csv").
std::filesystem::path resolve_profile_like(const std::string& name, const std::filesystem::path& workload_dir,
                                           const std::vector<std::filesystem::path>& dirs, const JsonValue& where,
                                           const std::string& extension) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  auto add = [&](const fs::path& p) {
    candidates.push_back(p);
    if (p.extension() != extension) candidates.push_back(fs::path(p.string() + extension));
  };
  const fs::path given(name);
  for (const fs::path& dir : dirs) add(dir / given.filename());
  if (given.is_absolute()) add(given);
  add(workload_dir / given);
  add(workload_dir / given.filename());
  std::error_code ec;
  for (const fs::path& c : candidates) {
    if (fs::is_regular_file(c, ec)) return c;
  }
  where.fail((extension == ".csv" ? "kernel profile '" : "file '") + name +
             "' not found (looked in --profiles folders and beside the workload)");
}

std::filesystem::path resolve_profile(const std::string& name, const std::filesystem::path& workload_dir,
                                      const std::vector<std::filesystem::path>& dirs, const JsonValue& where) {
  return resolve_profile_like(name, workload_dir, dirs, where, ".csv");
}

ArrivalSpec parse_arrivals(const JsonValue& v, const std::filesystem::path& dir) {
  v.reject_unknown_keys({"type", "rate", "file", "gaps"});
  ArrivalSpec a;
  const std::string type = v.get<std::string>("type");
  if (type == "closed") {
    a.kind = ArrivalKind::kClosedLoop;
  } else if (type == "poisson" || type == "uniform") {
    a.kind = type == "poisson" ? ArrivalKind::kPoisson : ArrivalKind::kUniform;
    a.rate_per_s = v.get<double>("rate");
    if (!(a.rate_per_s > 0)) v.at("rate").fail("rate must be positive (requests per second)");
  } else if (type == "trace") {
    a.kind = ArrivalKind::kTrace;
    if (auto gaps = v.find("gaps")) {
      a.trace_gaps_s = gaps->as<std::vector<double>>();
    } else {
      const auto file = v.get<std::string>("file");
      const std::filesystem::path p =
          std::filesystem::path(file).is_absolute() ? std::filesystem::path(file) : dir / file;
      if (!std::filesystem::is_regular_file(p))
        v.at("file").fail("arrival trace '" + p.string() + "' not found (relative paths are read beside the workload)");
      a.trace_gaps_s = read_arrival_trace(p);
    }
    if (a.trace_gaps_s.empty()) v.fail("arrival trace is empty");
    for (double g : a.trace_gaps_s) {
      if (!(g >= 0)) v.fail("arrival gaps must be non-negative");
    }
  } else {
    v.at("type").fail("unknown arrival type '" + type + "' (closed, poisson, uniform, trace)");
  }
  return a;
}

Workload load_native(const JsonValue& root, const std::filesystem::path& dir,
                     const std::vector<std::filesystem::path>& profile_dirs) {
  root.reject_unknown_keys({"format", "version", "device", "seed", "launch_overhead_us", "max_duration_s", "clients"});
  if (root.get<std::int64_t>("version") != 1) root.at("version").fail("unsupported version (this build reads 1)");
  Workload w;
  try {
    w.device = device_by_name(root.get<std::string>("device"));
  } catch (const InputError& e) {
    root.at("device").fail(e.message());
  }
  w.seed = root.get_or<std::uint64_t>("seed", 1);
  w.launch_overhead_us = root.get_or<double>("launch_overhead_us", 5.0);
  if (!(w.launch_overhead_us >= 0 && w.launch_overhead_us <= 1e6))
    root.at("launch_overhead_us").fail("launch_overhead_us must be 0 to 1e6 microseconds");
  w.max_duration_s = root.get_or<double>("max_duration_s", 0.0);
  for (const JsonValue& c : root.at("clients").elements()) {
    c.reject_unknown_keys({"name", "profile", "first_profile", "priority", "kind", "arrivals", "requests", "warmup",
                           "gap_ms", "launch_overhead_us", "mps_active_thread_percentage"});
    ClientSpec s;
    s.name = c.get<std::string>("name");
    // Rows, CSV lines and latency files name clients: a blank or repeated
    // name would make them ambiguous.
    if (s.name.find_first_not_of(" \t") == std::string::npos) c.at("name").fail("a client's name must not be empty");
    for (const ClientSpec& earlier : w.clients)
      if (earlier.name == s.name) c.at("name").fail("client name '" + s.name + "' is used twice");
    const std::string priority = c.get<std::string>("priority");
    if (priority != "high" && priority != "best-effort")
      c.at("priority").fail("priority must be 'high' or 'best-effort'");
    s.high_priority = priority == "high";
    const std::string kind = c.get<std::string>("kind");
    if (kind != "inference" && kind != "training") c.at("kind").fail("kind must be 'inference' or 'training'");
    s.training = kind == "training";
    const auto profile = resolve_profile(c.get<std::string>("profile"), dir, profile_dirs, c.at("profile"));
    s.profile_path = profile.string();
    s.kernels = to_sim_kernels(read_kernel_profile(profile), w.device);
    if (auto first = c.find("first_profile")) {
      s.first_kernels = to_sim_kernels(
          read_kernel_profile(resolve_profile(first->as<std::string>(), dir, profile_dirs, *first)), w.device);
    }
    s.arrivals = parse_arrivals(c.at("arrivals"), dir);
    s.requests = c.get_or<std::int64_t>("requests", 0);
    s.warmup = c.get_or<std::int64_t>("warmup", 0);
    if (s.requests < 0 || s.warmup < 0) c.fail("requests and warmup must be non-negative");
    if (s.requests > 0 && s.warmup >= s.requests) c.at("warmup").fail("warmup must be smaller than requests");
    if (auto gap = c.find("gap_ms")) {
      const double ms = gap->as<double>();
      if (!(ms >= 0 && ms <= 1e6)) gap->fail("gap_ms must be 0 to 1e6 milliseconds");
      if (s.arrivals.kind != ArrivalKind::kClosedLoop)
        gap->fail(
            "gap_ms is the host time between a closed-loop client's requests; open-loop arrivals space them "
            "already");
      s.gap_us = ms * 1e3;
    }
    if (auto launch = c.find("launch_overhead_us")) {
      const double us = launch->as<double>();
      if (!(us >= 0 && us <= 1e6)) launch->fail("launch_overhead_us must be 0 to 1e6 microseconds");
      s.launch_overhead_us = us;
    }
    if (auto pct = c.find("mps_active_thread_percentage")) {
      const double v = pct->as<double>();
      if (!(v > 0 && v <= 100)) pct->fail("mps_active_thread_percentage must be above 0 and at most 100");
      s.mps_active_thread_percentage = v;
    }
    w.clients.push_back(std::move(s));
  }
  return w;
}

// Orion's configs: [{arch, kernel_file, additional_kernel_file?, num_kernels,
// num_iters, args: {model_name, batchsize, rps, uniform, dummy_data, train}}],
// the last client being the high-priority one; on a V100 unless the profiles
// record another GPU.
Workload load_orion_config(const JsonValue& root, const std::filesystem::path& dir,
                           const std::vector<std::filesystem::path>& profile_dirs) {
  Workload w;
  const auto clients = root.elements();
  if (clients.empty()) root.fail("workload has no clients");
  w.device = device_by_name("v100");
  for (std::size_t i = 0; i < clients.size(); ++i) {
    const JsonValue& c = clients[i];
    ClientSpec s;
    const JsonValue args = c.at("args");
    s.name = c.get_or<std::string>("arch", "client") + "-" + std::to_string(i);
    s.high_priority = i + 1 == clients.size() && clients.size() > 1;
    s.training = args.get_or<bool>("train", false);
    const bool has_additional = c.has("additional_kernel_file");
    // Orion profiles a training iteration twice: kernel_file for the first
    // iteration and additional_kernel_file for the steady state.
    const auto main_file =
        resolve_profile(c.get<std::string>(has_additional ? "additional_kernel_file" : "kernel_file"), dir,
                        profile_dirs, c.at(has_additional ? "additional_kernel_file" : "kernel_file"));
    s.profile_path = main_file.string();
    const KernelProfile main_profile = read_kernel_profile(main_file);
    // Orion measured its profiles on a V100; profiles that record another GPU
    // (ours, from capture or import-ncu) set the device instead, all alike:
    // the first client's decides, the others must agree.
    if (i == 0 && !main_profile.device.empty()) w.device = device_by_name(main_profile.device);
    s.kernels = to_sim_kernels(main_profile, w.device);
    if (has_additional) {
      s.first_kernels = to_sim_kernels(read_kernel_profile(resolve_profile(c.get<std::string>("kernel_file"), dir,
                                                                           profile_dirs, c.at("kernel_file"))),
                                       w.device);
    }
    // Orion's scheduler takes an iteration to be num_kernels launches: a count
    // that disagrees with the profile would cut or overrun every iteration.
    auto check_count = [&](const char* key, std::size_t kernels, const char* file_key) {
      auto count = c.find(key);
      if (!count) return;
      const auto n = count->as<std::int64_t>();
      if (n != static_cast<std::int64_t>(kernels))
        count->fail(std::string(key) + " is " + std::to_string(n) + " but " + c.get<std::string>(file_key) + " lists " +
                    std::to_string(kernels) + " kernels");
    };
    check_count(has_additional ? "additional_num_kernels" : "num_kernels", s.kernels.size(),
                has_additional ? "additional_kernel_file" : "kernel_file");
    if (has_additional) check_count("num_kernels", s.first_kernels.size(), "kernel_file");
    if (auto batch = args.find("batchsize"); batch && batch->as<std::int64_t>() < 1)
      batch->fail("batchsize must be positive");
    const double rps = args.get_or<double>("rps", 0.0);
    if (!(rps >= 0)) args.at("rps").fail("rps must be 0 (closed loop) or a positive rate");
    if (auto input = args.find("input_file")) {
      // A trace of inter-arrival gaps (JSON list of seconds), found like the profiles.
      s.arrivals.kind = ArrivalKind::kTrace;
      const auto trace = resolve_profile_like(input->as<std::string>(), dir, profile_dirs, *input, ".json");
      s.arrivals.trace_gaps_s = read_arrival_trace(trace);
      if (s.arrivals.trace_gaps_s.empty()) input->fail("arrival trace is empty");
    } else if (rps > 0) {
      s.arrivals.kind = args.get_or<bool>("uniform", false) ? ArrivalKind::kUniform : ArrivalKind::kPoisson;
      s.arrivals.rate_per_s = rps;
    }
    // Orion runs each client for num_iters; we run the high-priority client
    // for that many requests and let the others run until it is done.
    if (auto iters = c.find("num_iters"); iters && iters->as<std::int64_t>() < 1)
      iters->fail("num_iters must be positive");
    s.requests = s.high_priority || clients.size() == 1 ? c.get_or<std::int64_t>("num_iters", 1000) : 0;
    s.warmup = s.requests > 20 ? 10 : 0;
    w.clients.push_back(std::move(s));
  }
  return w;
}

}  // namespace

Workload load_workload(const std::filesystem::path& path, const std::vector<std::filesystem::path>& profile_dirs) {
  // A workload lists clients (its profiles are separate files): 16 MiB is plenty.
  const JsonDocument doc = parse_json(read_file(path, 16ull << 20), path.string());
  const std::filesystem::path dir = path.parent_path();
  Workload w;
  if (doc.root().is_array()) {
    w = load_orion_config(doc.root(), dir, profile_dirs);
  } else {
    const std::string format = doc.root().get<std::string>("format");
    if (format != "gpufleet-orion-workload") doc.root().at("format").fail("expected format 'gpufleet-orion-workload'");
    w = load_native(doc.root(), dir, profile_dirs);
  }
  w.source = path.string();
  for (std::size_t i = 0; i < w.clients.size(); ++i) w.clients[i].arrival_stream = i;
  if (w.clients.empty()) doc.root().fail("workload has no clients");
  int high = 0;
  for (const ClientSpec& c : w.clients) {
    high += c.high_priority ? 1 : 0;
    if (c.kernels.empty())
      throw InputError("client '" + c.name + "' has an empty kernel profile", {path.string(), "", std::nullopt});
  }
  if (high > 1)
    throw InputError("at most one client may have high priority", {path.string(), "/clients", std::nullopt});
  // A typo in a count, a rate or a horizon is an error message, not a run
  // that never ends: bound the simulated time and the requests.
  constexpr double kMaxRequests = 1e7, kMaxSimulatedSeconds = 1e6, kMaxRate = 1e7;
  if (!(w.max_duration_s >= 0 && w.max_duration_s <= kMaxSimulatedSeconds)) {
    throw InputError("max_duration_s must be between 0 and 1e6 seconds",
                     {path.string(), "/max_duration_s", std::nullopt});
  }
  for (const ClientSpec& c : w.clients) {
    const bool rated = c.arrivals.kind == ArrivalKind::kPoisson || c.arrivals.kind == ArrivalKind::kUniform;
    if (rated && !(c.arrivals.rate_per_s > 0 && c.arrivals.rate_per_s <= kMaxRate)) {
      throw InputError("client '" + c.name + "': the request rate must be above 0 and at most 1e7 per second",
                       {path.string(), "", std::nullopt});
    }
    if (static_cast<double>(c.requests) > kMaxRequests) {
      throw InputError("client '" + c.name + "' would make more than 1e7 requests", {path.string(), "", std::nullopt});
    }
    if (rated && c.requests > 0 && w.max_duration_s == 0 &&
        static_cast<double>(c.requests) / c.arrivals.rate_per_s > kMaxSimulatedSeconds) {
      throw InputError(fmt::format("client '{}': {} requests at {:g} per second span more than 1e6 simulated "
                                   "seconds; raise the rate or set max_duration_s",
                                   c.name, c.requests, c.arrivals.rate_per_s),
                       {path.string(), "", std::nullopt});
    }
  }
  bool bounded = w.max_duration_s > 0;
  for (const ClientSpec& c : w.clients) bounded = bounded || c.requests > 0;
  if (!bounded) {
    throw InputError("nothing bounds the run: give some client 'requests' or set 'max_duration_s'",
                     {path.string(), "", std::nullopt});
  }
  return w;
}

ArrivalStream::ArrivalStream(const ArrivalSpec& spec, std::uint64_t seed)
    : spec_(spec), rng_(seed), exponential_(spec.rate_per_s > 0 ? spec.rate_per_s : 1.0) {
  if (spec_.kind == ArrivalKind::kUniform) {
    // Where in its period a uniform client starts is arbitrary (when its
    // process came up): drawn, so that its arrivals do not fall on the same
    // instants as another client's by construction (a trace of whole
    // milliseconds beside 100 requests/s would otherwise collide exactly,
    // with ties decided by rounding). 53 random bits, the same on every
    // standard library.
    const double unit = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    phase_s_ = unit / spec_.rate_per_s;
  }
}

double ArrivalStream::next() {
  switch (spec_.kind) {
    case ArrivalKind::kPoisson:
      t_ += exponential_(rng_);
      break;
    // From the index, not by adding the period: no drift over millions of requests.
    case ArrivalKind::kUniform:
      t_ = phase_s_ + static_cast<double>(index_) / spec_.rate_per_s;
      break;
    case ArrivalKind::kTrace:
      t_ += spec_.trace_gaps_s[index_ % spec_.trace_gaps_s.size()];
      break;
    case ArrivalKind::kClosedLoop:
      return std::numeric_limits<double>::infinity();
  }
  ++index_;
  return t_;
}

std::vector<double> generate_arrivals(const ArrivalSpec& spec, std::int64_t count, std::uint64_t seed) {
  std::vector<double> out;
  if (spec.kind == ArrivalKind::kClosedLoop || count <= 0) return out;
  out.reserve(static_cast<std::size_t>(count));
  ArrivalStream stream(spec, seed);
  for (std::int64_t i = 0; i < count; ++i) out.push_back(stream.next());
  return out;
}

}  // namespace fleet::orion
