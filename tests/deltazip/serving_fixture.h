// The serving tests' shared fixture: a tiny random base, two fine-tunes and
// their compressed deltas on disk, engine options and a few prompts. Used by
// the CPU tests (test_serving.cpp) and the GPU ones (test_serving_gpu.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/atomic_file.h"
#include "deltazip/container.h"
#include "deltazip/serve/torch/engine.h"
#include "deltazip/serve/torch/variant_delta.h"
#include "deltazip/torch/delta_compressor.h"
#include "deltazip/torch/reconstruct.h"
#include "model/torch/llama.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace fleet::deltazip {

inline std::vector<std::vector<std::int64_t>> prompts() {
  return {{1, 40, 41, 42}, {1, 100, 7, 9, 200, 33, 34, 35, 36, 37, 38, 39, 12},
          {1, 77},         {1, 5, 6, 7, 8, 9, 10, 11, 12, 13},
          {1, 250, 251},   {1, 60, 61, 62, 63, 64}};
}

// A tiny random base, two fine-tunes (base + noise) and their deltas: 4-bit
// 2:4 round-to-nearest with float16 dense deltas, and 2-bit 2:4 OBS with full
// dense tensors. Built once for the whole suite.
class Serving : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fleet::testing::TempDir();
    auto config = model::llama_preset("tiny");
    config.max_position_embeddings = 128;
    auto make = [&](const std::string& name, std::uint64_t seed) {
      auto m = model::LlamaModel::random(config, seed);
      std::filesystem::create_directories(*dir_ / name);
      m.save(*dir_ / name);
      write_file_atomically(*dir_ / name / "tokenizer.json", text::byte_tokenizer_json());
      return m;
    };
    auto base = make("base", 1);
    make("other-base", 2);
    auto fine_tune = [&](const std::string& name, std::uint64_t seed) {
      torch::manual_seed(static_cast<std::int64_t>(seed));
      auto m = model::LlamaModel::load(*dir_ / "base");
      std::vector<std::pair<std::string, torch::Tensor>> values;
      for (const auto& [n, t] : m.named_parameters()) values.emplace_back(n, t + 0.03 * torch::randn_like(t));
      m.load_parameters(values);
      std::filesystem::create_directories(*dir_ / name);
      m.save(*dir_ / name);
      write_file_atomically(*dir_ / name / "tokenizer.json", text::byte_tokenizer_json());
    };
    fine_tune("ft1", 11);
    fine_tune("ft2", 12);
    auto compress = [&](const std::string& target, const std::string& base_name, int bits, const std::string& method,
                        const std::string& dense, const std::string& out) {
      CompressCommand c;
      c.base = *dir_ / base_name;
      c.target = *dir_ / target;
      c.output = *dir_ / out;
      c.bits = bits;
      c.method = method;
      c.dense_policy = dense;
      c.calib_samples = 8;
      c.seq_len = 32;
      c.threads = 1;
      EXPECT_GT(compress_delta(c).bytes, 0u);
    };
    compress("ft1", "base", 4, "rtn", "delta-zstd", "ft1.h5");
    compress("ft2", "base", 2, "obs", "full", "ft2.h5");
    compress("ft1", "other-base", 4, "rtn", "delta-zstd", "foreign.h5");
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::filesystem::path path(const std::string& name) { return *dir_ / name; }

  // `target` against the base into `output`: a short calibration, one thread.
  static CompressCommand quick_compression(const std::string& target, const std::string& output) {
    CompressCommand c;
    c.base = path("base");
    c.target = path(target);
    c.output = path(output);
    c.calib_samples = 8;
    c.seq_len = 32;
    c.threads = 1;
    c.force = true;
    return c;
  }

 public:
  // The base with both fine-tunes loaded as deltas over it and as the
  // models `dz-compress decompress` would rebuild.
  struct TwoVariants {
    explicit TwoVariants(const std::string& first = "ft1.h5", const std::string& second = "ft2.h5")
        : base(model::LlamaModel::load(path("base"))),
          r1(path(first)),
          r2(path(second)),
          v1(VariantDelta::load("ft1", r1, base)),
          v2(VariantDelta::load("ft2", r2, base)),
          m1(reconstruct_model(r1, base)),
          m2(reconstruct_model(r2, base)) {}
    model::LlamaModel base;
    DeltaReader r1, r2;
    std::shared_ptr<const VariantDelta> v1, v2;
    model::LlamaModel m1, m2;
  };

  static EngineOptions options(ServeMode mode) {
    EngineOptions o;
    o.base = path("base");
    o.base_name = "base";
    o.mode = mode;
    o.max_batch = 3;            // fewer slots than requests: sequences join as others leave
    o.max_tokens_per_step = 7;  // prompts prefilled in several chunks
    o.max_context = 96;
    return o;
  }

  // Every token of a request; gives up (a failure, not a hang) when the
  // engine makes no progress for two minutes.
  static std::vector<std::int64_t> collect(const std::shared_ptr<RequestStream>& stream) {
    std::vector<std::int64_t> out;
    for (int idle = 0; idle < 120;) {
      auto u = stream->wait(std::chrono::milliseconds(1000));
      idle = u.tokens.empty() && !u.finished ? idle + 1 : 0;
      out.insert(out.end(), u.tokens.begin(), u.tokens.end());
      EXPECT_TRUE(u.error.empty()) << u.error;
      if (u.finished) return out;
    }
    ADD_FAILURE() << "no progress for 120 s";
    stream->cancel();
    return out;
  }

  // Request i of a mixed stream: the models ft1, base, ft2 in turn, the
  // prompts in turn, 10 to 12 tokens.
  static GenerationRequest request(std::size_t i) {
    static const std::vector<std::string> names = {"ft1", "base", "ft2"};
    const auto all = prompts();
    GenerationRequest r;
    r.model = names[i % names.size()];
    r.prompt = all[i % all.size()];
    r.max_tokens = 10 + static_cast<std::int64_t>(i % 3);
    return r;
  }

  inline static fleet::testing::TempDir* dir_ = nullptr;
};

}  // namespace fleet::deltazip
