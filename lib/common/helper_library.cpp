#include "common/helper_library.h"

#include <cstdlib>

#include "common/error.h"

namespace fleet {

std::filesystem::path helper_library(const std::string& file_name, const char* environment_variable,
                                     const std::string& why_missing) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv(environment_variable); env != nullptr && *env != '\0') {
    if (!fs::exists(env)) throw InputError(std::string(environment_variable) + ": no such file " + env);
    return env;
  }
  std::error_code ec;
  const fs::path bin = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const fs::path beside = bin / file_name, installed = bin.parent_path() / "lib" / "gpufleet" / file_name;
  for (const fs::path& place : {beside, installed})
    if (!ec && fs::exists(place, ec)) return place;
  throw InputError(file_name + " is neither beside the program (" + beside.string() + ") nor in " +
                   installed.parent_path().string() + "; " + why_missing + ", or set " + environment_variable);
}

}  // namespace fleet
