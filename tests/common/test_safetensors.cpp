#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/half.h"
#include "common/json.h"
#include "common/safetensors.h"
#include "dtype_samples.h"
#include "safetensors_fixtures.h"
#include "test_util.h"

namespace fleet {
namespace {

using testing::error_of;

using testing::raw_safetensors;

// Deterministic bytes for a dtype: small values that every type represents exactly.
std::vector<std::byte> sample_bytes(DType dtype, std::size_t n) {
  std::vector<std::byte> out(n * dtype_size(dtype));
  for (std::size_t i = 0; i < n; ++i) {
    double v = static_cast<double>(i % 7) - (dtype_is_float(dtype) || dtype == DType::kI8 ? 3.0 : 0.0);
    if (dtype == DType::kBool) v = static_cast<double>(i % 2);
    if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) v = static_cast<double>(i % 256);
    testing::store_as(dtype, v, out.data() + i * dtype_size(dtype));
  }
  return out;
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  testing::TempDir dir;
  SafetensorsWriter writer;
  for (DType d : kAllDTypes) {
    writer.add_owned("t." + std::string(dtype_name(d)), d, {2, 3, 5}, sample_bytes(d, 30));
  }
  writer.add_owned("scalar", DType::kF32, {}, sample_bytes(DType::kF32, 1));
  writer.add_owned("empty", DType::kI64, {0, 4}, {});
  writer.set_metadata("format", "pt");
  writer.set_metadata("note", "unicode ✓");
  writer.write(dir / "all.safetensors");

  SafetensorsFile file(dir / "all.safetensors");
  EXPECT_EQ(file.tensors().size(), std::size(kAllDTypes) + 2);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "unicode ✓");
  for (DType d : kAllDTypes) {
    const std::string name = "t." + std::string(dtype_name(d));
    const TensorView v = file.view(name);
    EXPECT_EQ(v.dtype, d) << name;
    EXPECT_EQ(v.shape, (std::vector<std::int64_t>{2, 3, 5})) << name;
    const auto expected = sample_bytes(d, 30);
    ASSERT_EQ(v.data.size(), expected.size()) << name;
    EXPECT_EQ(std::memcmp(v.data.data(), expected.data(), expected.size()), 0) << name;
    // The writer orders by element size, so typed views are aligned.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data.data()) % dtype_size(d), 0u) << name;
  }
  EXPECT_EQ(file.view("scalar").numel(), 1u);
  EXPECT_TRUE(file.view("scalar").shape.empty());
  EXPECT_EQ(file.view("empty").numel(), 0u);
  EXPECT_EQ(file.view("t.F32").to_double()[1], -2.0);
  EXPECT_EQ(file.view("t.BF16").to_double()[6], 3.0);
  EXPECT_EQ(file.view("t.I64").as<std::int64_t>()[3], 3);
  EXPECT_THROW(file.view("t.I64").as<float>(), InputError);
  EXPECT_EQ(error_of([&] { file.view("absent"); }), (dir / "all.safetensors").string() + ": absent: no such tensor");
}

TEST(Safetensors, HeaderIsPaddedToEightBytes) {
  testing::TempDir dir;
  SafetensorsWriter writer;
  writer.add_owned("a", DType::kU8, {3}, sample_bytes(DType::kU8, 3));
  writer.write(dir / "a.safetensors");
  const std::string raw = read_file(dir / "a.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 3);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  writer.add_owned("a", DType::kF32, {2}, sample_bytes(DType::kF32, 2));
  EXPECT_THROW(writer.add_owned("a", DType::kF32, {2}, sample_bytes(DType::kF32, 2)), InputError);
  EXPECT_THROW(writer.add_owned("b", DType::kF32, {3}, sample_bytes(DType::kF32, 2)), InputError);
  EXPECT_THROW(writer.add_owned("__metadata__", DType::kF32, {2}, sample_bytes(DType::kF32, 2)), InputError);
}

TEST(Safetensors, ShardedWriteAndRead) {
  testing::TempDir dir;
  SafetensorsWriter writer;
  for (int i = 0; i < 6; ++i) {
    writer.add_owned("layer." + std::to_string(i) + ".weight", DType::kF32, {16, 16}, sample_bytes(DType::kF32, 256));
  }
  writer.set_metadata("format", "pt");
  const auto files = writer.write_sharded(dir.path(), 2048);  // two 1 KiB tensors per shard
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files.back().filename(), "model.safetensors.index.json");
  EXPECT_EQ(files.front().filename(), "model-00001-of-00003.safetensors");

  const auto index = load_json_file(files.back());
  EXPECT_EQ(index.root().at("metadata").get<std::uint64_t>("total_size"), 6u * 1024u);

  for (const auto& path : {dir.path(), files.back()}) {
    SafetensorsCheckpoint ckpt(path);
    EXPECT_EQ(ckpt.names().size(), 6u);
    EXPECT_EQ(ckpt.files().size(), 3u);
    EXPECT_EQ(ckpt.metadata().at("format"), "pt");
    const TensorView v = ckpt.view("layer.5.weight");
    EXPECT_EQ(v.to_double()[2], -1.0);
    EXPECT_THROW(ckpt.view("layer.6.weight"), InputError);
  }
}

TEST(Safetensors, SingleShardWritesPlainFile) {
  testing::TempDir dir;
  SafetensorsWriter writer;
  writer.add_owned("w", DType::kF16, {4}, sample_bytes(DType::kF16, 4));
  const auto files = writer.write_sharded(dir.path(), 1 << 20);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename(), "model.safetensors");
  EXPECT_TRUE(SafetensorsCheckpoint(dir.path()).contains("w"));
}

TEST(Safetensors, BrokenIndexIsRejected) {
  testing::TempDir dir;
  SafetensorsWriter writer;
  for (const char* name : {"a", "b", "c", "d"})
    writer.add_owned(name, DType::kF32, {256}, sample_bytes(DType::kF32, 256));
  writer.write_sharded(dir.path(), 2048);  // {a, b} and {c, d}
  const auto index_path = dir / "model.safetensors.index.json";
  auto rewrite = [&](const std::string& weight_map) {
    write_file_atomically(index_path, R"({"weight_map": )" + weight_map + "}");
  };
  auto error_opening = [&] { return error_of([&] { SafetensorsCheckpoint c(dir.path()); }); };
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";

  rewrite(R"({"a": ")" + s1 + R"(", "b": ")" + s1 + R"(", "c": "model-00009-of-00002.safetensors"})");
  EXPECT_NE(error_opening().find("shard 'model-00009-of-00002.safetensors' does not exist"), std::string::npos);
  rewrite(R"({"a": ")" + s1 + R"(", "b": ")" + s1 + R"(", "c": ")" + s1 + R"(", "d": ")" + s2 + R"("})");
  EXPECT_NE(error_opening().find("tensor 'c' is not in shard"), std::string::npos);
  rewrite(R"({"a": ")" + s1 + R"(", "c": ")" + s2 + R"(", "d": ")" + s2 + R"("})");
  EXPECT_NE(error_opening().find("tensor 'b' of shard '" + s1 + "' is missing from the index"), std::string::npos)
      << error_opening();
  rewrite(R"({"a": "../etc/passwd"})");
  EXPECT_NE(error_opening().find("plain relative name"), std::string::npos);
  rewrite("[1, 2]");
  EXPECT_NE(error_opening().find("/weight_map: expected an object"), std::string::npos);
  rewrite(R"({"a": ")" + s1 + R"(", "b": ")" + s1 + R"(", "c": ")" + s2 + R"(", "d": ")" + s2 + R"("})");
  EXPECT_EQ(error_opening(), "no error");
}

// ---- corrupt files: each gives one clear InputError --------------------------

struct CorruptCase {
  const char* name;
  std::vector<std::byte> bytes;
  const char* expected;  // substring of the message
};

std::vector<CorruptCase> corrupt_cases() {
  const std::string good = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::vector<CorruptCase> cases;
  cases.push_back({"empty file", {}, "too short for a safetensors header"});
  cases.push_back({"zero-length header", raw_safetensors("", 0, -1), "cannot be a JSON object"});
  auto truncated = raw_safetensors(good, 8);
  truncated.resize(truncated.size() - 3);
  cases.push_back({"truncated data", truncated, "past the 5-byte data buffer"});
  cases.push_back({"length past end", raw_safetensors(good, 8, 10000), "runs past the end"});
  cases.push_back({"huge length", raw_safetensors(good, 8, std::int64_t{1} << 40), "exceeds the"});
  cases.push_back({"bad json", raw_safetensors(R"({"a":{"dtype":"F32",)", 8), "header is not valid JSON"});
  cases.push_back({"not an object", raw_safetensors("[1,2,3]", 8), "must be a JSON object"});
  cases.push_back({"unknown dtype", raw_safetensors(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
                   "unknown dtype 'Q4'"});
  cases.push_back({"shape mismatch", raw_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                   "needs 12 bytes but data_offsets span 8"});
  cases.push_back({"overlap",
                   raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                   12),
                   "data overlaps tensor 'a'"});
  cases.push_back({"out of range", raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})", 8),
                   "past the 8-byte data buffer"});
  cases.push_back({"reversed offsets", raw_safetensors(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
                   "is before begin"});
  cases.push_back({"negative dim", raw_safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                   "expected a non-negative integer"});
  cases.push_back({"overflowing shape",
                   raw_safetensors(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
                   "overflows"});
  cases.push_back({"duplicate name",
                   raw_safetensors(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                   R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                   2),
                   "duplicate tensor name"});
  cases.push_back(
      {"metadata not strings", raw_safetensors(R"({"__metadata__":{"n":1}})", 0), "metadata values must be strings"});
  cases.push_back({"missing offsets", raw_safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"});
  cases.push_back({"extra field", raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
                   "unknown field 'x'"});
  cases.push_back({"entry not object", raw_safetensors(R"({"a":5})", 0), "tensor entry must be an object"});
  cases.push_back({"float offsets", raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", 8),
                   "expected a non-negative integer"});
  std::string bad_utf8 = R"({"a\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  cases.push_back({"invalid utf-8", raw_safetensors(bad_utf8, 1), "header is not valid JSON"});
  return cases;
}

TEST(Safetensors, EveryCorruptCaseGivesAClearError) {
  testing::TempDir dir;
  for (const auto& c : corrupt_cases()) {
    const auto path = dir / "bad.safetensors";
    testing::write_bytes(path, c.bytes);
    const std::string message = error_of([&] { SafetensorsFile f(path); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": got '" << message << "'";
    EXPECT_EQ(message.rfind(path.string(), 0), 0u) << c.name << ": message should start with the file: " << message;
  }
}

TEST(Safetensors, MissingFileIsAnInputError) {
  testing::TempDir dir;
  EXPECT_THROW(SafetensorsFile(dir / "absent.safetensors"), InputError);
  EXPECT_THROW(SafetensorsCheckpoint(dir / "absent"), InputError);
  EXPECT_THROW(SafetensorsCheckpoint(dir.path()), InputError);  // folder without a model
}

}  // namespace
}  // namespace fleet
