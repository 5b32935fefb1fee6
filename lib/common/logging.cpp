#include "common/logging.h"

#include <algorithm>
#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.h"

namespace fleet {

spdlog::level::level_enum parse_log_level(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "trace") return spdlog::level::trace;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "info") return spdlog::level::info;
  if (lower == "warn" || lower == "warning") return spdlog::level::warn;
  if (lower == "error") return spdlog::level::err;
  if (lower == "critical") return spdlog::level::critical;
  if (lower == "off") return spdlog::level::off;
  throw UsageError("unknown log level '" + name + "' (use trace, debug, info, warn, error, critical or off)");
}

spdlog::level::level_enum resolve_log_level(const LogOptions& options, const char* env_value) {
  if (!options.level.empty()) return parse_log_level(options.level);
  if (options.quiet) return spdlog::level::warn;
  if (options.verbosity >= 2) return spdlog::level::trace;
  if (options.verbosity == 1) return spdlog::level::debug;
  if (env_value != nullptr && *env_value != '\0') {
    try {
      return parse_log_level(env_value);
    } catch (const UsageError& e) {
      throw UsageError(std::string(kLogLevelEnvVar) + ": " + e.message());
    }
  }
  return spdlog::level::info;
}

void setup_logging(const std::string& program, const LogOptions& options) {
  const auto level = resolve_log_level(options, std::getenv(kLogLevelEnvVar));
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(program, std::move(sink));
  logger->set_pattern("[%H:%M:%S.%e] " + program + " %^%l%$: %v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

bool logging_is_quiet() { return spdlog::default_logger_raw()->level() > spdlog::level::info; }

}  // namespace fleet
