// The steps of a Hugging Face tokenizer.json pipeline around its model:
// normalizers, pre-tokenizers and decoders, built from their JSON objects.
// Only the kinds Llama-family tokenizers use are supported; any other kind is
// an InputError naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/json.h"

namespace fleet::text {

/// A piece of the input on its way to the model. `at_input_start` is true for
/// the piece that begins at offset 0 of the original text (Metaspace's
/// "first" prepend scheme depends on it).
struct TextPiece {
  std::string text;
  bool at_input_start = false;
};

/// Rewrites a piece of text before it is split (Prepend, Replace, Strip, Sequence).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

/// Splits pieces into words for the model (ByteLevel, Split, Metaspace,
/// Digits, Sequence); may rewrite them (ByteLevel maps bytes to characters).
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<TextPiece>& pieces) const = 0;
};

/// Turns token strings back into text (ByteLevel, Metaspace, Replace,
/// ByteFallback, Fuse, Strip, Sequence); works on the whole list like the
/// library's decode_chain.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

/// Builders from tokenizer.json objects; null JSON gives nullptr.
std::unique_ptr<Normalizer> make_normalizer(const JsonValue& spec);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonValue& spec);
std::unique_ptr<Decoder> make_decoder(const JsonValue& spec);

/// GPT-2's reversible map from bytes to printable characters (as UTF-8).
const std::string& byte_to_char(unsigned char byte);
/// The inverse map; -1 for characters outside it.
int char_to_byte(char32_t cp);

}  // namespace fleet::text
