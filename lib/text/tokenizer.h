// Hugging Face tokenizer.json tokenizers with a BPE model: byte-level BPE
// (GPT-2 / Llama-3 style) and SentencePiece-style BPE with byte fallback
// (Llama-2 style), with added and special tokens. Encodings equal the
// `tokenizers` library's. No libtorch.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::text {

class BpeModel;
class Normalizer;
class PreTokenizer;
class Decoder;

/// The largest token id a tokenizer.json may use (16.7 M, 65 times Gemma's
/// 256 k vocabulary), and how many ids below its largest may have no token:
/// both bound the tables that ids index, whatever a file claims.
inline constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;
inline constexpr std::int64_t kMaxUnusedIds = 65536;

/// A token the tokenizer matches in raw text before anything else.
struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;  ///< absorbs whitespace on its left
  bool rstrip = false;  ///< absorbs whitespace on its right
};

class Tokenizer {
 public:
  /// Loads `path`: a tokenizer.json file or a folder holding one. InputError
  /// naming the file and field for anything unsupported or malformed.
  static Tokenizer load(const std::filesystem::path& path);
  /// Parses tokenizer.json text; `source` names it in errors.
  static Tokenizer parse(std::string_view json_text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text`; with `add_special_tokens` the post-processor's
  /// template (e.g. a leading <s>) is applied.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// Text of `ids`; with `skip_special_tokens` special tokens are left out.
  /// InputError for an id outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  /// One more than the largest id (model vocabulary and added tokens).
  std::int32_t vocab_size() const { return vocab_size_; }
  /// Id of a token string (added tokens first), if any.
  std::optional<std::int32_t> token_id(std::string_view token) const;
  /// The string of token `id`; InputError when out of range.
  const std::string& token(std::int32_t id) const;
  /// True for special added tokens.
  bool is_special(std::int32_t id) const;

 private:
  Tokenizer();
  void encode_segment(std::string_view text, bool at_input_start, std::vector<std::int32_t>& out) const;

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;                                  ///< longest content first
  std::array<std::vector<std::size_t>, 256> added_by_first_byte_;  ///< indices into added_
  std::vector<std::string> id_to_token_;
  std::vector<bool> special_;
  std::vector<std::int32_t> prefix_ids_, suffix_ids_;  ///< template around a single sequence
  std::int32_t vocab_size_ = 0;
};

/// tokenizer.json of the byte-level tokenizer for self-made models: ids 0-3
/// are <pad>, <s>, </s>, <unk>, and ids 4-259 the 256 bytes (GPT-2's byte
/// characters, no merges), so any text encodes and decodes losslessly. The
/// `tokenizers` library and `transformers` load it as well.
std::string byte_tokenizer_json();

/// Special-token ids of the byte-level tokenizer.
inline constexpr std::int32_t kBytePadId = 0, kByteBosId = 1, kByteEosId = 2, kByteVocabSize = 260;

}  // namespace fleet::text
