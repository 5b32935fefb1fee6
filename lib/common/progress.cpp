#include "common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/logging.h"

namespace fleet {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<std::uint64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

namespace {

double rate_of(const ProgressState& s) { return s.elapsed_s > 0 ? static_cast<double>(s.done) / s.elapsed_s : 0.0; }

std::string rate_and_eta(const ProgressState& s) {
  const double rate = rate_of(s);
  std::string out = fmt::format("{:.3g} {}/s", rate, s.unit);
  if (s.total > 0 && s.done < s.total) {
    out += " ETA " + (rate > 0 ? format_duration(static_cast<double>(s.total - s.done) / rate) : std::string("?"));
  } else if (s.total > 0) {
    out += " in " + format_duration(s.elapsed_s);
  }
  return out;
}

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 80;
}

}  // namespace

std::string render_progress_bar(const ProgressState& s, int width) {
  const std::string counts = s.total > 0 ? fmt::format("{}/{}", s.done, s.total) : fmt::format("{}", s.done);
  const std::string tail = fmt::format(" {} {}", counts, rate_and_eta(s));
  const int bar_width = width - static_cast<int>(s.label.size() + tail.size()) - 3;
  if (s.total == 0 || bar_width < 5) return s.label + tail;
  const double fraction = std::min(1.0, static_cast<double>(s.done) / static_cast<double>(s.total));
  const int filled = static_cast<int>(fraction * bar_width);
  return s.label + " [" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(bar_width - filled), '.') + "]" + tail;
}

std::string render_progress_line(const ProgressState& s) {
  if (s.total == 0) return fmt::format("{}: {} {}, {}", s.label, s.done, s.unit, rate_and_eta(s));
  const double pct = 100.0 * static_cast<double>(s.done) / static_cast<double>(s.total);
  return fmt::format("{}: {}/{} {} ({:.0f}%), {}", s.label, s.done, s.total, s.unit, pct, rate_and_eta(s));
}

Progress::Progress(std::string label, std::uint64_t total, std::string unit, ProgressStyle style)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), style_(style), clock_([] {
        return Clock::now();
      }) {
  if (style_ == ProgressStyle::kAuto) {
    if (logging_is_quiet()) {
      style_ = ProgressStyle::kSilent;
    } else {
      style_ = ::isatty(STDERR_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLogLines;
    }
  }
  start_ = last_report_ = clock_();
}

Progress::~Progress() {
  if (!finished_ && shown_ && style_ == ProgressStyle::kBar) std::fputs("\n", stderr);  // leave the terminal tidy
}

void Progress::set_clock(std::function<Clock::time_point()> clock) {
  clock_ = std::move(clock);
  start_ = last_report_ = clock_();
}

ProgressState Progress::state() const {
  return ProgressState{label_, unit_, done_, total_, std::chrono::duration<double>(clock_() - start_).count()};
}

void Progress::advance(std::uint64_t n) {
  done_ += n;
  maybe_report(false);
}

void Progress::set(std::uint64_t done) {
  done_ = done;
  maybe_report(false);
}

void Progress::finish() {
  if (finished_) return;
  maybe_report(true);
  if (style_ == ProgressStyle::kBar) std::fputs("\n", stderr);
  finished_ = true;
}

void Progress::finish_if_shown() {
  if (shown_) finish();
  finished_ = true;
}

void Progress::maybe_report(bool force) {
  if (style_ == ProgressStyle::kSilent) return;
  const auto now = clock_();
  const auto interval = style_ == ProgressStyle::kBar ? bar_interval_ : log_interval_;
  if (!force && now - last_report_ < interval) return;
  last_report_ = now;
  shown_ = true;
  if (style_ == ProgressStyle::kBar) {
    const std::string line = render_progress_bar(state(), terminal_width() - 1);
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    std::fflush(stderr);
  } else {
    const std::string line = render_progress_line(state());
    if (sink_) {
      sink_(line);
    } else {
      spdlog::info("{}", line);
    }
  }
}

}  // namespace fleet
