#include "common/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/half.h"
#include "common/json.h"

namespace fleet {

namespace {

constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& message,
                       std::optional<std::uint64_t> offset = std::nullopt) {
  throw InputError(message, ErrorContext{file, field, offset});
}

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

// Reads a non-negative integer from a header value, or fails naming the field.
std::uint64_t header_uint(const nlohmann::json& v, const std::string& file, const std::string& field) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
    fail(file, field, "expected a non-negative integer, got " + v.dump());
  }
  return v.get<std::uint64_t>();
}

TensorInfo parse_tensor_entry(const std::string& name, const nlohmann::json& entry, const std::string& file) {
  if (!entry.is_object()) fail(file, name, "tensor entry must be an object, got " + std::string(entry.type_name()));
  TensorInfo info;
  info.name = name;
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      fail(file, name, "unknown field '" + it.key() + "' in tensor entry");
    }
  }
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) fail(file, name, "missing or non-string 'dtype'");
  auto dtype = parse_dtype(dtype_it->get<std::string>());
  if (!dtype) fail(file, name, "unknown dtype '" + dtype_it->get<std::string>() + "'");
  info.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) fail(file, name, "missing or non-array 'shape'");
  for (const auto& d : *shape_it) {
    const std::uint64_t dim = header_uint(d, file, name + ".shape");
    if (dim > static_cast<std::uint64_t>(INT64_MAX)) fail(file, name, "shape dimension too large");
    info.shape.push_back(static_cast<std::int64_t>(dim));
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    fail(file, name, "'data_offsets' must be an array [begin, end]");
  }
  info.begin = header_uint((*offsets_it)[0], file, name + ".data_offsets");
  info.end = header_uint((*offsets_it)[1], file, name + ".data_offsets");
  if (info.end < info.begin) {
    fail(file, name, "data_offsets end " + std::to_string(info.end) + " is before begin " + std::to_string(info.begin));
  }
  const auto numel = checked_numel(info.shape);
  const std::uint64_t elem = dtype_size(info.dtype);
  if (!numel || (*numel != 0 && *numel > UINT64_MAX / elem))
    fail(file, name, "shape " + shape_to_string(info.shape) + " overflows");
  if (*numel * elem != info.nbytes()) {
    fail(file, name,
         "shape " + shape_to_string(info.shape) + " of " + std::string(dtype_name(info.dtype)) + " needs " +
             std::to_string(*numel * elem) + " bytes but data_offsets span " + std::to_string(info.nbytes()));
  }
  return info;
}

}  // namespace

std::uint64_t TensorInfo::numel() const { return checked_numel(shape).value_or(0); }

std::uint64_t TensorView::numel() const { return checked_numel(shape).value_or(0); }

void TensorView::check_typed_access(std::size_t size, std::size_t alignment) const {
  if (size != dtype_size(dtype)) {
    throw InputError("cannot view " + std::string(dtype_name(dtype)) + " data as a " + std::to_string(size) +
                     "-byte type");
  }
  if (reinterpret_cast<std::uintptr_t>(data.data()) % alignment != 0) {
    throw InputError("tensor data is not aligned for a typed view; copy it instead");
  }
}

std::vector<double> TensorView::to_double() const {
  const std::uint64_t n = numel();
  std::vector<double> out(n);
  const std::byte* p = data.data();
  auto load = [p](auto tag, std::uint64_t i) {
    decltype(tag) v;
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return v;
  };
  for (std::uint64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kF64:
        out[i] = load(double{}, i);
        break;
      case DType::kF32:
        out[i] = load(float{}, i);
        break;
      case DType::kF16:
        out[i] = f16_to_float(load(std::uint16_t{}, i));
        break;
      case DType::kBF16:
        out[i] = bf16_to_float(load(std::uint16_t{}, i));
        break;
      case DType::kI64:
        out[i] = static_cast<double>(load(std::int64_t{}, i));
        break;
      case DType::kI32:
        out[i] = load(std::int32_t{}, i);
        break;
      case DType::kI16:
        out[i] = load(std::int16_t{}, i);
        break;
      case DType::kI8:
        out[i] = load(std::int8_t{}, i);
        break;
      case DType::kU64:
        out[i] = static_cast<double>(load(std::uint64_t{}, i));
        break;
      case DType::kU32:
        out[i] = load(std::uint32_t{}, i);
        break;
      case DType::kU16:
        out[i] = load(std::uint16_t{}, i);
        break;
      case DType::kU8:
        out[i] = load(std::uint8_t{}, i);
        break;
      case DType::kBool:
        out[i] = load(std::uint8_t{}, i) != 0 ? 1.0 : 0.0;
        break;
      case DType::kF8E4M3:
      case DType::kF8E5M2:
        throw InputError("conversion of " + std::string(dtype_name(dtype)) + " to double is not supported");
    }
  }
  return out;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& file_name) {
  if (file.size() < 8) {
    fail(file_name, "", "file is " + std::to_string(file.size()) + " bytes, too short for a safetensors header");
  }
  const std::uint64_t header_len = read_u64_le(file.data());
  if (header_len > kSafetensorsMaxHeaderBytes) {
    fail(file_name, "",
         "header length " + std::to_string(header_len) + " exceeds the " + std::to_string(kSafetensorsMaxHeaderBytes) +
             "-byte limit",
         0);
  }
  if (header_len > file.size() - 8) {
    fail(file_name, "",
         "header length " + std::to_string(header_len) + " runs past the end of the " + std::to_string(file.size()) +
             "-byte file",
         0);
  }
  if (header_len < 2)
    fail(file_name, "", "header of " + std::to_string(header_len) + " bytes cannot be a JSON object", 0);
  const char* text = reinterpret_cast<const char*>(file.data() + 8);

  // Duplicate top-level keys would silently shadow each other in a map; reject them.
  std::set<std::string> seen;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) fail(file_name, key, "duplicate tensor name in header");
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len, on_event);
  } catch (const nlohmann::json::parse_error& e) {
    fail(file_name, "", "header is not valid JSON: " + json_error_text(e), 8 + (e.byte > 0 ? e.byte - 1 : 0));
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large
    fail(file_name, "", "header is not valid JSON: " + json_error_text(e));
  }
  if (!header.is_object()) fail(file_name, "", "header must be a JSON object, got " + std::string(header.type_name()));

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const std::uint64_t data_len = file.size() - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it->is_object()) fail(file_name, kMetadataKey, "must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail(file_name, std::string(kMetadataKey) + "." + m.key(), "metadata values must be strings");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo info = parse_tensor_entry(it.key(), *it, file_name);
    if (info.end > data_len) {
      fail(file_name, info.name,
           "data_offsets end " + std::to_string(info.end) + " is past the " + std::to_string(data_len) +
               "-byte data buffer (file truncated?)",
           out.data_start + info.begin);
    }
    out.tensors.push_back(std::move(info));
  }

  // Overlap check on the tensors sorted by position (empty tensors occupy nothing).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : out.tensors) {
    if (t.nbytes() > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      fail(file_name, by_offset[i]->name, "data overlaps tensor '" + by_offset[i - 1]->name + "'",
           out.data_start + by_offset[i]->begin);
    }
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return out;
}

// ---- SafetensorsFile -------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : map_(path), header_(parse_safetensors_header(map_.bytes(), path.string())) {}

bool SafetensorsFile::contains(const std::string& name) const {
  auto it = std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != header_.tensors.end() && it->name == name;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  if (it == header_.tensors.end() || it->name != name) fail(path().string(), name, "no such tensor");
  return *it;
}

TensorView SafetensorsFile::view(const std::string& name) const {
  const TensorInfo& t = info(name);
  return TensorView{t.dtype, t.shape, map_.bytes().subspan(header_.data_start + t.begin, t.nbytes())};
}

// ---- SafetensorsCheckpoint ---------------------------------------------------

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path target = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "model.safetensors.index.json")) {
      target = path / "model.safetensors.index.json";
    } else if (fs::exists(path / "model.safetensors")) {
      target = path / "model.safetensors";
    } else {
      throw InputError("folder holds neither model.safetensors nor model.safetensors.index.json",
                       {path.string(), "", std::nullopt});
    }
  } else if (!fs::exists(path, ec)) {
    throw InputError("no such file or folder", {path.string(), "", std::nullopt});
  }

  if (target.extension() != ".json") {
    shards_.push_back(std::make_unique<SafetensorsFile>(target));
    for (const auto& t : shards_.back()->tensors()) owner_[t.name] = shards_.back().get();
    return;
  }

  // Sharded: {"metadata": {...}, "weight_map": {tensor: shard_file}}.
  const JsonDocument index = load_json_file(target);
  const JsonValue weight_map = index.root().at("weight_map");
  std::map<std::string, const SafetensorsFile*> shard_by_file;
  for (const auto& [tensor, shard_value] : weight_map.members()) {
    const std::string shard_name = shard_value.as<std::string>();
    if (shard_name.empty() || fs::path(shard_name).is_absolute() || shard_name.find("..") != std::string::npos) {
      shard_value.fail("shard file name must be a plain relative name, got '" + shard_name + "'");
    }
    auto found = shard_by_file.find(shard_name);
    if (found == shard_by_file.end()) {
      const fs::path shard_path = target.parent_path() / shard_name;
      if (!fs::exists(shard_path, ec)) shard_value.fail("shard '" + shard_name + "' does not exist");
      shards_.push_back(std::make_unique<SafetensorsFile>(shard_path));
      found = shard_by_file.emplace(shard_name, shards_.back().get()).first;
    }
    if (!found->second->contains(tensor)) {
      shard_value.fail("tensor '" + tensor + "' is not in shard '" + shard_name + "'");
    }
    owner_[tensor] = found->second;
  }
  // Tensors present in a shard but claimed elsewhere (or twice) mean a broken index.
  for (const auto& shard : shards_) {
    for (const auto& t : shard->tensors()) {
      auto it = owner_.find(t.name);
      if (it == owner_.end()) {
        throw InputError(
            "tensor '" + t.name + "' of shard '" + shard->path().filename().string() + "' is missing from the index",
            {target.string(), "/weight_map", std::nullopt});
      }
      if (it->second != shard.get()) {
        throw InputError("tensor '" + t.name + "' appears in shards '" + shard->path().filename().string() + "' and '" +
                             it->second->path().filename().string() + "'",
                         {target.string(), "/weight_map", std::nullopt});
      }
    }
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(owner_.size());
  for (const auto& [name, shard] : owner_) out.push_back(name);
  return out;
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) {
    throw InputError(
        "no such tensor in checkpoint",
        {shards_.empty() ? std::string() : shards_.front()->path().parent_path().string(), name, std::nullopt});
  }
  return it->second->info(name);
}

TensorView SafetensorsCheckpoint::view(const std::string& name) const {
  info(name);  // uniform error for a missing name
  return owner_.at(name)->view(name);
}

const std::map<std::string, std::string>& SafetensorsCheckpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return shards_.empty() ? kEmpty : shards_.front()->metadata();
}

std::vector<std::filesystem::path> SafetensorsCheckpoint::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& s : shards_) out.push_back(s->path());
  return out;
}

// ---- SafetensorsWriter -------------------------------------------------------

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                            std::span<const std::byte> data) {
  if (name.empty() || name == kMetadataKey) throw InputError("invalid tensor name '" + name + "'");
  for (const auto& e : entries_) {
    if (e.name == name) throw InputError("tensor added twice", {"", name, std::nullopt});
  }
  const auto numel = checked_numel(shape);
  if (!numel || *numel * dtype_size(dtype) != data.size()) {
    throw InputError("shape " + shape_to_string(shape) + " of " + std::string(dtype_name(dtype)) + " does not match " +
                         std::to_string(data.size()) + " bytes",
                     {"", name, std::nullopt});
  }
  entries_.push_back(Entry{name, dtype, std::move(shape), data});
}

void SafetensorsWriter::add_owned(const std::string& name, DType dtype, std::vector<std::int64_t> shape,
                                  std::vector<std::byte> data) {
  owned_.push_back(std::move(data));
  add(name, dtype, std::move(shape), owned_.back());
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

std::uint64_t SafetensorsWriter::data_bytes() const {
  std::uint64_t total = 0;
  for (const auto& e : entries_) total += e.data.size();
  return total;
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::aligned_order(std::vector<const Entry*> entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    const auto sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  return entries;
}

void SafetensorsWriter::write_entries(const std::filesystem::path& path,
                                      const std::vector<const Entry*>& entries) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  std::uint64_t offset = 0;
  for (const Entry* e : entries) {
    header[e->name] = {
        {"dtype", dtype_name(e->dtype)}, {"shape", e->shape}, {"data_offsets", {offset, offset + e->data.size()}}};
    offset += e->data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data buffer starts 8-byte aligned
  std::byte length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xff);
  write_file_atomically(path, [&](AtomicFileWriter& out) {
    out.write(std::span<const std::byte>(length, 8));
    out.write(text);
    for (const Entry* e : entries) out.write(e->data);
  });
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  std::vector<const Entry*> all;
  for (const auto& e : entries_) all.push_back(&e);
  write_entries(path, aligned_order(std::move(all)));
}

std::vector<std::filesystem::path> SafetensorsWriter::write_sharded(const std::filesystem::path& dir,
                                                                    std::uint64_t max_shard_bytes,
                                                                    const std::string& stem) const {
  if (max_shard_bytes == 0) throw UsageError("maximum shard size must be positive");
  // Greedy packing in name order; a tensor larger than the limit gets a shard of its own.
  std::vector<const Entry*> by_name;
  for (const auto& e : entries_) by_name.push_back(&e);
  std::sort(by_name.begin(), by_name.end(), [](const Entry* a, const Entry* b) { return a->name < b->name; });
  std::vector<std::vector<const Entry*>> shards(1);
  std::uint64_t current = 0;
  for (const Entry* e : by_name) {
    if (!shards.back().empty() && current + e->data.size() > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(e);
    current += e->data.size();
  }

  std::vector<std::filesystem::path> written;
  if (shards.size() == 1) {
    written.push_back(dir / (stem + ".safetensors"));
    write(written.back());
    return written;
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::vector<const Entry*> entries = aligned_order(shards[i]);
    const std::string file = safetensors_shard_name(stem, i, shards.size());
    write_entries(dir / file, entries);
    written.push_back(dir / file);
    for (const Entry* e : entries) weight_map.emplace_back(e->name, file);
  }
  written.push_back(write_safetensors_index(dir, stem, weight_map, data_bytes()));
  return written;
}

std::string safetensors_shard_name(const std::string& stem, std::size_t index, std::size_t count) {
  auto number = [](std::size_t v) {
    std::string s = std::to_string(v);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return stem + "-" + number(index + 1) + "-of-" + number(count) + ".safetensors";
}

std::filesystem::path write_safetensors_index(const std::filesystem::path& dir, const std::string& stem,
                                              const std::vector<std::pair<std::string, std::string>>& weight_map,
                                              std::uint64_t total_bytes) {
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (const auto& [tensor, file] : weight_map) map[tensor] = file;
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", map}};
  const auto path = dir / (stem + ".safetensors.index.json");
  write_file_atomically(path, index.dump(2) + "\n");
  return path;
}

}  // namespace fleet
