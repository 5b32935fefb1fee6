#include "text/regex.h"

#include <mutex>

#include <oniguruma.h>

#include "common/error.h"
#include "common/utf8.h"

namespace fleet::text {

struct Regex::Impl {
  regex_t* regex = nullptr;
  ~Impl() {
    if (regex) onig_free(regex);
  }
};

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  static std::once_flag init;
  std::call_once(init, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
  OnigErrorInfo info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  int rc = onig_new(&impl_->regex, begin, begin + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                    ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    impl_->regex = nullptr;
    throw InputError("invalid regular expression '" + pattern + "': " + reinterpret_cast<char*>(message));
  }
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  // A region per call keeps one compiled pattern usable from many threads.
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(),
                                                            [](OnigRegion* r) { onig_region_free(r, 1); });
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  std::size_t pos = 0;
  while (pos <= text.size()) {
    int at = onig_search(impl_->regex, str, end, str + pos, end, region.get(), ONIG_OPTION_NONE);
    if (at == ONIG_MISMATCH) break;
    if (at < 0) throw RuntimeFailure("regular expression search failed (Oniguruma error " + std::to_string(at) + ")");
    auto begin = static_cast<std::size_t>(region.get()->beg[0]);
    auto stop = static_cast<std::size_t>(region.get()->end[0]);
    if (stop > begin) {
      matches.emplace_back(begin, stop);
      pos = stop;
    } else {
      // An empty match: step over one character so the search advances.
      if (begin >= text.size()) break;
      pos = begin + utf8::sequence_length(static_cast<unsigned char>(text[begin]));
    }
  }
  return matches;
}

}  // namespace fleet::text
