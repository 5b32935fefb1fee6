// Synthetic corpora made by the toolkit, no downloads: a small base
// "language" of templated sentences, and fine-tuning tasks (copy, reverse,
// sort, add) whose answers can be checked exactly, so fine-tuned variants
// differ measurably from the base and from each other. No libtorch.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fleet::model {

enum class SyntheticTask { kBase, kCopy, kReverse, kSort, kAdd };

/// Parses "base", "copy", "reverse", "sort" or "add"; UsageError otherwise.
SyntheticTask parse_synthetic_task(const std::string& name);
const char* synthetic_task_name(SyntheticTask task);
/// The names of all tasks, base first.
std::vector<std::string> synthetic_task_names();

/// One example: the line is prompt + answer + "\n"; a model solves it when
/// its greedy continuation of the prompt up to the newline equals the answer.
struct TaskExample {
  std::string prompt;  ///< e.g. "reverse: kdqz ="
  std::string answer;  ///< e.g. " zqdk"
};

/// A random example of a fine-tuning task (not kBase).
TaskExample make_task_example(SyntheticTask task, std::mt19937_64& rng);
/// A random sentence of the base language, ending in ".".
std::string make_base_sentence(std::mt19937_64& rng);

/// `lines` lines of the task's corpus (base: sentences), from `seed`.
std::string make_synthetic_corpus(SyntheticTask task, std::size_t lines, std::uint64_t seed);
/// `count` examples for measuring accuracy. Evaluation seeds draw from a
/// separate stream, so they do not repeat the training corpus's sequence.
std::vector<TaskExample> make_task_examples(SyntheticTask task, std::size_t count, std::uint64_t seed);

}  // namespace fleet::model
