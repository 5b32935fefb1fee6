// A private temporary folder (mkdtemp under TMPDIR, or /tmp) that is removed
// with everything in it when the owner goes out of scope, on every way out,
// so a failed run leaves nothing behind in a shared /tmp.
#pragma once

#include <filesystem>
#include <string_view>

namespace fleet {

class TemporaryFolder {
 public:
  /// Creates "<TMPDIR>/<prefix>-XXXXXX" with mode 0700; IoError when it cannot.
  explicit TemporaryFolder(std::string_view prefix);
  ~TemporaryFolder();
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace fleet
