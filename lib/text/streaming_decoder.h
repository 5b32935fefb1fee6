// Text of generated tokens as they arrive, at a cost per token that does not
// grow with the sequence. No libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fleet::text {

class Tokenizer;

/// Decodes each new token in the context of the few tokens before it and
/// returns only the text it adds: decode(window + new) minus decode(window),
/// the window being the tokens since the last text that was handed out (the
/// scheme vLLM and the `tokenizers` library's DecodeStream use). So:
/// - a generated token's text is what it would be after its context: a
///   SentencePiece-style tokenizer keeps the leading space of a word that
///   follows the prompt, which decoding the generated tokens alone drops;
/// - nothing is handed out while the text ends in an unfinished UTF-8
///   character (the decoder's U+FFFD), so a character split over byte tokens
///   arrives whole;
/// - ids the tokenizer does not know (a model's padded vocabulary rows) have
///   no text.
/// The concatenated pieces equal decode(context + generated) past
/// decode(context) whenever the latter is a prefix of the former, except
/// after a run of byte-fallback tokens that turned into invalid UTF-8 once
/// part of it had been handed out (a whole decode then writes U+FFFD over
/// the part already handed out; the pieces keep it).
class StreamingDecoder {
 public:
  /// `context`: the tokens before the first generated one (the prompt; only
  /// its last few are used).
  StreamingDecoder(const Tokenizer& tokenizer, std::span<const std::int64_t> context, bool skip_special_tokens);

  /// Text that `ids` complete.
  std::string push(std::span<const std::int64_t> ids);
  /// What is still held back (an unfinished character at the end), as the
  /// decoder writes it; call once generation has ended.
  std::string flush();

 private:
  void append(std::span<const std::int64_t> ids);
  std::string decode(std::size_t from, std::size_t to) const;
  std::string take(bool final);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<std::int32_t> ids_;  ///< the window (the next piece's context) and the tokens after it
  std::size_t read_ = 0;           ///< end of the window: where the text handed out ends
};

}  // namespace fleet::text
