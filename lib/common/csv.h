// CSV (RFC 4180: quoted fields, doubled quotes, CRLF or LF) with errors that
// name the file, line and column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_io.h"

namespace fleet {

/// A parsed CSV table: the header and the data rows, each with its line number.
class CsvTable {
 public:
  /// Parses `text`; InputError on an unterminated quote or a row whose field
  /// count differs from the header's, or past `max_rows` data rows (each
  /// field is a string: a table takes several times its text). Blank lines
  /// are skipped.
  static CsvTable parse(std::string_view text, const std::string& name, std::size_t max_rows = SIZE_MAX);
  /// Reads and parses a file of at most `max_bytes` (InputError beyond, unread).
  static CsvTable read(const std::filesystem::path& path, std::uintmax_t max_bytes = kMaxDocumentBytes,
                       std::size_t max_rows = SIZE_MAX);

  /// Column names of the first row.
  const std::vector<std::string>& header() const { return header_; }
  /// Number of data rows.
  std::size_t rows() const { return rows_.size(); }
  /// Field `column` of data row `row`.
  const std::string& at(std::size_t row, std::size_t column) const { return rows_[row][column]; }
  /// Fields of data row `row`.
  const std::vector<std::string>& row(std::size_t row) const { return rows_[row]; }
  /// 1-based line number of data row `row` in the file.
  std::size_t line_of(std::size_t row) const { return lines_[row]; }
  /// Index of a column by exact name, or nullopt.
  std::optional<std::size_t> column(std::string_view name) const;
  /// Index of a column; InputError naming the file when absent.
  std::size_t require_column(std::string_view name) const;
  /// Name given to parse() or the file path.
  const std::string& name() const { return name_; }

  /// Field as a double ("1,234.5" thousands separators accepted); InputError
  /// naming file, line and column when it is not a number.
  double number(std::size_t row, std::size_t column) const;
  /// Field as an integer (a float with no fraction accepted).
  long long integer(std::size_t row, std::size_t column) const;
  /// Throws InputError for (row, column) with `message`.
  [[noreturn]] void fail(std::size_t row, std::size_t column, const std::string& message) const;

 private:
  std::string name_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::size_t> lines_;
};

/// Quotes a field when it holds a comma, quote or newline.
std::string csv_escape(std::string_view field);

}  // namespace fleet
