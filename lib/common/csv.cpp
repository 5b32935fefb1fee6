#include "common/csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/error.h"
#include "common/file_io.h"

namespace fleet {

CsvTable CsvTable::parse(std::string_view text, const std::string& name, std::size_t max_rows) {
  CsvTable table;
  table.name_ = name;
  std::vector<std::string> fields;
  std::string field;
  std::size_t line = 1, record_line = 1;
  bool in_quotes = false, field_quoted = false, any = false;
  auto end_record = [&] {
    fields.push_back(std::move(field));
    field.clear();
    const bool blank = fields.size() == 1 && fields[0].empty() && !field_quoted;
    if (!blank) {
      if (table.header_.empty()) {
        table.header_ = std::move(fields);
      } else {
        if (fields.size() != table.header_.size()) {
          throw InputError("expected " + std::to_string(table.header_.size()) + " fields (as in the header), found " +
                               std::to_string(fields.size()),
                           {name, "line " + std::to_string(record_line), std::nullopt});
        }
        if (table.rows_.size() >= max_rows)
          throw InputError("more than " + std::to_string(max_rows) + " rows; at most that many are read",
                           {name, "line " + std::to_string(record_line), std::nullopt});
        table.rows_.push_back(std::move(fields));
        table.lines_.push_back(record_line);
      }
    }
    fields.clear();
    field_quoted = false;
    any = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && field.empty()) {
      in_quotes = field_quoted = any = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_record();
      ++line;
      record_line = line;
    } else {
      field += c;
      any = true;
    }
  }
  if (in_quotes)
    throw InputError("unterminated quoted field", {name, "line " + std::to_string(record_line), std::nullopt});
  if (any || !field.empty()) end_record();
  if (table.header_.empty()) throw InputError("empty CSV file (no header)", {name, "", std::nullopt});
  return table;
}

CsvTable CsvTable::read(const std::filesystem::path& path, std::uintmax_t max_bytes, std::size_t max_rows) {
  return parse(read_file(path, max_bytes), path.string(), max_rows);
}

std::optional<std::size_t> CsvTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return i;
  }
  return std::nullopt;
}

std::size_t CsvTable::require_column(std::string_view name) const {
  if (auto c = column(name)) return *c;
  throw InputError("missing column '" + std::string(name) + "'", {name_, "header", std::nullopt});
}

void CsvTable::fail(std::size_t row, std::size_t column, const std::string& message) const {
  const std::string col = column < header_.size() ? header_[column] : std::to_string(column + 1);
  throw InputError(message, {name_, "line " + std::to_string(lines_.at(row)) + ", column '" + col + "'", std::nullopt});
}

double CsvTable::number(std::size_t row, std::size_t column) const {
  std::string text;
  for (char c : rows_.at(row).at(column)) {
    if (c != ',' && c != ' ') text += c;  // "1,234.5" as some exporters print it
  }
  if (text.empty()) fail(row, column, "empty field, expected a number");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) {
    fail(row, column, "expected a number, got '" + rows_[row][column] + "'");
  }
  return v;
}

long long CsvTable::integer(std::size_t row, std::size_t column) const {
  const double v = number(row, column);
  if (v != std::floor(v) || std::fabs(v) > 9.0e15)
    fail(row, column, "expected an integer, got '" + rows_[row][column] + "'");
  return static_cast<long long>(v);
}

std::string csv_escape(std::string_view field) {
  if (field.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace fleet
