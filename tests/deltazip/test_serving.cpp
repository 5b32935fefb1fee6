// dz-serve's engine: a variant served from its packed delta in a mixed batch
// computes what the model reconstructed by `dz-compress decompress` computes
// alone (logits, and greedy tokens through the continuous-batching engine in
// every mode), and requests it cannot serve are refused with the right status.
#include <future>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "deltazip/container.h"
#include "deltazip/serve/torch/engine.h"
#include "deltazip/serve/torch/variant_delta.h"
#include "deltazip/torch/delta_compressor.h"
#include "deltazip/torch/reconstruct.h"
#include "model/torch/generate.h"
#include "model/torch/llama.h"
#include "serving_fixture.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace fleet::deltazip {
namespace {

using model::LlamaModel;

// One mixed batch of two variants and the base through the delta overlay,
// against each variant's reconstructed model run alone.
void expect_mixed_batch_equals_models_alone(Serving::TwoVariants& loaded) {
  torch::NoGradGuard no_grad;
  auto& [base, r1, r2, v1, v2, m1, m2] = loaded;
  // Rows: ft1, ft1, base, ft2 (sorted by variant, as the engine sorts them).
  const std::vector<const LlamaModel*> alone = {&m1, &m1, &base, &m2};
  auto tokens = torch::randint(4, 260, {4, 9}, torch::kInt64);
  const std::vector<std::int64_t> counts = {9, 5, 9, 7};
  model::KvCache cache(base.config(), 4, 32, torch::kFloat32);
  DeltaOverlay overlay({{0, 2, v1.get()}, {2, 1, nullptr}, {3, 1, v2.get()}}, 4);
  auto mixed = base.forward_cached(cache, {0, 1, 2, 3}, tokens, counts, true, &overlay);
  for (std::int64_t b = 0; b < 4; ++b) {
    model::KvCache own(base.config(), 1, 32, torch::kFloat32);
    auto expected = alone[static_cast<std::size_t>(b)]->forward_cached(own, {0}, tokens.narrow(0, b, 1),
                                                                       {counts[static_cast<std::size_t>(b)]}, true);
    const auto n = counts[static_cast<std::size_t>(b)];
    auto got = mixed.narrow(0, b, 1).narrow(1, 0, n), want = expected.narrow(1, 0, n);
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4))
        << "row " << b << ": max difference " << (got - want).abs().max().item<float>();
  }
  // The deltas are not trivial: each variant's logits differ from the base's.
  EXPECT_GT((mixed[0] - mixed[2]).abs().max().item<float>(), 1e-2);
  EXPECT_GT((mixed[3] - mixed[2]).abs().max().item<float>(), 1e-2);
}

TEST_F(Serving, MixedBatchLogitsEqualEachReconstructedModelAlone) {
  TwoVariants loaded;
  expect_mixed_batch_equals_models_alone(loaded);
  // Packed form: far fewer bytes than the float32 weights it stands for.
  EXPECT_LT(loaded.v1->bytes, 4 * static_cast<std::uint64_t>(loaded.base.config().hidden_size) * 260 + 500000);
}

// The forms beyond the uniform grid serve as they reconstruct: a 2-bit Lloyd
// codebook per group of 32 columns beside a size-budgeted container whose
// layers took different forms (1-bit sign and sparse ones among them).
TEST_F(Serving, CodebookAndBudgetedFormsServeLikeTheirReconstruction) {
  CompressCommand c = quick_compression("ft1", "ft1-lloyd.h5");
  c.bits = 2;
  c.grid = "lloyd";
  c.group_size = 32;
  compress_delta(c);
  CompressCommand b = c;
  b.target = path("ft2");
  b.output = path("ft2-budget.h5");
  b.bits = 4;
  b.grid = "minmax";
  b.group_size = -1;
  b.target_ratio = 9;
  const auto budgeted = compress_delta(b);
  std::set<std::string> forms;
  for (const auto& [layer, form] : budgeted.allocation) forms.insert(form);
  EXPECT_GE(forms.size(), 2u) << "the budget chose one form for every layer";
  EXPECT_LE(budgeted.bytes, budgeted.budget_bytes);
  TwoVariants loaded("ft1-lloyd.h5", "ft2-budget.h5");
  expect_mixed_batch_equals_models_alone(loaded);
}

// Low-rank deltas (two packed factors per layer) serve as they reconstruct,
// beside a variant of full rank: in a prefill, where the full-rank variant
// takes the merged product, and row by row.
TEST_F(Serving, LowRankDeltasServeLikeTheirReconstruction) {
  CompressCommand c = quick_compression("ft1", "ft1-rank.h5");
  c.bits = 4;
  c.sparsity = "none";
  c.rank = 6;
  compress_delta(c);
  TwoVariants loaded("ft1-rank.h5", "ft2.h5");
  ASSERT_EQ(loaded.r1.packed_names().size(), 0u);
  // Every linear layer, and an untied head.
  ASSERT_EQ(loaded.r1.low_rank_names().size(),
            7 * loaded.base.num_layers() + (loaded.base.config().tie_word_embeddings ? 0 : 1));
  ASSERT_NE(loaded.v1->down(0), nullptr);
  EXPECT_EQ(loaded.v1->down(0)->rows(), 6);
  expect_mixed_batch_equals_models_alone(loaded);
}

// A fine-tune whose linear layers moved along two directions each: under
// a size budget the low-rank forms win those layers (the other forms keep
// a 2-bit or 1-bit grid of every weight), and the container serves as it
// reconstructs.
TEST_F(Serving, TheBudgetGivesLowRankFormsToADeltaAlongFewDirections) {
  torch::manual_seed(21);
  auto m = LlamaModel::load(path("base"));
  std::vector<std::pair<std::string, torch::Tensor>> values;
  for (const auto& [n, t] : m.named_parameters()) {
    auto moved = t;
    if (n.find("_proj.weight") != std::string::npos)
      moved = t + 0.05 * torch::randn({t.size(0), 2}).matmul(torch::randn({2, t.size(1)})) / std::sqrt(t.size(1));
    values.emplace_back(n, moved);
  }
  m.load_parameters(values);
  std::filesystem::create_directories(path("ft-few"));
  m.save(path("ft-few"));
  write_file_atomically(path("ft-few") / "tokenizer.json", text::byte_tokenizer_json());
  CompressCommand c = quick_compression("ft-few", "ft-few-budget.h5");
  c.target_ratio = 12;
  const auto budgeted = compress_delta(c);
  std::size_t low_rank_layers = 0;
  for (const auto& [layer, form] : budgeted.allocation) low_rank_layers += form.find("low rank") != std::string::npos;
  EXPECT_GT(low_rank_layers, budgeted.allocation.size() / 2) << "of " << budgeted.allocation.size() << " layers";
  EXPECT_LE(budgeted.bytes, budgeted.budget_bytes);
  TwoVariants loaded("ft-few-budget.h5", "ft2.h5");
  expect_mixed_batch_equals_models_alone(loaded);
}

torch::Tensor parameter(const LlamaModel& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  throw std::runtime_error("no parameter " + name);
}

// The delta product on the CPU for every number of rows (the fused kernels for
// a few, decoded tiles times the small-batch kernel or BLAS for more), and
// the prefill product x · (W + Δ)ᵀ, against the whole delta decoded.
TEST_F(Serving, DeltaProductsEqualTheDecodedDeltaForEveryRowCount) {
  torch::NoGradGuard no_grad;
  auto base = LlamaModel::load(path("base"));
  DeltaReader r1(path("ft1.h5"));
  auto v1 = VariantDelta::load("ft1", r1, base);
  const SbmmMatrix& delta = *v1->linear.at(6);  // layer 0's down projection
  auto dense = torch::empty({delta.rows(), delta.cols()});
  delta.decode_rows(0, delta.rows(), dense.data_ptr<float>());
  auto w = parameter(base, "model.layers.0.mlp.down_proj.weight").contiguous();
  for (bool small_batch : {true, false}) {
    model::use_small_batch_linear(small_batch);
    for (std::int64_t n : {1, 3, 8, 9, 16, 33, 40, 70}) {
      auto x = torch::randn({n, delta.cols()});
      auto y0 = torch::randn({n, delta.rows()});
      auto y = y0.clone();
      sbmm_add(delta, x, y);
      auto want =
          (y0.to(torch::kFloat64) + x.to(torch::kFloat64).mm(dense.to(torch::kFloat64).t())).to(torch::kFloat32);
      EXPECT_TRUE(torch::allclose(y, want, 1e-4, 1e-4)) << n << " rows, small-batch kernel " << small_batch
                                                        << ": max difference " << (y - want).abs().max().item<float>();
      auto merged = torch::full({n, delta.rows()}, std::nanf(""));  // every entry must be written
      merged_product(delta, w, x, merged);
      auto merged_want = x.to(torch::kFloat64).mm((w + dense).to(torch::kFloat64).t()).to(torch::kFloat32);
      EXPECT_TRUE(torch::allclose(merged, merged_want, 1e-4, 1e-4))
          << n << " rows, small-batch kernel " << small_batch << ": max difference "
          << (merged - merged_want).abs().max().item<float>();
    }
  }
  model::use_small_batch_linear(true);
}

// Several variants' prefill products of one layer in one pass over W: each
// equals its own x · (W + Δ)ᵀ, whatever the mix of row counts (which picks
// the kernel and the tile height).
TEST_F(Serving, MergedProductsOfSeveralVariantsEqualEachVariantsOwn) {
  torch::NoGradGuard no_grad;
  auto base = LlamaModel::load(path("base"));
  DeltaReader r1(path("ft1.h5")), r2(path("ft2.h5"));
  auto v1 = VariantDelta::load("ft1", r1, base), v2 = VariantDelta::load("ft2", r2, base);
  auto w = parameter(base, "model.layers.0.mlp.down_proj.weight").contiguous();
  const SbmmMatrix* deltas[] = {v1->linear.at(6).get(), v2->linear.at(6).get(), v1->linear.at(6).get()};
  for (bool small_batch : {true, false}) {
    model::use_small_batch_linear(small_batch);
    for (const auto& counts : {std::vector<std::int64_t>{9, 40, 70}, std::vector<std::int64_t>{300, 12, 33}}) {
      std::vector<MergedProduct> products;
      std::vector<torch::Tensor> wants;
      for (std::size_t i = 0; i < 3; ++i) {
        auto x = torch::randn({counts[i], w.size(1)});
        auto dense = torch::empty({w.size(0), w.size(1)});
        deltas[i]->decode_rows(0, w.size(0), dense.data_ptr<float>());
        wants.push_back(x.to(torch::kFloat64).mm((w + dense).to(torch::kFloat64).t()).to(torch::kFloat32));
        products.push_back({deltas[i], x, torch::full({counts[i], w.size(0)}, std::nanf(""))});
      }
      merged_products(products, w);
      for (std::size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(torch::allclose(products[i].out, wants[i], 1e-4, 1e-4))
            << "variant " << i << " of 3, " << counts[i] << " rows, small-batch kernel " << small_batch
            << ": max difference " << (products[i].out - wants[i]).abs().max().item<float>();
    }
  }
  model::use_small_batch_linear(true);
  auto other_shape = parameter(base, "model.layers.0.self_attn.q_proj.weight").contiguous();
  std::vector<MergedProduct> wrong{{deltas[0], torch::randn({9, w.size(1)}), torch::empty({9, w.size(0)})}};
  EXPECT_THROW(merged_products(wrong, other_shape), std::invalid_argument);
}

// A variant with enough rows in the step (a prompt's prefill) takes the merged
// product (one dense product with W + Δ instead of the base's plus the
// delta's); variants with a few rows and rows of the base model keep base
// product + SBMM in the same call; each row computes what its reconstructed
// model computes alone. A step without such a variant, and a decode step
// with rows left for the base product, are left to the model's usual path.
TEST_F(Serving, VariantsWithManyRowsTakeOneProductEach) {
  torch::NoGradGuard no_grad;
  TwoVariants loaded;
  auto& [base, r1, r2, v1, v2, m1, m2] = loaded;
  const auto hidden = base.config().hidden_size;
  const char* q_name = "model.layers.1.self_attn.q_proj.weight";
  const auto& q = parameter(base, q_name);
  auto q_of = [&](const LlamaModel& m, const torch::Tensor& rows) { return torch::linear(rows, parameter(m, q_name)); };
  DeltaOverlay overlay({{0, 2, v1.get()}, {2, 1, v2.get()}}, 3);
  // 20 tokens: more rows than the tile path needs with or without the
  // small-batch kernel (a CPU without AVX2 needs 17).
  auto x = torch::randn({3, 20, hidden});
  auto want = torch::cat({q_of(m1, x.narrow(0, 0, 2)), q_of(m2, x.narrow(0, 2, 1))});
  for (bool small_batch : {false, true}) {
    model::use_small_batch_linear(small_batch);
    auto merged = overlay.linear(1, model::Projection::kQ, x, q);
    ASSERT_TRUE(merged.defined()) << "small-batch kernel " << small_batch;
    EXPECT_TRUE(torch::allclose(merged, want, 1e-4, 1e-4)) << (merged - want).abs().max().item<float>();
  }
  EXPECT_FALSE(overlay.linear(1, model::Projection::kQ, torch::randn({3, 1, hidden}), q).defined());
  // A decode step (one position per row) merges only when no base product
  // is left: 20 sequences of ft1 beside 2 of ft2 keep base product + SBMM,
  // the same rows as a prefill's positions do not.
  DeltaOverlay decode_rows({{0, 20, v1.get()}, {20, 2, v2.get()}}, 22);
  EXPECT_FALSE(decode_rows.linear(1, model::Projection::kQ, torch::randn({22, 1, hidden}), q).defined());
  EXPECT_TRUE(decode_rows.linear(1, model::Projection::kQ, torch::randn({22, hidden}), q).defined());

  // Rows one per token, as a padded prefill's real positions: 20 rows of ft1
  // (merged), 3 of the base, 4 of ft2 (base product + SBMM).
  DeltaOverlay mixed_rows({{0, 20, v1.get()}, {20, 3, nullptr}, {23, 4, v2.get()}}, 27);
  auto rows = torch::randn({27, hidden});
  auto rows_want =
      torch::cat({q_of(m1, rows.narrow(0, 0, 20)), q_of(base, rows.narrow(0, 20, 3)), q_of(m2, rows.narrow(0, 23, 4))});
  for (bool small_batch : {false, true}) {
    model::use_small_batch_linear(small_batch);
    auto got = mixed_rows.linear(1, model::Projection::kQ, rows, q);
    ASSERT_TRUE(got.defined()) << "small-batch kernel " << small_batch;
    EXPECT_TRUE(torch::allclose(got, rows_want, 1e-4, 1e-4)) << (got - rows_want).abs().max().item<float>();
  }
  model::use_small_batch_linear(true);

  // Through the model: a whole prefill, logits as each reconstruction alone.
  auto tokens = torch::randint(4, 260, {3, 20}, torch::kInt64);
  model::KvCache cache(base.config(), 3, 32, torch::kFloat32);
  auto mixed = base.forward_cached(cache, {0, 1, 2}, tokens, {20, 20, 20}, true, &overlay);
  const std::vector<const LlamaModel*> alone = {&m1, &m1, &m2};
  for (std::int64_t b = 0; b < 3; ++b) {
    model::KvCache own(base.config(), 1, 32, torch::kFloat32);
    auto expected = alone[static_cast<std::size_t>(b)]->forward_cached(own, {0}, tokens.narrow(0, b, 1), {20}, true);
    auto got = mixed.narrow(0, b, 1);
    EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4))
        << "row " << b << ": max difference " << (got - expected).abs().max().item<float>();
  }
}

// A prefill pads shorter prompts to the longest; the model hands the overlay
// only the real positions (for_positions: segments counted in tokens), and
// each sequence's logits at its real positions are what its reconstruction
// gives for its prompt alone.
TEST_F(Serving, PaddedPrefillComputesOnlyTheRealPositions) {
  torch::NoGradGuard no_grad;
  TwoVariants loaded;
  auto& [base, r1, r2, v1, v2, m1, m2] = loaded;
  const auto hidden = base.config().hidden_size;
  const std::vector<std::int64_t> counts = {20, 13, 5, 17};  // ft1: 33 rows (merged), base: 5, ft2: 17
  DeltaOverlay overlay({{0, 2, v1.get()}, {2, 1, nullptr}, {3, 1, v2.get()}}, 4);
  const std::vector<const LlamaModel*> alone = {&m1, &m1, &base, &m2};
  const char* q_name = "model.layers.1.self_attn.q_proj.weight";
  auto positions = overlay.for_positions(counts);
  ASSERT_NE(positions, nullptr);
  auto x = torch::randn({55, hidden});
  auto projected = positions->linear(1, model::Projection::kQ, x, parameter(base, q_name));
  ASSERT_TRUE(projected.defined());
  std::int64_t at = 0;
  for (std::int64_t b = 0; b < 4; ++b) {
    const auto real = counts[static_cast<std::size_t>(b)];
    auto want = torch::linear(x.narrow(0, at, real), parameter(*alone[static_cast<std::size_t>(b)], q_name));
    EXPECT_TRUE(torch::allclose(projected.narrow(0, at, real), want, 1e-4, 1e-4)) << "row " << b;
    at += real;
  }
  EXPECT_THROW(overlay.for_positions({20, 13}), std::invalid_argument);

  auto tokens = torch::randint(4, 260, {4, 20}, torch::kInt64);
  for (std::int64_t b = 0; b < 4; ++b)  // the padding as the engine writes it
    tokens[b].narrow(0, counts[static_cast<std::size_t>(b)], 20 - counts[static_cast<std::size_t>(b)]).zero_();
  model::KvCache cache(base.config(), 4, 32, torch::kFloat32);
  auto mixed = base.forward_cached(cache, {0, 1, 2, 3}, tokens, counts, true, &overlay);
  for (std::int64_t b = 0; b < 4; ++b) {
    const auto real = counts[static_cast<std::size_t>(b)];
    model::KvCache own(base.config(), 1, 32, torch::kFloat32);
    auto expected = alone[static_cast<std::size_t>(b)]->forward_cached(
        own, {0}, tokens.narrow(0, b, 1).narrow(1, 0, real), {real}, true);
    auto got = mixed.narrow(0, b, 1).narrow(1, 0, real);
    EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4))
        << "row " << b << ": max difference " << (got - expected).abs().max().item<float>();
  }
}

// Every mode serves every variant exactly as its reconstruction runs alone.
class ServingModes : public Serving, public ::testing::WithParamInterface<ServeMode> {};

TEST_P(ServingModes, GreedyTokensEqualTheReconstructedModelRunAlone) {
  torch::NoGradGuard no_grad;
  auto base = LlamaModel::load(path("base"));
  DeltaReader r1(path("ft1.h5")), r2(path("ft2.h5"));
  std::map<std::string, LlamaModel> alone;
  alone.emplace("ft1", reconstruct_model(r1, base));
  alone.emplace("ft2", reconstruct_model(r2, base));
  alone.emplace("base", LlamaModel::load(path("base")));

  auto o = options(GetParam());
  o.max_variants_per_batch = 1;  // requests for the other variant wait for the batch to drain of one
  Engine engine(o);
  engine.add_variant("ft1", path("ft1.h5"));
  engine.add_variant("ft2", path("ft2.h5"));
  std::vector<GenerationRequest> asked;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (std::size_t i = 0; i < 12; ++i) {
    asked.push_back(request(i));
    streams.push_back(engine.submit(asked.back()));
  }
  std::map<std::string, std::vector<std::vector<std::int64_t>>> by_model;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    auto got = collect(streams[i]);
    model::GenerationOptions g;
    g.max_new_tokens = asked[i].max_tokens;
    g.stop_tokens = {engine.eos_token_id()};
    auto want = model::generate(alone.at(asked[i].model), {asked[i].prompt}, g)[0];
    EXPECT_EQ(got, want) << "request " << i << " for " << asked[i].model;
    by_model[asked[i].model].push_back(got);
  }
  // The check means something: the variants answer the same prompt differently.
  EXPECT_NE(by_model["ft1"][0], by_model["base"][0]);
  EXPECT_NE(by_model["ft2"][0], by_model["base"][0]);
  EXPECT_TRUE(engine.idle());
  // Never two variants in one step (the base rides along with either).
  const auto text = engine.metrics_text();
  const auto steps = text.substr(text.find("dz_batch_variants_count"));
  const auto one = text.substr(text.find("dz_batch_variants_bucket{le=\"1\"}"));
  EXPECT_EQ(std::stod(one.substr(one.find(' ') + 1)), std::stod(steps.substr(steps.find(' ') + 1)));
}

// Echo's scoring: every prompt token's log-probability, over prefill chunks, in
// every mode, equals the model's log-softmax when the variant runs alone.
TEST_P(ServingModes, PromptLogprobsEqualTheModelRunAlone) {
  torch::NoGradGuard no_grad;
  auto base = LlamaModel::load(path("base"));
  DeltaReader r2(path("ft2.h5"));
  const auto alone = reconstruct_model(r2, base);
  Engine engine(options(GetParam()));
  engine.add_variant("ft2", path("ft2.h5"));
  GenerationRequest r;
  r.model = "ft2";
  r.prompt = {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55};  // three chunks of 7
  r.max_tokens = 1;
  r.logprobs = 2;
  r.prompt_logprobs = true;
  auto stream = engine.submit(r);
  std::vector<model::TokenLogprobs> got;
  for (int idle = 0; idle < 120;) {
    auto u = stream->wait(std::chrono::milliseconds(1000));
    idle = u.prompt_logprobs.empty() && !u.finished ? idle + 1 : 0;
    for (auto& l : u.prompt_logprobs) got.push_back(l);
    if (u.finished) break;
  }
  ASSERT_EQ(got.size(), r.prompt.size() - 1);
  auto tokens = torch::tensor(r.prompt, torch::kInt64).unsqueeze(0);
  model::KvCache cache(base.config(), 1, 32, torch::kFloat32);
  auto want = torch::log_softmax(
      alone.forward_cached(cache, {0}, tokens, {static_cast<std::int64_t>(r.prompt.size())}, true)[0].to(
          torch::kFloat64),
      -1);
  for (std::size_t t = 1; t < r.prompt.size(); ++t) {
    EXPECT_NEAR(got[t - 1].logprob, want[static_cast<std::int64_t>(t) - 1][r.prompt[t]].item<double>(), 1e-4) << t;
    ASSERT_EQ(got[t - 1].top.size(), 2u);
    EXPECT_NEAR(got[t - 1].top[0].second, want[static_cast<std::int64_t>(t) - 1].max().item<double>(), 1e-4) << t;
  }
  // Asking for the prompt's log-probabilities needs logprobs.
  r.logprobs = -1;
  EXPECT_THROW(engine.submit(r), ServeError);
}

INSTANTIATE_TEST_SUITE_P(AllModes, ServingModes,
                         ::testing::Values(ServeMode::kDelta, ServeMode::kSwap, ServeMode::kFull),
                         [](const ::testing::TestParamInfo<ServeMode>& info) { return serve_mode_name(info.param); });

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ServeError& e) {
    return e.status();
  }
  return 200;
}

TEST_F(Serving, RefusesWhatItCannotServe) {
  Engine engine(options(ServeMode::kDelta));
  engine.add_variant("ft1", path("ft1.h5"));
  GenerationRequest r;
  r.model = "ft1";
  r.prompt = {1, 2, 3};
  r.max_tokens = 4;
  auto with = [&](auto change) {
    auto copy = r;
    change(copy);
    return status_of([&] { engine.submit(copy); });
  };
  EXPECT_EQ(with([](GenerationRequest& g) { g.model = "missing"; }), 404);
  // Over the context: 400 context_length_exceeded, as OpenAI and vLLM answer;
  // an unknown model is named first.
  EXPECT_EQ(with([](GenerationRequest& g) { g.prompt.assign(97, 5); }), 400);
  EXPECT_EQ(with([](GenerationRequest& g) { g.prompt.assign(97, 5), g.model = "missing"; }), 404);
  try {
    auto copy = r;
    copy.prompt.assign(97, 5);
    engine.submit(copy);
    ADD_FAILURE() << "an over-long prompt was accepted";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
  }
  EXPECT_EQ(with([](GenerationRequest& g) { g.max_tokens = 94; }), 400);
  EXPECT_EQ(with([](GenerationRequest& g) { g.max_tokens = 0; }), 400);
  EXPECT_EQ(with([](GenerationRequest& g) { g.prompt = {1, 260}; }), 400);
  EXPECT_EQ(with([](GenerationRequest& g) { g.prompt.clear(); }), 400);
  // A delta made from another base, an unreadable file, a duplicate name.
  EXPECT_EQ(status_of([&] { engine.add_variant("foreign", path("foreign.h5")); }), 400);
  EXPECT_EQ(status_of([&] { engine.add_variant("gone", path("missing.h5")); }), 400);
  write_file_atomically(path("garbage.h5"), "not an HDF5 file at all");
  EXPECT_EQ(status_of([&] { engine.add_variant("garbage", path("garbage.h5")); }), 400);
  EXPECT_EQ(status_of([&] { engine.add_variant("ft1", path("ft2.h5")); }), 400);
  EXPECT_EQ(status_of([&] { engine.remove_variant("nothing"); }), 404);
  // Still serving; then unloaded (404), then shutting down (503).
  EXPECT_EQ(collect(engine.submit(r)).size(), 4u);
  engine.remove_variant("ft1");
  EXPECT_EQ(with([](GenerationRequest&) {}), 404);
  engine.begin_shutdown();
  EXPECT_EQ(with([](GenerationRequest& g) { g.model = "base"; }), 503);
}

// Llama 3 Instruct ends a turn with a second end-of-sequence id, listed in
// generation_config.json (and config.json) and named by the chat template's
// eos_token: generation stops at any of them.
TEST_F(Serving, StopsAtEveryEndOfSequenceId) {
  torch::NoGradGuard no_grad;
  testing::TempDir dir;
  const auto folder = dir.path() / "base";
  std::filesystem::copy(path("base"), folder, std::filesystem::copy_options::recursive);
  model::GenerationOptions g;
  g.max_new_tokens = 8;
  g.stop_tokens = {model::llama_preset("tiny").eos_token_id};
  // A prompt whose free run has a token at k >= 1 that did not occur before
  // it: listed as an end of sequence, it ends the sequence there.
  const auto base = LlamaModel::load(folder);
  std::vector<std::int64_t> prompt, free_run;
  std::size_t k = 0;
  for (const auto& candidate : prompts()) {
    prompt = candidate;
    free_run = model::generate(base, {prompt}, g)[0];
    for (k = 1; k < free_run.size(); ++k)
      if (std::find(free_run.begin(), free_run.begin() + static_cast<std::ptrdiff_t>(k), free_run[k]) ==
          free_run.begin() + static_cast<std::ptrdiff_t>(k))
        break;
    if (k < free_run.size()) break;
  }
  ASSERT_LT(k, free_run.size());
  write_file_atomically(folder / "generation_config.json", "{\"eos_token_id\": [" + std::to_string(g.stop_tokens[0]) +
                                                               ", " + std::to_string(free_run[k]) + "]}");
  auto o = options(ServeMode::kDelta);
  o.base = folder;
  const std::vector<std::int64_t> until_k(free_run.begin(), free_run.begin() + static_cast<std::ptrdiff_t>(k));
  GenerationRequest r;
  r.model = "base";
  r.prompt = prompt;
  r.max_tokens = 8;
  {
    Engine engine(o);
    EXPECT_EQ(engine.end_of_sequence_ids(), (std::vector<std::int64_t>{g.stop_tokens[0], free_run[k]}));
    EXPECT_EQ(collect(engine.submit(r)), until_k);
  }
  // The same id as the chat template's eos_token (tokenizer_config.json).
  std::filesystem::remove(folder / "generation_config.json");
  const auto tokenizer = text::Tokenizer::load(folder);
  write_file_atomically(folder / "tokenizer_config.json",
                        nlohmann::json{{"chat_template", "{{ messages[0]['content'] }}"},
                                       {"eos_token", tokenizer.token(static_cast<std::int32_t>(free_run[k]))}}
                            .dump());
  Engine engine(o);
  EXPECT_EQ(engine.end_of_sequence_ids(), (std::vector<std::int64_t>{g.stop_tokens[0], free_run[k]}));
  EXPECT_EQ(collect(engine.submit(r)), until_k);
}

TEST_F(Serving, DeltaMemoryKeepsOneVariantAndEvictsTheLeastRecentlyUsed) {
  auto o = options(ServeMode::kDelta);
  {
    auto base = LlamaModel::load(path("base"));
    DeltaReader r1(path("ft1.h5")), r2(path("ft2.h5"));
    o.delta_memory = std::max(VariantDelta::load("a", r1, base)->bytes, VariantDelta::load("b", r2, base)->bytes);
  }
  Engine engine(o);
  engine.add_variant("ft1", path("ft1.h5"));
  engine.add_variant("ft2", path("ft2.h5"));
  GenerationRequest r;
  r.prompt = {1, 9, 8, 7};
  r.max_tokens = 3;
  std::map<std::string, std::vector<std::int64_t>> first;
  for (const char* name : {"ft1", "ft2", "ft1", "ft2"}) {
    r.model = name;
    auto tokens = collect(engine.submit(r));
    if (!first.count(name)) first[name] = tokens;
    EXPECT_EQ(tokens, first[name]) << "reloaded " << name << " answers differently";
  }
  const auto& m = engine.metrics();
  EXPECT_EQ(m.value("dz_delta_loads"), 4);
  EXPECT_EQ(m.value("dz_delta_evictions"), 3);
  EXPECT_LE(m.value("dz_resident_bytes", {{"part", "deltas"}}), static_cast<double>(o.delta_memory));
}

TEST_F(Serving, ColdVariantLoadsWhileTheBatchKeepsRunning) {
  auto o = options(ServeMode::kDelta);
  std::promise<void> release;
  auto released = release.get_future().share();
  o.before_delta_load = [released](const std::string&) { released.wait(); };  // the disk is "slow"
  Engine engine(o);
  engine.add_variant("ft1", path("ft1.h5"));
  GenerationRequest cold;
  cold.model = "ft1";
  cold.prompt = {1, 9, 8, 7};
  cold.max_tokens = 4;
  auto waiting = engine.submit(cold);
  // While ft1's load is held, requests for the base run to their end.
  GenerationRequest warm = cold;
  warm.model = "base";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(collect(engine.submit(warm)).size(), 4u);
  auto state = [&] {
    for (const auto& m : engine.models())
      if (m.name == "ft1") return m.state;
    return std::string();
  };
  EXPECT_EQ(state(), "loading");
  EXPECT_TRUE(waiting->wait(std::chrono::milliseconds(0)).tokens.empty());
  release.set_value();
  EXPECT_EQ(collect(waiting).size(), 4u);
  EXPECT_EQ(state(), "resident");
}

// With one variant allowed per step, a request for another variant lets
// later requests for the running one go ahead (the batch stays full) until a
// batch's worth of them has passed it; then it stops the queue behind it and
// runs as soon as its variant fits, so it is neither blocking nor starved.
TEST_F(Serving, VariantCapLetsLaterRequestsAheadForABatchAtMost) {
  auto o = options(ServeMode::kDelta);
  o.max_batch = 2;
  o.max_variants_per_batch = 1;
  std::promise<void> release;
  auto released = release.get_future().share();
  o.before_delta_load = [released](const std::string&) { released.wait(); };
  Engine engine(o);
  engine.add_variant("ft1", path("ft1.h5"));
  engine.add_variant("ft2", path("ft2.h5"));
  // Everything is queued before ft1's delta arrives, so the order of
  // admissions follows from the queue alone, not from how fast this thread is.
  GenerationRequest longer;
  longer.model = "ft1";
  longer.prompt = {1, 5, 6, 7};
  longer.max_tokens = 64;
  longer.sampling.logit_bias = {{engine.eos_token_id(), -100.0f}};  // runs all 64 tokens
  auto l = engine.submit(longer);
  GenerationRequest other = longer;
  other.model = "ft2";
  other.max_tokens = 2;
  auto h = engine.submit(other);
  GenerationRequest later = other;
  later.model = "ft1";
  std::vector<std::shared_ptr<RequestStream>> s;
  for (int i = 0; i < 4; ++i) s.push_back(engine.submit(later));
  release.set_value();
  // The first two later ft1 requests run beside the long one (before it ends,
  // while ft2's waits)...
  EXPECT_EQ(collect(l).size(), 64u);
  EXPECT_TRUE(s[0]->wait(std::chrono::milliseconds(0)).finished) << "the ft2 request blocked the queue behind it";
  EXPECT_TRUE(s[1]->wait(std::chrono::milliseconds(0)).finished);
  // ... and no more: the third waits until the ft2 request has run.
  EXPECT_EQ(collect(s[2]).size(), 2u);
  const auto ft2 = h->wait(std::chrono::milliseconds(0));
  EXPECT_TRUE(ft2.finished) << "later requests kept passing the ft2 request";
  EXPECT_EQ(ft2.tokens.size(), 2u);
  EXPECT_EQ(collect(s[3]).size(), 2u);
  EXPECT_TRUE(engine.idle());
}

TEST_F(Serving, CancelledRequestFreesItsSlot) {
  auto o = options(ServeMode::kDelta);
  o.max_batch = 1;
  Engine engine(o);
  GenerationRequest r;
  r.model = "base";
  r.prompt = {1, 2, 3};
  r.max_tokens = 90;
  auto long_one = engine.submit(r);
  long_one->wait(std::chrono::milliseconds(5000));  // running now
  long_one->cancel();
  r.max_tokens = 2;
  EXPECT_EQ(collect(engine.submit(r)).size(), 2u);  // gets the only slot
  auto u = long_one->wait(std::chrono::milliseconds(0));
  EXPECT_TRUE(u.finished);
  EXPECT_EQ(u.finish_reason, "cancelled");
}

}  // namespace
}  // namespace fleet::deltazip
