#include "common/error.h"

#include <cstring>

namespace fleet {

namespace {

// An error is one line whatever the input it quotes: control characters (a
// newline inside a field name, a carriage return in a value) are written as
// C escapes, "\n" or "\x1b".
std::string one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[byte >> 4];
      out += hex[byte & 15];
    }
  }
  return out;
}

}  // namespace

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
  return one_line(out);
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

std::string errno_message(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace fleet
