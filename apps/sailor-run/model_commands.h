// `sailor-run init` and `make-corpus`: a randomly initialised model folder,
// and a synthetic training corpus.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace fleet::model {

/// `sailor-run init`: a randomly initialised model folder.
struct InitCommand {
  std::string preset;               ///< built-in config name, or
  std::filesystem::path config;     ///< a config.json
  std::filesystem::path tokenizer;  ///< tokenizer.json (default: the byte tokenizer)
  std::filesystem::path output;
  std::uint64_t seed = 0;
  std::string dtype = "float32";
  bool force = false;  ///< replace an existing folder
};
int run_init(const InitCommand& command);

/// `sailor-run make-corpus`.
struct CorpusCommand {
  std::string task;
  std::size_t lines = 1000;
  std::uint64_t seed = 0;
  std::filesystem::path output;
};
int run_make_corpus(const CorpusCommand& command);

}  // namespace fleet::model
