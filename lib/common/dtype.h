// Element types of stored tensors, named as safetensors names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fleet {

/// Element type of a tensor in a file.
enum class DType : std::uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
};

/// Every dtype, for loops in tests and tools.
inline constexpr DType kAllDTypes[] = {DType::kF64,    DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                       DType::kF8E5M2, DType::kI64, DType::kI32, DType::kI16,  DType::kI8,
                                       DType::kU64,    DType::kU32, DType::kU16, DType::kU8,   DType::kBool};

/// Bytes per element.
std::size_t dtype_size(DType dtype);
/// The safetensors name ("F32", "BF16", "BOOL", ...).
std::string_view dtype_name(DType dtype);
/// Parses a safetensors dtype name; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);
/// True for the floating-point types.
bool dtype_is_float(DType dtype);

/// Number of elements of `shape` (1 for a scalar); nullopt on overflow or a negative dimension.
std::optional<std::uint64_t> checked_numel(std::span<const std::int64_t> shape);
/// "[2, 3, 4]".
std::string shape_to_string(std::span<const std::int64_t> shape);

}  // namespace fleet
