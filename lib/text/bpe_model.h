// The byte-pair-encoding model of a Hugging Face tokenizer.json: vocabulary,
// ranked merges, unknown token and byte fallback. Turns one pre-tokenized
// word into token ids exactly as the `tokenizers` library does.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fleet::text {

/// Settings of a BPE model besides its vocabulary and merges.
struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;  ///< prepended to non-initial pieces
  bool fuse_unk = false;                  ///< consecutive unknowns become one
  bool byte_fallback = false;             ///< unknown characters as <0xNN> tokens
  bool ignore_merges = false;             ///< a word in the vocabulary is one token
};

class BpeModel {
 public:
  /// `merges` are pairs of token strings, highest priority first. InputError
  /// when a merge names a token that is not in `vocab`, or its result is not.
  BpeModel(std::unordered_map<std::string, std::int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  /// Appends the ids of `word` to `out`. InputError when a character is
  /// unknown and there is neither a byte fallback nor an unknown token.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  /// Id of a token string, if in the vocabulary.
  std::optional<std::int32_t> id_of(std::string_view token) const;
  /// The vocabulary (token -> id).
  const std::unordered_map<std::string, std::int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t result;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void tokenize_uncached(std::string_view word, std::vector<std::int32_t>& out) const;
  // A word's symbols before merging (bpe_model.cpp): one per character, its
  // bytes when byte fallback covers an unknown one, else the unknown token.
  struct Symbol;
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  // Applies the merges, lowest rank first, then leftmost.
  void merge(std::vector<Symbol>& symbols) const;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<std::int32_t> unk_id_;
  std::int32_t byte_ids_[256];
  bool has_all_bytes_ = false;
  // Words repeat a lot in text; remembering their ids is the library's trick too.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>> cache_;
};

}  // namespace fleet::text
