// What a delta container holds, tensor by tensor and by class of tensor
// (linear layers, LM head, embedding, norms): stored form, weights, bytes.
// No libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fleet::deltazip {

struct ContainerSummary {
  struct Tensor {
    std::string name;
    std::string form;  ///< "4-bit 2:4", "dense delta", "8-bit row delta of 12 rows", ...
    std::int64_t elements = 0;
    std::uint64_t bytes = 0;  ///< stored bytes (after the lossless stage)
  };
  struct Total {
    std::int64_t elements = 0;
    std::uint64_t bytes = 0;
  };
  std::filesystem::path file;
  std::uint64_t file_bytes = 0;
  std::string base_identity;
  std::string settings_json;  ///< the compression settings, as the container records them
  std::vector<Tensor> tensors;
  std::map<std::string, Total> classes;  ///< by tensor class; classes without weights are left out
  Total all;

  /// Bits per weight of `bytes` over `elements` (0 without elements).
  static double bits_per_weight(std::uint64_t bytes, std::int64_t elements);
  /// The linear layers' total (zero when the container has none).
  Total linear() const;
};

/// Reads the container's index (not its tensors' data). InputError or
/// IoError for a file that is not a readable delta container.
ContainerSummary summarize_container(const std::filesystem::path& path);

}  // namespace fleet::deltazip
