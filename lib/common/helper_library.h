// Where a program finds a shared library it hands to other processes (the
// Orion interposer, the CUPTI injection): named by an environment variable,
// else beside the program (the build tree's bin/), else in the installed
// layout's lib/gpufleet/ next to bin/.
#pragma once

#include <filesystem>
#include <string>

namespace fleet {

/// The library `file_name`; InputError naming every place looked at, and
/// `why_missing` (how it gets built), when it is in none of them.
std::filesystem::path helper_library(const std::string& file_name, const char* environment_variable,
                                     const std::string& why_missing);

}  // namespace fleet
