// Progress of long work: a bar with rate and ETA on a terminal, periodic
// log lines otherwise (batch jobs, CI), nothing in quiet mode.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace fleet {

/// How progress is shown.
enum class ProgressStyle {
  kAuto,      ///< bar when stderr is a terminal and logging is not quiet, else log lines
  kBar,       ///< always a bar on stderr
  kLogLines,  ///< an info log line every `log_interval`
  kSilent,    ///< nothing
};

/// Snapshot used to render one line; exposed for tests.
struct ProgressState {
  std::string label;
  std::string unit;
  std::uint64_t done = 0;
  std::uint64_t total = 0;  ///< 0 when unknown
  double elapsed_s = 0;
};

/// "label [#####.....] 45/100 units 12.3 units/s ETA 0:04" fitted to `width` columns.
std::string render_progress_bar(const ProgressState& state, int width);
/// "label: 45/100 units (45%), 12.3 units/s, ETA 0:04" for log lines.
std::string render_progress_line(const ProgressState& state);
/// Seconds as "H:MM:SS" or "M:SS".
std::string format_duration(double seconds);

/// Reports progress of one piece of long work. Not thread-safe: advance it
/// from one thread.
class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  Progress(std::string label, std::uint64_t total, std::string unit = "steps",
           ProgressStyle style = ProgressStyle::kAuto);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Adds `n` finished units.
  void advance(std::uint64_t n = 1);
  /// Sets the finished units.
  void set(std::uint64_t done);
  /// Finishes: final bar or log line with the total time.
  void finish();
  /// Finishes as finish() if progress was shown at all; work too short to
  /// have shown any finishes silently (no line for every quick run).
  void finish_if_shown();

  /// Interval between log lines in kLogLines style (default 10 s).
  void set_log_interval(std::chrono::milliseconds interval) { log_interval_ = interval; }
  /// Replaces the clock (tests).
  void set_clock(std::function<Clock::time_point()> clock);
  /// Replaces where log lines go (default: spdlog info).
  void set_sink(std::function<void(const std::string&)> sink) { sink_ = std::move(sink); }

 private:
  void maybe_report(bool force);
  ProgressState state() const;

  std::string label_;
  std::string unit_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  ProgressStyle style_;
  bool finished_ = false;
  bool shown_ = false;  // a bar or line was written
  std::function<Clock::time_point()> clock_;
  std::function<void(const std::string&)> sink_;
  Clock::time_point start_;
  Clock::time_point last_report_;
  std::chrono::milliseconds log_interval_{10000};
  std::chrono::milliseconds bar_interval_{100};
};

}  // namespace fleet
