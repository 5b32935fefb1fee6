// Logging set up once per program: spdlog to stderr, level from flags or environment.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace fleet {

/// Environment variable that sets the log level when no flag does.
inline constexpr const char* kLogLevelEnvVar = "GPUFLEET_LOG_LEVEL";

/// The logging flags every program shares.
struct LogOptions {
  int verbosity = 0;   ///< number of -v: 1 = debug, 2+ = trace
  bool quiet = false;  ///< -q: warnings and errors only
  std::string level;   ///< --log-level NAME, wins over -v/-q
};

/// Resolves the effective level: --log-level, then -q / -v, then the
/// environment value (may be null), then info. Throws UsageError on a bad name.
spdlog::level::level_enum resolve_log_level(const LogOptions& options, const char* env_value);

/// Parses trace|debug|info|warn|warning|error|critical|off; throws UsageError otherwise.
spdlog::level::level_enum parse_log_level(const std::string& name);

/// Installs the default logger for `program` (stderr, coloured on a terminal).
void setup_logging(const std::string& program, const LogOptions& options);

/// True when the user asked for quiet output (-q or a level above info).
bool logging_is_quiet();

}  // namespace fleet
