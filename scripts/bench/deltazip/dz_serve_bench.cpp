// DeltaZip serving microbenchmarks, printed as JSON lines; scripts/bench/deltazip/dz_serve.sh runs them.
//
//   bench_dz_serve sbmm THREADS REPEATS
//     the SBMM kernel on packed 4-bit 2:4 and 2-bit 2:4 deltas of the 100m
//     preset's shapes against one dense float32 GEMM of the same shape
//     (libtorch), and against what full mode does instead (one dense GEMM per
//     variant), for 1-64 batch rows spread over 1-16 variants; the
//     portable kernels against the AVX2 ones (where the CPU has them); and
//     the base product as the model computes it (model::inference_linear:
//     the small-batch kernel, at its widest and at AVX2 width) against the
//     same GEMM.
//   bench_dz_serve merged THREADS REPEATS
//     the prefill product of one variant, x · (W + Δ)ᵀ from the packed delta
//     (decoded tile by tile, W added), against one dense GEMM with the
//     reconstructed matrix (what full mode runs) and against the base
//     product alone as the model computes it, for 8-256 prompt rows.
//   bench_dz_serve streamed THREADS REPEATS
//     what decoding streams from memory at every step, with the kernels'
//     prefetching on and off (x86): the base product over a model's worth
//     of weights (64 matrices of 2048 x 768, 400 MB) for 1-64 rows, and
//     tiles of W + Δ decoded from 64 packed deltas with W added.
//   bench_dz_serve decode BASE_DIR BATCH THREADS REPEATS DEVICE DELTA.h5...
//     one decode step of BATCH sequences spread over the deltas: delta mode
//     (base + SBMM overlay) against full mode (one reconstructed model per
//     variant), same cache, same batch, on DEVICE (cpu or cuda; float32 on
//     both, as dz-serve computes).
#include <chrono>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/half.h"
#include "common/simd_x86.h"
#include "deltazip/container.h"
#include "deltazip/serve/torch/variant_delta.h"
#include "deltazip/torch/reconstruct.h"
#include "model/small_batch_linear.h"
#include "model/torch/compute_device.h"
#include "model/torch/cpu_threads.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"

using namespace fleet;
using namespace fleet::deltazip;
using Clock = std::chrono::steady_clock;

namespace {

template <typename F>
double best_of(int repeats, F&& f) {
  f();  // warm-up
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

PackedMatrix random_packed(std::int64_t rows, std::int64_t cols, int bits, std::mt19937& rng) {
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols)), kept(codes.size(), 0);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(rng() % (1u << bits));
  for (std::size_t g = 0; g < kept.size(); g += 4) {  // 2:4, two kept at random positions
    const auto a = rng() % 4, b = (a + 1 + rng() % 3) % 4;
    kept[g + a] = kept[g + b] = 1;
  }
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows), float_to_f16(0.01f));
  std::vector<std::uint8_t> zeros(static_cast<std::size_t>(rows), static_cast<std::uint8_t>(1u << (bits - 1)));
  return pack_matrix(rows, cols, bits, -1, SparsityPattern::parse("2:4"), codes, kept, scales, zeros);
}

int sbmm(int repeats) {
  std::mt19937 rng(1);
  // The 100m preset's shapes, and a 7B model's input width (4096) on fewer outputs.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {768, 768}, {2048, 768}, {768, 2048}, {1024, 4096}};
  for (int bits : {4, 2})
    for (auto [rows, cols] : shapes) {
      std::vector<SbmmMatrix> deltas;
      std::vector<torch::Tensor> dense;
      for (int v = 0; v < 16; ++v) {
        deltas.emplace_back(random_packed(rows, cols, bits, rng));
        dense.push_back(torch::randn({rows, cols}));
      }
      for (std::int64_t n : {1, 2, 4, 8, 16, 32, 64})
        for (std::int64_t variants : {1, 4, 16}) {
          if (variants > n) continue;
          auto x = torch::randn({n, cols});
          auto y = torch::zeros({n, rows});
          const std::int64_t per = n / variants;
          auto run_sbmm = [&] {
            for (std::int64_t v = 0; v < variants; ++v) {
              auto xs = x.narrow(0, v * per, per).contiguous();
              auto ys = y.narrow(0, v * per, per);
              sbmm_add(deltas[static_cast<std::size_t>(v)], xs, ys);
            }
          };
          auto run_one_gemm = [&] { y = torch::linear(x, dense[0]); };
          auto run_small_batch = [&] {  // the base product as decoding computes it
            torch::NoGradGuard no_grad;
            y = model::inference_linear(x, dense[0]);
          };
          auto run_per_variant_gemm = [&] {
            for (std::int64_t v = 0; v < variants; ++v)
              y.narrow(0, v * per, per)
                  .copy_(torch::linear(x.narrow(0, v * per, per), dense[static_cast<std::size_t>(v)]));
          };
          const double t_sbmm = best_of(repeats, run_sbmm), t_gemm = best_of(repeats, run_one_gemm),
                       t_full = best_of(repeats, run_per_variant_gemm), t_small = best_of(repeats, run_small_batch);
          model::small_batch::use_avx512(false);  // the AVX2 width of the small-batch kernel
          const double t_small_avx2 = best_of(repeats, run_small_batch);
          model::small_batch::use_avx512(true);
          SbmmMatrix::use_avx512(false);  // the AVX2 width of the SBMM kernels
          const double t_sbmm_avx2 = best_of(repeats, run_sbmm);
          SbmmMatrix::use_avx512(true);
          SbmmMatrix::use_vector_kernels(false);  // the portable kernels, for the vector kernels' gain
          const double t_portable = best_of(repeats, run_sbmm);
          SbmmMatrix::use_vector_kernels(true);
          std::cout << nlohmann::json{{"bench", "sbmm"},
                                      {"bits", bits},
                                      {"rows", rows},
                                      {"cols", cols},
                                      {"batch", n},
                                      {"variants", variants},
                                      {"sbmm_us", t_sbmm * 1e6},
                                      {"dense_gemm_us", t_gemm * 1e6},
                                      {"sbmm_avx2_us", t_sbmm_avx2 * 1e6},
                                      {"sbmm_avx512", SbmmMatrix::avx512_in_use()},
                                      {"per_variant_gemm_us", t_full * 1e6},
                                      {"sbmm_portable_us", t_portable * 1e6},
                                      {"inference_linear_us", t_small * 1e6},
                                      {"inference_linear_avx2_us", t_small_avx2 * 1e6},
                                      {"small_batch_avx512", model::small_batch::avx512_in_use()},
                                      {"small_batch_kernel",
                                       model::small_batch_linear_in_use() && n <= model::small_batch::max_rows()},
                                      {"dense_gemm_over_inference_linear", t_gemm / t_small},
                                      {"vector_kernels", SbmmMatrix::vector_kernels()},
                                      {"portable_over_sbmm", t_portable / t_sbmm},
                                      {"sbmm_over_dense", t_sbmm / t_gemm},
                                      {"sbmm_over_per_variant", t_sbmm / t_full},
                                      {"packed_bytes", deltas[0].bytes()},
                                      {"dense_bytes", rows * cols * 4}}
                           .dump()
                    << std::endl;
        }
    }
  return 0;
}

int merged(int repeats) {
  torch::NoGradGuard no_grad;
  std::mt19937 rng(2);
  // The 100m preset's shapes, and a 7B model's input width (4096) on fewer outputs.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {768, 768}, {2048, 768}, {768, 2048}, {1024, 4096}};
  for (auto [rows, cols] : shapes) {
    const SbmmMatrix delta(random_packed(rows, cols, 4, rng));
    // Two more variants of the layer: three prompts of a step in one pass over W.
    const SbmmMatrix second(random_packed(rows, cols, 4, rng)), third(random_packed(rows, cols, 2, rng));
    auto w = torch::randn({rows, cols});
    auto decoded = torch::empty({rows, cols});
    delta.decode_rows(0, rows, decoded.data_ptr<float>());
    auto reconstructed = w + decoded;
    for (std::int64_t n : {8, 16, 24, 32, 40, 48, 64, 96, 128, 256}) {
      auto x = torch::randn({n, cols});
      auto y = torch::empty({n, rows});
      const double t_merged = best_of(repeats, [&] { merged_product(delta, w, x, y); });
      auto y2 = torch::empty({n, rows}), y3 = torch::empty({n, rows});
      const double t_three_apart = best_of(repeats, [&] {
        merged_product(delta, w, x, y);
        merged_product(second, w, x, y2);
        merged_product(third, w, x, y3);
      });
      const std::vector<MergedProduct> three{{&delta, x, y}, {&second, x, y2}, {&third, x, y3}};
      const double t_three_together = best_of(repeats, [&] { merged_products(three, w); });
      // Full mode's product, and one BLAS GEMM of the shape for the kernel below.
      const double t_full = best_of(repeats, [&] { y = torch::linear(x, reconstructed); });
      const double t_base = best_of(repeats, [&] { y = model::inference_linear(x, w); });
      // The small-batch kernel on every row, whatever max_rows() says: where
      // it stops beating BLAS on this machine.
      double t_small = 0;
      if (model::small_batch_linear_in_use())
        t_small = best_of(repeats, [&] {
          model::small_batch::linear(x.data_ptr<float>(), n, cols, cols, w.data_ptr<float>(), rows, y.data_ptr<float>(),
                                     rows);
        });
      std::cout << nlohmann::json{{"bench", "merged"},
                                  {"rows", rows},
                                  {"cols", cols},
                                  {"batch", n},
                                  {"merged_us", t_merged * 1e6},
                                  {"dense_gemm_us", t_full * 1e6},
                                  {"base_product_us", t_base * 1e6},
                                  {"small_batch_all_rows_us", t_small * 1e6},
                                  {"merged_over_dense", t_merged / t_full},
                                  {"three_variants_apart_us", t_three_apart * 1e6},
                                  {"three_variants_one_pass_us", t_three_together * 1e6},
                                  {"one_pass_over_apart", t_three_together / t_three_apart},
                                  {"small_batch_avx512", model::small_batch::avx512_in_use()},
                                  {"small_batch_kernel", model::small_batch_linear_in_use()}}
                       .dump()
                << std::endl;
    }
  }
  return 0;
}

int streamed(int repeats) {
#if defined(__x86_64__)
  torch::NoGradGuard no_grad;
  std::mt19937 rng(3);
  constexpr std::int64_t kRows = 2048, kCols = 768, kMatrices = 64, kTile = 64;
  // Far more than any cache: every product reads its weights from memory.
  auto weights = torch::randn({kMatrices, kRows, kCols});
  std::vector<SbmmMatrix> deltas;
  for (std::int64_t m = 0; m < kMatrices; ++m) deltas.emplace_back(random_packed(kRows, kCols, 4, rng));
  auto w = [&](std::int64_t m) { return weights.data_ptr<float>() + m * kRows * kCols; };
  auto timed = [&](bool prefetch, auto&& f) {
    simd::use_prefetch(prefetch);
    const double t = best_of(repeats, f);
    simd::use_prefetch(true);
    return t;
  };
  for (std::int64_t n : {1, 2, 4, 8, 16, 32, 64}) {
    if (!model::small_batch_linear_in_use() || n > model::small_batch::max_rows(kCols)) continue;
    auto x = torch::randn({n, kCols});
    auto y = torch::empty({n, kRows});
    auto run = [&] {
      for (std::int64_t m = 0; m < kMatrices; ++m)
        model::small_batch::linear(x.data_ptr<float>(), n, kCols, kCols, w(m), kRows, y.data_ptr<float>(), kRows);
    };
    const double off = timed(false, run), on = timed(true, run);
    std::cout << nlohmann::json{{"bench", "streamed"},
                                {"what", "base_product"},
                                {"rows", n},
                                {"matrices", kMatrices},
                                {"shape", {kRows, kCols}},
                                {"no_prefetch_ms", off * 1e3},
                                {"prefetch_ms", on * 1e3},
                                {"speedup", off / on},
                                {"small_batch_avx512", model::small_batch::avx512_in_use()}}
                     .dump()
              << std::endl;
  }
  std::vector<float> tile(static_cast<std::size_t>(kTile * kCols));
  auto decode = [&] {
    for (std::int64_t m = 0; m < kMatrices; ++m)
      for (std::int64_t b = 0; b < kRows; b += kTile)
        deltas[static_cast<std::size_t>(m)].decode_rows(b, b + kTile, tile.data(), w(m) + b * kCols);
  };
  const double off = timed(false, decode), on = timed(true, decode);
  std::cout << nlohmann::json{{"bench", "streamed"},
                              {"what", "tiles_of_w_plus_delta"},
                              {"bits", 4},
                              {"matrices", kMatrices},
                              {"shape", {kRows, kCols}},
                              {"no_prefetch_ms", off * 1e3},
                              {"prefetch_ms", on * 1e3},
                              {"speedup", off / on},
                              {"sbmm_avx512", SbmmMatrix::avx512_in_use()}}
                   .dump()
            << std::endl;
#else
  (void)repeats;
  std::cerr << "bench_dz_serve streamed: the kernels prefetch on x86 only\n";
#endif
  return 0;
}

// One decode step of `batch` rows, each row's variant applied three ways:
// as deltas on the base (SBMM overlay), as full reconstructed models (one
// forward per variant's rows), and the base alone (the floor).
class DecodeRig {
 public:
  DecodeRig(const std::string& base_dir, std::int64_t batch, model::ComputeDevice compute,
            const std::vector<std::string>& files)
      : batch_(batch),
        cuda_(compute == model::ComputeDevice::kCuda),
        base_(model::LlamaModel::load(base_dir, torch::kFloat32, model::torch_device(compute))),
        cache_(base_.config(), batch, kContext, torch::kFloat32, base_.device()),
        ones_(static_cast<std::size_t>(batch), 1) {
    for (const auto& f : files) {
      DeltaReader reader(f);
      deltas_.push_back(VariantDelta::load(f, reader, base_));
      full_.push_back(reconstruct_model(reader, base_, base_.device()));
    }
    const auto variants = static_cast<std::int64_t>(files.size());
    for (std::int64_t b = 0; b < batch; ++b) slots_.push_back(b);
    // Row b belongs to variant b * variants / batch: contiguous segments.
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto* v = deltas_[static_cast<std::size_t>(b * variants / batch)].get();
      if (segments_.empty() || segments_.back().variant != v) segments_.push_back({b, 0, v});
      segments_.back().count++;
    }
    tokens_ = torch::randint(4, base_.config().vocab_size, {batch, kPrompt}, torch::kInt64).to(base_.device());
    next_ = torch::randint(4, base_.config().vocab_size, {batch, 1}, torch::kInt64).to(base_.device());
  }

  // Seconds per step, each after a prompt in every slot.
  double delta_step() {
    fill();
    DeltaOverlay overlay(segments_, batch_);
    return timed([&] { base_.forward_cached(cache_, slots_, next_, ones_, false, &overlay); });
  }
  double full_step() {
    fill();
    return timed([&] {
      for (const auto& seg : segments_) {
        const auto v = static_cast<std::size_t>(seg.begin * static_cast<std::int64_t>(full_.size()) / batch_);
        std::vector<std::int64_t> part(slots_.begin() + seg.begin, slots_.begin() + seg.begin + seg.count);
        full_[v].forward_cached(cache_, part, next_.narrow(0, seg.begin, seg.count),
                                std::vector<std::int64_t>(static_cast<std::size_t>(seg.count), 1));
      }
    });
  }
  double base_step() {
    fill();
    return timed([&] { base_.forward_cached(cache_, slots_, next_, ones_); });
  }

  std::uint64_t delta_bytes() const {
    std::uint64_t n = 0;
    for (const auto& d : deltas_) n += d->bytes;
    return n;
  }
  std::uint64_t model_bytes() const {
    std::uint64_t n = 0;
    for (const auto& [name, t] : base_.named_parameters()) n += static_cast<std::uint64_t>(t.nbytes());
    return n;
  }

 private:
  static constexpr std::int64_t kContext = 160, kPrompt = 128;
  static constexpr int kSteps = 8;

  // Kernels on a GPU run asynchronously: every timed region ends with a sync.
  void sync() const {
    if (cuda_) torch::cuda::synchronize();
  }
  void fill() {
    for (std::int64_t b = 0; b < batch_; ++b) cache_.reset(b);
    base_.forward_cached(cache_, slots_, tokens_, std::vector<std::int64_t>(static_cast<std::size_t>(batch_), kPrompt));
    sync();
  }
  template <typename Step>
  double timed(Step step) {
    const auto t0 = Clock::now();
    for (int s = 0; s < kSteps; ++s) step();
    sync();
    return std::chrono::duration<double>(Clock::now() - t0).count() / kSteps;
  }

  std::int64_t batch_;
  bool cuda_;
  model::LlamaModel base_;
  model::KvCache cache_;
  std::vector<std::int64_t> ones_, slots_;
  std::vector<std::shared_ptr<const VariantDelta>> deltas_;
  std::vector<model::LlamaModel> full_;
  std::vector<VariantSegment> segments_;
  torch::Tensor tokens_, next_;
};

int decode(const std::string& base_dir, std::int64_t batch, int repeats, const std::string& device_choice,
           const std::vector<std::string>& files) {
  torch::NoGradGuard no_grad;
  const model::ComputeDevice compute = model::resolve_device(device_choice);
  DecodeRig rig(base_dir, batch, compute, files);
  double t_delta = 1e30, t_full = 1e30, t_base = 1e30;
  for (int r = 0; r < repeats + 1; ++r) {  // interleaved, the first round warms up
    const double d = rig.delta_step(), f = rig.full_step(), b = rig.base_step();
    if (r == 0) continue;
    t_delta = std::min(t_delta, d);
    t_full = std::min(t_full, f);
    t_base = std::min(t_base, b);
  }
  const std::uint64_t model_bytes = rig.model_bytes();
  std::cout << nlohmann::json{{"bench", "decode"},
                              {"device", model::device_name(compute)},
                              {"batch", batch},
                              {"variants", files.size()},
                              {"delta_step_ms", t_delta * 1e3},
                              {"full_step_ms", t_full * 1e3},
                              {"base_step_ms", t_base * 1e3},
                              {"delta_over_full", t_delta / t_full},
                              {"delta_over_base", t_delta / t_base},
                              {"resident_delta_mode_bytes", model_bytes + rig.delta_bytes()},
                              {"resident_full_mode_bytes", model_bytes * (1 + files.size())}}
                   .dump()
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "sbmm" && argc == 4) {
    model::set_cpu_threads(std::stoi(argv[2]));
    return sbmm(std::stoi(argv[3]));
  }
  if (what == "merged" && argc == 4) {
    model::set_cpu_threads(std::stoi(argv[2]));
    return merged(std::stoi(argv[3]));
  }
  if (what == "streamed" && argc == 4) {
    model::set_cpu_threads(std::stoi(argv[2]));
    return streamed(std::stoi(argv[3]));
  }
  if (what == "decode" && argc >= 8) {
    model::set_cpu_threads(std::stoi(argv[4]));
    return decode(argv[2], std::stoll(argv[3]), std::stoi(argv[5]), argv[6],
                  std::vector<std::string>(argv + 7, argv + argc));
  }
  std::cerr << "usage: bench_dz_serve sbmm THREADS REPEATS | merged THREADS REPEATS | streamed THREADS REPEATS | "
               "decode BASE_DIR BATCH THREADS REPEATS cpu|cuda DELTA.h5...\n";
  return 2;
} catch (const std::exception& e) {
  std::cerr << "bench_dz_serve: error: " << e.what() << "\n";
  return 1;
}
