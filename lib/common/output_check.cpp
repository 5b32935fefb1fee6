#include "common/output_check.h"

#include <unistd.h>

#include <iostream>

#include "common/error.h"
#include "common/file_io.h"
#include "common/output_claim.h"
#include "common/output_path.h"

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
  if (!path.empty()) outputs_.push_back({normalize_output_path(path), std::move(option), false});
  return *this;
}

OutputCheck& OutputCheck::folder(const fs::path& path, std::string option) {
  if (!path.empty()) outputs_.push_back({normalize_output_path(path), std::move(option), true});
  return *this;
}

OutputCheck& OutputCheck::without_claim() {
  claim_ = false;
  return *this;
}

void OutputCheck::check(Existing existing, bool force) const {
  int stdin_readers = 0, stdout_writers = 0;
  for (const Entry& in : inputs_) stdin_readers += is_stdio(in.path) ? 1 : 0;
  if (stdin_readers > 1) throw UsageError("only one input can be '-' (standard input)");
  std::vector<const Entry*> to_claim;
  std::vector<fs::path> claim_paths;
  for (const Entry& out : outputs_) {
    const OutputTarget target = resolve_output(out.path);
    if (target.kind != OutputKind::kReplace) {
      // Written into, never replaced: nothing to force, nothing to claim.
      if (out.folder)
        refuse(out.option, out.path,
               target.is_stdout() ? "a folder cannot be standard output"
                                  : "is not a folder (a folder output cannot be a stream)");
      if (target.is_stdout() && ++stdout_writers > 1) throw UsageError("only one output can be '-' (standard output)");
      continue;
    }
    std::error_code ec;
    const fs::path parent = target.path.parent_path().empty() ? fs::path(".") : target.path.parent_path();
    if (!fs::is_directory(parent, ec))
      refuse(out.option, out.path, "the folder " + parent.string() + " does not exist");
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      refuse(out.option, out.path, "the folder " + parent.string() + " is not writable");
    const std::size_t name_max = max_name_length(parent);
    const std::size_t name_length = target.path.filename().string().size();
    if (name_length > name_max)
      refuse(out.option, out.path,
             "the name is " + std::to_string(name_length) + " bytes long; the folder accepts at most " +
                 std::to_string(name_max));
    if (target.exists) {
      if (out.folder && !target.is_folder) refuse(out.option, out.path, "exists and is not a folder");
      if (!out.folder && target.is_folder) refuse(out.option, out.path, "is a folder; give a file name");
      const bool has_content = !out.folder || !fs::is_empty(target.path, ec);
      if (existing == Existing::kNeedsForce && !force && has_content) {
        refuse(out.option, out.path,
               std::string(out.folder ? "exists and is not empty" : "exists") + "; pass --force to replace it");
      }
    }
    const fs::path real = resolved(target.path);
    for (const Entry& in : inputs_) {
      if (is_stdio(in.path) || !fs::exists(in.path, ec)) continue;
      const fs::path source = resolved(in.path);
      if (real == source) refuse(out.option, out.path, "is also the input " + in.option + "; write elsewhere");
      if (fs::is_directory(source, ec) && is_within(real, source)) {
        refuse(out.option, out.path,
               "lies inside the input " + in.option + " " + in.path.string() + "; write elsewhere");
      }
      if (out.folder && is_within(source, real)) {
        refuse(out.option, out.path, "replacing it would remove the input " + in.option + " " + in.path.string());
      }
    }
    for (const Entry& other : outputs_) {
      if (&other != &out && !is_stdio(other.path) && resolved(other.path) == real) {
        refuse(out.option, out.path, "is also the output " + other.option);
      }
    }
    to_claim.push_back(&out);
    claim_paths.push_back(target.path);
  }
  // Only once every check passed: a refused command claims nothing.
  for (std::size_t i = 0; claim_ && i < to_claim.size(); ++i) {
    try {
      claim_output(claim_paths[i]);
    } catch (const UsageError& e) {
      refuse(to_claim[i]->option, to_claim[i]->path, e.message());
    }
  }
}

bool OutputCheck::writes_stdout() const {
  for (const Entry& out : outputs_) {
    try {
      if (resolve_output(out.path).is_stdout()) return true;
    } catch (const Error&) {
      // check() reports it
    }
  }
  return false;
}

std::ostream& report_stream(const OutputCheck& check) { return check.writes_stdout() ? std::cerr : std::cout; }

}  // namespace fleet
