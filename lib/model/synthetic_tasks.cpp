#include "model/synthetic_tasks.h"

#include <algorithm>

#include "common/error.h"

namespace fleet::model {
namespace {

constexpr const char* kDeterminers[] = {"the", "a", "every", "some", "one"};
constexpr const char* kAdjectives[] = {"red", "small", "quiet", "old", "bright", "lazy", "quick", "green"};
constexpr const char* kNouns[] = {"cat", "dog", "bird", "fox", "river", "tree", "robot", "child", "cloud", "stone"};
constexpr const char* kVerbs[] = {"sees", "follows", "likes", "finds", "watches", "carries", "hears", "meets"};
constexpr const char* kPlaces[] = {"near the hill", "in the garden", "by the sea", "under the bridge", "at night"};

template <typename T, std::size_t N>
const T& pick(const T (&items)[N], std::mt19937_64& rng) {
  return items[std::uniform_int_distribution<std::size_t>(0, N - 1)(rng)];
}

int uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::string noun_phrase(std::mt19937_64& rng) {
  std::string s = pick(kDeterminers, rng);
  if (uniform(rng, 0, 1)) s += std::string(" ") + pick(kAdjectives, rng);
  return s + " " + pick(kNouns, rng);
}

std::string random_letters(std::mt19937_64& rng, int min_len, int max_len) {
  std::string s(static_cast<std::size_t>(uniform(rng, min_len, max_len)), 'a');
  for (auto& c : s) c = static_cast<char>('a' + uniform(rng, 0, 25));
  return s;
}

}  // namespace

SyntheticTask parse_synthetic_task(const std::string& name) {
  if (name == "base") return SyntheticTask::kBase;
  if (name == "copy") return SyntheticTask::kCopy;
  if (name == "reverse") return SyntheticTask::kReverse;
  if (name == "sort") return SyntheticTask::kSort;
  if (name == "add") return SyntheticTask::kAdd;
  throw UsageError("unknown task '" + name + "' (known: base, copy, reverse, sort, add)");
}

const char* synthetic_task_name(SyntheticTask task) {
  switch (task) {
    case SyntheticTask::kBase:
      return "base";
    case SyntheticTask::kCopy:
      return "copy";
    case SyntheticTask::kReverse:
      return "reverse";
    case SyntheticTask::kSort:
      return "sort";
    case SyntheticTask::kAdd:
      return "add";
  }
  return "?";
}

std::vector<std::string> synthetic_task_names() { return {"base", "copy", "reverse", "sort", "add"}; }

std::string make_base_sentence(std::mt19937_64& rng) {
  std::string s = noun_phrase(rng) + " " + pick(kVerbs, rng) + " " + noun_phrase(rng);
  switch (uniform(rng, 0, 3)) {
    case 0:
      s += std::string(" ") + pick(kPlaces, rng);
      break;
    case 1:
      s += " and " + noun_phrase(rng);
      break;
    case 2:
      s += " " + std::to_string(uniform(rng, 2, 99)) + " times";
      break;
    default:
      break;
  }
  // Letter strings like the tasks' inputs appear in the base language too, as
  // names that recur later in the line: a base model learns to look back and
  // repeat, which the fine-tuning tasks then build on.
  if (uniform(rng, 0, 1) == 0) {
    auto name = random_letters(rng, 3, 8);
    s = "the " + std::string(pick(kNouns, rng)) + " called " + name + " " + pick(kVerbs, rng) + " " + noun_phrase(rng) +
        " . " + name + " " + pick(kVerbs, rng) + " " + noun_phrase(rng);
  }
  return s + " .";
}

TaskExample make_task_example(SyntheticTask task, std::mt19937_64& rng) {
  switch (task) {
    case SyntheticTask::kCopy: {
      auto s = random_letters(rng, 3, 8);
      return {"copy: " + s + " =", " " + s};
    }
    case SyntheticTask::kReverse: {
      auto s = random_letters(rng, 3, 8);
      return {"reverse: " + s + " =", " " + std::string(s.rbegin(), s.rend())};
    }
    case SyntheticTask::kSort: {
      auto s = random_letters(rng, 3, 8);
      auto sorted = s;
      std::sort(sorted.begin(), sorted.end());
      return {"sort: " + s + " =", " " + sorted};
    }
    case SyntheticTask::kAdd: {
      int a = uniform(rng, 0, 999), b = uniform(rng, 0, 999);
      return {"add: " + std::to_string(a) + "+" + std::to_string(b) + " =", " " + std::to_string(a + b)};
    }
    case SyntheticTask::kBase:
      break;
  }
  throw UsageError("the base language has no task examples");
}

std::string make_synthetic_corpus(SyntheticTask task, std::size_t lines, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out;
  for (std::size_t i = 0; i < lines; ++i) {
    if (task == SyntheticTask::kBase) {
      out += make_base_sentence(rng);
    } else {
      auto ex = make_task_example(task, rng);
      out += ex.prompt + ex.answer;
    }
    out += '\n';
  }
  return out;
}

std::vector<TaskExample> make_task_examples(SyntheticTask task, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  std::vector<TaskExample> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(make_task_example(task, rng));
  return out;
}

}  // namespace fleet::model
