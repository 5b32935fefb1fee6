#include "text/streaming_decoder.h"

#include <algorithm>

#include "text/tokenizer.h"

namespace fleet::text {
namespace {

// How many context tokens precede the first generated one: enough for the
// decoders' context rules (a leading-space strip, byte groups), as in vLLM.
constexpr std::size_t kContextTokens = 5;
// A window that starts inside a character decodes to U+FFFD there; it is
// widened by at most this many tokens to reach the character's first byte.
constexpr std::size_t kMaxCharacterTokens = 4;

const std::string kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, std::span<const std::int64_t> context,
                                   bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  append(context.last(std::min(context.size(), kContextTokens + kMaxCharacterTokens)));
  read_ = ids_.size();
  std::size_t start = read_ > kContextTokens ? read_ - kContextTokens : 0;
  while (start > 0 && decode(start, read_).starts_with(kReplacement)) --start;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(start));
  read_ -= start;
}

void StreamingDecoder::append(std::span<const std::int64_t> ids) {
  for (auto id : ids)
    if (id >= 0 && id < tokenizer_.vocab_size()) ids_.push_back(static_cast<std::int32_t>(id));
}

std::string StreamingDecoder::decode(std::size_t from, std::size_t to) const {
  return tokenizer_.decode(std::span<const std::int32_t>(ids_).subspan(from, to - from), skip_special_);
}

std::string StreamingDecoder::push(std::span<const std::int64_t> ids) {
  append(ids);
  return take(/*final=*/false);
}

std::string StreamingDecoder::flush() { return take(/*final=*/true); }

std::string StreamingDecoder::take(bool final) {
  if (ids_.size() == read_) return "";
  const std::string before = decode(0, read_);
  const std::string after = decode(0, ids_.size());
  if (!final && (after.size() <= before.size() || ends_with_replacement(after))) return "";
  // Normally the window's text only grows. When the new tokens rewrite it
  // instead (a byte group left unfinished at the end turns the whole group
  // into U+FFFD), what was handed out stands and the new tokens count alone.
  std::string piece = after.starts_with(before) ? after.substr(before.size()) : decode(read_, ids_.size());
  // The window moves on: what was new is the next piece's context.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = ids_.size();
  return piece;
}

}  // namespace fleet::text
