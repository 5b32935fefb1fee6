#include "common/temporary_folder.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.h"

namespace fleet {

TemporaryFolder::TemporaryFolder(std::string_view prefix) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::string pattern = (dir / (std::string(prefix) + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw IoError("cannot create a temporary folder in " + dir.string() + ": " + std::strerror(errno) +
                  " (set TMPDIR to a writable folder)");
  }
  path_ = pattern;
}

TemporaryFolder::~TemporaryFolder() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace fleet
