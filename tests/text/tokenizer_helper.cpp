// Test helper: encodes and decodes texts with our tokenizer so that a Python
// script can compare the results with the `tokenizers` library's.
//
//   tokenizer_helper TOKENIZER_JSON TEXTS_JSON   -> JSON on stdout:
//     [{"ids": [...], "ids_plain": [...], "decoded": "...", "decoded_skip": "...",
//       "streamed": [{"k": K, "one": "...", "three": "..."}, ...]}, ...]
//     where "streamed" is what StreamingDecoder hands out (special tokens
//     skipped) for ids[K:] after the context ids[:K], for every K, fed one
//     and three ids at a time, flushed at the end
//   tokenizer_helper --byte-tokenizer OUT_JSON   -> writes byte_tokenizer_json()
//   tokenizer_helper --chat CASES_JSON           -> [rendered text or {"error": ...}, ...] for
//     CASES_JSON [{"template": "...", "variables": {...}}, ...] (chat templates)
#include <cstdio>
#include <iostream>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "text/chat_template.h"
#include "text/streaming_decoder.h"
#include "text/tokenizer.h"

namespace {

std::string streamed(const fleet::text::Tokenizer& tokenizer, const std::vector<std::int64_t>& ids, std::size_t k,
                     std::size_t step) {
  const std::span<const std::int64_t> all(ids);
  fleet::text::StreamingDecoder decoder(tokenizer, all.first(k), /*skip_special_tokens=*/true);
  std::string out;
  for (std::size_t i = k; i < ids.size(); i += step)
    out += decoder.push(all.subspan(i, std::min(step, ids.size() - i)));
  return out + decoder.flush();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 3 && std::string(argv[1]) == "--byte-tokenizer") {
    fleet::write_file_atomically(argv[2], fleet::text::byte_tokenizer_json());
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--chat") {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : nlohmann::json::parse(fleet::read_file(argv[2]))) {
      try {
        auto t = fleet::text::ChatTemplate::parse(c.at("template").get<std::string>(), "template");
        out.push_back(t.render(c.at("variables")));
      } catch (const fleet::Error& e) {
        out.push_back({{"error", e.what()}});
      }
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  if (argc != 3) {
    std::cerr << "usage: tokenizer_helper TOKENIZER_JSON TEXTS_JSON | --byte-tokenizer OUT\n";
    return 2;
  }
  auto tokenizer = fleet::text::Tokenizer::load(argv[1]);
  auto texts = nlohmann::json::parse(fleet::read_file(argv[2]));
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : texts) {
    auto text = t.get<std::string>();
    auto ids = tokenizer.encode(text, true);
    auto plain = tokenizer.encode(text, false);
    const std::vector<std::int64_t> ids64(ids.begin(), ids.end());
    nlohmann::json splits = nlohmann::json::array();
    for (std::size_t k = 0; k < ids.size(); ++k) {
      splits.push_back(
          {{"k", k}, {"one", streamed(tokenizer, ids64, k, 1)}, {"three", streamed(tokenizer, ids64, k, 3)}});
    }
    out.push_back({{"ids", ids},
                   {"ids_plain", plain},
                   {"decoded", tokenizer.decode(plain, false)},
                   {"decoded_skip", tokenizer.decode(ids, true)},
                   {"streamed", splits}});
  }
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "tokenizer_helper: error: " << e.what() << "\n";
  return 1;
}
