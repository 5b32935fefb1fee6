// A small mutation fuzzer for the input formats we parse: valid examples
// mutated (bytes changed, tokens inserted, spans removed, cut short) and
// handed to a parser, which must accept them or throw one of the toolkit's
// own errors (InputError, UsageError): never crash, hang, throw anything
// else, or allocate without bound (std::bad_alloc fails the test).
// Deterministic (fixed seeds); FLEET_FUZZ_ITERATIONS=N runs N mutations per
// format instead of the CI count, for longer runs by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"

namespace fleet::testing {

/// Tokens that break parsers in interesting ways: structure, huge and
/// negative numbers, non-numbers, quotes and line ends.
inline const std::vector<std::string>& fuzz_tokens() {
  static const std::vector<std::string> tokens = {
      ",",          "\"",         "\n",    "\r\n",   ":",       "[",   "]",    "{",       "}",
      "-1",         "0",          "1e308", "-1e308", "1e400",   "nan", "null", "true",    "9999999999999999999",
      "4294967300", "2147483647", "1e9",   "65536",  "\\u0000", "\\",  "n/a",  "(256, 1", ""};
  return tokens;
}

/// One mutation of `text`.
inline std::string fuzz_mutate(std::string text, std::mt19937_64& rng) {
  if (text.empty()) return text;
  const std::size_t at = rng() % text.size();
  switch (rng() % 5) {
    case 0:
      text[at] = static_cast<char>(rng() & 0xff);
      break;
    case 1:
      text.insert(at, fuzz_tokens()[rng() % fuzz_tokens().size()]);
      break;
    case 2:
      text.erase(at, 1 + rng() % 16);
      break;
    case 3:
      text.resize(at);
      break;
    default: {  // a digit run replaced by a huge number
      const std::size_t digit = text.find_first_of("0123456789", at);
      if (digit != std::string::npos) text.replace(digit, 1, "99999999999");
    }
  }
  return text;
}

/// Mutations per format: `ci` unless FLEET_FUZZ_ITERATIONS says otherwise.
inline int fuzz_iterations(int ci) {
  const char* given = std::getenv("FLEET_FUZZ_ITERATIONS");
  const int n = given != nullptr ? std::atoi(given) : 0;
  return n > 0 ? n : ci;
}

/// What a run of the fuzzer saw.
struct FuzzCounts {
  int accepted = 0, rejected = 0;
};

/// Feeds `iterations` mutations (1-3 each) of the `seeds` to `parse`; any
/// exception other than the toolkit's errors fails the test with the input.
inline FuzzCounts fuzz(const std::vector<std::string>& seeds, int iterations, std::uint64_t seed,
                       const std::function<void(const std::string&)>& parse) {
  std::mt19937_64 rng(seed);
  FuzzCounts counts;
  for (int i = 0; i < iterations; ++i) {
    std::string text = seeds[static_cast<std::size_t>(i) % seeds.size()];
    const int rounds = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < rounds; ++k) text = fuzz_mutate(text, rng);
    try {
      parse(text);
      ++counts.accepted;
    } catch (const fleet::Error& e) {
      ++counts.rejected;
      // One line, as every program prints it.
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << "a multi-line error: " << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutation " << i << " (seed " << seed << "): " << typeid(e).name() << ": " << e.what()
                    << "\ninput:\n"
                    << text.substr(0, 2000);
      return counts;
    }
  }
  return counts;
}

}  // namespace fleet::testing
