// Thousands of mutated headers fed to the parser: each must parse into
// in-bounds tensors or fail with InputError — never crash, hang or read out
// of bounds (the ASan/UBSan build in scripts/test.sh checks the last part).
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "common/safetensors.h"
#include "safetensors_fixtures.h"

namespace fleet {
namespace {

const std::string kHeader = R"({"__metadata__":{"format":"pt"},)"
                            R"("embed":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]},)"
                            R"("norm":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
                            R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}})";

// JSON fragments that push mutations toward interesting parser states.
const char* kTokens[] = {"{",
                         "}",
                         "[",
                         "]",
                         ",",
                         ":",
                         "\"",
                         "-1",
                         "0",
                         "1e309",
                         "18446744073709551615",
                         "\"F32\"",
                         "\"BOOL\"",
                         "null",
                         "true",
                         "\\u0000",
                         "\xff",
                         "data_offsets",
                         "shape"};

void check_parse(const std::vector<std::byte>& bytes, int* parsed, int* rejected) {
  try {
    const SafetensorsHeader h = parse_safetensors_header(bytes, "fuzz");
    for (const TensorInfo& t : h.tensors) {
      ASSERT_LE(t.begin, t.end);
      ASSERT_LE(h.data_start + t.end, bytes.size());
      ASSERT_EQ(t.numel() * dtype_size(t.dtype), t.nbytes());
    }
    ++*parsed;
  } catch (const InputError&) {
    ++*rejected;
  }
}

TEST(SafetensorsFuzz, MutatedHeadersNeverCrash) {
  const std::vector<std::byte> original = testing::raw_safetensors(kHeader, 32);
  std::mt19937_64 rng(20261202);
  int parsed = 0, rejected = 0;
  for (int iteration = 0; iteration < 6000; ++iteration) {
    std::vector<std::byte> bytes = original;
    const int kind = static_cast<int>(rng() % 5);
    const std::size_t header_end = 8 + kHeader.size();
    if (kind == 0) {  // flip a few random bytes anywhere in prefix + header
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
        bytes[rng() % header_end] = static_cast<std::byte>(rng() & 0xff);
      }
    } else if (kind == 1) {  // truncate anywhere
      bytes.resize(rng() % bytes.size());
    } else if (kind == 2) {  // splice a token into the header, fixing up the length
      const std::string token = kTokens[rng() % std::size(kTokens)];
      const std::size_t at = 8 + rng() % kHeader.size();
      std::string header = kHeader;
      header.insert(at - 8, token);
      bytes = testing::raw_safetensors(header, 32);
    } else if (kind == 3) {  // replace a digit in the header with another number
      std::string header = kHeader;
      std::size_t pos = header.find_first_of("0123456789", rng() % header.size());
      if (pos != std::string::npos) header.replace(pos, 1, std::to_string(rng() % 100));
      bytes = testing::raw_safetensors(header, 32);
    } else {  // corrupt the length prefix
      const int byte = static_cast<int>(rng() % 8);
      bytes[static_cast<std::size_t>(byte)] = static_cast<std::byte>(rng() & 0xff);
    }
    check_parse(bytes, &parsed, &rejected);
  }
  // Both outcomes must occur, or the mutations are not exercising the parser.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace fleet
