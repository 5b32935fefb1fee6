#include "text/tokenizer.h"

#include <algorithm>
#include <functional>
#include <map>

#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "text/bpe_model.h"
#include "text/tokenizer_steps.h"

namespace fleet::text {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::vector<std::pair<std::string, std::string>> parse_merges(const JsonValue& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const auto& m : merges.elements()) {
    if (m.raw().is_string()) {
      auto s = m.as<std::string>();
      auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        m.fail("a merge must be two tokens separated by one space");
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      // Releases from 0.20 on write merges as [left, right] pairs.
      auto pair = m.as<std::vector<std::string>>();
      if (pair.size() != 2) m.fail("a merge must be a pair of tokens");
      out.emplace_back(pair[0], pair[1]);
    }
  }
  return out;
}

std::unique_ptr<BpeModel> parse_model(const JsonValue& model) {
  auto type = model.get_or<std::string>("type", "BPE");
  if (type != "BPE") model.at("type").fail("unsupported tokenizer model '" + type + "' (only BPE is supported)");
  if (auto dropout = model.find("dropout"); dropout && dropout->as<double>() != 0.0)
    dropout->fail("BPE dropout is not supported (it makes encodings random)");
  if (auto suffix = model.find("end_of_word_suffix"); suffix && !suffix->as<std::string>().empty())
    suffix->fail("end_of_word_suffix is not supported");
  std::unordered_map<std::string, std::int32_t> vocab;
  auto vocab_json = model.at("vocab");
  if (!vocab_json.is_object()) vocab_json.fail("must be an object of token: id");
  vocab.reserve(vocab_json.size());
  for (auto& [token, id] : vocab_json.members()) {
    auto value = id.as<std::int32_t>();
    if (value < 0) id.fail("token ids must be non-negative");
    vocab.emplace(token, value);
  }
  BpeOptions options;
  if (auto unk = model.find("unk_token")) options.unk_token = unk->as<std::string>();
  options.continuing_subword_prefix = model.get_or<std::string>("continuing_subword_prefix", "");
  options.fuse_unk = model.get_or<bool>("fuse_unk", false);
  options.byte_fallback = model.get_or<bool>("byte_fallback", false);
  options.ignore_merges = model.get_or<bool>("ignore_merges", false);
  try {
    return std::make_unique<BpeModel>(std::move(vocab), parse_merges(model.at("merges")), options);
  } catch (const InputError& e) {
    model.fail(e.what());
  }
}

// The ids a TemplateProcessing puts before and after "$A" of a single sequence.
void parse_template(const JsonValue& spec, std::vector<std::int32_t>& prefix, std::vector<std::int32_t>& suffix) {
  std::map<std::string, std::vector<std::int32_t>> specials;
  if (auto st = spec.find("special_tokens"))
    for (auto& [name, entry] : st->members()) specials[name] = entry.get<std::vector<std::int32_t>>("ids");
  bool seen_sequence = false;
  for (const auto& piece : spec.at("single").elements()) {
    if (auto seq = piece.find("Sequence")) {
      if (seq->get<std::string>("id") != "A") seq->at("id").fail("a single-sequence template can only use $A");
      seen_sequence = true;
    } else if (auto tok = piece.find("SpecialToken")) {
      auto name = tok->get<std::string>("id");
      auto it = specials.find(name);
      if (it == specials.end()) tok->at("id").fail("special token '" + name + "' is not in special_tokens");
      auto& target = seen_sequence ? suffix : prefix;
      target.insert(target.end(), it->second.begin(), it->second.end());
    } else {
      piece.fail("expected Sequence or SpecialToken");
    }
  }
  if (!seen_sequence) spec.at("single").fail("the template never places the sequence ($A)");
}

void parse_post_processor(const JsonValue& spec, std::vector<std::int32_t>& prefix, std::vector<std::int32_t>& suffix) {
  if (spec.is_null()) return;
  auto type = spec.get<std::string>("type");
  if (type == "Sequence") {
    for (const auto& p : spec.at("processors").elements()) parse_post_processor(p, prefix, suffix);
  } else if (type == "TemplateProcessing") {
    parse_template(spec, prefix, suffix);
  } else if (type != "ByteLevel") {  // ByteLevel only adjusts offsets
    spec.at("type").fail("unsupported post-processor '" + type +
                         "' (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  auto file = std::filesystem::is_directory(path) ? path / "tokenizer.json" : path;
  if (!std::filesystem::exists(file)) throw InputError(file.string() + ": no such tokenizer file");
  return parse(read_file(file, kMaxDocumentBytes), file.string());
}

Tokenizer Tokenizer::parse(std::string_view json_text, const std::string& source) {
  auto doc = parse_json(json_text, source);
  JsonValue root = doc.root();
  Tokenizer t;
  if (auto trunc = root.find("truncation")) trunc->fail("truncation settings are not supported; remove them");
  t.model_ = parse_model(root.at("model"));
  if (auto n = root.find("normalizer")) t.normalizer_ = make_normalizer(*n);
  if (auto p = root.find("pre_tokenizer")) t.pre_tokenizer_ = make_pre_tokenizer(*p);
  if (auto d = root.find("decoder")) t.decoder_ = make_decoder(*d);
  if (auto p = root.find("post_processor")) parse_post_processor(*p, t.prefix_ids_, t.suffix_ids_);

  // Ids index tables of max id + 1 entries: an id far above the number of
  // tokens (a typo, a corrupt file) would allocate without bound.
  std::size_t entries = t.model_->vocab().size();
  if (auto added = root.find("added_tokens")) entries += added->elements().size();
  const std::int64_t max_allowed =
      std::min<std::int64_t>(kMaxTokenId, static_cast<std::int64_t>(entries) + kMaxUnusedIds);
  auto check_id = [&](std::int64_t id, const std::function<void(const std::string&)>& fail) {
    if (id > max_allowed)
      fail("token id " + std::to_string(id) + " is far above the " + std::to_string(entries) +
           " tokens listed (ids must be below " + std::to_string(max_allowed + 1) + ")");
  };
  std::int32_t max_id = -1;
  for (const auto& [token, id] : t.model_->vocab()) {
    check_id(id, [&](const std::string& why) { root.at("model").at("vocab").fail("'" + token + "': " + why); });
    max_id = std::max(max_id, id);
  }
  if (auto added = root.find("added_tokens")) {
    for (const auto& a : added->elements()) {
      AddedToken tok;
      tok.id = a.get<std::int32_t>("id");
      tok.content = a.get<std::string>("content");
      tok.special = a.get_or<bool>("special", false);
      tok.lstrip = a.get_or<bool>("lstrip", false);
      tok.rstrip = a.get_or<bool>("rstrip", false);
      if (a.get_or<bool>("single_word", false)) a.at("single_word").fail("single_word added tokens are not supported");
      if (tok.id < 0) a.at("id").fail("token ids must be non-negative");
      check_id(tok.id, [&](const std::string& why) { a.at("id").fail(why); });
      if (tok.content.empty()) a.at("content").fail("an added token cannot be empty");
      max_id = std::max(max_id, tok.id);
      t.added_.push_back(std::move(tok));
    }
  }
  t.vocab_size_ = max_id + 1;
  t.id_to_token_.assign(static_cast<std::size_t>(t.vocab_size_), std::string());
  t.special_.assign(static_cast<std::size_t>(t.vocab_size_), false);
  for (const auto& [token, id] : t.model_->vocab()) t.id_to_token_[static_cast<std::size_t>(id)] = token;
  for (const auto& a : t.added_) {
    t.id_to_token_[static_cast<std::size_t>(a.id)] = a.content;
    t.special_[static_cast<std::size_t>(a.id)] = a.special;
  }
  // Longest first, so that at one position the longest added token wins.
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (std::size_t i = 0; i < t.added_.size(); ++i)
    t.added_by_first_byte_[static_cast<unsigned char>(t.added_[i].content[0])].push_back(i);
  return t;
}

void Tokenizer::encode_segment(std::string_view text, bool at_input_start, std::vector<std::int32_t>& out) const {
  std::string normalized(text);
  if (normalizer_) normalizer_->normalize(normalized);
  if (normalized.empty()) return;
  std::vector<TextPiece> pieces{{std::move(normalized), at_input_start}};
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
  for (const auto& p : pieces) model_->tokenize(p.text, out);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<std::int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  std::size_t segment_start = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (auto index : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& a = added_[index];
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    std::size_t segment_end = pos, next = pos + hit->content.size();
    if (hit->lstrip)
      while (segment_end > segment_start && is_space(text[segment_end - 1])) --segment_end;
    if (hit->rstrip)
      while (next < text.size() && is_space(text[next])) ++next;
    encode_segment(text.substr(segment_start, segment_end - segment_start), segment_start == 0, ids);
    ids.push_back(hit->id);
    segment_start = pos = next;
  }
  encode_segment(text.substr(segment_start), segment_start == 0, ids);
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (auto id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    tokens.push_back(token(id));
  }
  if (decoder_) decoder_->decode(tokens);
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& a : added_)
    if (a.content == token) return a.id;
  return model_->id_of(token);
}

const std::string& Tokenizer::token(std::int32_t id) const {
  if (id < 0 || id >= vocab_size_)
    throw InputError("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                     std::to_string(vocab_size_) + ")");
  return id_to_token_[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_[static_cast<std::size_t>(id)];
}

std::string byte_tokenizer_json() {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  const char* specials[] = {"<pad>", "<s>", "</s>", "<unk>"};
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (int i = 0; i < 4; ++i) {
    vocab[specials[i]] = i;
    added.push_back({{"id", i},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  for (int b = 0; b < 256; ++b) vocab[byte_to_char(static_cast<unsigned char>(b))] = 4 + b;
  nlohmann::ordered_json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {kByteBosId}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", nlohmann::ordered_json::array()}}}};
  return doc.dump(2);
}

}  // namespace fleet::text
