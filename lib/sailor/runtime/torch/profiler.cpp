#include "sailor/runtime/torch/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/output_check.h"
#include "common/progress.h"
#include "model/model_folder.h"
#include "model/torch/compute_device.h"
#include "model/torch/cpu_threads.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "model/torch/torch_compat.h"
#include "model/torch/training_parts.h"
#include "sailor/estimator.h"
#include "sailor/model_from_config.h"
#include "sailor/runtime/torch/communicator.h"
#include "sailor/runtime/world.h"
#include "sailor/specs.h"

namespace fleet::sailor::runtime {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Counts the bytes libtorch holds in CPU memory (current and peak), by
// standing in front of the CPU allocator for the life of the profile.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) { self_ = this; }
  c10::DataPtr allocate(size_t n) FLEET_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    // Only allocations whose context is their data (the default allocator's) are counted.
    if (data == nullptr || inner.get_context() != data) return inner;
    auto deleter = inner.get_deleter();
    inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[data] = {n, deleter};
    }
    const auto now = current_.fetch_add(n) + n;
    std::size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {data, data, &release, inner.device()};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
#if FLEET_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif

  std::size_t current() const { return current_.load(); }
  std::size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_ = current_.load(); }

 private:
  static void release(void* data) {
    c10::DeleterFnPtr deleter = nullptr;
    std::size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(self_->mutex_);
      auto it = self_->live_.find(data);
      if (it == self_->live_.end()) return;
      n = it->second.first;
      deleter = it->second.second;
      self_->live_.erase(it);
    }
    self_->current_ -= n;
    if (deleter != nullptr) deleter(data);
  }

  c10::Allocator* inner_;
  static inline CountingCpuAllocator* self_ = nullptr;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::pair<std::size_t, c10::DeleterFnPtr>> live_;
  mutable std::atomic<std::size_t> current_{0}, peak_{0};
};

// The one counting allocator of the process (the allocator must outlive every tensor).
CountingCpuAllocator* counting_allocator() {
  static CountingCpuAllocator* allocator = [] {
    auto* a = new CountingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  return c10::GetCPUAllocator() == allocator ? allocator : nullptr;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct LayerMeasurement {
  double forward_s = 0, backward_s = 0, update_s = 0;
  double kept_bytes = 0;  ///< held after forward for backward (output excluded)
};

std::vector<int> parse_positive(const std::vector<int>& values, const char* flag) {
  if (values.empty()) throw UsageError(std::string(flag) + " needs at least one value");
  for (int v : values)
    if (v < 1) throw UsageError(std::string(flag) + " values must be positive");
  std::vector<int> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  return sorted;
}

// Measures every layer of `model` at micro-batch `mbs`: forward, backward
// (with the loss for the head) and AdamW update, median of `repeats` after
// `warmup`. Under tensor parallelism `model` holds this rank's slices and
// every rank of `tp` runs the same inputs (same seeds); each figure is the
// slowest rank's.
std::vector<LayerMeasurement> measure_layers(model::LlamaModel& model, int mbs, int seq_len, const ProfileCommand& c,
                                             torch::Device on_device, CountingCpuAllocator* counter,
                                             TensorParallelGroupAdapter* tp, Progress& progress) {
  const auto& config = model.config();
  const int layers = static_cast<int>(model.num_layers()) + 2;
  const bool cuda = on_device.is_cuda();
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  model::TrainOptions options;
  options.seq_len = seq_len;
  std::vector<LayerMeasurement> measured;
  for (int l = 0; l < layers; ++l) {
    auto params = model.named_parameters(l, l + 1);
    for (auto& [name, p] : params) p.set_requires_grad(true);
    model::AdamW optimizer(params, options);
    std::vector<double> fwd, bwd, upd, mem;
    for (int r = 0; r < c.warmup + c.repeats; ++r) {
      torch::manual_seed(static_cast<std::uint64_t>(1000 * l + r));  // the same inputs on every TP rank
      torch::Tensor input;
      model::Batch batch;
      if (l == 0) {
        input = torch::randint(0, config.vocab_size, {mbs, seq_len}, torch::kInt64).to(on_device);
      } else {
        input = torch::randn({mbs, seq_len, config.hidden_size}, torch::kFloat32).to(on_device).requires_grad_(true);
      }
      if (l == layers - 1) {
        batch.tokens = torch::randint(0, config.vocab_size, {mbs, seq_len}, torch::kInt64).to(on_device);
        batch.mask = torch::ones({mbs, seq_len}, torch::kFloat32).to(on_device);
      }
      sync();
      const std::size_t before = counter ? counter->current() : 0;
      // On a GPU the layer runs as `sailor-run train` runs it: bfloat16 matrix
      // products under autocast, weights and optimizer in float32.
      std::optional<model::compat::CudaAutocast> autocast;
      if (cuda) autocast.emplace(torch::kBFloat16);
      auto t0 = Clock::now();
      auto output = model.forward_layers(input, l, l + 1);
      if (l == layers - 1) {
        const double divisor = static_cast<double>(mbs * (seq_len - 1));
        output = tp ? model::vocab_parallel_batch_loss(output, batch, divisor, model.vocab_start(), *tp)
                    : model::batch_loss(output, batch, divisor);
      }
      sync();
      auto t1 = Clock::now();
      // Signed: another thread (Gloo's, freeing an earlier step's buffers)
      // can release memory during the forward, and an unsigned difference
      // then wrapped to ~1.8e19 bytes (a planner input of 1e18 floats).
      const double held = counter ? static_cast<double>(counter->current()) - static_cast<double>(before) -
                                        static_cast<double>(output.nbytes())
                                  : 0;
      if (l == layers - 1)
        output.backward();
      else
        output.backward(torch::ones_like(output));
      sync();
      auto t2 = Clock::now();
      autocast.reset();  // before the update, as in training (autocast caches weight casts)
      optimizer.step(1e-4, r + 1);
      sync();
      auto t3 = Clock::now();
      for (auto& [name, p] : params) p.mutable_grad() = torch::Tensor();
      if (r < c.warmup) continue;
      fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      upd.push_back(std::chrono::duration<double>(t3 - t2).count());
      mem.push_back(std::max(held, 0.0));
    }
    LayerMeasurement m{median(fwd), median(bwd), median(upd), median(mem)};
    if (tp != nullptr) {
      auto slowest = torch::tensor({m.forward_s, m.backward_s, m.update_s, m.kept_bytes}, torch::kFloat64);
      tp->all_reduce_max(slowest);
      m = {slowest[0].item<double>(), slowest[1].item<double>(), slowest[2].item<double>(), slowest[3].item<double>()};
    }
    measured.push_back(m);
    progress.advance();
  }
  return measured;
}

// What a profile measures and where, checked before anything is measured.
struct ProfileSetup {
  std::vector<int> mbs_list, tp_list;
  WorldInfo world;
  bool writer = false;  ///< rank 0 writes the files
  std::filesystem::path model_output;
  model::ComputeDevice device = model::ComputeDevice::kCpu;
  torch::Device on_device{torch::kCPU};
  CountingCpuAllocator* counter = nullptr;  ///< counts kept bytes on the CPU
  int seq_len = 0, layers = 0;
};

ProfileSetup prepare_profile(const ProfileCommand& c) {
  ProfileSetup p;
  p.mbs_list = parse_positive(c.mbs, "--mbs");
  p.tp_list = parse_positive(c.tp, "--tp");
  if (c.warmup < 0 || c.repeats < 1) throw UsageError("--repeats must be at least 1 and --warmup at least 0");
  // Tensor parallelism is measured on as many ranks as its degree: the
  // profile runs under `sailor-run launch --nprocs N` (N = the largest).
  p.world = world_from_environment();
  const int widest = p.tp_list.back();
  if (widest > p.world.world_size)
    throw UsageError(fmt::format("--tp {} needs {} ranks: run sailor-run launch --nprocs {} -- profile ...", widest,
                                 widest, widest));
  p.writer = p.world.rank == 0;
  p.model_output = c.model_output.empty() ? c.output.parent_path() / "model.json" : c.model_output;
  OutputCheck check;
  check.input(c.model, "--model");
  if (p.writer) check.file(c.output, "-o").file(p.model_output, "--model-out");
  check.check(Existing::kReplace);
  p.device = model::resolve_device(c.device);
  if (p.world.distributed() && p.device == model::ComputeDevice::kCuda)
    throw UsageError("profiling tensor parallelism runs on the CPU (Gloo) so far; use --device cpu");
  p.on_device = model::torch_device(p.device);
  p.counter = p.device == model::ComputeDevice::kCpu ? counting_allocator() : nullptr;
  return p;
}

// The sequence length and layer count from the model's config.
void fit_to_model(ProfileSetup& p, const ProfileCommand& c, const model::ModelFolder& folder) {
  const auto& config = folder.config();
  p.seq_len =
      c.seq_len > 0 ? c.seq_len : static_cast<int>(std::min<std::int64_t>(config.max_position_embeddings, 1024));
  if (p.seq_len < 2 || p.seq_len > config.max_position_embeddings)
    throw UsageError(
        fmt::format("--seq-len must be in [2, {}] (max_position_embeddings)", config.max_position_embeddings));
  for (int tp : p.tp_list)
    if (tp > 1) model::check_tensor_parallel(config, tp);
  p.layers = config.num_hidden_layers + 2;
}

using Measurements = std::map<std::pair<int, int>, std::vector<LayerMeasurement>>;  // (tp, mbs) -> layers

// Every micro-batch size at tensor-parallel degree `tp`, on this rank's slice
// of the model: the profile's entries, and the measurements by (tp, mbs).
void measure_degree(const ProfileCommand& c, const ProfileSetup& p, const model::ModelFolder& folder, int tp,
                    Communicator* comm, Progress& progress, nlohmann::json& entries, Measurements& all) {
  std::unique_ptr<TensorParallelGroupAdapter> group;
  if (tp > 1) {
    std::vector<int> ranks(static_cast<std::size_t>(tp));
    for (int r = 0; r < tp; ++r) ranks[static_cast<std::size_t>(r)] = r;
    group = std::make_unique<TensorParallelGroupAdapter>(comm->group(fmt::format("tp{}", tp), ranks), p.world.rank);
  }
  auto model = model::LlamaModel::load(folder, torch::kFloat32, p.on_device);
  // Every layer's parameters train as their own leaves (a tied head, too).
  model.separate_tied_head();
  if (group) {
    model.shard_for_tensor_parallel(*group);
    model.separate_tied_head();  // the head's slice
  }
  for (int mbs : p.mbs_list) {
    const auto measured = measure_layers(model, mbs, p.seq_len, c, p.on_device, p.counter, group.get(), progress);
    nlohmann::json times = nlohmann::json::array(), kept = nlohmann::json::array();
    for (const auto& m : measured) {
      times.push_back({m.forward_s, m.backward_s, m.update_s});
      kept.push_back(m.kept_bytes);
    }
    // Bytes kept for backward are counted on the CPU only (null on a GPU); per TP rank.
    entries.push_back({{"mbs", mbs},
                       {"tp", tp},
                       {"layers", times},
                       {"activation_bytes", p.counter ? kept : nlohmann::json(nullptr)},
                       {"seq_len", p.seq_len},
                       {"device", p.device == model::ComputeDevice::kCuda ? "cuda" : "cpu"}});
    all[{tp, mbs}] = measured;
  }
}

// The planner's model: parameters and activations sent onward from the
// config; the activation memory kept for backward as measured (per
// sequence and TP rank, in the simulator's float units), where it could be.
ModelSpec planner_model(const ProfileSetup& p, const model::ModelFolder& folder, const std::string& name,
                        const Measurements& all) {
  const JsonDocument config_doc = parse_json(folder.config_text(), (folder.path() / "config.json").string());
  const double bytes_per_float = default_calibration().activation_bytes_per_float;
  ModelSpec spec = model_spec_from_hf_config(config_doc.root(), p.seq_len, bytes_per_float, name);
  if (p.counter == nullptr) return spec;
  for (int tp : p.tp_list) {
    // The largest micro-batch measures the per-sequence figure best.
    const auto& m = all.at({tp, p.mbs_list.back()});
    const double sequences = p.mbs_list.back();
    for (int l = 0; l < p.layers; ++l)
      spec.layers[static_cast<std::size_t>(l)].act_memory[tp] =
          m[static_cast<std::size_t>(l)].kept_bytes / sequences / bytes_per_float;
  }
  return spec;
}

// Per (tp, mbs): the layers' summed times and kept bytes.
std::vector<ProfileTotals> profile_totals(const Measurements& all, bool counted) {
  std::vector<ProfileTotals> totals;
  for (const auto& [key, measured] : all) {
    ProfileTotals t{key.first, key.second, 0, 0, 0, std::nullopt};
    double kept = 0;
    for (const auto& m : measured) {
      t.forward_s += m.forward_s;
      t.backward_s += m.backward_s;
      t.update_s += m.update_s;
      kept += m.kept_bytes;
    }
    if (counted) t.kept_bytes = kept;
    totals.push_back(t);
  }
  return totals;
}

}  // namespace

std::optional<ProfileResult> profile_layers(const ProfileCommand& c) {
  model::set_cpu_threads(c.threads);
  if (c.gpu_type.empty()) throw UsageError("--gpu-type names this device as the cluster description does");
  ProfileSetup p = prepare_profile(c);
  const model::ModelFolder folder(c.model);
  fit_to_model(p, c, folder);
  std::unique_ptr<Communicator> comm;
  if (p.world.distributed())
    comm = std::make_unique<Communicator>(
        p.world, std::chrono::milliseconds(static_cast<std::int64_t>(c.timeout_seconds * 1000)));

  nlohmann::json entries = nlohmann::json::array();
  Measurements all;
  Progress progress("profile", static_cast<std::uint64_t>(p.mbs_list.size() * p.tp_list.size() * p.layers), "layers",
                    p.writer ? ProgressStyle::kAuto : ProgressStyle::kSilent);
  for (int tp : p.tp_list) {
    // Ranks [0, tp) measure this degree; the others wait for them.
    if (p.world.rank < tp) measure_degree(c, p, folder, tp, comm.get(), progress, entries, all);
    if (comm) comm->world().barrier();
  }
  progress.finish();
  if (!p.writer) return std::nullopt;
  const std::string name =
      c.model.filename().empty() ? c.model.parent_path().filename().string() : c.model.filename().string();
  const nlohmann::json profile = {
      {"format", "gpufleet-sailor-profile"}, {"version", 1}, {"model", name}, {"gpus", {{c.gpu_type, entries}}}};
  const ModelSpec spec = planner_model(p, folder, name, all);
  write_file_atomically(c.output, profile.dump(2) + "\n");
  write_file_atomically(p.model_output, to_json(spec).dump(2) + "\n");

  ProfileResult result;
  result.profile = c.output;
  result.model = p.model_output;
  result.layers = p.layers;
  result.entries_json = entries.dump();
  result.totals = profile_totals(all, p.counter != nullptr);
  return result;
}

}  // namespace fleet::sailor::runtime
