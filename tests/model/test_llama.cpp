// The transformer's own properties: batched cached inference equals running
// each sequence alone, save/load round trips, and clear errors for broken
// folders. Agreement with transformers is check_llama.py.
#include <gtest/gtest.h>

#include <fstream>

#include <torch/torch.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "model/model_folder.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "test_util.h"

namespace fleet::model {
namespace {

LlamaConfig small_config(bool tied) {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.initializer_range = 0.2;  // large weights make differences visible
  return c;
}

torch::Tensor random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(vocab, {1, n}, gen, torch::kInt64);
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double rel = 1e-5) {
  ASSERT_EQ(a.sizes(), b.sizes());
  double scale = b.abs().max().item<double>();
  double diff = (a - b).abs().max().item<double>();
  EXPECT_LE(diff, rel * scale) << "max difference " << diff << " against scale " << scale;
}

TEST(Llama, CachedDecodeMatchesFullForward) {
  auto model = LlamaModel::random(small_config(false), 7);
  auto tokens = random_tokens(20, 97, 1);
  torch::NoGradGuard no_grad;
  auto full = model.forward(tokens)[0];
  KvCache cache(model.config(), 1, 32, torch::kFloat32);
  auto prefill = model.forward_cached(cache, {0}, tokens.narrow(1, 0, 12), {12}, true)[0];
  expect_close(prefill, full.narrow(0, 0, 12));
  for (std::int64_t t = 12; t < 20; ++t) {
    auto step = model.forward_cached(cache, {0}, tokens.narrow(1, t, 1), {1})[0];
    expect_close(step, full[t]);
  }
  EXPECT_EQ(cache.length(0), 20);
}

// inference_linear: torch::linear's result through the small-batch kernel
// for up to max_rows() rows without autograd (32 to 256 by CPU and BLAS:
// the row counts cover each side of every limit), torch::linear itself
// otherwise (so that training keeps its graph), and a whole decode the same
// either way.
TEST(Llama, InferenceLinearEqualsTorchLinear) {
  auto w = torch::randn({37, 45});
  for (std::int64_t rows : {1, 5, 32, 33, 64, 80, 96, 97, 200, 256, 257}) {
    auto x = torch::randn({rows, 1, 45});
    torch::NoGradGuard no_grad;
    expect_close(inference_linear(x, w), torch::linear(x, w));
  }
  auto trainable = torch::randn({6, 45}, torch::requires_grad());
  auto y = inference_linear(torch::randn({3, 45}), trainable);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(trainable.grad().defined());

  auto model = LlamaModel::random(small_config(false), 7);
  auto tokens = torch::cat({random_tokens(16, 97, 3), random_tokens(16, 97, 4), random_tokens(16, 97, 5)});
  torch::NoGradGuard no_grad;
  auto decode = [&] {
    KvCache cache(model.config(), 3, 32, torch::kFloat32);
    auto logits = model.forward_cached(cache, {0, 1, 2}, tokens.narrow(1, 0, 8), {8, 8, 8}, true);
    std::vector<torch::Tensor> steps = {logits};
    for (std::int64_t t = 8; t < 16; ++t)
      steps.push_back(model.forward_cached(cache, {0, 1, 2}, tokens.narrow(1, t, 1), {1, 1, 1}, true));
    return torch::cat(steps, 1);
  };
  auto with_kernel = decode();
  use_small_batch_linear(false);
  EXPECT_FALSE(small_batch_linear_in_use());
  auto with_blas = decode();
  use_small_batch_linear(true);
  expect_close(with_kernel, with_blas);
}

TEST(Llama, BatchedSequencesOfDifferentLengthsEqualEachAlone) {
  auto model = LlamaModel::random(small_config(true), 11);
  const std::vector<std::int64_t> lengths{9, 3, 14};
  std::vector<torch::Tensor> seqs;
  for (std::size_t i = 0; i < lengths.size(); ++i) seqs.push_back(random_tokens(lengths[i] + 6, 97, 100 + i));
  torch::NoGradGuard no_grad;
  // Alone: prefill, then 6 decode steps, slot 0 of its own cache.
  std::vector<std::vector<torch::Tensor>> alone(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    KvCache cache(model.config(), 1, 32, torch::kFloat32);
    alone[i].push_back(model.forward_cached(cache, {0}, seqs[i].narrow(1, 0, lengths[i]), {lengths[i]})[0]);
    for (std::int64_t t = 0; t < 6; ++t)
      alone[i].push_back(model.forward_cached(cache, {0}, seqs[i].narrow(1, lengths[i] + t, 1), {1})[0]);
  }
  // Together, in slots 3, 0, 1 of one cache (not contiguous), prefill right-padded.
  KvCache cache(model.config(), 4, 32, torch::kFloat32);
  const std::vector<std::int64_t> slots{3, 0, 1};
  auto padded = torch::zeros({3, 14}, torch::kInt64);
  for (std::size_t i = 0; i < seqs.size(); ++i)
    padded[static_cast<std::int64_t>(i)].narrow(0, 0, lengths[i]).copy_(seqs[i][0].narrow(0, 0, lengths[i]));
  auto first = model.forward_cached(cache, slots, padded, lengths);
  for (std::size_t i = 0; i < seqs.size(); ++i) expect_close(first[static_cast<std::int64_t>(i)], alone[i][0]);
  for (std::int64_t t = 0; t < 6; ++t) {
    auto step_tokens = torch::zeros({3, 1}, torch::kInt64);
    for (std::size_t i = 0; i < seqs.size(); ++i)
      step_tokens[static_cast<std::int64_t>(i)][0] = seqs[i][0][lengths[i] + t];
    auto logits = model.forward_cached(cache, slots, step_tokens, {1, 1, 1});
    for (std::size_t i = 0; i < seqs.size(); ++i)
      expect_close(logits[static_cast<std::int64_t>(i)], alone[i][static_cast<std::size_t>(t + 1)]);
  }
  EXPECT_EQ(cache.length(3), 15);
  EXPECT_EQ(cache.length(1), 20);
  EXPECT_EQ(cache.length(2), 0);
}

// An overlay that adds nothing and records how many rows each projection
// hands it; for_positions gives one that shares the record.
class RecordingOverlay final : public WeightOverlay {
 public:
  explicit RecordingOverlay(std::shared_ptr<std::vector<std::int64_t>> rows, bool compacts = true)
      : rows_(std::move(rows)), compacts_(compacts) {}
  void add_linear(std::size_t, Projection, const torch::Tensor& x, torch::Tensor&) const override {
    rows_->push_back(x.numel() / x.size(-1));
  }
  std::unique_ptr<const WeightOverlay> for_positions(const std::vector<std::int64_t>&) const override {
    return compacts_ ? std::make_unique<RecordingOverlay>(rows_) : nullptr;
  }
  torch::Tensor norm_weight(std::size_t, NormSlot, const torch::Tensor& base) const override { return base; }
  void add_embedding(const torch::Tensor&, torch::Tensor&) const override {}
  void add_head(const torch::Tensor&, torch::Tensor&) const override {}

 private:
  std::shared_ptr<std::vector<std::int64_t>> rows_;
  bool compacts_;
};

// A right-padded prefill projects only the real positions (with an overlay,
// through its for_positions view; an overlay without one sees the padded
// rows), and its logits there are those of the padded computation.
TEST(Llama, PaddedPrefillProjectsOnlyTheRealPositions) {
  auto model = LlamaModel::random(small_config(false), 12);
  torch::NoGradGuard no_grad;
  const std::vector<std::int64_t> lengths{9, 3, 14}, slots{0, 1, 2};
  auto tokens = torch::zeros({3, 14}, torch::kInt64);
  for (std::int64_t i = 0; i < 3; ++i)
    tokens[i]
        .narrow(0, 0, lengths[static_cast<std::size_t>(i)])
        .copy_(random_tokens(lengths[static_cast<std::size_t>(i)], 97, 40 + i)[0]);
  std::vector<torch::Tensor> logits;
  for (bool compacts : {true, false}) {
    auto rows = std::make_shared<std::vector<std::int64_t>>();
    RecordingOverlay overlay(rows, compacts);
    KvCache cache(model.config(), 3, 32, torch::kFloat32);
    logits.push_back(model.forward_cached(cache, slots, tokens, lengths, true, &overlay));
    ASSERT_EQ(rows->size(), 2u * 7u);  // seven projections per layer
    for (auto n : *rows) EXPECT_EQ(n, compacts ? 9 + 3 + 14 : 3 * 14);
  }
  for (std::int64_t i = 0; i < 3; ++i) {
    const auto n = lengths[static_cast<std::size_t>(i)];
    expect_close(logits[0][i].narrow(0, 0, n), logits[1][i].narrow(0, 0, n));
  }
}

TEST(Llama, CacheAndTokenErrorsAreClear) {
  auto model = LlamaModel::random(small_config(true), 3);
  KvCache cache(model.config(), 1, 8, torch::kFloat32);
  auto tokens = random_tokens(9, 97, 2);
  auto message = testing::error_of([&] { model.forward_cached(cache, {0}, tokens, {9}); });
  EXPECT_NE(message.find("beyond the cache"), std::string::npos) << message;
  EXPECT_EQ(cache.length(0), 0);  // nothing was appended
  auto bad = torch::full({1, 2}, 97, torch::kInt64);
  message = testing::error_of([&] { model.forward(bad); });
  EXPECT_NE(message.find("outside the vocabulary"), std::string::npos) << message;
}

TEST(Llama, SaveLoadRoundTripsInEveryDtype) {
  testing::TempDir dir;
  auto model = LlamaModel::random(small_config(false), 5);
  auto tokens = random_tokens(10, 97, 4);
  torch::NoGradGuard no_grad;
  auto reference = model.forward(tokens);
  model.save(dir.path());
  expect_close(LlamaModel::load(dir.path()).forward(tokens), reference, 0);
  EXPECT_EQ(load_llama_config(dir.path()).torch_dtype, "float32");
  for (auto type : {torch::kBFloat16, torch::kFloat16}) {
    model.save(dir.path(), type);
    EXPECT_EQ(load_llama_config(dir.path()).torch_dtype, torch_dtype_name(type));
    SafetensorsFile file(dir.path() / "model.safetensors");
    EXPECT_EQ(file.info("model.norm.weight").dtype, type == torch::kBFloat16 ? DType::kBF16 : DType::kF16);
    // Loaded to float32, the rounded weights give nearly the same logits.
    expect_close(LlamaModel::load(dir.path()).forward(tokens), reference, 0.05);
  }
}

// A folder opened once is not re-entered: the model loads from it after
// config.json and the weight file are gone from the path (the weights stay
// mapped), the same as loading the path, and a stage loads only its layers.
TEST(Llama, AnOpenedFolderLoadsWithoutReenteringThePath) {
  testing::TempDir dir;
  auto model = LlamaModel::random(small_config(true), 7);
  auto tokens = random_tokens(9, 97, 2);
  torch::NoGradGuard no_grad;
  const auto reference = model.forward(tokens);
  model.save(dir.path());
  const std::string config_text = read_file(dir.path() / "config.json");
  const ModelFolder folder(dir.path());
  std::filesystem::remove(dir.path() / "config.json");
  std::filesystem::remove(dir.path() / "model.safetensors");
  EXPECT_EQ(folder.config_text(), config_text);
  EXPECT_EQ(folder.config().num_hidden_layers, 2);
  expect_close(LlamaModel::load(folder).forward(tokens), reference, 0);
  const auto stage = LlamaModel::load_layers(folder, 1, 4);  // blocks 0-1, the norm and the tied head
  EXPECT_EQ(stage.named_parameters(1, 4).size(), model.named_parameters(1, 4).size());
  // The path itself is gone: opening it again says what is missing.
  const auto message = testing::error_of([&] { ModelFolder again(dir.path()); });
  EXPECT_NE(message.find("config.json"), std::string::npos) << message;
}

// Rewrites model.safetensors of `dir` without `drop`, or with `reshape` given a new shape.
void rewrite_weights(const std::filesystem::path& dir, const std::string& drop, const std::string& reshape) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  {
    SafetensorsFile file(dir / "model.safetensors");
    for (const auto& info : file.tensors()) tensors.emplace_back(info.name, to_torch(file.view(info.name)));
  }
  SafetensorsWriter writer;
  for (auto& [name, t] : tensors) {
    if (name == drop) continue;
    add_to_writer(writer, name, name == reshape ? t.flatten() : t);
  }
  writer.write(dir / "model.safetensors");
}

TEST(Llama, BrokenFoldersGiveClearErrors) {
  testing::TempDir dir;
  auto model = LlamaModel::random(small_config(false), 5);
  model.save(dir.path());
  rewrite_weights(dir.path(), "model.layers.1.mlp.up_proj.weight", "");
  auto message = testing::error_of([&] { LlamaModel::load(dir.path()); });
  EXPECT_NE(message.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << message;
  const auto named_once = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos && text.find(part) == text.rfind(part);
  };
  EXPECT_TRUE(named_once(message, "model.safetensors")) << message;

  model.save(dir.path());
  rewrite_weights(dir.path(), "", "model.layers.0.self_attn.k_proj.weight");
  message = testing::error_of([&] { LlamaModel::load(dir.path()); });
  EXPECT_NE(message.find("'model.layers.0.self_attn.k_proj.weight' of model.safetensors has shape [768], but "
                         "num_key_value_heads, head_dim and hidden_size make it [16, 48]"),
            std::string::npos)
      << message;
  EXPECT_TRUE(named_once(message, "model.safetensors") && named_once(message, "k_proj")) << message;
  EXPECT_TRUE(named_once(message, "config.json")) << message;

  model.save(dir.path());
  std::filesystem::resize_file(dir.path() / "model.safetensors", 1000);
  message = testing::error_of([&] { LlamaModel::load(dir.path()); });
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;

  model.save(dir.path());
  write_file_atomically(dir.path() / "config.json", R"({"architectures": ["GPT2LMHeadModel"]})");
  message = testing::error_of([&] { LlamaModel::load(dir.path()); });
  EXPECT_NE(message.find("only LlamaForCausalLM"), std::string::npos) << message;
  write_file_atomically(dir.path() / "config.json",
                        R"({"vocab_size": 97, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
                            "num_attention_heads": 6, "num_key_value_heads": 4})");
  message = testing::error_of([&] { LlamaModel::load(dir.path()); });
  EXPECT_NE(message.find("num_key_value_heads: must divide num_attention_heads"), std::string::npos) << message;
  EXPECT_TRUE(named_once(message, "config.json") && named_once(message, "num_key_value_heads:")) << message;
}

TEST(Llama, LossMaskSelectsTargets) {
  auto logits = torch::zeros({1, 3, 4});
  logits[0][0][1] = 5.0;  // predicts token 1 at position 1 well
  auto tokens = torch::tensor({0, 1, 2}, torch::kInt64).view({1, 3});
  auto mask = torch::tensor({0.0, 1.0, 0.0}).view({1, 3});
  double only_first = causal_lm_loss(logits, tokens, mask).item<double>();
  EXPECT_NEAR(only_first, std::log(std::exp(5.0) + 3.0) - 5.0, 1e-6);
  double both = causal_lm_loss(logits, tokens).item<double>();
  EXPECT_NEAR(both, (only_first + std::log(4.0)) / 2, 1e-6);
}

}  // namespace
}  // namespace fleet::model
