#include "deltazip/serve/torch/variant_delta.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "common/error.h"
#include "deltazip/torch/reconstruct.h"
#include "fleet/config.h"
#include "model/small_batch_linear.h"
#include "model/torch/tensor_bridge.h"

#if FLEET_WITH_CUDA
#include "deltazip/sbmm/cuda/sbmm_cuda.h"
#endif
#if FLEET_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace fleet::deltazip {
namespace {

constexpr const char* kNoCudaKernel =
    "delta mode on a GPU needs the CUDA SBMM kernel: this build has no CUDA toolkit (docs/gpu.md)";

constexpr const char* kProjectionNames[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                             "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                             "mlp.down_proj"};

std::string layer_tensor(std::size_t layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix + ".weight";
}

bool contains(const std::vector<std::string>& sorted, const std::string& name) {
  return std::binary_search(sorted.begin(), sorted.end(), name);
}

// A dense entry as float32: the variant's value minus the base's.
torch::Tensor dense_delta(const DeltaReader& reader, const std::string& name, const torch::Tensor& base) {
  auto entry = reader.dense(name);
  auto stored = dense_tensor(entry);
  if (stored.sizes() != base.sizes())
    throw InputError(reader.path().string() + ": tensor '" + name + "' has another shape than the base's");
  auto value = stored.to(torch::kFloat32);
  return entry.kind == DenseKind::kFull ? value - base.to(torch::kCPU, torch::kFloat32) : value;
}

}  // namespace

std::shared_ptr<const VariantDelta> VariantDelta::load(const std::string& name, const DeltaReader& reader,
                                                       const model::LlamaModel& base) {
  check_same_architecture(base.config(), delta_config(reader), reader.path().string());
  std::map<std::string, torch::Tensor> base_params;
  for (const auto& [param, t] : base.named_parameters()) base_params[param] = t;
  const auto device = base.device();
  if (device.is_cuda() && !FLEET_WITH_CUDA) throw UsageError(kNoCudaKernel);
  auto v = std::make_shared<VariantDelta>();
  v->name = name;
  const auto layers = base.num_layers();
  torch::NoGradGuard no_grad;
  auto dense_or_zero = [&](const std::string& tensor) -> torch::Tensor {
    if (!contains(reader.dense_names(), tensor)) return {};
    auto d = dense_delta(reader, tensor, base_params.at(tensor));
    v->bytes += static_cast<std::uint64_t>(d.nbytes());
    return d.to(device);
  };
  // Norms are kept as the variant's full weights: the overlay hands them out per row.
  auto norm = [&](const std::string& tensor) {
    auto base_value = base_params.at(tensor).to(device, torch::kFloat32);
    auto d = dense_or_zero(tensor);
    return d.defined() ? base_value + d : base_value;
  };
  for (std::size_t l = 0; l < layers; ++l) {
    for (const char* projection : kProjectionNames) {
      const auto tensor = layer_tensor(l, projection);
      const auto& base_w = base_params.at(tensor);
      std::unique_ptr<SbmmMatrix> matrix, down;
      if (contains(reader.low_rank_names(), tensor)) {
        const auto low_rank = reader.low_rank(tensor);
        matrix = std::make_unique<SbmmMatrix>(low_rank.up);
        down = std::make_unique<SbmmMatrix>(low_rank.down);
      } else if (contains(reader.packed_names(), tensor)) {
        matrix = std::make_unique<SbmmMatrix>(reader.packed(tensor));
      } else {
        throw InputError(reader.path().string() + ": no packed delta for '" + tensor +
                         "' (dz-serve's delta mode needs every linear layer compressed)");
      }
      const auto cols = down ? down->cols() : matrix->cols();
      if (matrix->rows() != base_w.size(0) || cols != base_w.size(1))
        throw InputError(reader.path().string() + ": '" + tensor + "' has another shape than the base's");
      v->bytes += matrix->bytes() + (down ? down->bytes() : 0);
#if FLEET_WITH_CUDA
      if (device.is_cuda()) {  // the packed arrays are copied to the GPU; the host copy goes
        v->device_linear.push_back(std::make_shared<const SbmmCudaMatrix>(matrix->layout()));
        v->device_linear_down.push_back(down ? std::make_shared<const SbmmCudaMatrix>(down->layout()) : nullptr);
        continue;
      }
#endif
      v->linear.push_back(std::move(matrix));
      v->linear_down.push_back(std::move(down));
    }
    v->input_norm.push_back(norm(layer_tensor(l, "input_layernorm")));
    v->post_attention_norm.push_back(norm(layer_tensor(l, "post_attention_layernorm")));
  }
  v->final_norm = norm("model.norm.weight");
  v->embedding_delta = dense_or_zero("model.embed_tokens.weight");
  // An untied head compressed as a linear layer: decoded once, kept dense
  // (one matrix per variant, as a dense head delta was).
  const bool packed_head = contains(reader.packed_names(), "lm_head.weight"),
             low_rank_head = contains(reader.low_rank_names(), "lm_head.weight");
  if (!base.config().tie_word_embeddings && (packed_head || low_rank_head)) {
    const auto& base_head = base_params.at("lm_head.weight");
    // The reader checked the entry's shape against the model's on opening.
    auto head = torch::empty(base_head.sizes(), torch::kFloat32);
    const std::span<float> values{head.data_ptr<float>(), static_cast<std::size_t>(head.numel())};
    if (low_rank_head)
      unpack_low_rank(reader.low_rank("lm_head.weight"), values);
    else
      unpack_matrix(reader.packed("lm_head.weight"), values);
    v->bytes += static_cast<std::uint64_t>(head.nbytes());
    v->head_delta = head.to(device);
  } else {
    v->head_delta = base.config().tie_word_embeddings ? v->embedding_delta : dense_or_zero("lm_head.weight");
  }
  return v;
}

namespace {

constexpr std::int64_t kTile = 64;  // output rows decoded at a time: 64 x cols floats stay in L2

// Rows of x from which the tile path (decode a tile, multiply it densely)
// beats the fused kernels, which decode every weight again for each group of
// input rows. Measured with bench_dz_serve sbmm (docs/benchmarks.md).
std::int64_t tile_path_rows(const SbmmMatrix& delta) {
  if (!delta.fused_2of4()) return 5;
  return model::small_batch_linear_in_use() ? 9 : 17;
}

// Whether the small-batch kernel multiplies n rows of x by a tile of `cols`
// columns faster than BLAS. It multiplies the tile where it is (BLAS copies
// it once more), which wins up to its max_rows(); beyond that BLAS's packed
// kernel wins unless the small kernel's working set, a block of five tile
// rows and four rows of x (AVX-512), stays in a 32 KiB L1. Measured with
// bench_dz_serve sbmm for 32-256 rows (docs/benchmarks.md).
bool small_kernel_for_tile(std::int64_t n, std::int64_t cols) {
  if (!model::small_batch_linear_in_use()) return false;
  if (n <= model::small_batch::max_rows(cols)) return true;
  return model::small_batch::avx512_in_use() && (5 + 4) * cols * static_cast<std::int64_t>(sizeof(float)) <= 32 * 1024;
}

// Output rows decoded at a time for n rows of x. The small-batch kernel reads
// a tile in place, so kTile rows suffice. A BLAS call packs x anew for every
// tile, so its tiles hold about 1 MiB (bench_dz_serve merged, AVX2: 40-256
// rows of x 4-13 % faster than with kTile rows; 256 KiB tiles are slower
// than 1 MiB ones, 2-4 MiB ones only gain from 128 rows), but no more than
// half of Δ's rows per thread, so that every intra-op thread gets tiles.
std::int64_t tile_rows(std::int64_t n, const SbmmMatrix& delta) {
  if (small_kernel_for_tile(n, delta.cols())) return kTile;
  const std::int64_t fit = (std::int64_t{1} << 20) / (delta.cols() * static_cast<std::int64_t>(sizeof(float)));
  const std::int64_t share = delta.rows() / (2 * static_cast<std::int64_t>(at::get_num_threads()));
  return std::max(kTile, std::min(fit, share) / kTile * kTile);
}

// Tiles of `rows_per_tile` output rows (of `rows`, each `cols` wide) split
// over libtorch's intra-op threads, each handed a per-thread buffer of one
// tile that stays in cache: use(begin, count, buffer) decodes rows of Δ into
// it and uses them, so the whole matrix never exists dequantized.
template <typename Use>
void for_each_tile(std::int64_t rows, std::int64_t cols, std::int64_t rows_per_tile, Use&& use) {
  const std::int64_t tiles = (rows + rows_per_tile - 1) / rows_per_tile;
  at::parallel_for(0, tiles, 1, [&](std::int64_t first, std::int64_t last) {
    thread_local std::vector<float> buffer;
    buffer.resize(static_cast<std::size_t>(rows_per_tile * cols));
    for (std::int64_t t = first; t < last; ++t) {
      const std::int64_t begin = t * rows_per_tile;
      use(begin, std::min(rows_per_tile, rows - begin), buffer.data());
    }
  });
}

// out[:, begin, begin + count) = x · tileᵀ (+= with `accumulate`); x [n, cols]
// and out float32 contiguous.
void multiply_tile(const torch::Tensor& x, float* tile, std::int64_t begin, std::int64_t count, torch::Tensor& out,
                   bool accumulate) {
  const std::int64_t n = x.size(0), cols = x.size(1);
  if (small_kernel_for_tile(n, cols)) {
    model::small_batch::linear(x.data_ptr<float>(), n, cols, cols, tile, count, out.data_ptr<float>() + begin,
                               out.size(1), accumulate);
    return;
  }
  auto t = torch::from_blob(tile, {count, cols}, torch::kFloat32);
  out.narrow(1, begin, count).addmm_(x, t.t(), /*beta=*/accumulate ? 1 : 0);
}

}  // namespace

void sbmm_add(const SbmmMatrix& delta, const torch::Tensor& x, torch::Tensor& out) {
  const auto n = x.size(0);
  if (n < tile_path_rows(delta)) {  // a few rows: touch only the kept weights, no dense tile
    const float* xp = x.data_ptr<float>();
    float* yp = out.data_ptr<float>();
    at::parallel_for(0, delta.rows(), kTile, [&](std::int64_t begin, std::int64_t end) {
      delta.multiply_add(xp, n, delta.cols(), yp, out.size(1), begin, end);
    });
    return;
  }
  for_each_tile(delta.rows(), delta.cols(), tile_rows(n, delta),
                [&](std::int64_t begin, std::int64_t count, float* tile) {
                  delta.decode_rows(begin, begin + count, tile);
                  multiply_tile(x, tile, begin, count, out, /*accumulate=*/true);
                });
}

void merged_products(const std::vector<MergedProduct>& products, const torch::Tensor& base) {
  if (products.empty()) return;
  const std::int64_t rows = base.size(0), cols = base.size(1);
  std::int64_t rows_per_tile = std::numeric_limits<std::int64_t>::max();
  for (const auto& p : products) {
    if (p.delta->rows() != rows || p.delta->cols() != cols)
      throw std::invalid_argument("merged_products: every delta must have the base matrix's shape");
    rows_per_tile = std::min(rows_per_tile, tile_rows(p.x.size(0), *p.delta));
  }
  const float* w = base.data_ptr<float>();
  // Tile by tile, every variant in turn: the tile's rows of W come from
  // memory for the first variant and from cache for the others.
  for_each_tile(rows, cols, rows_per_tile, [&](std::int64_t begin, std::int64_t count, float* tile) {
    for (const auto& p : products) {
      p.delta->decode_rows(begin, begin + count, tile, w + begin * cols);
      torch::Tensor out = p.out;
      multiply_tile(p.x, tile, begin, count, out, /*accumulate=*/false);
    }
  });
}

void merged_product(const SbmmMatrix& delta, const torch::Tensor& base, const torch::Tensor& x, torch::Tensor& out) {
  merged_products({{&delta, x, out}}, base);
}

DeltaOverlay::DeltaOverlay(std::vector<VariantSegment> segments, std::int64_t batch) : batch_(batch) {
  for (auto& s : segments)
    if (s.variant && s.count > 0) segments_.push_back(s);
}

std::unique_ptr<const model::WeightOverlay> DeltaOverlay::for_positions(const std::vector<std::int64_t>& counts) const {
  if (static_cast<std::int64_t>(counts.size()) != batch_)
    throw std::invalid_argument("DeltaOverlay: one token count per batch row");
  std::vector<std::int64_t> first(counts.size() + 1, 0);  // first real position of each batch row
  for (std::size_t b = 0; b < counts.size(); ++b) first[b + 1] = first[b] + counts[b];
  std::vector<VariantSegment> rows;
  for (const auto& s : segments_) {
    const auto begin = first[static_cast<std::size_t>(s.begin)],
               end = first[static_cast<std::size_t>(s.begin + s.count)];
    rows.push_back({begin, end - begin, s.variant});
  }
  return std::make_unique<DeltaOverlay>(std::move(rows), first.back());
}

namespace {

// One segment's rows of x (float32, contiguous) and where their product
// goes: `flat`, a view of the same rows of out where those are float32 and
// contiguous, otherwise a zeroed temporary that finish() adds into them.
struct SegmentProduct {
  torch::Tensor rows_x, flat, rows_out;

  SegmentProduct(const VariantSegment& s, const torch::Tensor& x, torch::Tensor& out)
      : rows_x(x.narrow(0, s.begin, s.count).reshape({-1, x.size(-1)}).to(torch::kFloat32).contiguous()) {
    auto rows = out.narrow(0, s.begin, s.count);
    if (rows.is_contiguous() && rows.scalar_type() == torch::kFloat32) {
      flat = rows.view({-1, out.size(-1)});
    } else {
      flat = torch::zeros({rows_x.size(0), out.size(-1)}, x.options().dtype(torch::kFloat32));
      rows_out = rows;
    }
  }
  void finish() {
    if (rows_out.defined()) rows_out.add_(flat.view(rows_out.sizes()).to(rows_out.scalar_type()));
  }
};

// The delta product of one segment's rows of x added into the same rows of
// out, on the CPU.
void add_segment(const VariantSegment& s, std::size_t index, const torch::Tensor& x, torch::Tensor& out) {
  if (x.is_cuda()) throw UsageError(kNoCudaKernel);
  SegmentProduct p(s, x, out);
  if (const SbmmMatrix* down = s.variant->down(index)) {  // (x · downᵀ) · upᵀ
    auto inner = torch::zeros({p.rows_x.size(0), down->rows()}, p.rows_x.options());
    sbmm_add(*down, p.rows_x, inner);
    sbmm_add(*s.variant->linear.at(index), inner, p.flat);
  } else {
    sbmm_add(*s.variant->linear.at(index), p.rows_x, p.flat);
  }
  p.finish();
}

#if FLEET_WITH_CUDA
// Every segment's delta product of one linear layer in one grouped launch of
// the CUDA kernel on PyTorch's current stream, so it runs in order with the
// base's products around it (one launch per variant and layer would cost
// the host microseconds each, 112 times per variant in a step of the 100m
// preset).
void add_segments_on_gpu(const std::vector<VariantSegment>& segments, std::size_t index, const torch::Tensor& x,
                         torch::Tensor& out) {
  std::vector<SegmentProduct> pending;
  std::vector<torch::Tensor> inner;  // low-rank variants' x · downᵀ
  std::vector<SbmmCudaProduct> down_products, products;
  pending.reserve(segments.size());
  for (const auto& s : segments) {
    auto& p = pending.emplace_back(s, x, out);
    const auto n = p.rows_x.size(0);
    const float* in = p.rows_x.data_ptr<float>();
    if (const auto& down = s.variant->device_linear_down.at(index)) {
      const auto& t = inner.emplace_back(torch::zeros({n, down->rows()}, p.rows_x.options()));
      down_products.push_back({down.get(), in, n, t.data_ptr<float>()});
      in = t.data_ptr<float>();
    }
    products.push_back({s.variant->device_linear.at(index).get(), in, n, p.flat.data_ptr<float>()});
  }
  void* stream = nullptr;
#if FLEET_TORCH_CUDA
  stream = c10::cuda::getCurrentCUDAStream().stream();
#endif
  // Down factors first, in one launch; then every variant's (up or whole) product in another.
  if (!down_products.empty()) sbmm_cuda_grouped(down_products.data(), down_products.size(), stream);
  sbmm_cuda_grouped(products.data(), products.size(), stream);
  // PyTorch's allocator is stream-ordered: inputs freed on leaving are
  // reused only by work queued after this launch.
  for (auto& p : pending) p.finish();
}
#endif

}  // namespace

torch::Tensor DeltaOverlay::linear(std::size_t layer, model::Projection which, const torch::Tensor& x,
                                   const torch::Tensor& base) const {
  // A variant with enough rows for the tile path (a prompt's prefill) takes
  // x · (W + Δ)ᵀ: decoding Δ's tiles and adding W's rows costs less than a
  // second dense product. The other rows (variants with a few rows, and rows
  // of the base model) keep base product + SBMM.
  if (!x.device().is_cpu() || x.scalar_type() != torch::kFloat32 || base.scalar_type() != torch::kFloat32 ||
      !base.is_contiguous() || x.dim() < 2 || x.size(0) != batch_ || x.numel() == 0)
    return {};
  const auto index = layer * 7 + static_cast<std::size_t>(which);
  const std::int64_t in = x.size(-1), per_row = x.numel() / (batch_ * in), out_features = base.size(0);
  std::vector<char> merged(static_cast<std::size_t>(batch_), 0);
  std::vector<const VariantSegment*> rest;
  std::int64_t covered = 0;
  for (const auto& s : segments_) {
    // A low-rank delta's two thin products cost less than a pass over W.
    if (s.variant->down(index) != nullptr || s.count * per_row < tile_path_rows(*s.variant->linear.at(index))) {
      rest.push_back(&s);
      continue;
    }
    std::fill_n(merged.begin() + s.begin, s.count, 1);
    covered += s.count;
  }
  // Beside a base product, a merged variant costs one more pass over W: a
  // prompt's rows repay it, a decode step's few rows per variant do not
  // (merging the largest variant of decode steps served 3-5 % less).
  const bool decode_step = x.dim() == 3 && x.size(1) == 1;
  if (covered == 0 || (decode_step && covered != batch_)) return {};
  auto sizes = x.sizes().vec();
  sizes.back() = out_features;
  auto out = torch::empty(sizes, x.options());
  std::vector<MergedProduct> products;
  for (const auto& s : segments_)
    if (merged[static_cast<std::size_t>(s.begin)])
      products.push_back({s.variant->linear.at(index).get(),
                          x.narrow(0, s.begin, s.count).reshape({-1, in}).contiguous(),
                          out.narrow(0, s.begin, s.count).view({-1, out_features})});
  merged_products(products, base);
  std::vector<std::int64_t> others;  // batch rows left for the base product
  for (std::int64_t b = 0; b < batch_; ++b)
    if (!merged[static_cast<std::size_t>(b)]) others.push_back(b);
  if (others.empty()) return out;
  auto rows = torch::tensor(others, torch::TensorOptions().dtype(torch::kInt64));
  out.index_copy_(0, rows, model::inference_linear(x.index_select(0, rows), base));
  for (const VariantSegment* s : rest) add_segment(*s, index, x, out);
  return out;
}

void DeltaOverlay::add_linear(std::size_t layer, model::Projection which, const torch::Tensor& x,
                              torch::Tensor& out) const {
  const auto index = layer * 7 + static_cast<std::size_t>(which);
#if FLEET_WITH_CUDA
  if (x.is_cuda()) return add_segments_on_gpu(segments_, index, x, out);
#endif
  for (const auto& s : segments_) add_segment(s, index, x, out);
}

torch::Tensor DeltaOverlay::norm_weight(std::size_t layer, model::NormSlot which, const torch::Tensor& base) const {
  if (segments_.empty()) return base;
  auto weights = base.to(torch::kFloat32).view({1, 1, -1}).repeat({batch_, 1, 1});
  for (const auto& s : segments_) {
    const auto& w = which == model::NormSlot::kFinal   ? s.variant->final_norm
                    : which == model::NormSlot::kInput ? s.variant->input_norm[layer]
                                                       : s.variant->post_attention_norm[layer];
    weights.narrow(0, s.begin, s.count).copy_(w.view({1, 1, -1}).expand({s.count, 1, w.size(0)}));
  }
  return weights.to(base.scalar_type());
}

void DeltaOverlay::add_embedding(const torch::Tensor& tokens, torch::Tensor& hidden) const {
  for (const auto& s : segments_) {
    if (!s.variant->embedding_delta.defined()) continue;
    hidden.narrow(0, s.begin, s.count)
        .add_(
            torch::embedding(s.variant->embedding_delta, tokens.narrow(0, s.begin, s.count)).to(hidden.scalar_type()));
  }
}

void DeltaOverlay::add_head(const torch::Tensor& hidden, torch::Tensor& logits) const {
  for (const auto& s : segments_) {
    if (!s.variant->head_delta.defined()) continue;
    auto rows = hidden.narrow(0, s.begin, s.count).to(torch::kFloat32);
    logits.narrow(0, s.begin, s.count).add_(torch::linear(rows, s.variant->head_delta).to(logits.scalar_type()));
  }
}

}  // namespace fleet::deltazip
