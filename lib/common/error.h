// Error types shared by every module, and the exit codes the programs map them to.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

namespace fleet {

/// Process exit codes used by every program (docs/usage.md, "Exit codes").
enum class ExitCode : int {
  kSuccess = 0,     ///< the work was done
  kFailure = 1,     ///< a runtime failure (I/O, out of memory, a bug)
  kUsage = 2,       ///< bad flags or input that fails validation
  kNoSolution = 3,  ///< the input is valid but has no answer (e.g. no plan fits)
};

/// Where in the input an error was found; every part is optional.
struct ErrorContext {
  std::string file;                     ///< file the problem is in
  std::string field;                    ///< field, JSON path or tensor name
  std::optional<std::uint64_t> offset;  ///< byte offset inside the file
};

/// Base of every error the toolkit throws on purpose. what() is one line:
/// "FILE: FIELD: at byte N: MESSAGE" with the absent parts left out.
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, std::string message, ErrorContext context = {});

  /// The message without the context prefix.
  const std::string& message() const noexcept { return message_; }
  /// File, field and offset the error refers to.
  const ErrorContext& context() const noexcept { return context_; }
  /// Exit code a program should end with because of this error.
  ExitCode exit_code() const noexcept { return code_; }

 private:
  ExitCode code_;
  std::string message_;
  ErrorContext context_;
};

/// Bad command-line usage or an option value out of range (exit 2).
class UsageError : public Error {
 public:
  explicit UsageError(std::string message, ErrorContext context = {})
      : Error(ExitCode::kUsage, std::move(message), std::move(context)) {}
};

/// An input file or value that fails validation: malformed, corrupt, wrong
/// shape, unknown name (exit 2).
class InputError : public Error {
 public:
  explicit InputError(std::string message, ErrorContext context = {})
      : Error(ExitCode::kUsage, std::move(message), std::move(context)) {}
};

/// The operating system refused: open, read, write, rename, mmap (exit 1).
class IoError : public Error {
 public:
  explicit IoError(std::string message, ErrorContext context = {})
      : Error(ExitCode::kFailure, std::move(message), std::move(context)) {}
};

/// Valid input without a solution, e.g. no plan fits in memory (exit 3).
class NoSolutionError : public Error {
 public:
  explicit NoSolutionError(std::string message, ErrorContext context = {})
      : Error(ExitCode::kNoSolution, std::move(message), std::move(context)) {}
};

/// A failure while doing the work that is neither bad input nor I/O (exit 1).
class RuntimeFailure : public Error {
 public:
  explicit RuntimeFailure(std::string message, ErrorContext context = {})
      : Error(ExitCode::kFailure, std::move(message), std::move(context)) {}
};

/// Formats "FILE: FIELD: at byte N: MESSAGE", leaving out empty parts, on
/// one line: control characters quoted from the input become C escapes.
std::string format_error(const std::string& message, const ErrorContext& context);

/// Exit code for any exception: an Error's own code, 1 for everything else.
ExitCode exit_code_for(const std::exception& e) noexcept;

/// Message for errno `err` prefixed by what was attempted ("open: No such file").
std::string errno_message(const std::string& what, int err);

}  // namespace fleet
