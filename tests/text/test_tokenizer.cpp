// Tokenizer unit tests; the comparison with Hugging Face `tokenizers` on
// trained files is check_tokenizers.py.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/utf8.h"
#include "test_util.h"
#include "text/streaming_decoder.h"
#include "text/tokenizer.h"

namespace fleet::text {
namespace {

TEST(ByteTokenizer, EncodesEveryByteAndRoundTrips) {
  auto tok = Tokenizer::parse(byte_tokenizer_json(), "byte");
  EXPECT_EQ(tok.vocab_size(), kByteVocabSize);
  auto ids = tok.encode("A\xC3\xA9\n", true);
  // <s>, then byte + 4 for each of 'A', 0xC3, 0xA9, '\n'.
  EXPECT_EQ(ids, (std::vector<std::int32_t>{kByteBosId, 4 + 'A', 4 + 0xC3, 4 + 0xA9, 4 + '\n'}));
  std::string all;
  for (int b = 1; b < 256; ++b) all += static_cast<char>(b);
  auto plain = tok.encode(all, false);
  ASSERT_EQ(plain.size(), 255u);
  for (int b = 1; b < 256; ++b) EXPECT_EQ(plain[b - 1], 4 + b);
  // Invalid UTF-8 decodes to replacement characters, valid text exactly.
  EXPECT_EQ(tok.decode(tok.encode("naïve 🎉 text", false)), "naïve 🎉 text");
  EXPECT_EQ(tok.decode(ids, true), "A\xC3\xA9\n");
  EXPECT_EQ(tok.encode("</s>", false), (std::vector<std::int32_t>{kByteEosId}));
}

TEST(ByteTokenizer, RejectsUnknownIds) {
  auto tok = Tokenizer::parse(byte_tokenizer_json(), "byte");
  std::vector<std::int32_t> bad{5, kByteVocabSize};
  auto message = testing::error_of([&] { tok.decode(bad); });
  EXPECT_NE(message.find("outside the vocabulary"), std::string::npos) << message;
}

TEST(StreamingDecoder, HandsOutWholeCharactersAndSkipsUnknownIds) {
  auto tok = Tokenizer::parse(byte_tokenizer_json(), "byte");
  const std::vector<std::int64_t> prompt{kByteBosId, 4 + 'h', 4 + 'i'};
  StreamingDecoder decoder(tok, prompt, /*skip_special_tokens=*/true);
  EXPECT_EQ(decoder.push(std::vector<std::int64_t>{4 + ' ', 4 + 0xC3}), "");  // the space waits for the character
  EXPECT_EQ(decoder.push(std::vector<std::int64_t>{4 + 0xA9}), " \xC3\xA9");
  // A model's padded vocabulary rows and special tokens have no text.
  EXPECT_EQ(decoder.push(std::vector<std::int64_t>{kByteVocabSize + 3, -1, kByteEosId}), "");
  EXPECT_EQ(decoder.push(std::vector<std::int64_t>{4 + '!', 4 + 0xF0, 4 + 0x9F}), "");
  EXPECT_EQ(decoder.flush(), "!\xEF\xBF\xBD");  // ended inside a character: one U+FFFD
  EXPECT_EQ(decoder.flush(), "");
}

TEST(TokenizerJson, UnsupportedPartsAreNamed) {
  struct Case {
    std::string json, expected;
  };
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  std::vector<Case> cases = {
      {R"({"model": {"type": "Unigram", "vocab": []}})", "unsupported tokenizer model 'Unigram'"},
      {"{" + model + R"(, "normalizer": {"type": "NFKC"}})", "unsupported normalizer 'NFKC'"},
      {"{" + model + R"(, "pre_tokenizer": {"type": "BertPreTokenizer"}})", "unsupported pre-tokenizer"},
      {"{" + model + R"(, "decoder": {"type": "WordPiece"}})", "unsupported decoder 'WordPiece'"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "not in the vocabulary"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})", "two tokens separated by one space"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}})", "dropout"},
      {"{" + model + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}})",
       "invalid regular expression"},
      {R"({"model": )", "byte"},
  };
  for (const auto& c : cases) {
    auto message = testing::error_of([&] { Tokenizer::parse(c.json, "t.json"); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.json << "\n -> " << message;
  }
}

TEST(TokenizerJson, MergesApplyByRank) {
  // "a b" outranks "b c": "abc" -> "ab" + "c", never "a" + "bc".
  const char* json = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4},
                         "merges": ["a b", "b c"]}})";
  auto tok = Tokenizer::parse(json, "t.json");
  EXPECT_EQ(tok.encode("abc"), (std::vector<std::int32_t>{3, 2}));
  EXPECT_EQ(tok.encode("bcab"), (std::vector<std::int32_t>{4, 3}));
  auto message = testing::error_of([&] { tok.encode("abx"); });
  EXPECT_NE(message.find("no unknown token"), std::string::npos) << message;
}

TEST(Utf8, MakeValidReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::make_valid("a\xF0\x9F\x8E"
                             "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8::make_valid("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::make_valid("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_TRUE(utf8::is_valid("ok \xE2\x98\x83"));
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
}

}  // namespace
}  // namespace fleet::text
