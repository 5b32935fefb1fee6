// Entry points of the model-related subcommands: `sailor-run init`,
// `sailor-run make-corpus`, `dz-compress eval` and `compare` (training is
// sailor/runtime/commands.h).
// Torch-free header: the programs include it, the .cpp uses libtorch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/trainer.h"

namespace fleet::model {

/// Sets the CPU threads of libtorch and of the BLAS it calls (OpenBLAS keeps its
/// own pool); 0 keeps the defaults; UsageError when negative.
void set_cpu_threads(int threads);

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

/// `dz-compress eval`: perplexity on text files and accuracy on synthetic tasks.
struct EvalCommand {
  std::filesystem::path model;
  std::vector<std::filesystem::path> text;
  std::vector<std::string> tasks;
  std::size_t samples = 100;
  std::uint64_t seed = 1;
  std::int64_t window = 256;
  std::string dtype;            ///< empty: float32 on the CPU, bfloat16 on a GPU
  std::string device = "auto";  ///< cpu, cuda or auto
  int threads = 0;
  bool json = false;
};
int run_eval(const EvalCommand& command);

/// `dz-compress compare`: perplexity and task accuracy of several models side by side.
struct CompareCommand {
  std::vector<std::pair<std::string, std::filesystem::path>> models;  ///< label, folder
  std::vector<std::filesystem::path> text;
  std::vector<std::string> tasks;
  std::size_t samples = 100;
  std::uint64_t seed = 1;
  std::int64_t window = 256;
  std::string device = "auto";  ///< cpu, cuda or auto (float32 on both: the three models are compared exactly)
  int threads = 0;
  bool json = false;
};
int run_compare(const CompareCommand& command);

}  // namespace fleet::model
