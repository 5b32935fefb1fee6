// `orion-profile import-ncu` and `summarize`: their options and runs.
#pragma once

#include <filesystem>
#include <string>

namespace fleet::orion {

/// Options of `orion-profile import-ncu`.
struct ImportNcuOptions {
  std::filesystem::path input;
  std::string device = "v100";
  std::filesystem::path output;
};

/// Converts an Nsight Compute CSV export to our profile CSV.
int run_import_ncu(const ImportNcuOptions& options);

/// Options of `orion-profile summarize`.
struct SummarizeOptions {
  std::filesystem::path profile;
  bool json = false;
};

/// Prints kernel count, total time, time per class and the SM-need distribution.
int run_summarize(const SummarizeOptions& options);

}  // namespace fleet::orion
