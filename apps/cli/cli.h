// Shared command-line scaffolding: every program is a Tool with the same
// common flags, subcommands with actions, one error line and the exit codes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/logging.h"

namespace fleet {

/// One program: `name subcommand [options]`, with --help, --version, -v, -q,
/// --log-level defined once here.
class Tool {
 public:
  /// Action of a subcommand; returns the exit code (usually 0) or throws.
  using Action = std::function<int()>;

  Tool(std::string name, std::string description);

  /// The CLI11 application, for options that belong to the whole program.
  CLI::App& app() { return *app_; }

  /// Adds a subcommand and the action run after parsing and logging set-up.
  CLI::App* add_command(const std::string& name, const std::string& description, Action action);

  /// Extra lines printed by --version after the version (build and devices).
  void set_version_details(std::function<std::string()> details);

  /// Parses, sets up logging, runs the chosen action; maps every error to
  /// one line on stderr ("name: error: ...") and an exit code. Temporaries
  /// are removed if a signal ends the program (signal_cleanup.h), and
  /// standard output is flushed and checked before a successful exit: a
  /// result that could not be written (a full disk) makes the exit code 1.
  int run(int argc, char** argv);

  /// The text --version prints.
  std::string version_text() const;

 private:
  int run_command(int argc, char** argv);

  std::string name_;
  std::unique_ptr<CLI::App> app_;
  LogOptions log_options_;
  std::map<const CLI::App*, Action> actions_;
  std::function<std::string()> version_details_;
};

/// A check of a numeric option, run on the text before CLI11 converts it (so
/// "-3" never wraps into a huge unsigned count): the value must be a number in
/// [min, max]. The message names the option and the range. Caps are set where
/// a larger value would exhaust memory or time rather than do more work.
CLI::Validator in_range(double min, double max);

/// Transform for options that name an output file or folder: normalises the
/// path where it is parsed ("out/" becomes "out"), so every later use means
/// the same thing (see normalize_output_path).
CLI::Validator output_path();

/// A numeric option with its default shown and its range checked (in_range).
template <typename T>
CLI::Option* add_number_option(CLI::App* command, const std::string& name, T& value, const std::string& help,
                               double min, double max) {
  return command->add_option(name, value, help)->capture_default_str()->check(in_range(min, max));
}

/// Adds `--threads N` (CPU threads of libtorch and of the BLAS it calls; 0
/// keeps their defaults), checked to lie in [0, 1024].
CLI::Option* add_threads_option(CLI::App* command, int* threads);

/// Adds the `--json` flag (machine-readable result on stdout, logs on stderr).
CLI::Option* add_json_flag(CLI::App* command, bool* json);

}  // namespace fleet
