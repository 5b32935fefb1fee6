// Tensor parallelism against the unsplit model: two ranks as two threads
// whose collectives meet in shared memory. The sharded forward gives the
// whole model's logits (gathered) and loss, the vocabulary-parallel
// cross-entropy equals the plain one, and every rank's gradients are its
// slice of the whole model's.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_parallel.h"
#include "model/torch/training_parts.h"

namespace fleet::model {
namespace {

// The ranks of one process's threads: each collective waits for all, then
// the last to arrive combines and hands everyone the result.
class ThreadGroup final : public TensorParallelGroup {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<torch::Tensor*> slots;
    int arrived = 0, generation = 0;
  };
  ThreadGroup(Shared& shared, int rank, int size) : shared_(shared), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(torch::Tensor& t) override { reduce(t, false); }
  void all_reduce_max(torch::Tensor& t) override { reduce(t, true); }

 private:
  void reduce(torch::Tensor& t, bool max) {
    std::unique_lock<std::mutex> lock(shared_.mutex);
    shared_.slots[static_cast<std::size_t>(rank_)] = &t;
    const int generation = shared_.generation;
    if (++shared_.arrived == size_) {
      auto result = shared_.slots[0]->clone();
      for (int r = 1; r < size_; ++r)
        result = max ? torch::maximum(result, *shared_.slots[static_cast<std::size_t>(r)])
                     : result + *shared_.slots[static_cast<std::size_t>(r)];
      for (auto* slot : shared_.slots) slot->copy_(result);
      shared_.arrived = 0;
      ++shared_.generation;
      shared_.cv.notify_all();
    } else {
      shared_.cv.wait(lock, [&] { return shared_.generation != generation; });
    }
  }
  Shared& shared_;
  int rank_, size_;
};

LlamaConfig small_config(bool tied) {
  auto c = llama_preset("tiny");
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.tie_word_embeddings = tied;
  return c;
}

// One rank's results: loss, its logits columns, its gradients by name.
struct RankResult {
  double loss = 0;
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads;
};

class TensorParallel : public ::testing::TestWithParam<bool> {};

TEST_P(TensorParallel, ShardsComputeTheWholeModel) {
  const auto config = small_config(GetParam());
  const int size = 2;
  auto tokens = torch::randint(0, config.vocab_size, {3, 10}, torch::kInt64);
  Batch batch{tokens, torch::ones({3, 10}, torch::kFloat32)};
  const double divisor = 3 * 9;
  const int layers = config.num_hidden_layers + 2;

  auto whole = LlamaModel::random(config, 11);
  whole.separate_tied_head();
  auto params = whole.named_parameters(0, layers);
  for (auto& [n, p] : params) p.set_requires_grad(true);
  auto logits = whole.forward_layers(tokens, 0, layers);
  auto loss = batch_loss(logits, batch, divisor);
  loss.backward();

  ThreadGroup::Shared shared;
  shared.slots.resize(size);
  std::vector<RankResult> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ThreadGroup group(shared, r, size);
      auto model = LlamaModel::random(config, 11);
      model.separate_tied_head();
      model.shard_for_tensor_parallel(group);
      auto mine = model.named_parameters(0, layers);
      for (auto& [n, p] : mine) p.set_requires_grad(true);
      auto local = model.forward_layers(tokens, 0, layers);
      auto l = vocab_parallel_batch_loss(local, batch, divisor, model.vocab_start(), group);
      l.backward();
      results[static_cast<std::size_t>(r)].loss = l.item<double>();
      results[static_cast<std::size_t>(r)].logits = local.detach();
      for (auto& [n, p] : mine) results[static_cast<std::size_t>(r)].grads[n] = p.grad().clone();
    });
  }
  for (auto& t : threads) t.join();

  const double expected_loss = loss.item<double>();
  for (const auto& r : results) EXPECT_NEAR(r.loss, expected_loss, 1e-5 * expected_loss);
  auto gathered = torch::cat({results[0].logits, results[1].logits}, -1);
  EXPECT_TRUE(torch::allclose(gathered, logits.detach(), 1e-4, 1e-5));
  for (const auto& [name, p] : params) {
    const auto& full = p.grad();
    for (int r = 0; r < size; ++r) {
      const auto spec = shard_spec(config, name, r, size);
      auto slice = spec.dim < 0 ? full : full.narrow(spec.dim, spec.offset, spec.length);
      const auto& got = results[static_cast<std::size_t>(r)].grads.at(name);
      const double scale = slice.abs().max().item<double>() + 1e-12;
      EXPECT_LE((got - slice).abs().max().item<double>() / scale, 1e-4) << name << " on rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, TensorParallel, ::testing::Values(false, true));

TEST(TensorParallelConfig, RefusesSplitsThatDoNotDivide) {
  auto config = small_config(false);
  EXPECT_NO_THROW(check_tensor_parallel(config, 2));
  config.num_key_value_heads = 1;
  EXPECT_THROW(check_tensor_parallel(config, 2), InputError);
  EXPECT_EQ(shard_spec(config, "exp_avg.model.layers.0.self_attn.o_proj.weight", 1, 2).dim, 1);
  EXPECT_EQ(shard_spec(config, "model.layers.0.input_layernorm.weight", 1, 2).dim, -1);
}

}  // namespace
}  // namespace fleet::model
