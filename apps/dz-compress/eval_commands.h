// `dz-compress eval` and `compare`: perplexity on text and exact-match
// accuracy on synthetic tasks, of one model or of several side by side.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace fleet::model {

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
