// A Hugging Face model folder, opened once: config.json read and parsed,
// the weight files mapped and indexed (one model.safetensors or a sharded
// index). The tokenizer, the chat template and generation_config.json's
// end-of-sequence ids are read from it on request. Programs open a folder
// once and pass it down instead of re-entering the path for each piece.
// Needs no libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "model/llama_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace fleet::model {

class ModelFolder {
 public:
  /// Reads `dir`/config.json and opens the weights. InputError naming the
  /// file for a missing or invalid config.json, missing weights, or a
  /// damaged safetensors header or index.
  explicit ModelFolder(std::filesystem::path dir);

  const std::filesystem::path& path() const { return dir_; }
  const LlamaConfig& config() const { return config_; }
  /// config.json as stored (identities hash its bytes).
  const std::string& config_text() const { return config_text_; }
  /// model.safetensors.index.json when sharded, else model.safetensors.
  const std::filesystem::path& weights_path() const { return weights_path_; }
  /// The weights, mapped (nothing is read until a tensor is viewed).
  const SafetensorsCheckpoint& weights() const { return weights_; }

  /// tokenizer.json, parsed (each call reads it: keep what it returns).
  text::Tokenizer load_tokenizer() const;
  /// tokenizer_config.json's chat template; nullopt when there is none.
  std::optional<text::ModelChatTemplate> load_chat_template() const;
  /// config.json's end-of-sequence ids, then generation_config.json's.
  std::vector<std::int64_t> end_of_sequence_ids() const;

 private:
  std::filesystem::path dir_;
  std::string config_text_;
  LlamaConfig config_;
  std::filesystem::path weights_path_;
  SafetensorsCheckpoint weights_;
};

}  // namespace fleet::model
