// sailor-plan's subcommands: the options each takes and the run that does
// the work and prints (one source file per subcommand).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sailor/planner_inputs.h"

namespace fleet::sailor {

/// Options of `sailor-plan import-sailor`.
struct ImportCommand {
  std::filesystem::path source;
  std::string model;
  std::filesystem::path output_dir;
  std::vector<std::string> prices;  ///< GPU=USD
  std::vector<std::string> quotas;  ///< GPU@ZONE=N
  int global_batch = 0;
  int sequence_length = 0;
};
int run_import(const ImportCommand& options);

/// Options of `sailor-plan import-hf`.
struct ImportHfCommand {
  std::filesystem::path config;  ///< a Hugging Face config.json (or its folder)
  std::filesystem::path output;  ///< model.json to write
  int sequence_length = 2048;
  std::string name;  ///< model name (default: the config's folder name)
};
int run_import_hf(const ImportHfCommand& options);

/// Options of `sailor-plan simulate`.
struct SimulateCommand {
  InputPaths paths;
  std::filesystem::path plan;
  std::optional<std::filesystem::path> trace;
  bool json = false;
};
int run_simulate(const SimulateCommand& options);

/// Options of `sailor-plan search`.
struct SearchCommand {
  InputPaths paths;
  std::string objective = "throughput";
  double max_cost_per_iter = 0;
  double min_throughput = 0;
  double max_energy_per_iter = 0;
  int max_gpus = 0;
  int top = 1;
  int max_stages = 16;
  bool exhaustive = false;
  std::optional<std::filesystem::path> output;
  bool json = false;
};
int run_search(const SearchCommand& options);

/// Options of `sailor-plan calibrate`.
struct CalibrateCommand {
  InputPaths paths;
  std::filesystem::path runs;           ///< measured runs (docs/sailor-model.md, "Calibration")
  std::filesystem::path hold_out;       ///< another model's inputs folder: predicted with the fit, never fitted to
  std::filesystem::path hold_out_runs;  ///< its measured runs (default: hold_out/measured_runs.json)
  bool json = false;
};
int run_calibrate(const CalibrateCommand& options);

/// Options of `sailor-plan export`.
struct ExportCommand {
  InputPaths paths;
  std::filesystem::path plan;
  std::string format = "sailor";
  std::filesystem::path output;
};
int run_export(const ExportCommand& options);

}  // namespace fleet::sailor
