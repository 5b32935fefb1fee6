#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/half.h"
#include "common/hdf5_store.h"
#include "common/hdf5_seal.h"
#include "test_util.h"

namespace fleet {
namespace {

std::vector<std::byte> pattern_bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  std::mt19937 rng(seed);
  for (auto& b : out) b = static_cast<std::byte>(rng() % 16);  // compressible but not constant
  return out;
}

TEST(Hdf5Store, RoundTripEveryDtypeAndShape) {
  testing::TempDir dir;
  const std::vector<std::int64_t> shape{3, 4, 5};
  {
    Hdf5Store store = Hdf5Store::create(dir / "t.h5");
    for (DType d : kAllDTypes) {
      auto bytes = pattern_bytes(60 * dtype_size(d), static_cast<unsigned>(d));
      if (d == DType::kBool) {
        for (auto& b : bytes) b = static_cast<std::byte>(static_cast<int>(b) & 1);
      }
      if (d == DType::kF16 || d == DType::kBF16) {
        // Finite, exactly representable values: byte pattern of small floats.
        for (std::size_t i = 0; i < 60; ++i) {
          const std::uint16_t h = d == DType::kF16 ? float_to_f16(static_cast<float>(i) - 30.5f)
                                                   : float_to_bf16(static_cast<float>(i) - 30.5f);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
      }
      store.write_tensor(std::string("dtypes/") + std::string(dtype_name(d)), d, shape, bytes);
    }
    store.write_tensor("scalar", DType::kF64, {}, testing::bytes_of(std::vector<double>{2.5}));
    store.write_tensor("empty", DType::kF32, std::vector<std::int64_t>{0, 3}, {});
    store.write_tensor("plain", DType::kI32, std::vector<std::int64_t>{4},
                       testing::bytes_of(std::vector<std::int32_t>{1, -2, 3, -4}), TensorWriteOptions{std::nullopt});
    store.commit();
  }
  Hdf5Store store = Hdf5Store::open(dir / "t.h5");
  const auto names = store.tensor_names();
  EXPECT_EQ(names.size(), std::size(kAllDTypes) + 3);
  for (DType d : kAllDTypes) {
    const std::string name = std::string("dtypes/") + std::string(dtype_name(d));
    const StoredTensor t = store.read_tensor(name);
    EXPECT_EQ(t.dtype, d) << name;
    EXPECT_EQ(t.shape, shape) << name;
    auto expected = pattern_bytes(60 * dtype_size(d), static_cast<unsigned>(d));
    if (d == DType::kBool) {
      for (auto& b : expected) b = static_cast<std::byte>(static_cast<int>(b) & 1);
    }
    if (d != DType::kF16 && d != DType::kBF16) {
      EXPECT_EQ(t.data, expected) << name;
    }
    EXPECT_TRUE(store.info(name).compressed) << name;
  }
  const StoredTensor bf = store.read_tensor("dtypes/BF16");
  std::uint16_t h = 0;
  std::memcpy(&h, bf.data.data() + 2 * 7, 2);
  EXPECT_EQ(bf16_to_float(h), 7.0f - 30.5f);
  EXPECT_EQ(store.read_tensor("scalar").shape.size(), 0u);
  EXPECT_EQ(store.read_tensor("empty").shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_FALSE(store.info("plain").compressed);
  const std::vector<std::int32_t> plain{1, -2, 3, -4};
  const auto plain_bytes = testing::bytes_of(plain);
  EXPECT_EQ(store.read_tensor("plain").data, std::vector<std::byte>(plain_bytes.begin(), plain_bytes.end()));
}

TEST(Hdf5Store, CompressesRepetitiveData) {
  testing::TempDir dir;
  std::vector<float> zeros(1 << 18, 0.0f);
  {
    Hdf5Store store = Hdf5Store::create(dir / "z.h5");
    store.write_tensor("zeros", DType::kF32, std::vector<std::int64_t>{512, 512}, testing::bytes_of(zeros));
    store.commit();
  }
  Hdf5Store store = Hdf5Store::open(dir / "z.h5");
  const auto info = store.info("zeros");
  EXPECT_TRUE(info.compressed);
  EXPECT_LT(info.stored_bytes, zeros.size() * 4 / 100);
  EXPECT_LT(std::filesystem::file_size(dir / "z.h5"), 64u * 1024u);
  EXPECT_EQ(store.read_tensor("zeros").data.size(), zeros.size() * 4);
}

TEST(Hdf5Store, Attributes) {
  testing::TempDir dir;
  {
    Hdf5Store store = Hdf5Store::create(dir / "a.h5");
    store.write_tensor("layers/0/q", DType::kU8, std::vector<std::int64_t>{2},
                       testing::bytes_of(std::vector<std::uint8_t>{1, 2}));
    store.set_attribute("", "format", std::string("gpufleet-delta"));
    store.set_attribute("", "version", std::int64_t{1});
    store.set_attribute("", "damp", 0.01);
    store.set_attribute("layers/0/q", "shape", std::vector<std::int64_t>{4, 8});
    store.set_attribute("layers/0/q", "scales", std::vector<double>{0.5, 0.25});
    store.set_attribute("", "version", std::int64_t{2});  // replaces
    store.commit();
  }
  Hdf5Store store = Hdf5Store::open(dir / "a.h5");
  EXPECT_EQ(std::get<std::string>(store.attribute("", "format")), "gpufleet-delta");
  EXPECT_EQ(std::get<std::int64_t>(store.attribute("", "version")), 2);
  EXPECT_DOUBLE_EQ(std::get<double>(store.attribute("", "damp")), 0.01);
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(store.attribute("layers/0/q", "shape")),
            (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(store.attributes("").size(), 3u);
  EXPECT_EQ(store.attributes("layers/0/q").size(), 2u);
  EXPECT_FALSE(store.find_attribute("", "absent").has_value());
  try {
    store.attribute("", "absent");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/@absent: missing attribute"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(store.contains("layers/0/q"));
  EXPECT_FALSE(store.contains("layers/0"));  // a group, not a tensor
  EXPECT_FALSE(store.contains("layers/9/q"));
  EXPECT_THROW(store.read_tensor("layers/9/q"), InputError);
  EXPECT_THROW(store.set_attribute("", "x", std::int64_t{1}), UsageError);  // read-only
}

TEST(Hdf5Store, UncommittedStoreLeavesPreviousFile) {
  testing::TempDir dir;
  {
    Hdf5Store store = Hdf5Store::create(dir / "d.h5");
    store.write_tensor("v", DType::kI64, std::vector<std::int64_t>{1},
                       testing::bytes_of(std::vector<std::int64_t>{41}));
    store.commit();
  }
  {
    Hdf5Store store = Hdf5Store::create(dir / "d.h5");
    store.write_tensor("other", DType::kI64, std::vector<std::int64_t>{1},
                       testing::bytes_of(std::vector<std::int64_t>{0}));
    // no commit: as if the work failed
  }
  EXPECT_EQ(testing::list_dir(dir.path()), std::vector<std::string>{"d.h5"});
  Hdf5Store store = Hdf5Store::open(dir / "d.h5");
  EXPECT_EQ(store.tensor_names(), std::vector<std::string>{"v"});
}

TEST(Hdf5Store, BadInputsGiveClearErrors) {
  testing::TempDir dir;
  write_file_atomically(dir / "junk.h5", "this is not an HDF5 file at all");
  try {
    Hdf5Store::open(dir / "junk.h5");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos);
  }
  EXPECT_THROW(Hdf5Store::open(dir / "absent.h5"), InputError);
  try {
    Hdf5Store::open(dir.path());  // a folder is not "not an HDF5 file": the cause is named
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
  }
  Hdf5Store store = Hdf5Store::create(dir / "x.h5");
  store.write_tensor("a", DType::kF32, std::vector<std::int64_t>{1}, testing::bytes_of(std::vector<float>{1}));
  EXPECT_THROW(
      store.write_tensor("a", DType::kF32, std::vector<std::int64_t>{1}, testing::bytes_of(std::vector<float>{1})),
      InputError);
  EXPECT_THROW(
      store.write_tensor("b", DType::kF32, std::vector<std::int64_t>{2}, testing::bytes_of(std::vector<float>{1})),
      InputError);
}

TEST(Hdf5Store, CorruptChunkIsAnInputError) {
  testing::TempDir dir;
  std::vector<std::byte> data = pattern_bytes(1 << 16, 3);
  {
    Hdf5Store store = Hdf5Store::create(dir / "c.h5");
    store.write_tensor("t", DType::kU8, std::vector<std::int64_t>{1 << 16}, data);
    store.commit();
  }
  // Overwrite bytes inside the compressed chunk: find the zstd frame's magic number.
  std::string raw = read_file(dir / "c.h5");
  const std::size_t frame = raw.find("\x28\xb5\x2f\xfd");
  ASSERT_NE(frame, std::string::npos);
  ASSERT_LT(frame + 400, raw.size());
  for (std::size_t i = frame + 200; i < frame + 264; ++i) raw[i] = static_cast<char>(0x5a);
  write_file_atomically(dir / "c.h5", raw);
  // The seal refuses the file before HDF5 opens it.
  try {
    (void)Hdf5Store::open(dir / "c.h5");
    ADD_FAILURE() << "a damaged file was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("do not match their digest"), std::string::npos) << e.what();
  }
  // Sealed again (as if damaged before it was sealed), the chunk's own checks catch it.
  seal_hdf5_file(dir / "c.h5");
  Hdf5Store store = Hdf5Store::open(dir / "c.h5");
  EXPECT_THROW(store.read_tensor("t"), InputError);
}

TEST(Hdf5Store, TheSealRefusesTruncationAndForeignUserBlocks) {
  testing::TempDir dir;
  {
    Hdf5Store store = Hdf5Store::create(dir / "s.h5");
    store.write_tensor("t", DType::kU8, std::vector<std::int64_t>{4096}, pattern_bytes(4096, 5));
    store.commit();
  }
  const std::string raw = read_file(dir / "s.h5");
  ASSERT_EQ(raw.compare(0, 20, "gpufleet-hdf5-seal 1"), 0);
  EXPECT_EQ(raw.compare(512, 4, "\x89HDF"), 0);
  EXPECT_EQ(verify_hdf5_file(dir / "s.h5"), Hdf5Seal::kVerified);
  for (std::size_t size : {std::size_t{0}, std::size_t{100}, std::size_t{512}, raw.size() / 2, raw.size() - 1}) {
    write_file_atomically(dir / "cut.h5", std::string_view(raw).substr(0, size));
    EXPECT_THROW((void)Hdf5Store::open(dir / "cut.h5"), InputError) << size;
  }
  // Appended bytes change the size the seal records.
  write_file_atomically(dir / "long.h5", raw + "x");
  EXPECT_THROW((void)Hdf5Store::open(dir / "long.h5"), InputError);
  // A user block that is not our seal: HDF5 would read the file, we do not.
  std::string foreign = raw;
  std::fill(foreign.begin(), foreign.begin() + 512, 'u');
  write_file_atomically(dir / "foreign.h5", foreign);
  try {
    (void)Hdf5Store::open(dir / "foreign.h5");
    ADD_FAILURE() << "a file with a foreign user block was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("carry no seal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fleet
