// JSON helpers on nlohmann::json whose errors name the file and the JSON path
// (RFC 6901 pointer) of a missing or mistyped field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fleet {

/// A node of a parsed document that remembers its file and path, so that
/// every accessor can throw an InputError saying where the problem is.
class JsonValue {
 public:
  JsonValue(const nlohmann::json& node, std::shared_ptr<const std::string> file, std::string path)
      : node_(&node), file_(std::move(file)), path_(std::move(path)) {}

  /// The underlying nlohmann value.
  const nlohmann::json& raw() const { return *node_; }
  /// JSON pointer of this node ("" for the root, "/stages/0/layers" below).
  const std::string& path() const { return path_; }
  /// File the document came from (or the name given to parse_json).
  const std::string& file() const { return *file_; }

  bool is_object() const { return node_->is_object(); }
  bool is_array() const { return node_->is_array(); }
  bool is_null() const { return node_->is_null(); }

  /// True when this is an object with member `key`.
  bool has(std::string_view key) const;
  /// Required member; throws "missing field" when absent or not an object.
  JsonValue at(std::string_view key) const;
  /// Optional member; nullopt when absent or null.
  std::optional<JsonValue> find(std::string_view key) const;
  /// Required array element.
  JsonValue at(std::size_t index) const;
  /// Number of elements of an array or members of an object.
  std::size_t size() const;
  /// Elements of an array (throws when this is not an array).
  std::vector<JsonValue> elements() const;
  /// Members of an object in document order of nlohmann (sorted by key).
  std::vector<std::pair<std::string, JsonValue>> members() const;

  /// Typed value: bool, std::string, integers (range-checked, integral
  /// floats accepted), double, std::vector of those.
  template <typename T>
  T as() const;

  /// Required typed member.
  template <typename T>
  T get(std::string_view key) const {
    return at(key).as<T>();
  }
  /// Optional typed member with a default.
  template <typename T>
  T get_or(std::string_view key, T fallback) const {
    auto member = find(key);
    return member ? member->as<T>() : std::move(fallback);
  }

  /// Throws when this is an object holding a key outside `known` (catches typos).
  void reject_unknown_keys(std::initializer_list<std::string_view> known) const;
  /// Throws InputError "FILE: PATH: message".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  void require_object() const;
  void require_array() const;
  std::string type_name() const;
  std::int64_t as_int64() const;
  std::uint64_t as_uint64() const;

  const nlohmann::json* node_;
  std::shared_ptr<const std::string> file_;
  std::string path_;
};

/// A parsed document that owns its JSON and hands out JsonValues.
class JsonDocument {
 public:
  JsonDocument(nlohmann::json json, std::string file)
      : json_(std::make_shared<nlohmann::json>(std::move(json))),
        file_(std::make_shared<const std::string>(std::move(file))) {}

  /// The root node.
  JsonValue root() const { return JsonValue(*json_, file_, ""); }
  /// The parsed JSON.
  const nlohmann::json& json() const { return *json_; }

 private:
  std::shared_ptr<nlohmann::json> json_;
  std::shared_ptr<const std::string> file_;
};

/// Parses text; a syntax error becomes InputError with `name` and the byte offset.
JsonDocument parse_json(std::string_view text, const std::string& name);
/// Reads and parses a file (IoError when unreadable, InputError when malformed).
JsonDocument load_json_file(const std::filesystem::path& path);
/// Writes JSON atomically (indent < 0: compact), ending with a newline.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& json, int indent = 2);
/// nlohmann's message without its "[json.exception...]" prefix.
std::string json_error_text(const nlohmann::json::exception& e);
/// Escapes one key for use in a JSON pointer (RFC 6901: ~ -> ~0, / -> ~1).
std::string json_pointer_escape(std::string_view key);

// ---- template implementation -------------------------------------------

template <typename T>
T JsonValue::as() const {
  if constexpr (std::is_same_v<T, bool>) {
    if (!node_->is_boolean()) fail("expected a boolean, got " + type_name());
    return node_->get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!node_->is_string()) fail("expected a string, got " + type_name());
    return node_->get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) {
      const std::int64_t v = as_int64();
      if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          v > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
        fail("integer " + std::to_string(v) + " is out of range");
      }
      return static_cast<T>(v);
    } else {
      const std::uint64_t v = as_uint64();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        fail("integer " + std::to_string(v) + " is out of range");
      }
      return static_cast<T>(v);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!node_->is_number()) fail("expected a number, got " + type_name());
    return node_->get<T>();
  } else {
    // std::vector<U>
    using U = typename T::value_type;
    T out;
    for (const JsonValue& element : elements()) out.push_back(element.as<U>());
    return out;
  }
}

}  // namespace fleet
