#include "common/output_check.h"

#include <unistd.h>

#include <iostream>

#include "common/error.h"
#include "common/file_io.h"

namespace fleet {

namespace fs = std::filesystem;

namespace {

// The absolute, normalised path with symbolic links of existing parts resolved.
fs::path resolved(const fs::path& path) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : out;
}

// True when `inner` is `outer` or lies somewhere below it.
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

[[noreturn]] void refuse(const std::string& option, const fs::path& path, const std::string& why) {
  throw UsageError(option + " " + path.string() + ": " + why);
}

}  // namespace

OutputCheck& OutputCheck::input(const fs::path& path, std::string option) {
  if (!path.empty()) inputs_.push_back({path, std::move(option), false});
  return *this;
}

OutputCheck& OutputCheck::file(const fs::path& path, std::string option) {
  if (!path.empty()) outputs_.push_back({path, std::move(option), false});
  return *this;
}

OutputCheck& OutputCheck::folder(const fs::path& path, std::string option) {
  if (!path.empty()) outputs_.push_back({path, std::move(option), true});
  return *this;
}

void OutputCheck::check(Existing existing, bool force) const {
  int stdin_readers = 0, stdout_writers = 0;
  for (const Entry& in : inputs_) stdin_readers += is_stdio(in.path) ? 1 : 0;
  if (stdin_readers > 1) throw UsageError("only one input can be '-' (standard input)");
  for (const Entry& out : outputs_) {
    if (is_stdio(out.path)) {
      if (out.folder) refuse(out.option, out.path, "a folder cannot be standard output");
      if (++stdout_writers > 1) throw UsageError("only one output can be '-' (standard output)");
      continue;
    }
    std::error_code ec;
    const fs::path parent = out.path.parent_path().empty() ? fs::path(".") : out.path.parent_path();
    if (!fs::is_directory(parent, ec)) refuse(out.option, out.path, "the folder " + parent.string() + " does not exist");
    if (::access(parent.c_str(), W_OK | X_OK) != 0) refuse(out.option, out.path, "the folder " + parent.string() + " is not writable");
    const auto status = fs::status(out.path, ec);
    if (fs::exists(status)) {
      if (out.folder && !fs::is_directory(status)) refuse(out.option, out.path, "exists and is not a folder");
      if (!out.folder && fs::is_directory(status)) refuse(out.option, out.path, "is a folder; give a file name");
      const bool has_content = !out.folder || !fs::is_empty(out.path, ec);
      if (existing == Existing::kNeedsForce && !force && has_content) {
        refuse(out.option, out.path, std::string(out.folder ? "exists and is not empty" : "exists") +
                                         "; pass --force to replace it");
      }
    }
    const fs::path target = resolved(out.path);
    for (const Entry& in : inputs_) {
      if (is_stdio(in.path) || !fs::exists(in.path, ec)) continue;
      const fs::path source = resolved(in.path);
      if (target == source) refuse(out.option, out.path, "is also the input " + in.option + "; write elsewhere");
      if (fs::is_directory(source, ec) && is_within(target, source)) {
        refuse(out.option, out.path, "lies inside the input " + in.option + " " + in.path.string() + "; write elsewhere");
      }
      if (out.folder && is_within(source, target)) {
        refuse(out.option, out.path, "replacing it would remove the input " + in.option + " " + in.path.string());
      }
    }
    for (const Entry& other : outputs_) {
      if (&other != &out && !is_stdio(other.path) && resolved(other.path) == target) {
        refuse(out.option, out.path, "is also the output " + other.option);
      }
    }
  }
}

bool OutputCheck::writes_stdout() const {
  for (const Entry& out : outputs_) {
    if (is_stdio(out.path)) return true;
  }
  return false;
}

std::ostream& report_stream(const OutputCheck& check) { return check.writes_stdout() ? std::cerr : std::cout; }

}  // namespace fleet
