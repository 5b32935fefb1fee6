#include "text/bpe_model.h"

#include <cstdio>
#include <queue>

#include "common/error.h"
#include "common/utf8.h"

namespace fleet::text {
namespace {

constexpr std::size_t kCacheCapacity = 1 << 16;
constexpr std::size_t kMaxCachedWordBytes = 256;

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, std::int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  const std::size_t prefix = options_.continuing_subword_prefix.size();
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto a = id_of(left), b = id_of(right);
    if (!a || !b)
      throw InputError("BPE merge " + std::to_string(rank) + " ('" + left + " " + right +
                       "') names a token that is not in the vocabulary");
    // With a continuing-subword prefix the right piece loses its prefix in the merged token.
    std::string merged =
        left +
        (prefix && right.compare(0, prefix, options_.continuing_subword_prefix) == 0 ? right.substr(prefix) : right);
    auto result = id_of(merged);
    if (!result)
      throw InputError("BPE merge " + std::to_string(rank) + " ('" + left + " " + right + "') makes '" + merged +
                       "', which is not in the vocabulary");
    merges_.try_emplace(pair_key(*a, *b), Merge{static_cast<std::int32_t>(rank), *result});
  }
  if (options_.unk_token) {
    unk_id_ = id_of(*options_.unk_token);
    if (!unk_id_) throw InputError("BPE unknown token '" + *options_.unk_token + "' is not in the vocabulary");
  }
  has_all_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = id_of(name);
    byte_ids_[b] = id ? *id : -1;
    has_all_bytes_ = has_all_bytes_ && id.has_value();
  }
}

std::optional<std::int32_t> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> ids;
  tokenize_uncached(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() <= kMaxCachedWordBytes) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

// Symbols in a doubly linked list; `len` 0 marks one merged away.
struct BpeModel::Symbol {
  std::int32_t id;
  int prev, next;
  std::size_t len;
};

void BpeModel::tokenize_uncached(std::string_view word, std::vector<std::int32_t>& out) const {
  if (options_.ignore_merges) {
    if (auto id = id_of(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  initial_symbols(word, symbols);
  merge(symbols);
  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  symbols.reserve(word.size());
  bool last_was_unk = false;
  for (std::size_t pos = 0; pos < word.size();) {
    std::size_t len = utf8::sequence_length(static_cast<unsigned char>(word[pos]));
    if (pos + len > word.size()) len = word.size() - pos;
    std::string piece(word.substr(pos, len));
    if (pos > 0 && !options_.continuing_subword_prefix.empty()) piece = options_.continuing_subword_prefix + piece;
    auto push = [&](std::int32_t id) {
      int index = static_cast<int>(symbols.size());
      symbols.push_back({id, index - 1, index + 1, len});
    };
    if (auto id = id_of(piece)) {
      push(*id);
      last_was_unk = false;
    } else if (options_.byte_fallback && has_all_bytes_) {
      for (std::size_t k = 0; k < len; ++k) {
        push(byte_ids_[static_cast<unsigned char>(word[pos + k])]);
        symbols.back().len = 1;
      }
      last_was_unk = false;
    } else if (unk_id_) {
      if (options_.fuse_unk && last_was_unk) {
        symbols.back().len += len;
      } else {
        push(*unk_id_);
      }
      last_was_unk = true;
    } else {
      throw InputError("cannot tokenize '" + std::string(word) +
                       "': a character is not in the vocabulary and the tokenizer has no unknown token");
    }
    pos += len;
  }
  if (!symbols.empty()) symbols.back().next = -1;
}

void BpeModel::merge(std::vector<Symbol>& symbols) const {
  // Lowest rank first, then leftmost: the order the reference library merges in.
  struct Candidate {
    std::int32_t rank;
    int pos;
    std::int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int i) {
    if (i < 0) return;
    int j = symbols[i].next;
    if (j < 0) return;
    auto it = merges_.find(pair_key(symbols[i].id, symbols[j].id));
    if (it != merges_.end()) queue.push({it->second.rank, i, it->second.result});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.pos];
    // Skip stale candidates: the pair there no longer makes this token.
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto now = merges_.find(pair_key(left.id, right.id));
    if (now == merges_.end() || now->second.result != c.result) continue;
    left.id = c.result;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
}

}  // namespace fleet::text
