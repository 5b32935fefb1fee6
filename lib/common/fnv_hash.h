// FNV-1a, 64 bits, over bytes: the content hash of the HDF5 store's tensor
// checksums and of base-model identities. Not cryptographic: it detects
// corruption and mix-ups, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace fleet {

/// Incremental FNV-1a (64-bit) over bytes.
struct Fnv1a64 {
  std::uint64_t value = 1469598103934665603ull;

  /// Adds bytes.
  void add(std::span<const std::byte> bytes) {
    for (const std::byte b : bytes) {
      value ^= static_cast<std::uint64_t>(b);
      value *= 1099511628211ull;
    }
  }
  /// Adds the characters of `text` and a terminating zero (so "ab","c" differs from "a","bc").
  void add_string(std::string_view text) {
    add(std::as_bytes(std::span<const char>(text.data(), text.size())));
    add(std::span<const std::byte>(&kZero, 1));
  }

 private:
  static constexpr std::byte kZero{0};
};

}  // namespace fleet
