// DeltaZip's pipeline: compress a fine-tuned model as its delta from a base
// model, layer by layer with calibration; reconstruct it. Torch-free
// header: the programs include it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fleet::deltazip {

/// `dz-compress compress`.
struct CompressCommand {
  std::filesystem::path base, target, output;
  int bits = 4;
  std::string sparsity = "2:4";
  std::int64_t group_size = -1;
  bool symmetric = true;
  std::string grid = "minmax";  ///< minmax, mse or ternary (obs_compressor.h GridFit)
  std::int64_t rank = 0;        ///< > 0: every linear layer as two factors of this rank (low_rank_compressor.h)
  bool act_order = false;
  double damp = 0.01;
  std::int64_t block_size = 128;
  std::string method = "obs";      ///< obs or rtn
  std::filesystem::path calib;     ///< calibration text (default: built-in synthetic corpus)
  std::int64_t calib_samples = 0;  ///< 0: default_calibration_samples

  std::int64_t seq_len = 128;
  std::string dense_policy = "delta-zstd";  ///< or full
  int embedding_bits = 8;  ///< delta-zstd: the embedding's changed rows at this many bits (2-8); 0: dense float16
  int zstd_level = 9;
  /// A size budget instead of bits and sparsity: the whole file at most the
  /// fp16 model's size / target_ratio, or at most max_bytes (0: unused).
  /// Each linear layer's form is then chosen where bytes remove the most
  /// error (docs/usage.md, "Compressing to a size").
  double target_ratio = 0;
  std::uint64_t max_bytes = 0;
  int threads = 0;
  std::string device = "auto";  ///< cpu, cuda or auto (model forward and OBS sweeps)
  bool force = false;
  /// Also measure what round-to-nearest would have lost, for comparison
  /// (CompressResult::weighted_error_rtn; one more quantization per matrix).
  bool compare_with_rtn = false;
};

/// What compress_delta wrote.
struct CompressResult {
  std::filesystem::path output;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::int64_t parameters = 0;  ///< of the fine-tuned model
  /// OBS: the layers' output error, tr((delta - q) H (delta - q)^T) summed
  /// over the linear layers; and round-to-nearest's, when compared. Unset
  /// for round-to-nearest.
  std::optional<double> weighted_error, weighted_error_rtn;
  std::string settings_json;  ///< the settings recorded in the container
  /// With a size budget: the budget in bytes and each linear layer's form
  /// ("2-bit 2:4"), in the order they were compressed.
  std::uint64_t budget_bytes = 0;
  std::vector<std::pair<std::string, std::string>> allocation;
};
/// Compresses `command.target` as a delta from `command.base` into
/// `command.output` (replaced only with `force`), with progress on stderr.
CompressResult compress_delta(const CompressCommand& command);

/// Calibration sequences of `seq_len` tokens when none are asked for: two
/// tokens per input of the widest linear layer (its Hessian needs about as
/// many tokens as inputs to be of full rank), at least 8, at most 64
/// sequences. On the copy fine-tune, accuracy through a 2-bit 2:4 delta did
/// not improve past 8 sequences (docs/benchmarks.md).
std::int64_t default_calibration_samples(std::int64_t hidden_size, std::int64_t intermediate_size,
                                         std::int64_t seq_len);

/// `dz-compress decompress`.
struct DecompressCommand {
  std::filesystem::path delta, base, output;
  bool force = false;
};
int run_decompress(const DecompressCommand& command);

}  // namespace fleet::deltazip
