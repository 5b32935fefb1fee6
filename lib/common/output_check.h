// Checks a command's outputs before it starts working: every output can be
// written, none replaces or sits inside one of its inputs, existing results
// are replaced only where the command's --force rules allow, and no other
// command is writing the same output (the check claims each output for the
// rest of the process, see output_claim.h). A command that searches or
// trains for minutes must not fail at the end because of a path it could
// have checked at the start.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace fleet {

/// What happens to an output that already exists.
enum class Existing {
  kReplace,     ///< replaced atomically (files a command regenerates, like plans and reports)
  kNeedsForce,  ///< kept unless --force (models and deltas that took long to make)
};

/// The paths of one invocation, checked as a whole by check().
class OutputCheck {
 public:
  /// Something the command reads (a file or a folder); `option` names it in errors.
  OutputCheck& input(const std::filesystem::path& path, std::string option);
  /// An output file; "-" is standard output.
  OutputCheck& file(const std::filesystem::path& path, std::string option);
  /// An output folder that the command replaces as a whole.
  OutputCheck& folder(const std::filesystem::path& path, std::string option);
  /// Checks without claiming: for the processes of a job whose outputs
  /// another process of the same job (rank 0, the controller) claims.
  OutputCheck& without_claim();

  /// UsageError (exit 2) naming the option when: an output's folder is
  /// missing or not writable; its name is longer than the folder accepts; a
  /// file output is a folder or a folder output a file; an output is a
  /// socket or a block device (resolve_output); an output exists and
  /// `existing` is kNeedsForce without `force`; an output is an input, lies
  /// inside an input folder or (a folder) contains an input; two outputs are
  /// the same path; more than one input or output is standard input/output;
  /// a folder output is a stream; another command holds an output. Outputs
  /// that are streams (standard output, a FIFO, /dev/null) are written into,
  /// so they need no --force. Then claims every file and folder output.
  void check(Existing existing, bool force = false) const;

  /// True when an output is standard output ("-", /dev/stdout): the command's report then goes to stderr,
  /// so that standard output carries only the data.
  bool writes_stdout() const;

 private:
  struct Entry {
    std::filesystem::path path;
    std::string option;
    bool folder = false;
  };
  std::vector<Entry> inputs_, outputs_;
  bool claim_ = true;
};

/// Where a command prints its report: stdout, or stderr when `check` sends
/// data to stdout.
std::ostream& report_stream(const OutputCheck& check);

}  // namespace fleet
