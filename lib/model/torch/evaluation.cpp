#include "model/torch/evaluation.h"

#include <cmath>

#include <torch/torch.h>

#include "common/error.h"
#include "model/torch/generate.h"
#include "text/streaming_decoder.h"

namespace fleet::model {

PerplexityResult evaluate_perplexity(const LlamaModel& model, const std::vector<std::int64_t>& tokens,
                                     std::int64_t window, std::int64_t batch) {
  if (window < 2) throw UsageError("the evaluation window must hold at least 2 tokens");
  window = std::min(window, model.config().max_position_embeddings);
  if (tokens.size() < 2) throw InputError("the text has fewer than 2 tokens: nothing to predict");
  const auto n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t stride = window - 1;
  std::vector<std::int64_t> starts;
  for (std::int64_t s = 0; s + 1 < n; s += stride) starts.push_back(s);
  torch::NoGradGuard no_grad;
  double total_nll = 0;
  std::int64_t predicted = 0;
  for (std::size_t first = 0; first < starts.size(); first += static_cast<std::size_t>(batch)) {
    const std::size_t rows = std::min(static_cast<std::size_t>(batch), starts.size() - first);
    std::int64_t width = 0;
    for (std::size_t r = 0; r < rows; ++r) width = std::max(width, std::min(window, n - starts[first + r]));
    auto input = torch::zeros({static_cast<std::int64_t>(rows), width}, torch::kInt64);
    auto mask = torch::zeros({static_cast<std::int64_t>(rows), width}, torch::kFloat32);
    for (std::size_t r = 0; r < rows; ++r) {
      const auto len = std::min(window, n - starts[first + r]);
      auto row = torch::tensor(
          std::vector<std::int64_t>(tokens.begin() + starts[first + r], tokens.begin() + starts[first + r] + len),
          torch::kInt64);
      input[static_cast<std::int64_t>(r)].narrow(0, 0, len).copy_(row);
      mask[static_cast<std::int64_t>(r)].narrow(0, 1, len - 1).fill_(1.0);
      predicted += len - 1;
    }
    auto logits = model.forward(input.to(model.device())).to(torch::kCPU);
    const auto V = logits.size(-1);
    auto losses = torch::nn::functional::cross_entropy(
        logits.narrow(1, 0, width - 1).reshape({-1, V}), input.narrow(1, 1, width - 1).reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    total_nll += (losses.to(torch::kFloat64) * mask.narrow(1, 1, width - 1).reshape({-1}).to(torch::kFloat64))
                     .sum()
                     .item<double>();
  }
  PerplexityResult result;
  result.tokens = predicted;
  result.mean_nll = total_nll / static_cast<double>(predicted);
  result.perplexity = std::exp(result.mean_nll);
  return result;
}

TaskAccuracy evaluate_task(const LlamaModel& model, const text::Tokenizer& tokenizer, SyntheticTask task,
                           std::size_t count, std::uint64_t seed) {
  auto examples = make_task_examples(task, count, seed);
  std::vector<std::vector<std::int64_t>> prompts;
  std::size_t longest_answer = 0;
  for (const auto& ex : examples) {
    auto ids = tokenizer.encode(ex.prompt, true);
    prompts.emplace_back(ids.begin(), ids.end());
    longest_answer = std::max(longest_answer, ex.answer.size());
  }
  GenerationOptions options;
  // Enough tokens for the answer even at one token per byte, and the newline.
  options.max_new_tokens = static_cast<std::int64_t>(longest_answer) + 2;
  options.stop_tokens = model.config().eos_token_ids();
  auto newline = tokenizer.encode("\n", false);
  if (newline.size() == 1) options.stop_tokens.push_back(newline[0]);
  auto outputs = generate(model, prompts, options);
  TaskAccuracy result{synthetic_task_name(task), 0, examples.size()};
  for (std::size_t i = 0; i < examples.size(); ++i) {
    // Decoded after its prompt: a SentencePiece-style tokenizer drops the
    // answer's leading space when the answer is decoded alone.
    text::StreamingDecoder decoder(tokenizer, prompts[i], /*skip_special_tokens=*/true);
    auto text = decoder.push(outputs[i]);
    text += decoder.flush();
    text = text.substr(0, text.find('\n'));
    if (text == examples[i].answer) ++result.correct;
  }
  return result;
}

}  // namespace fleet::model
