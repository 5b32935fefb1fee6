#include "common/chrome_trace.h"

#include <cmath>

#include "common/error.h"
#include "common/json.h"

namespace fleet {

namespace {

void check_time(double t, const std::string& name) {
  if (!std::isfinite(t)) throw InputError("non-finite trace time", {"", name, std::nullopt});
}

}  // namespace

void ChromeTrace::add_complete(int pid, int tid, const std::string& name, const std::string& category, double start_us,
                               double duration_us, nlohmann::json args) {
  check_time(start_us, name);
  check_time(duration_us, name);
  if (duration_us < 0) throw InputError("negative trace duration", {"", name, std::nullopt});
  nlohmann::json e = {{"ph", "X"},       {"pid", pid},     {"tid", tid},        {"name", name},
                      {"cat", category}, {"ts", start_us}, {"dur", duration_us}};
  if (!args.is_null()) e["args"] = std::move(args);
  events_.push_back(std::move(e));
}

void ChromeTrace::add_instant(int pid, int tid, const std::string& name, const std::string& category, double time_us) {
  check_time(time_us, name);
  events_.push_back(
      {{"ph", "i"}, {"pid", pid}, {"tid", tid}, {"name", name}, {"cat", category}, {"ts", time_us}, {"s", "t"}});
}

void ChromeTrace::add_counter(int pid, const std::string& name, double time_us, const std::string& series,
                              double value) {
  check_time(time_us, name);
  events_.push_back({{"ph", "C"}, {"pid", pid}, {"name", name}, {"ts", time_us}, {"args", {{series, value}}}});
}

void ChromeTrace::set_process_name(int pid, const std::string& name) {
  events_.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"}, {"args", {{"name", name}}}});
}

void ChromeTrace::set_thread_name(int pid, int tid, const std::string& name, int sort_index) {
  events_.push_back({{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_name"}, {"args", {{"name", name}}}});
  events_.push_back(
      {{"ph", "M"}, {"pid", pid}, {"tid", tid}, {"name", "thread_sort_index"}, {"args", {{"sort_index", sort_index}}}});
}

nlohmann::json ChromeTrace::to_json() const { return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}}; }

void ChromeTrace::write(const std::filesystem::path& path) const { write_json_file(path, to_json(), -1); }

}  // namespace fleet
