// Builders of raw safetensors bytes, valid and deliberately broken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fleet::testing {

/// u64 little-endian length + header text + data, with the length overridable.
inline std::vector<std::byte> raw_safetensors(const std::string& header, std::size_t data_bytes,
                                              std::int64_t length_override = -1) {
  const std::uint64_t n = length_override >= 0 ? static_cast<std::uint64_t>(length_override) : header.size();
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  for (std::size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<std::byte>(i * 7 + 1));
  return out;
}

/// Writes bytes to a file.
inline void write_bytes(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace fleet::testing
