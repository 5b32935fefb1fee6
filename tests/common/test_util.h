// Helpers shared by the tests: a temporary folder per test and byte helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/temporary_folder.h"

namespace fleet::testing {

/// The message of the error of type `E` (InputError by default) `f` throws, or "no error".
template <typename E = InputError>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

/// A fresh folder under the system temp dir, removed with its contents at the end.
class TempDir : public TemporaryFolder {
 public:
  TempDir() : TemporaryFolder("fleet-test") {}
  std::filesystem::path operator/(const std::string& name) const { return path() / name; }
};

/// Bytes of a trivially copyable vector.
template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

/// Names of files in `dir` (not recursive), sorted.
inline std::vector<std::string> list_dir(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fleet::testing
