// Test helper driven by check_llama.py, which compares with `transformers`:
//
//   model_helper logits MODEL_DIR REQUEST_JSON OUT.safetensors
//     REQUEST_JSON {"tokens": [...], "prefill": n}; writes "full" (one forward
//     over all tokens) and "cached" (prefill of n tokens, then one decode step
//     per remaining token), both [T, vocab] float32.
//   model_helper random CONFIG_JSON SEED OUT_DIR
//     writes a randomly initialised model folder (config.json, model.safetensors).
#include <iostream>

#include <torch/torch.h>

#include "common/file_io.h"
#include "common/json.h"
#include "common/safetensors.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"

using namespace fleet::model;

int main(int argc, char** argv) try {
  std::string command = argc > 1 ? argv[1] : "";
  if (command == "logits" && argc == 5) {
    auto model = LlamaModel::load(argv[2]);
    auto request = nlohmann::json::parse(fleet::read_file(argv[3]));
    auto ids = request.at("tokens").get<std::vector<std::int64_t>>();
    auto prefill = request.at("prefill").get<std::int64_t>();
    const auto T = static_cast<std::int64_t>(ids.size());
    auto tokens = torch::tensor(ids, torch::kInt64).view({1, T});
    torch::NoGradGuard no_grad;
    auto full = model.forward(tokens)[0];
    KvCache cache(model.config(), 1, T, model.dtype());
    std::vector<torch::Tensor> rows;
    rows.push_back(model.forward_cached(cache, {0}, tokens.narrow(1, 0, prefill), {prefill}, true)[0]);
    for (std::int64_t t = prefill; t < T; ++t)
      rows.push_back(model.forward_cached(cache, {0}, tokens.narrow(1, t, 1), {1}, false));
    auto cached = torch::cat(rows, 0);
    fleet::SafetensorsWriter writer;
    add_to_writer(writer, "full", full.contiguous());
    add_to_writer(writer, "cached", cached.contiguous());
    writer.write(argv[4]);
    return 0;
  }
  if (command == "random" && argc == 5) {
    auto doc = fleet::load_json_file(argv[2]);
    auto config = parse_llama_config(doc.root());
    auto model = LlamaModel::random(config, std::stoull(argv[3]));
    std::filesystem::create_directories(argv[4]);
    model.save(argv[4]);
    return 0;
  }
  std::cerr << "usage: model_helper logits MODEL_DIR REQUEST_JSON OUT | random CONFIG SEED OUT_DIR\n";
  return 2;
} catch (const std::exception& e) {
  std::cerr << "model_helper: error: " << e.what() << "\n";
  return 1;
}
