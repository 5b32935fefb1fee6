#include "text/tokenizer_steps.h"

#include <array>
#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "common/utf8.h"
#include "text/regex.h"

namespace fleet::text {
namespace {

// GPT-2's pre-tokenization pattern, which ByteLevel applies when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteTable {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, int> to_byte;
  ByteTable() {
    // Printable bytes map to themselves; the rest to U+0100 onwards, in order.
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      utf8::append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

// A literal or regular-expression pattern ({"String": ...} or {"Regex": ...}).
class Pattern {
 public:
  static Pattern literal(std::string text) {
    Pattern p;
    p.literal_ = std::move(text);
    return p;
  }
  explicit Pattern(const JsonValue& spec) {
    if (auto s = spec.find("String")) {
      literal_ = s->as<std::string>();
      if (literal_.empty()) spec.fail("empty pattern");
    } else if (auto r = spec.find("Regex")) {
      regex_.emplace(r->as<std::string>());
    } else {
      spec.fail("pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }
  }
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (std::size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size()))
      out.emplace_back(at, at + literal_.size());
    return out;
  }
  std::string replace_all(std::string_view text, std::string_view with) const {
    std::string out;
    std::size_t last = 0;
    for (auto [b, e] : find_all(text)) {
      out.append(text.substr(last, b - last));
      out.append(with);
      last = e;
    }
    out.append(text.substr(last));
    return out;
  }

 private:
  Pattern() = default;
  std::string literal_;
  std::optional<Regex> regex_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const JsonValue& v) {
  auto s = v.as<std::string>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  v.fail("unknown split behavior '" + s + "'");
}

// Splits one piece at the matches, the way the library's split behaviours do.
void split_piece(const TextPiece& piece, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<TextPiece>& out) {
  struct Span {
    std::size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  std::size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  }
  if (last < piece.text.size()) spans.push_back({last, piece.text.size(), invert});

  std::vector<Span> merged;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : spans)
        if (!s.is_match) merged.push_back(s);
      break;
    case SplitBehavior::kIsolated:
      merged = spans;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !merged.empty())
          merged.back().end = s.end;
        else
          merged.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty())
          merged.back().begin = it->begin;
        else
          merged.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case SplitBehavior::kContiguous:
      for (std::size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].is_match == previous_match)
          merged.back().end = spans[i].end;
        else
          merged.push_back(spans[i]);
        previous_match = spans[i].is_match;
      }
      break;
  }
  for (const auto& s : merged) {
    if (s.end > s.begin)
      out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_input_start && s.begin == 0});
  }
}

// ---- normalizers ----

class NormalizerSequence : public Normalizer {
 public:
  explicit NormalizerSequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const JsonValue& pattern, std::string content) : pattern_(pattern), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t b = 0, e = text.size();
    if (left_)
      while (b < e && is_space_byte(text[b])) ++b;
    if (right_)
      while (e > b && is_space_byte(text[e - 1])) --e;
    text = text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// ---- pre-tokenizers ----

class PreTokenizerSequence : public PreTokenizer {
 public:
  explicit PreTokenizerSequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    for (const auto& s : steps_) s->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const JsonValue& pattern, SplitBehavior behavior, bool invert)
      : pattern_(pattern), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (const auto& p : pieces) split_piece(p, pattern_.find_all(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), regex_(use_regex ? std::optional<Regex>(kGpt2Pattern) : std::nullopt) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> split;
    for (auto& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (regex_)
        split_piece(p, regex_->find_all(p.text), SplitBehavior::kIsolated, false, split);
      else if (!p.text.empty())
        split.push_back(std::move(p));
    }
    const auto& table = byte_table();
    for (auto& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) mapped += table.to_char[c];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme parse_prepend_scheme(const JsonValue& spec) {
  auto scheme = spec.find("prepend_scheme");
  if (!scheme) {
    // Releases before 0.14 wrote add_prefix_space instead.
    return spec.get_or<bool>("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  auto s = scheme->as<std::string>();
  if (s == "always") return PrependScheme::kAlways;
  if (s == "first") return PrependScheme::kFirst;
  if (s == "never") return PrependScheme::kNever;
  scheme->fail("unknown prepend_scheme '" + s + "'");
}

std::string metaspace_replacement(const JsonValue& spec) {
  auto r = spec.get_or<std::string>("replacement", "\xE2\x96\x81");
  std::size_t len = 0;
  if (r.empty() || (utf8::decode(r, 0, len), len != r.size())) spec.at("replacement").fail("must be one character");
  return r;
}

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        pattern_(Pattern::literal(replacement_)) {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (auto& p : pieces) {
      std::string text;
      for (char c : p.text) {
        if (c == ' ')
          text += replacement_;
        else
          text += c;
      }
      bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_input_start);
      if (prepend && text.compare(0, replacement_.size(), replacement_) != 0) text.insert(0, replacement_);
      TextPiece piece{std::move(text), p.at_input_start};
      if (split_)
        split_piece(piece, pattern_.find_all(piece.text), SplitBehavior::kMergedWithNext, false, out);
      else if (!piece.text.empty())
        out.push_back(std::move(piece));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Pattern pattern_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual), regex_(R"(\p{N})") {}
  void pre_tokenize(std::vector<TextPiece>& pieces) const override {
    std::vector<TextPiece> out;
    for (const auto& p : pieces)
      split_piece(p, regex_.find_all(p.text), individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                  false, out);
    pieces = std::move(out);
  }

 private:
  bool individual_;
  Regex regex_;
};

// ---- decoders ----

class DecoderSequence : public Decoder {
 public:
  explicit DecoderSequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class ByteLevelDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      for (std::size_t pos = 0; pos < t.size();) {
        std::size_t len = 0;
        char32_t cp = utf8::decode(t, pos, len);
        int b = char_to_byte(cp);
        if (b >= 0)
          bytes += static_cast<char>(b);
        else
          bytes.append(t, pos, len);  // not a byte character: keep it as written
        pos += len;
      }
    }
    tokens = {utf8::make_valid(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          // The reference drops every replacement of the first token, not only a leading one.
          if (!(i == 0 && scheme_ != PrependScheme::kNever)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const JsonValue& pattern, std::string content) : pattern_(pattern), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// The byte value of a "<0xNN>" token, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    std::size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        // The library gives one replacement character per byte token here.
        for (std::size_t k = 0; k < pending_count; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (auto& t : tokens) {
      int b = byte_token_value(t);
      if (b >= 0) {
        pending += static_cast<char>(b);
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens = {std::move(all)};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, std::size_t start, std::size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::size_t b = 0, e = t.size();
      for (std::size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++k)
        b += content_.size();
      for (std::size_t k = 0;
           k < stop_ && e >= b + content_.size() && t.compare(e - content_.size(), content_.size(), content_) == 0; ++k)
        e -= content_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

std::string type_of(const JsonValue& spec) { return spec.get<std::string>("type"); }

}  // namespace

const std::string& byte_to_char(unsigned char byte) { return byte_table().to_char[byte]; }

int char_to_byte(char32_t cp) {
  const auto& map = byte_table().to_byte;
  auto it = map.find(cp);
  return it == map.end() ? -1 : it->second;
}

std::unique_ptr<Normalizer> make_normalizer(const JsonValue& spec) {
  if (spec.is_null()) return nullptr;
  auto type = type_of(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& s : spec.at("normalizers").elements())
      if (auto n = make_normalizer(s)) steps.push_back(std::move(n));
    return std::make_unique<NormalizerSequence>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.get<std::string>("prepend"));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(spec.at("pattern"), spec.get<std::string>("content"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(spec.get_or<bool>("strip_left", true),
                                             spec.get_or<bool>("strip_right", true));
  spec.at("type").fail("unsupported normalizer '" + type + "' (supported: Sequence, Prepend, Replace, Strip)");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonValue& spec) {
  if (spec.is_null()) return nullptr;
  auto type = type_of(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& s : spec.at("pretokenizers").elements())
      if (auto p = make_pre_tokenizer(s)) steps.push_back(std::move(p));
    return std::make_unique<PreTokenizerSequence>(std::move(steps));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(spec.get_or<bool>("add_prefix_space", true),
                                                   spec.get_or<bool>("use_regex", true));
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(spec.at("pattern"), parse_behavior(spec.at("behavior")),
                                               spec.get_or<bool>("invert", false));
  if (type == "Metaspace")
    return std::make_unique<MetaspacePreTokenizer>(metaspace_replacement(spec), parse_prepend_scheme(spec),
                                                   spec.get_or<bool>("split", true));
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(spec.get_or<bool>("individual_digits", false));
  spec.at("type").fail("unsupported pre-tokenizer '" + type +
                       "' (supported: Sequence, ByteLevel, Split, Metaspace, Digits)");
}

std::unique_ptr<Decoder> make_decoder(const JsonValue& spec) {
  if (spec.is_null()) return nullptr;
  auto type = type_of(spec);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& s : spec.at("decoders").elements())
      if (auto d = make_decoder(s)) steps.push_back(std::move(d));
    return std::make_unique<DecoderSequence>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(metaspace_replacement(spec), parse_prepend_scheme(spec));
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(spec.at("pattern"), spec.get<std::string>("content"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(spec.get<std::string>("content"), spec.get<std::size_t>("start"),
                                          spec.get<std::size_t>("stop"));
  spec.at("type").fail("unsupported decoder '" + type +
                       "' (supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)");
}

}  // namespace fleet::text
