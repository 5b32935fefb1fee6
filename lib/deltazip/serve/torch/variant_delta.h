// One fine-tuned variant as dz-serve keeps it in memory in delta mode: each
// linear layer's delta in packed low-bit form (SbmmMatrix on the CPU,
// SbmmCudaMatrix in GPU memory when the base runs on a GPU), the small dense
// tensors (norms, embedding and head deltas) as float32 on the base's device
// — and the overlay that lets one batched forward pass run each row with its
// own variant. Include only from torch targets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "deltazip/container.h"
#include "deltazip/sbmm/sbmm.h"
#include "model/torch/llama.h"

namespace fleet::deltazip {

class SbmmCudaMatrix;  // deltazip/sbmm/cuda/sbmm_cuda.h, in builds with CUDA

struct VariantDelta {
  std::string name;
  /// Linear deltas by layer * 7 + projection (model::Projection order): on
  /// the CPU in `linear`, or in GPU memory in `device_linear` (then `linear`
  /// is empty), as the base model's device. A low-rank delta is its up
  /// factor [out, rank] there and its down factor [rank, in] at the same
  /// index of `linear_down` / `device_linear_down` (null for a delta of full
  /// rank): x · Δᵀ = (x · downᵀ) · upᵀ, two products of the packed factors.
  std::vector<std::unique_ptr<SbmmMatrix>> linear, linear_down;
  std::vector<std::shared_ptr<const SbmmCudaMatrix>> device_linear, device_linear_down;
  /// Norm weights of the variant (base + delta), [hidden], per layer.
  std::vector<torch::Tensor> input_norm, post_attention_norm;
  torch::Tensor final_norm;
  /// Embedding and head deltas [vocab, hidden]; undefined when zero.
  torch::Tensor embedding_delta, head_delta;
  /// Bytes held in memory.
  std::uint64_t bytes = 0;

  /// The down factor of linear delta `index`, or null (full rank, or on a GPU).
  const SbmmMatrix* down(std::size_t index) const {
    return index < linear_down.size() ? linear_down[index].get() : nullptr;
  }

  /// Reads every tensor of `reader` (already checked against the base's
  /// identity) into serving form on the base's device. InputError for a
  /// malformed container or a model of another architecture; UsageError for a
  /// base on a GPU in a build without the CUDA kernel.
  static std::shared_ptr<const VariantDelta> load(const std::string& name, const DeltaReader& reader,
                                                  const model::LlamaModel& base);
};

/// A batch as runs of rows by variant (nullptr: the base model itself).
struct VariantSegment {
  std::int64_t begin = 0, count = 0;
  const VariantDelta* variant = nullptr;
};

/// The WeightOverlay of one batch: base products come from the model, and
/// every segment with a variant adds its delta products (SBMM on the CPU, or
/// one grouped launch of the CUDA kernel for all segments on the current
/// stream for tensors on a GPU). On the CPU,
/// a variant with enough rows in a prefill takes one product with W + Δ
/// instead (`linear`; in a decode step only when no base product is left).
class DeltaOverlay final : public model::WeightOverlay {
 public:
  DeltaOverlay(std::vector<VariantSegment> segments, std::int64_t batch);

  void add_linear(std::size_t layer, model::Projection which, const torch::Tensor& x,
                  torch::Tensor& out) const override;
  torch::Tensor linear(std::size_t layer, model::Projection which, const torch::Tensor& x,
                       const torch::Tensor& base) const override;
  std::unique_ptr<const model::WeightOverlay> for_positions(const std::vector<std::int64_t>& counts) const override;
  torch::Tensor norm_weight(std::size_t layer, model::NormSlot which, const torch::Tensor& base) const override;
  void add_embedding(const torch::Tensor& tokens, torch::Tensor& hidden) const override;
  void add_head(const torch::Tensor& hidden, torch::Tensor& logits) const override;

 private:
  std::vector<VariantSegment> segments_;  ///< only those with a variant
  std::int64_t batch_;
};

/// x_rows · Δᵀ added into `out` rows for one packed matrix: `x` [n, in] and
/// `out` [n, out] float32 contiguous, on the CPU. A few rows go through the
/// fused kernels; more through tiles of output rows decoded into cache and
/// multiplied densely, split over libtorch's intra-op threads.
void sbmm_add(const SbmmMatrix& delta, const torch::Tensor& x, torch::Tensor& out);

/// out = x · (W + Δ)ᵀ, W = `base` [out, in] float32 contiguous, by the same
/// tiles with W's rows added before the product: a variant's prefill without
/// a separate base product.
void merged_product(const SbmmMatrix& delta, const torch::Tensor& base, const torch::Tensor& x, torch::Tensor& out);

/// One variant's part of a step's merged products: out = x · (W + Δ)ᵀ (x
/// and out float32, contiguous rows).
struct MergedProduct {
  const SbmmMatrix* delta = nullptr;
  torch::Tensor x, out;
};
/// merged_product() for several variants of one linear layer (each Δ shaped
/// like `base`), reading W once: each tile of W's rows serves every
/// variant's tile of W + Δ while it is in cache. std::invalid_argument for
/// a delta of another shape.
void merged_products(const std::vector<MergedProduct>& products, const torch::Tensor& base);

}  // namespace fleet::deltazip
