// Chrome trace event JSON (loads in Perfetto and chrome://tracing): complete
// events, instants, counters and process/thread names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet {

/// Builds a trace in memory and writes it atomically. Times are microseconds.
class ChromeTrace {
 public:
  /// A span of work ("ph":"X") on row (pid, tid).
  void add_complete(int pid, int tid, const std::string& name, const std::string& category, double start_us,
                    double duration_us, nlohmann::json args = nullptr);
  /// A point in time ("ph":"i") on one row.
  void add_instant(int pid, int tid, const std::string& name, const std::string& category, double time_us);
  /// A counter sample ("ph":"C"), drawn as a graph per name.
  void add_counter(int pid, const std::string& name, double time_us, const std::string& series, double value);
  /// Names the process row group `pid`.
  void set_process_name(int pid, const std::string& name);
  /// Names row `tid` of `pid`; rows sort by `sort_index`.
  void set_thread_name(int pid, int tid, const std::string& name, int sort_index = 0);

  /// Number of events added (metadata included).
  std::size_t size() const { return events_.size(); }
  /// {"traceEvents": [...], "displayTimeUnit": "ms"}.
  nlohmann::json to_json() const;
  /// Writes to_json() atomically.
  void write(const std::filesystem::path& path) const;

 private:
  std::vector<nlohmann::json> events_;
};

}  // namespace fleet
