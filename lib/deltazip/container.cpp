#include "deltazip/container.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "model/llama_config.h"

namespace fleet::deltazip {
namespace {

constexpr const char* kLinear = "linear/";
constexpr const char* kDense = "dense/";

std::span<const std::byte> bytes_of(const void* data, std::size_t size) {
  return {static_cast<const std::byte*>(data), size};
}

template <typename T>
std::vector<T> read_vector(const Hdf5Store& store, const std::string& name, DType expected) {
  auto t = store.read_tensor(name);
  if (t.dtype != expected)
    throw InputError(store.path().string() + ": " + name + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                     std::string(dtype_name(expected)));
  std::vector<T> out(t.data.size() / sizeof(T));
  std::memcpy(out.data(), t.data.data(), out.size() * sizeof(T));
  return out;
}

std::int64_t int_attr(const Hdf5Store& store, const std::string& object, const std::string& key) {
  auto v = store.attribute(object, key);
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  throw InputError(store.path().string() + ": " + object + ": attribute " + key + " must be an integer");
}

std::string string_attr(const Hdf5Store& store, const std::string& object, const std::string& key) {
  auto v = store.attribute(object, key);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  throw InputError(store.path().string() + ": " + object + ": attribute " + key + " must be a string");
}

// FNV-1a, 64 bits.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(std::span<const std::byte> bytes) {
    for (auto b : bytes) {
      h ^= static_cast<std::uint64_t>(b);
      h *= 1099511628211ull;
    }
  }
  void add(const std::string& s) { add(bytes_of(s.data(), s.size() + 1)); }
};

}  // namespace

DeltaWriter::DeltaWriter(const std::filesystem::path& path, const DeltaHeader& header, int zstd_level)
    : store_(Hdf5Store::create(path)) {
  write_options_.zstd_level = zstd_level;
  store_.set_attribute("", "format", std::string(kContainerFormat));
  store_.set_attribute("", "version", kContainerVersion);
  store_.set_attribute("", "settings", header.settings_json);
  store_.set_attribute("", "base_identity", header.base_identity);
  store_.set_attribute("", "config", header.config_json);
}

void DeltaWriter::add_packed(const std::string& name, const PackedMatrix& m) {
  const std::string prefix = kLinear + name + "/";
  auto write = [&](const std::string& part, DType dtype, const void* data, std::size_t count) {
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(count)};
    store_.write_tensor(prefix + part, dtype, shape, bytes_of(data, count * dtype_size(dtype)), write_options_);
  };
  write("codes", DType::kU8, m.codes.data(), m.codes.size());
  write("scales", DType::kF16, m.scales.data(), m.scales.size());
  write("zeros", DType::kU8, m.zeros.data(), m.zeros.size());
  if (!m.indices.empty()) write("indices", DType::kU8, m.indices.data(), m.indices.size());
  const std::string object = prefix + "codes";
  store_.set_attribute(object, "shape", std::vector<std::int64_t>{m.rows, m.cols});
  store_.set_attribute(object, "bits", static_cast<std::int64_t>(m.bits));
  store_.set_attribute(object, "group_size", m.group_size);
  store_.set_attribute(object, "sparsity", m.sparsity.to_string());
}

void DeltaWriter::add_dense(const std::string& name, DenseKind kind, DType dtype, const std::vector<std::int64_t>& shape,
                            std::span<const std::byte> data) {
  const std::string object = kDense + name;
  store_.write_tensor(object, dtype, shape, data, write_options_);
  store_.set_attribute(object, "kind", std::string(kind == DenseKind::kDelta ? "delta" : "full"));
}

void DeltaWriter::commit() { store_.commit(); }

DeltaReader::DeltaReader(const std::filesystem::path& path) : store_(Hdf5Store::open(path)) {
  if (string_attr(store_, "", "format") != kContainerFormat)
    throw InputError(path.string() + ": not a " + std::string(kContainerFormat) + " container");
  if (int_attr(store_, "", "version") != kContainerVersion)
    throw InputError(path.string() + ": unsupported container version " + std::to_string(int_attr(store_, "", "version")));
  header_.settings_json = string_attr(store_, "", "settings");
  header_.base_identity = string_attr(store_, "", "base_identity");
  header_.config_json = string_attr(store_, "", "config");
  for (const auto& name : store_.tensor_names()) {
    if (name.rfind(kLinear, 0) == 0 && name.size() > 6 && name.compare(name.size() - 6, 6, "/codes") == 0)
      packed_.push_back(name.substr(7, name.size() - 7 - 6));
    else if (name.rfind(kDense, 0) == 0)
      dense_.push_back(name.substr(6));
  }
}

PackedMatrix DeltaReader::packed(const std::string& name) const {
  const std::string prefix = kLinear + name + "/", object = prefix + "codes";
  PackedMatrix m;
  auto shape_attr = store_.attribute(object, "shape");
  auto* shape = std::get_if<std::vector<std::int64_t>>(&shape_attr);
  if (!shape || shape->size() != 2) throw InputError(path().string() + ": " + name + ": bad shape attribute");
  m.rows = (*shape)[0];
  m.cols = (*shape)[1];
  m.bits = static_cast<int>(int_attr(store_, object, "bits"));
  m.group_size = int_attr(store_, object, "group_size");
  try {
    m.sparsity = SparsityPattern::parse(string_attr(store_, object, "sparsity"));
  } catch (const UsageError& e) {
    throw InputError(path().string() + ": " + name + ": " + e.what());
  }
  m.codes = read_vector<std::uint8_t>(store_, object, DType::kU8);
  m.scales = read_vector<std::uint16_t>(store_, prefix + "scales", DType::kF16);
  m.zeros = read_vector<std::uint8_t>(store_, prefix + "zeros", DType::kU8);
  if (store_.contains(prefix + "indices")) m.indices = read_vector<std::uint8_t>(store_, prefix + "indices", DType::kU8);
  m.validate(path().string() + ": " + name);
  return m;
}

DenseEntry DeltaReader::dense(const std::string& name) const {
  DenseEntry e;
  auto kind = string_attr(store_, kDense + name, "kind");
  if (kind != "delta" && kind != "full") throw InputError(path().string() + ": " + name + ": unknown kind '" + kind + "'");
  e.kind = kind == "delta" ? DenseKind::kDelta : DenseKind::kFull;
  e.tensor = store_.read_tensor(kDense + name);
  return e;
}

std::uint64_t DeltaReader::stored_bytes(const std::string& name) const {
  if (std::binary_search(dense_.begin(), dense_.end(), name)) return store_.info(kDense + name).stored_bytes;
  std::uint64_t total = 0;
  for (const char* part : {"codes", "scales", "zeros", "indices"}) {
    auto n = kLinear + name + "/" + part;
    if (store_.contains(n)) total += store_.info(n).stored_bytes;
  }
  return total;
}

std::int64_t DeltaReader::elements(const std::string& name) const {
  if (std::binary_search(dense_.begin(), dense_.end(), name)) {
    std::int64_t n = 1;
    for (auto d : store_.info(kDense + name).shape) n *= d;
    return n;
  }
  auto shape_attr = store_.attribute(kLinear + name + "/codes", "shape");
  const auto& shape = std::get<std::vector<std::int64_t>>(shape_attr);
  return shape.at(0) * shape.at(1);
}

std::string base_identity(const std::filesystem::path& model_dir) {
  Fnv fnv;
  auto config = model_dir / "config.json";
  if (!std::filesystem::is_regular_file(config)) throw InputError(config.string() + ": no such file");
  fnv.add(read_file(config));
  SafetensorsCheckpoint checkpoint(model::model_weights_path(model_dir));
  for (const auto& name : checkpoint.names()) {
    const auto& info = checkpoint.info(name);
    fnv.add(name);
    fnv.add(std::string(dtype_name(info.dtype)));
    for (auto d : info.shape) fnv.add(std::to_string(d));
    auto data = checkpoint.view(name).data;
    constexpr std::size_t kEdge = 4096, kBlock = 256, kBlocks = 16;
    if (data.size() <= 2 * kEdge + kBlocks * kBlock) {
      fnv.add(data);
      continue;
    }
    fnv.add(data.first(kEdge));
    fnv.add(data.last(kEdge));
    for (std::size_t b = 0; b < kBlocks; ++b) fnv.add(data.subspan((data.size() - kBlock) * b / kBlocks, kBlock));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv.h));
  return hex;
}

}  // namespace fleet::deltazip
