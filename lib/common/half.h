// IEEE half (F16) and bfloat16 conversions, round-to-nearest-even, NaN kept.
#pragma once

#include <bit>
#include <cstdint>

namespace fleet {

/// bfloat16 bits to float (exact).
inline float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

/// float to bfloat16 bits, rounding to nearest even; NaN stays NaN.
inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

/// IEEE half bits to float (exact, subnormals included).
float f16_to_float(std::uint16_t bits);
/// float to IEEE half bits, rounding to nearest even; overflow gives infinity.
std::uint16_t float_to_f16(float value);

}  // namespace fleet
