#include "deltazip/container.h"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <cstring>

#include "common/error.h"
#include "common/file_io.h"
#include "common/json.h"
#include "common/fnv_hash.h"
#include "common/safetensors.h"
#include "model/llama_config.h"
#include "model/model_folder.h"

namespace fleet::deltazip {
namespace {

constexpr const char* kLinear = "linear/";
constexpr const char* kDense = "dense/";
constexpr const char* kRows = "rows/";
constexpr const char* kLowRank = "lowrank/";
constexpr const char* kFactors[2] = {"up", "down"};

std::span<const std::byte> bytes_of(const void* data, std::size_t size) {
  return {static_cast<const std::byte*>(data), size};
}

template <typename T>
std::vector<T> read_vector(const Hdf5Store& store, const std::string& name, DType expected, std::uint64_t max_bytes) {
  auto t = store.read_tensor(name, max_bytes);
  if (t.dtype != expected)
    throw InputError(store.path().string() + ": " + name + " has dtype " + std::string(dtype_name(t.dtype)) +
                     ", expected " + std::string(dtype_name(expected)));
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

// The model the container's `config` describes, validated with the caps of
// LlamaConfig::validate before any size in it is used.
model::LlamaConfig container_config(const std::string& config_json, const std::filesystem::path& path) {
  const JsonDocument doc = parse_json(config_json, path.string() + ": config");
  return model::parse_llama_config(doc.root());
}

// Splits "<prefix><tensor>/<part>" into tensor and part; false for other names.
bool split_parts(const std::string& name, const char* prefix, std::string& tensor, std::string& part) {
  if (name.rfind(prefix, 0) != 0) return false;
  const auto slash = name.rfind('/');
  if (slash <= std::strlen(prefix)) return false;
  tensor = name.substr(std::strlen(prefix), slash - std::strlen(prefix));
  part = name.substr(slash + 1);
  return true;
}

bool contains_sorted(const std::vector<std::string>& names, const std::string& name) {
  return std::binary_search(names.begin(), names.end(), name);
}

// Checked narrowing of an integer attribute: InputError when out of [lo, hi].
std::int64_t int_attr_in(const Hdf5Store& store, const std::string& object, const std::string& key, std::int64_t lo,
                         std::int64_t hi) {
  const std::int64_t v = int_attr(store, object, key);
  if (v < lo || v > hi)
    throw InputError(store.path().string() + ": " + object + ": attribute " + key + " is " + std::to_string(v) +
                     ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
  return v;
}

// The container's datasets by kind: the parts of each packed matrix, row
// delta and low-rank delta, and the dense tensors' names. InputError for a
// name of no kind or a part a kind does not have.
struct EntryGroups {
  std::map<std::string, std::set<std::string>> linear_parts, row_parts, low_rank_parts;
  std::vector<std::string> dense;
};

EntryGroups group_entries(const std::vector<std::string>& names, const std::string& file) {
  EntryGroups g;
  auto unexpected = [&](const std::string& name) { throw InputError(file + ": unexpected entry '" + name + "'"); };
  for (const auto& name : names) {
    std::string tensor, part;
    if (split_parts(name, kLinear, tensor, part)) {
      if (part != "codes" && part != "scales" && part != "zeros" && part != "indices" && part != "codebook")
        unexpected(name);
      g.linear_parts[tensor].insert(part);
    } else if (split_parts(name, kLowRank, tensor, part)) {
      // lowrank/<tensor>/<up|down>/<part>: each factor a dense packed matrix.
      const auto slash = tensor.rfind('/');
      const std::string factor = slash == std::string::npos ? "" : tensor.substr(slash + 1);
      if ((factor != kFactors[0] && factor != kFactors[1]) || (part != "codes" && part != "scales" && part != "zeros"))
        unexpected(name);
      g.low_rank_parts[tensor.substr(0, slash)].insert(factor + "/" + part);
    } else if (split_parts(name, kRows, tensor, part)) {
      if (part != "rows" && part != "codes" && part != "scales") unexpected(name);
      g.row_parts[tensor].insert(part);
    } else if (name.rfind(kDense, 0) == 0) {
      g.dense.push_back(name.substr(std::strlen(kDense)));
    } else {
      unexpected(name);
    }
  }
  return g;
}

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

void DeltaWriter::add_packed(const std::string& name, const PackedMatrix& m) { write_packed(kLinear + name + "/", m); }

void DeltaWriter::add_low_rank(const std::string& name, const LowRankMatrix& m) {
  m.validate(name);
  write_packed(kLowRank + name + "/up/", m.up);
  write_packed(kLowRank + name + "/down/", m.down);
}

void DeltaWriter::write_packed(const std::string& prefix, const PackedMatrix& m) {
  auto write = [&](const std::string& part, DType dtype, const void* data, std::size_t count) {
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(count)};
    store_.write_tensor(prefix + part, dtype, shape, bytes_of(data, count * dtype_size(dtype)), write_options_);
  };
  write("codes", DType::kU8, m.codes.data(), m.codes.size());
  if (m.has_codebook()) {
    write("codebook", DType::kF16, m.codebook.data(), m.codebook.size());
  } else {
    write("scales", DType::kF16, m.scales.data(), m.scales.size());
    write("zeros", DType::kU8, m.zeros.data(), m.zeros.size());
  }
  if (!m.indices.empty()) write("indices", DType::kU8, m.indices.data(), m.indices.size());
  const std::string object = prefix + "codes";
  store_.set_attribute(object, "shape", std::vector<std::int64_t>{m.rows, m.cols});
  store_.set_attribute(object, "bits", static_cast<std::int64_t>(m.bits));
  store_.set_attribute(object, "group_size", m.group_size);
  store_.set_attribute(object, "sparsity", m.sparsity.to_string());
}

void DeltaWriter::add_dense(const std::string& name, DenseKind kind, DType dtype,
                            const std::vector<std::int64_t>& shape, std::span<const std::byte> data) {
  const std::string object = kDense + name;
  store_.write_tensor(object, dtype, shape, data, write_options_);
  store_.set_attribute(object, "kind", std::string(kind == DenseKind::kDelta ? "delta" : "full"));
}

void DeltaWriter::add_row_delta(const std::string& name, const RowDelta& d) {
  d.validate(name);
  const std::string prefix = kRows + name + "/";
  const std::vector<std::int64_t> kept{static_cast<std::int64_t>(d.kept_rows.size())};
  const std::vector<std::int64_t> code_bytes{static_cast<std::int64_t>(d.codes.size())};
  store_.write_tensor(prefix + "rows", DType::kI32, kept, bytes_of(d.kept_rows.data(), d.kept_rows.size() * 4),
                      write_options_);
  store_.write_tensor(prefix + "codes", DType::kU8, code_bytes, bytes_of(d.codes.data(), d.codes.size()),
                      write_options_);
  store_.write_tensor(prefix + "scales", DType::kF16, kept, bytes_of(d.scales.data(), d.scales.size() * 2),
                      write_options_);
  store_.set_attribute(prefix + "codes", "shape", std::vector<std::int64_t>{d.rows, d.cols});
  store_.set_attribute(prefix + "codes", "bits", static_cast<std::int64_t>(d.bits));
}

std::uint64_t DeltaWriter::commit() { return store_.commit(); }

DeltaReader::DeltaReader(const std::filesystem::path& path) : store_(Hdf5Store::open(path)) {
  if (string_attr(store_, "", "format") != kContainerFormat)
    throw InputError(path.string() + ": not a " + std::string(kContainerFormat) + " container");
  if (const auto version = int_attr(store_, "", "version"); version != kContainerVersion) {
    throw InputError(path.string() + ": unsupported container version " + std::to_string(version) +
                     " (this build reads " + std::to_string(kContainerVersion) + "; compress the model again)");
  }
  store_.require_checksums(true);
  header_.settings_json = string_attr(store_, "", "settings");
  header_.base_identity = string_attr(store_, "", "base_identity");
  header_.config_json = string_attr(store_, "", "config");
  check_layout(model::parameter_shapes(container_config(header_.config_json, path)));
}

void DeltaReader::check_layout(const std::vector<model::ParameterShape>& model_tensors) {
  // One place decides what a container holds, so inspect, decompress and
  // the server refuse the same files: every weight of the model in `config`
  // exactly once, as a packed matrix, two low-rank factors, a row delta or a
  // dense tensor of its shape, and nothing else. Shapes come from the model,
  // never from the file.
  const std::string file = path().string();
  auto fail = [&](const std::string& why) { throw InputError(file + ": " + why); };
  const std::vector<std::string> names = store_.tensor_names();
  std::map<std::string, std::vector<std::int64_t>> expected;
  for (const auto& t : model_tensors) expected.emplace(t.name, t.shape);
  auto [linear_parts, row_parts, low_rank_parts, dense] = group_entries(names, file);
  dense_ = std::move(dense);
  for (const auto& [tensor, parts] : linear_parts) {
    if (!parts.count("codes")) fail(tensor + ": the packed matrix has no 'codes'");
    if (parts.count("codebook") && (parts.count("scales") || parts.count("zeros")))
      fail(tensor + ": the packed matrix has both a 'codebook' and scales");
    if (!parts.count("codebook"))
      for (const char* part : {"scales", "zeros"})
        if (!parts.count(part)) fail(tensor + ": the packed matrix has no '" + part + "'");
    packed_.push_back(tensor);
  }
  for (const auto& [tensor, parts] : low_rank_parts) {
    if (parts.size() != 6) fail(tensor + ": the low-rank delta needs 'codes', 'scales' and 'zeros' of 'up' and 'down'");
    low_rank_.push_back(tensor);
  }
  for (const auto& [tensor, parts] : row_parts) {
    if (parts.size() != 3) fail(tensor + ": the row delta needs 'rows', 'codes' and 'scales'");
    row_deltas_.push_back(tensor);
  }
  std::set<std::string> seen;
  auto known = [&](const std::string& name) -> const std::vector<std::int64_t>& {
    const auto it = expected.find(name);
    if (it == expected.end()) fail("'" + name + "' is not a tensor of the model its config describes");
    if (!seen.insert(name).second) fail("'" + name + "' is stored twice");
    return it->second;
  };
  // A packed matrix or row delta: its `shape` attribute is the model's, two-dimensional.
  auto known_matrix = [&](const std::string& name, const std::string& group, const char* what) {
    const auto& shape = known(name);
    const auto attr = store_.attribute(group + name + "/codes", "shape");
    const auto* stored = std::get_if<std::vector<std::int64_t>>(&attr);
    if (shape.size() != 2 || stored == nullptr || *stored != shape)
      fail(name + ": the " + what + " shape differs from the model's " + shape_to_string(shape));
    return shape;
  };
  for (const auto& name : packed_) known_matrix(name, kLinear, "packed");
  // A low-rank delta: up [rows, rank] and down [rank, cols] chain to the
  // model's shape, the rank at least 1 and at most the smaller side.
  auto factor_shape = [&](const std::string& name, const char* factor) {
    const auto attr = store_.attribute(kLowRank + name + "/" + factor + "/codes", "shape");
    const auto* stored = std::get_if<std::vector<std::int64_t>>(&attr);
    if (stored == nullptr || stored->size() != 2)
      fail(name + ": the " + factor + " factor has no two-dimensional shape");
    return *stored;
  };
  for (const auto& name : low_rank_) {
    const auto& shape = known(name);
    const auto up = factor_shape(name, kFactors[0]), down = factor_shape(name, kFactors[1]);
    if (shape.size() != 2 || up[0] != shape[0] || down[1] != shape[1] || up[1] != down[0] || up[1] < 1 ||
        up[1] > std::min(shape[0], shape[1]))
      fail(name + ": factors " + shape_to_string(up) + " x " + shape_to_string(down) + " do not make the model's " +
           shape_to_string(shape) + " at a rank from 1 to its smaller side");
    low_rank_shapes_[name] = shape;
  }
  for (const auto& name : row_deltas_) dense_shapes_[name] = known_matrix(name, kRows, "row delta's");
  for (const auto& name : dense_) {
    const auto& shape = known(name);
    if (store_.info(kDense + name).shape != shape)
      fail(name + ": shape " + shape_to_string(store_.info(kDense + name).shape) + ", the model's is " +
           shape_to_string(shape));
    dense_shapes_[name] = shape;
  }
  for (const auto& t : model_tensors)
    if (!seen.count(t.name)) fail("no entry for the model's tensor '" + t.name + "'");
  // Row deltas read back as dense deltas: one list for the readers.
  dense_.insert(dense_.end(), row_deltas_.begin(), row_deltas_.end());
  std::sort(dense_.begin(), dense_.end());
}

PackedMatrix DeltaReader::packed(const std::string& name) const {
  if (!contains_sorted(packed_, name)) throw InputError(path().string() + ": no packed matrix '" + name + "'");
  return read_packed(kLinear + name + "/", name);
}

LowRankMatrix DeltaReader::low_rank(const std::string& name) const {
  if (!contains_sorted(low_rank_, name)) throw InputError(path().string() + ": no low-rank delta '" + name + "'");
  const std::string group = kLowRank + name + "/";
  LowRankMatrix m{read_packed(group + kFactors[0] + "/", name + " (up factor)"),
                  read_packed(group + kFactors[1] + "/", name + " (down factor)")};
  m.validate(path().string() + ": " + name);
  return m;
}

PackedMatrix DeltaReader::read_packed(const std::string& prefix, const std::string& name) const {
  const std::string object = prefix + "codes";
  PackedMatrix m;
  auto shape_attr = store_.attribute(object, "shape");
  auto* shape = std::get_if<std::vector<std::int64_t>>(&shape_attr);
  if (!shape || shape->size() != 2) throw InputError(path().string() + ": " + name + ": bad shape attribute");
  m.rows = (*shape)[0];
  m.cols = (*shape)[1];
  m.bits = static_cast<int>(int_attr_in(store_, object, "bits", 1, 8));
  m.group_size = int_attr_in(store_, object, "group_size", 1, m.cols);
  try {
    m.sparsity = SparsityPattern::parse(string_attr(store_, object, "sparsity"));
  } catch (const UsageError& e) {
    throw InputError(path().string() + ": " + name + ": " + e.what());
  }
  // No part of a packed matrix (codes, one scale per weight at most, masks) needs
  // more than two bytes per weight: a larger dataset is corrupt, refused before allocating.
  const auto max_bytes = static_cast<std::uint64_t>(m.rows * m.cols) * 2 + 64;
  m.codes = read_vector<std::uint8_t>(store_, object, DType::kU8, max_bytes);
  if (store_.contains(prefix + "codebook")) {
    // Exactly 2^bits float16 levels per group; anything larger is refused unread.
    const auto codebook_bytes = (static_cast<std::uint64_t>(m.rows * m.groups()) * 2 << m.bits) + 64;
    m.codebook = read_vector<std::uint16_t>(store_, prefix + "codebook", DType::kF16, codebook_bytes);
  } else {
    m.scales = read_vector<std::uint16_t>(store_, prefix + "scales", DType::kF16, max_bytes);
    m.zeros = read_vector<std::uint8_t>(store_, prefix + "zeros", DType::kU8, max_bytes);
  }
  if (store_.contains(prefix + "indices")) {
    m.indices = read_vector<std::uint8_t>(store_, prefix + "indices", DType::kU8, max_bytes);
  }
  m.validate(path().string() + ": " + name);
  return m;
}

DenseEntry DeltaReader::dense(const std::string& name) const {
  if (contains_sorted(row_deltas_, name)) return row_delta_entry(name);
  DenseEntry e;
  auto kind = string_attr(store_, kDense + name, "kind");
  if (kind != "delta" && kind != "full")
    throw InputError(path().string() + ": " + name + ": unknown kind '" + kind + "'");
  e.kind = kind == "delta" ? DenseKind::kDelta : DenseKind::kFull;
  // Exactly the model's shape (check_layout), of at most 8-byte values.
  const auto& shape = dense_shapes_.at(name);
  const auto numel = checked_numel(shape);
  e.tensor = store_.read_tensor(kDense + name, numel ? *numel * 8 : 0);
  e.form = e.kind == DenseKind::kDelta ? "dense delta" : "full";
  return e;
}

DenseEntry DeltaReader::row_delta_entry(const std::string& name) const {
  const std::string prefix = kRows + name + "/", object = prefix + "codes";
  const auto& shape = dense_shapes_.at(name);  // the model's, two dimensions (check_layout)
  RowDelta d;
  d.rows = shape[0];
  d.cols = shape[1];
  d.bits = static_cast<int>(int_attr_in(store_, object, "bits", 2, 8));
  // No part needs more than one byte per weight (or four per row): a larger dataset is corrupt.
  const auto max_bytes = static_cast<std::uint64_t>(d.rows * d.cols) + 4 * static_cast<std::uint64_t>(d.rows) + 64;
  d.kept_rows = read_vector<std::int32_t>(store_, prefix + "rows", DType::kI32, max_bytes);
  d.codes = read_vector<std::uint8_t>(store_, object, DType::kU8, max_bytes);
  d.scales = read_vector<std::uint16_t>(store_, prefix + "scales", DType::kF16, max_bytes);
  d.validate(path().string() + ": " + name);
  DenseEntry e;
  e.kind = DenseKind::kDelta;
  e.form = std::to_string(d.bits) + "-bit rows (" + std::to_string(d.kept_rows.size()) + " of " +
           std::to_string(d.rows) + ")";
  e.tensor.dtype = DType::kF32;
  e.tensor.shape = shape;
  e.tensor.data.resize(static_cast<std::size_t>(d.rows * d.cols) * sizeof(float));
  decode_row_delta(d, {reinterpret_cast<float*>(e.tensor.data.data()), static_cast<std::size_t>(d.rows * d.cols)});
  return e;
}

std::uint64_t DeltaReader::stored_bytes(const std::string& name) const {
  if (contains_sorted(row_deltas_, name)) {
    std::uint64_t total = 0;
    for (const char* part : {"rows", "codes", "scales"}) total += store_.info(kRows + name + "/" + part).stored_bytes;
    return total;
  }
  if (contains_sorted(dense_, name)) return store_.info(kDense + name).stored_bytes;
  std::uint64_t total = 0;
  const bool low_rank = contains_sorted(low_rank_, name);
  for (const std::string group : low_rank
                                     ? std::vector<std::string>{kLowRank + name + "/up/", kLowRank + name + "/down/"}
                                     : std::vector<std::string>{kLinear + name + "/"})
    for (const char* part : {"codes", "scales", "zeros", "indices", "codebook"}) {
      auto n = group + part;
      if (store_.contains(n)) total += store_.info(n).stored_bytes;
    }
  return total;
}

std::int64_t DeltaReader::elements(const std::string& name) const {
  if (const auto it = low_rank_shapes_.find(name); it != low_rank_shapes_.end()) return it->second[0] * it->second[1];
  if (const auto it = dense_shapes_.find(name); it != dense_shapes_.end()) {
    std::int64_t n = 1;
    for (auto d : it->second) n *= d;
    return n;
  }
  auto shape_attr = store_.attribute(kLinear + name + "/codes", "shape");
  const auto& shape = std::get<std::vector<std::int64_t>>(shape_attr);
  return shape.at(0) * shape.at(1);
}

std::string base_identity(const std::filesystem::path& model_dir) {
  return base_identity(model::ModelFolder(model_dir));
}

std::string base_identity(const model::ModelFolder& model) {
  Fnv1a64 fnv;
  fnv.add_string(model.config_text());
  const SafetensorsCheckpoint& checkpoint = model.weights();
  for (const auto& name : checkpoint.names()) {
    const auto& info = checkpoint.info(name);
    fnv.add_string(name);
    fnv.add_string(dtype_name(info.dtype));
    for (auto d : info.shape) fnv.add_string(std::to_string(d));
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
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv.value));
  return hex;
}

}  // namespace fleet::deltazip
