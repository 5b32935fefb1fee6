// Oniguruma regular expressions: the engine Hugging Face `tokenizers` uses,
// so pre-tokenizer patterns from tokenizer.json behave the same here.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fleet::text {

/// A compiled UTF-8 pattern (Ruby syntax, Oniguruma's default).
class Regex {
 public:
  /// Compiles `pattern`; InputError with Oniguruma's message when invalid.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  /// Byte ranges [begin, end) of the successive non-empty matches in `text`.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleet::text
