#include "common/json.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "common/file_io.h"

namespace fleet {

std::string json_pointer_escape(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

void JsonValue::fail(const std::string& message) const {
  throw InputError(message, ErrorContext{*file_, path_.empty() ? "/" : path_, std::nullopt});
}

std::string JsonValue::type_name() const {
  return node_->type_name();  // "object", "array", "string", "number", "boolean", "null"
}

void JsonValue::require_object() const {
  if (!node_->is_object()) fail("expected an object, got " + type_name());
}

void JsonValue::require_array() const {
  if (!node_->is_array()) fail("expected an array, got " + type_name());
}

bool JsonValue::has(std::string_view key) const { return node_->is_object() && node_->find(key) != node_->end(); }

JsonValue JsonValue::at(std::string_view key) const {
  require_object();
  auto it = node_->find(key);
  if (it == node_->end()) fail("missing field '" + std::string(key) + "'");
  return JsonValue(*it, file_, path_ + "/" + json_pointer_escape(key));
}

std::optional<JsonValue> JsonValue::find(std::string_view key) const {
  require_object();
  auto it = node_->find(key);
  if (it == node_->end() || it->is_null()) return std::nullopt;
  return JsonValue(*it, file_, path_ + "/" + json_pointer_escape(key));
}

JsonValue JsonValue::at(std::size_t index) const {
  require_array();
  if (index >= node_->size()) {
    fail("index " + std::to_string(index) + " is past the end (" + std::to_string(node_->size()) + " elements)");
  }
  return JsonValue((*node_)[index], file_, path_ + "/" + std::to_string(index));
}

std::size_t JsonValue::size() const {
  if (!node_->is_array() && !node_->is_object()) {
    fail("expected an array or object, got " + type_name());
  }
  return node_->size();
}

std::vector<JsonValue> JsonValue::elements() const {
  require_array();
  std::vector<JsonValue> out;
  out.reserve(node_->size());
  for (std::size_t i = 0; i < node_->size(); ++i) {
    out.emplace_back((*node_)[i], file_, path_ + "/" + std::to_string(i));
  }
  return out;
}

std::vector<std::pair<std::string, JsonValue>> JsonValue::members() const {
  require_object();
  std::vector<std::pair<std::string, JsonValue>> out;
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    out.emplace_back(it.key(), JsonValue(it.value(), file_, path_ + "/" + json_pointer_escape(it.key())));
  }
  return out;
}

void JsonValue::reject_unknown_keys(std::initializer_list<std::string_view> known) const {
  require_object();
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || (it.key() == k);
    if (!ok) {
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      JsonValue(it.value(), file_, path_ + "/" + json_pointer_escape(it.key()))
          .fail("unknown field '" + it.key() + "' (expected one of: " + list + ")");
    }
  }
}

std::int64_t JsonValue::as_int64() const {
  if (node_->is_number_integer()) {
    if (node_->is_number_unsigned() && node_->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail("integer is out of range");
    }
    return node_->get<std::int64_t>();
  }
  if (node_->is_number_float()) {
    const double d = node_->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15) {
      return static_cast<std::int64_t>(d);
    }
    fail("expected an integer, got " + node_->dump());
  }
  fail("expected an integer, got " + type_name());
}

std::uint64_t JsonValue::as_uint64() const {
  if (node_->is_number_unsigned()) return node_->get<std::uint64_t>();
  const std::int64_t v = as_int64();
  if (v < 0) fail("expected a non-negative integer, got " + std::to_string(v));
  return static_cast<std::uint64_t>(v);
}

std::string json_error_text(const nlohmann::json::exception& e) {
  // nlohmann prefixes "[json.exception.parse_error.101] "; keep the human part.
  std::string message = e.what();
  if (auto pos = message.find("] "); pos != std::string::npos) message.erase(0, pos + 2);
  return message;
}

JsonDocument parse_json(std::string_view text, const std::string& name) {
  try {
    return JsonDocument(nlohmann::json::parse(text), name);
  } catch (const nlohmann::json::parse_error& e) {
    ErrorContext context{name, "", std::nullopt};
    if (e.byte > 0) context.offset = e.byte - 1;  // nlohmann counts from 1
    throw InputError("malformed JSON: " + json_error_text(e), context);
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large
    throw InputError("malformed JSON: " + json_error_text(e), {name, "", std::nullopt});
  }
}

JsonDocument load_json_file(const std::filesystem::path& path) {
  return parse_json(read_file(path, kMaxDocumentBytes), path.string());
}

void write_json_file(const std::filesystem::path& path, const nlohmann::json& json, int indent) {
  write_file_atomically(path, json.dump(indent) + "\n");
}

}  // namespace fleet
