// config.json and generation_config.json as Hugging Face models write them:
// rotary scaling, several end-of-sequence ids, and clear refusals. The
// frequencies themselves are checked against transformers in check_llama.py.
#include <gtest/gtest.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/json.h"
#include "model/llama_config.h"
#include "test_util.h"

namespace fleet::model {
namespace {

const char* kBase = R"("vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 4)";

LlamaConfig parse(const std::string& extra) {
  return parse_llama_config(parse_json("{" + std::string(kBase) + extra + "}", "config.json").root());
}

std::string refusal(const std::string& extra) {
  return testing::error_of([&] { parse(extra); });
}

TEST(LlamaConfigJson, RopeScalingOfLlama31AndLinearAreRead) {
  auto c = parse(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  // Written back and read again: the same scaling.
  auto again = parse_llama_config(parse_json(llama_config_json(c), "written").root());
  EXPECT_EQ(again.rope_scaling.type, "llama3");
  EXPECT_EQ(again.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(again.rope_scaling.original_max_position_embeddings, 8192);

  // Configs written before rope_type say type.
  EXPECT_EQ(parse(R"(, "rope_scaling": {"type": "linear", "factor": 2})").rope_scaling.factor, 2.0);
  EXPECT_EQ(parse(R"(, "rope_scaling": null)").rope_scaling.type, "default");
  EXPECT_TRUE(parse_json(llama_config_json(parse("")), "written").root().raw()["rope_scaling"].is_null());
}

TEST(LlamaConfigJson, UnsupportedOrIncompleteRopeScalingIsRefused) {
  auto message = refusal(R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})");
  EXPECT_NE(message.find("rope_scaling/type: rope_scaling type 'dynamic' is not supported"), std::string::npos)
      << message;
  message = refusal(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})");
  EXPECT_NE(message.find("'yarn' is not supported (default, linear or llama3)"), std::string::npos) << message;
  message = refusal(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0})");
  EXPECT_NE(message.find("low_freq_factor"), std::string::npos) << message;
  message = refusal(R"(, "rope_scaling": {"rope_type": "linear", "factor": 0.5})");
  EXPECT_NE(message.find("rope_scaling/factor: must be at least 1"), std::string::npos) << message;
  message = refusal(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_NE(message.find("high_freq_factor: must exceed low_freq_factor"), std::string::npos) << message;
  message = refusal(R"(, "rope_scaling": {"factor": 8.0})");
  EXPECT_NE(message.find("needs rope_type"), std::string::npos) << message;
}

TEST(LlamaConfigJson, EveryListedEndOfSequenceIdCounts) {
  auto c = parse(R"(, "eos_token_id": [7, 9, 11])");
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_EQ(c.eos_token_ids(), (std::vector<std::int64_t>{7, 9, 11}));
  auto again = parse_llama_config(parse_json(llama_config_json(c), "written").root());
  EXPECT_EQ(again.eos_token_ids(), (std::vector<std::int64_t>{7, 9, 11}));
  EXPECT_EQ(parse(R"(, "eos_token_id": 3)").eos_token_ids(), (std::vector<std::int64_t>{3}));

  auto message = refusal(R"(, "eos_token_id": [7, 100])");
  EXPECT_NE(message.find("eos_token_id: token ids must be 0 to vocab_size - 1, got 100"), std::string::npos) << message;
  message = refusal(R"(, "eos_token_id": [])");
  EXPECT_NE(message.find("at least one token id"), std::string::npos) << message;
}

TEST(LlamaConfigJson, GenerationConfigAddsItsEndOfSequenceIds) {
  testing::TempDir dir;
  auto c = parse(R"(, "eos_token_id": [7, 9])");
  EXPECT_EQ(end_of_sequence_ids(dir.path(), c), (std::vector<std::int64_t>{7, 9}));  // no generation_config.json
  write_file_atomically(dir.path() / "generation_config.json", R"({"eos_token_id": [9, 42], "do_sample": true})");
  EXPECT_EQ(end_of_sequence_ids(dir.path(), c), (std::vector<std::int64_t>{7, 9, 42}));
  write_file_atomically(dir.path() / "generation_config.json", R"({"eos_token_id": 120})");
  auto message = testing::error_of([&] { end_of_sequence_ids(dir.path(), c); });
  EXPECT_NE(message.find("generation_config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("token id 120 is outside the vocabulary (100)"), std::string::npos) << message;
  write_file_atomically(dir.path() / "generation_config.json", R"({"eos_token_id": )");
  message = testing::error_of([&] { end_of_sequence_ids(dir.path(), c); });
  EXPECT_NE(message.find("generation_config.json"), std::string::npos) << message;
}

}  // namespace
}  // namespace fleet::model
