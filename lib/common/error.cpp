#include "common/error.h"

#include <cstring>

namespace fleet {

std::string format_error(const std::string& message, const ErrorContext& context) {
  std::string out;
  auto append = [&out](const std::string& part) {
    if (!out.empty()) out += ": ";
    out += part;
  };
  if (!context.file.empty()) append(context.file);
  if (!context.field.empty()) append(context.field);
  if (context.offset) append("at byte " + std::to_string(*context.offset));
  append(message);
  return out;
}

Error::Error(ExitCode code, std::string message, ErrorContext context)
    : std::runtime_error(format_error(message, context)),
      code_(code),
      message_(std::move(message)),
      context_(std::move(context)) {}

ExitCode exit_code_for(const std::exception& e) noexcept {
  if (const auto* err = dynamic_cast<const Error*>(&e)) return err->exit_code();
  return ExitCode::kFailure;
}

std::string errno_message(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace fleet
