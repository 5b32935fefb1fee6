// Mutated config.json, tokenizer.json and trainer_state.json options: each
// parses or fails with the toolkit's own error, one line, never a crash or
// an allocation a size in the file asked for (run under ASan/UBSan too).
#include <gtest/gtest.h>

#include "common/json.h"
#include "fuzz_util.h"
#include "model/llama_config.h"
#include "model/train_options.h"
#include "text/tokenizer.h"

namespace fleet::model {
namespace {

using fleet::testing::fuzz;
using fleet::testing::fuzz_iterations;

TEST(InputFuzz, ConfigJson) {
  const std::vector<std::string> seeds = {llama_config_json(llama_preset("tiny")),
                                          llama_config_json(llama_preset("100m"))};
  const auto counts = fuzz(seeds, fuzz_iterations(3000), 11, [](const std::string& text) {
    const JsonDocument doc = parse_json(text, "config.json");
    const LlamaConfig config = parse_llama_config(doc.root());
    // What a loader enumerates from it: bounded by the caps.
    EXPECT_LE(parameter_shapes(config).size(), static_cast<std::size_t>(9 * LlamaLimits::kLayers + 3));
  });
  EXPECT_GT(counts.accepted, 50);
  EXPECT_GT(counts.rejected, 500);
}

TEST(InputFuzz, TokenizerJson) {
  const std::string bpe = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3}, "merges": ["a b"]},
      "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "decoder": {"type": "ByteLevel"}})";
  const std::vector<std::string> seeds = {text::byte_tokenizer_json(), bpe};
  const auto counts = fuzz(seeds, fuzz_iterations(1500), 12, [](const std::string& text) {
    const text::Tokenizer t = text::Tokenizer::parse(text, "tokenizer.json");
    EXPECT_LE(t.vocab_size(), text::kMaxTokenId + 1);
    (void)t.decode(t.encode("ab ba <s> a", true));
  });
  EXPECT_GT(counts.accepted, 20);
  EXPECT_GT(counts.rejected, 200);
}

TEST(InputFuzz, TrainerStateOptions) {
  TrainOptions options;
  options.steps = 100;
  const std::vector<std::string> seeds = {options.to_json().dump(), options.to_json().dump(2)};
  const auto counts = fuzz(seeds, fuzz_iterations(3000), 13, [](const std::string& text) {
    const JsonDocument doc = parse_json(text, "trainer_state.json");
    TrainOptions::from_json(doc.root()).validate();
  });
  EXPECT_GT(counts.accepted, 20);
  EXPECT_GT(counts.rejected, 500);
}

}  // namespace
}  // namespace fleet::model
