// The delta container cannot lie: flipping any single byte of a container
// (seal, superblock, object headers, attributes, chunk indices, compressed
// data) is caught as an InputError by the file's seal before libhdf5 reads
// it. Below the seal (a file damaged before it was sealed), every flip is
// still either caught or leaves every value read back unchanged. Never a
// crash, never a silently different reconstruction, and never an allocation
// larger than the model the container describes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <fstream>
#include <random>
#include <tuple>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/half.h"
#include "common/hdf5_seal.h"
#include "deltazip/container.h"
#include "test_util.h"

namespace {

// The largest single allocation through operator new since the last reset:
// how the fuzz test sees an "oversized allocation" (a corrupt size that the
// reader believed). Replaces the global operator new of this test binary.
std::atomic<std::size_t> g_largest_allocation{0};

void* counted_allocation(std::size_t size) {
  std::size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
  while (size > seen && !g_largest_allocation.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t size) { return counted_allocation(size); }
void* operator new[](std::size_t size) { return counted_allocation(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them), so
// that every allocation and its release go through malloc and free.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return counted_allocation(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace fleet::deltazip {
namespace {

// The stored forms a container holds: 2-bit 2:4 with scales and zero
// points, 2-bit 2:4 with a codebook per row, 1-bit sign x scale, 2-bit
// dense (a low-rank factor).
enum class Form { kAffine, kCodebook, kSign, kDense };

// A matrix of the given form with random codes and plausible scales or levels.
PackedMatrix random_packed(std::int64_t rows, std::int64_t cols, std::uint32_t seed, Form form = Form::kAffine) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols)), kept(codes.size(), 1);
  for (auto& c : codes) c = static_cast<std::uint8_t>(rng() % 4);
  for (std::size_t g = 0; g < kept.size(); g += 4) {
    const std::size_t a = rng() % 4, b = (a + 1 + rng() % 3) % 4;
    kept[g + a] = kept[g + b] = 0;
  }
  if (form == Form::kCodebook) {
    std::vector<std::uint16_t> levels(static_cast<std::size_t>(rows) * 4);
    for (auto& v : levels) v = float_to_f16(0.001f * static_cast<float>(static_cast<int>(rng() % 101) - 50));
    return pack_matrix(rows, cols, 2, -1, SparsityPattern::parse("2:4"), codes, kept, {}, {}, levels);
  }
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows));
  std::vector<std::uint8_t> zeros(scales.size());
  for (std::size_t i = 0; i < scales.size(); ++i) {
    scales[i] = float_to_f16(0.001f * static_cast<float>(1 + rng() % 50));
    zeros[i] = static_cast<std::uint8_t>(rng() % 4);
  }
  if (form == Form::kDense) {
    std::fill(kept.begin(), kept.end(), 1);
    return pack_matrix(rows, cols, 2, -1, SparsityPattern::parse("none"), codes, kept, scales, zeros);
  }
  if (form == Form::kSign) {
    for (auto& c : codes) c &= 1;
    std::fill(zeros.begin(), zeros.end(), 0);
    std::fill(kept.begin(), kept.end(), 1);
    return pack_matrix(rows, cols, 1, -1, SparsityPattern::parse("none"), codes, kept, scales, zeros);
  }
  return pack_matrix(rows, cols, 2, -1, SparsityPattern::parse("2:4"), codes, kept, scales, zeros);
}

// Everything a reader of the container sees, as one comparable value.
std::string read_everything(const std::filesystem::path& path) {
  DeltaReader reader(path);
  std::string out =
      reader.header().settings_json + "|" + reader.header().base_identity + "|" + reader.header().config_json;
  for (const auto& name : reader.packed_names()) {
    const PackedMatrix m = reader.packed(name);
    std::vector<float> values(static_cast<std::size_t>(m.rows * m.cols));
    unpack_matrix(m, values);
    out += "|" + name + ":" + std::to_string(m.rows) + "x" + std::to_string(m.cols);
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  for (const auto& name : reader.low_rank_names()) {
    const LowRankMatrix m = reader.low_rank(name);
    std::vector<float> values(static_cast<std::size_t>(m.rows() * m.cols()));
    unpack_low_rank(m, values);
    out += "|" + name + ":rank " + std::to_string(m.rank());
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  for (const auto& name : reader.dense_names()) {
    const DenseEntry e = reader.dense(name);
    out += "|" + name + (e.kind == DenseKind::kDelta ? ":delta:" : ":full:") + e.form + shape_to_string(e.tensor.shape);
    out.append(reinterpret_cast<const char*>(e.tensor.data.data()), e.tensor.data.size());
  }
  return out;
}

class ContainerFuzz : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_ / "delta.h5";
    DeltaHeader header;
    header.settings_json = R"({"bits": 2, "sparsity": "2:4"})";
    header.base_identity = "0123456789abcdef";
    // A whole one-layer model: the reader refuses containers that miss a tensor.
    header.config_json = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16, "intermediate_size": 32,
                             "vocab_size": 24, "num_attention_heads": 2, "num_hidden_layers": 1})";
    DeltaWriter writer(path_, header, 3);
    const std::vector<std::tuple<const char*, std::int64_t, std::int64_t>> linear = {
        {"self_attn.q_proj", 16, 16}, {"self_attn.k_proj", 16, 16}, {"self_attn.v_proj", 16, 16},
        {"self_attn.o_proj", 16, 16}, {"mlp.gate_proj", 32, 16},    {"mlp.up_proj", 32, 16},
        {"mlp.down_proj", 16, 32}};
    std::uint32_t seed = 1;
    for (const auto& [name, rows, cols] : linear) {
      const std::string which = name;
      if (which == "self_attn.o_proj") {  // as two rank-3 factors
        writer.add_low_rank(
            std::string("model.layers.0.") + name + ".weight",
            {random_packed(rows, 3, seed, Form::kDense), random_packed(3, cols, seed + 100, Form::kDense)});
        ++seed;
        continue;
      }
      const Form form = which == "mlp.gate_proj"      ? Form::kCodebook
                        : which == "self_attn.k_proj" ? Form::kSign
                                                      : Form::kAffine;
      writer.add_packed(std::string("model.layers.0.") + name + ".weight", random_packed(rows, cols, seed++, form));
    }
    std::vector<std::uint16_t> embed(24 * 16);
    for (std::size_t i = 0; i < embed.size(); ++i) embed[i] = float_to_f16(0.01f * static_cast<float>(i % 97) - 0.4f);
    // The embedding as a row delta, some rows untouched (not stored).
    std::vector<float> embed_delta(24 * 16, 0.0f);
    for (std::size_t i = 0; i < embed_delta.size(); ++i)
      if ((i / 16) % 3 != 0) embed_delta[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    writer.add_row_delta("model.embed_tokens.weight", encode_row_delta(embed_delta, 24, 16, 4));
    writer.add_dense("lm_head.weight", DenseKind::kDelta, DType::kF16, {24, 16}, testing::bytes_of(embed));
    std::vector<std::uint16_t> zeros(16, 0);  // all zeros: compresses to almost nothing
    for (const char* norm : {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                             "model.layers.0.post_attention_layernorm.weight"})
      writer.add_dense(norm, DenseKind::kFull, DType::kF16, {16}, testing::bytes_of(zeros));
    writer.commit();
    original_ = read_file(path_);
    expected_ = read_everything(path_);
  }

  testing::TempDir dir_;
  std::filesystem::path path_;
  std::string original_, expected_;
};

// Writes `bytes` to `path` as they are (no fsync: thousands of small files).
void write_plain(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(ContainerFuzz, TheSealCatchesEveryFlippedByte) {
  ASSERT_GT(original_.size(), 4000u);
  const unsigned char patterns[] = {0x01, 0x80, 0xff, 0x10};
  // Every byte against the seal itself (what opening a file checks first)...
  for (std::size_t pos = 0; pos < original_.size(); ++pos) {
    std::string bytes = original_;
    bytes[pos] = static_cast<char>(bytes[pos] ^ patterns[pos % 4]);
    EXPECT_THROW(verify_hdf5_image(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), "image"),
                 InputError)
        << "flipping byte " << pos << " was not caught";
  }
  // ...and 300 of them, spread over the file, through the reader.
  const auto mutated = dir_ / "mutated.h5";
  for (std::size_t k = 0; k < 300; ++k) {
    const std::size_t pos = k * original_.size() / 300;
    std::string bytes = original_;
    bytes[pos] = static_cast<char>(bytes[pos] ^ patterns[k % 4]);
    write_plain(mutated, bytes);
    g_largest_allocation = 0;
    try {
      (void)read_everything(mutated);
      FAIL() << "flipping byte " << pos << " was not caught";
    } catch (const InputError& e) {
      const std::string message = e.what();
      ASSERT_TRUE(message.find("damaged") != std::string::npos || message.find("not an HDF5 file") != std::string::npos)
          << "byte " << pos << ": " << message;
    }
    ASSERT_LT(g_largest_allocation.load(), std::size_t{1} << 20)
        << "flipping byte " << pos << " made the reader allocate";
  }
}

// Every byte in a plain build; every third under AddressSanitizer, where
// each pass through libhdf5 is ten times slower (the same code runs).
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kBelowSealStride = 3;
#else
constexpr std::size_t kBelowSealStride = 1;
#endif

// A file damaged before it was sealed (the seal then vouches for the damage):
// HDF5's metadata checksums, the zstd frames' checksums, each tensor's
// checksum and the reader's size checks still stand.
TEST_F(ContainerFuzz, BelowTheSealEveryFlippedByteIsCaughtOrHarmless) {
  const auto mutated = dir_ / "mutated.h5";
  std::size_t caught = 0, harmless = 0;
  const unsigned char patterns[] = {0x01, 0x80, 0xff, 0x10};
  for (std::size_t pos = kHdf5SealBytes; pos < original_.size(); pos += kBelowSealStride) {
    std::string bytes = original_;
    bytes[pos] = static_cast<char>(bytes[pos] ^ patterns[pos % 4]);
    write_plain(mutated, bytes);
    seal_hdf5_file(mutated);
    g_largest_allocation = 0;
    try {
      const std::string seen = read_everything(mutated);
      if (seen != expected_) {
        const auto diff = static_cast<std::size_t>(
            std::mismatch(seen.begin(), seen.end(), expected_.begin(), expected_.end()).first - seen.begin());
        FAIL() << "flipping byte " << pos << " changed what is read without an error, from character " << diff
               << " on: " << seen.substr(diff > 40 ? diff - 40 : 0, 80);
      }
      ++harmless;
    } catch (const InputError&) {
      ++caught;
    } catch (const std::exception& e) {
      FAIL() << "byte " << pos << ": not an input error: " << e.what();
    }
    // The container decodes to a few KiB; nothing read from it may ask for more than 1 MiB at once.
    ASSERT_LT(g_largest_allocation.load(), std::size_t{1} << 20)
        << "flipping byte " << pos << " made the reader allocate";
  }
  // Most bytes are metadata or compressed data: a flip there must be caught.
  EXPECT_GT(caught, (original_.size() - kHdf5SealBytes) / kBelowSealStride / 2)
      << caught << " caught, " << harmless << " harmless";
}

TEST_F(ContainerFuzz, TruncationsAreCaught) {
  const auto cut = dir_ / "cut.h5";
  std::vector<std::size_t> sizes;
  for (std::size_t size = 0; size < original_.size(); size += 1024) sizes.push_back(size);
  for (std::size_t size : {std::size_t{1}, std::size_t{511}, std::size_t{513}, original_.size() - 1})
    sizes.push_back(size);
  for (std::size_t size : sizes) {
    write_file_atomically(cut, std::string_view(original_).substr(0, size));
    EXPECT_THROW(read_everything(cut), InputError) << "truncated to " << size << " bytes";
  }
}

}  // namespace
}  // namespace fleet::deltazip
