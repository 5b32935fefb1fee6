// Stores a double as one element of any dtype, for tests that build tensors
// of every type (shared by the unit tests and the interop helper).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/half.h"

namespace fleet::testing {

/// Writes `v` converted to `dtype` at `p` (F8 types get the low byte of v as an integer).
inline void store_as(DType dtype, double v, std::byte* p) {
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (dtype) {
    case DType::kF64:
      put(v);
      break;
    case DType::kF32:
      put(static_cast<float>(v));
      break;
    case DType::kF16:
      put(float_to_f16(static_cast<float>(v)));
      break;
    case DType::kBF16:
      put(float_to_bf16(static_cast<float>(v)));
      break;
    case DType::kI64:
      put(static_cast<std::int64_t>(v));
      break;
    case DType::kI32:
      put(static_cast<std::int32_t>(v));
      break;
    case DType::kI16:
      put(static_cast<std::int16_t>(v));
      break;
    case DType::kI8:
      put(static_cast<std::int8_t>(v));
      break;
    case DType::kU64:
      put(static_cast<std::uint64_t>(v));
      break;
    case DType::kU32:
      put(static_cast<std::uint32_t>(v));
      break;
    case DType::kU16:
      put(static_cast<std::uint16_t>(v));
      break;
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      put(static_cast<std::uint8_t>(static_cast<std::int64_t>(v)));
      break;
  }
}

}  // namespace fleet::testing
