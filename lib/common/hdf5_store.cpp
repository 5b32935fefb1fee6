#include "common/hdf5_store.h"

#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <utility>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/fnv_hash.h"
#include "common/hdf5_seal.h"
#include "common/hdf5_zstd_filter.h"

static_assert(std::endian::native == std::endian::little, "the HDF5 store assumes a little-endian host");

namespace fleet {

namespace {

// Owns one HDF5 identifier and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  /// Gives up ownership without closing.
  void release() { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Walks HDF5's error stack: "outermost description (innermost description)".
std::string hdf5_error_text() {
  std::vector<std::string> descriptions;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
        if (err->desc != nullptr && *err->desc != '\0') {
          static_cast<std::vector<std::string>*>(data)->emplace_back(err->desc);
        }
        return 0;
      },
      &descriptions);
  H5Eclear2(H5E_DEFAULT);
  if (descriptions.empty()) return "HDF5 call failed";
  // A failed system call's description spans lines and lists buffers and
  // offsets: keep only the system's message ("File too large").
  for (std::string& d : descriptions) {
    const std::string key = "error message = '";
    if (const auto at = d.find(key); at != std::string::npos) {
      const auto end = d.find('\'', at + key.size());
      d = d.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
    }
    std::replace(d.begin(), d.end(), '\n', ' ');
  }
  if (descriptions.size() == 1) return descriptions.front();
  return descriptions.front() + " (" + descriptions.back() + ")";
}

[[noreturn]] void fail_input(const std::filesystem::path& file, const std::string& field, const std::string& message) {
  throw InputError(message, ErrorContext{file.string(), field, std::nullopt});
}

hid_t check(hid_t id, const std::filesystem::path& file, const std::string& field, const std::string& what) {
  if (id < 0) fail_input(file, field, what + ": " + hdf5_error_text());
  return id;
}

void check_status(herr_t status, const std::filesystem::path& file, const std::string& field, const std::string& what) {
  if (status < 0) throw IoError(what + ": " + hdf5_error_text(), ErrorContext{file.string(), field, std::nullopt});
}

Handle float16_like(unsigned exponent_bits, unsigned mantissa_bits, size_t ebias) {
  // Start from a 32-bit IEEE float and reshape its fields to 16 bits, as h5py does.
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 15 - exponent_bits, exponent_bits, 0, mantissa_bits);
  H5Tset_size(t.get(), 2);
  H5Tset_precision(t.get(), 16);
  H5Tset_ebias(t.get(), ebias);
  return t;
}

// The HDF5 type that stores (and, as memory type, reads) `dtype`.
Handle hdf5_type_for(DType dtype) {
  auto copy = [](hid_t base) { return Handle(H5Tcopy(base), H5Tclose); };
  switch (dtype) {
    case DType::kF64:
      return copy(H5T_IEEE_F64LE);
    case DType::kF32:
      return copy(H5T_IEEE_F32LE);
    case DType::kF16:
      return float16_like(5, 10, 15);
    case DType::kBF16:
      return float16_like(8, 7, 127);
    case DType::kI64:
      return copy(H5T_STD_I64LE);
    case DType::kI32:
      return copy(H5T_STD_I32LE);
    case DType::kI16:
      return copy(H5T_STD_I16LE);
    case DType::kI8:
      return copy(H5T_STD_I8LE);
    case DType::kU64:
      return copy(H5T_STD_U64LE);
    case DType::kU32:
      return copy(H5T_STD_U32LE);
    case DType::kU16:
      return copy(H5T_STD_U16LE);
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return copy(H5T_STD_U8LE);
    case DType::kBool: {
      Handle t(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
      const std::int8_t f = 0, tr = 1;
      H5Tenum_insert(t.get(), "FALSE", &f);
      H5Tenum_insert(t.get(), "TRUE", &tr);
      return t;
    }
  }
  return {};
}

// Recognises the dtype of a stored type; nullopt for types we do not handle.
std::optional<DType> dtype_of_hdf5_type(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (size == 8) return DType::kF64;
      if (size == 4) return DType::kF32;
      if (size == 2) {
        const size_t ebias = H5Tget_ebias(type);
        if (ebias == 15) return DType::kF16;
        if (ebias == 127) return DType::kBF16;
      }
      return std::nullopt;
    case H5T_INTEGER: {
      const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      switch (size) {
        case 8:
          return is_signed ? DType::kI64 : DType::kU64;
        case 4:
          return is_signed ? DType::kI32 : DType::kU32;
        case 2:
          return is_signed ? DType::kI16 : DType::kU16;
        case 1:
          return is_signed ? DType::kI8 : DType::kU8;
        default:
          return std::nullopt;
      }
    }
    case H5T_ENUM:
      if (size == 1 && H5Tget_nmembers(type) == 2) return DType::kBool;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// Chunk dimensions of about `target` bytes, shrinking the outermost dimensions first.
std::vector<hsize_t> chunk_dims(std::span<const hsize_t> dims, std::size_t elem, std::uint64_t target) {
  std::vector<hsize_t> chunk(dims.begin(), dims.end());
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    std::uint64_t inner = elem;
    for (std::size_t j = i + 1; j < chunk.size(); ++j) inner *= chunk[j];
    if (inner * chunk[i] <= target) break;
    chunk[i] = std::max<std::uint64_t>(1, target / inner);
    if (inner <= target) break;
  }
  return chunk;
}

constexpr const char* kDTypeAttr = "dtype";  // marks F8 data stored as uint8
// FNV-1a of the decoded bytes, as int64: catches corrupt data that still decompresses.
constexpr const char* kChecksumAttr = "fnv1a64";

std::uint64_t content_checksum(std::span<const std::byte> data) {
  Fnv1a64 hash;
  hash.add(data);
  return hash.value;
}

}  // namespace

struct Hdf5Store::State {
  std::filesystem::path path;
  std::unique_ptr<AtomicFileWriter> writer;  // create mode only
  Handle file;

  hid_t object(const std::string& name) const {
    const std::string p = name.empty() ? "/" : name;
    return check(H5Oopen(file.get(), p.c_str(), H5P_DEFAULT), path, name, "no such object");
  }
};

namespace {

// File access for new files and images: the newest file format, in which
// every piece of metadata (superblock, object headers, B-trees, heaps)
// carries a checksum that HDF5 verifies on read, so a corrupt header is an
// error instead of a wrong shape or a crash.
Handle file_access(bool in_memory) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  if (in_memory) H5Pset_fapl_core(fapl.get(), 1 << 20, 0);  // grows by 1 MiB, never written to disk by HDF5
  return fapl;
}

}  // namespace

Hdf5Store::Hdf5Store(std::unique_ptr<State> state) : state_(std::move(state)) {}
Hdf5Store::Hdf5Store(Hdf5Store&&) noexcept = default;
Hdf5Store& Hdf5Store::operator=(Hdf5Store&&) noexcept = default;
Hdf5Store::~Hdf5Store() = default;  // an uncommitted writer removes its temporary file

const std::filesystem::path& Hdf5Store::path() const { return state_->path; }

std::uint64_t Hdf5Store::file_bytes() const {
  hsize_t size = 0;
  if (H5Fget_filesize(state_->file.get(), &size) < 0) fail_input(state_->path, "", "cannot tell the file size");
  return size;
}

Hdf5Store Hdf5Store::create(const std::filesystem::path& path) {
  ensure_hdf5_zstd_filter();
  auto state = std::make_unique<State>();
  state->path = path;
  state->writer = std::make_unique<AtomicFileWriter>(path);
  state->writer->close_fd();
  Handle fapl = file_access(false);
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Pset_userblock(fcpl.get(), kHdf5SealBytes);  // room for the seal, written on commit
  const hid_t id = H5Fcreate(state->writer->temp_path().c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  if (id < 0) throw IoError("cannot create HDF5 file: " + hdf5_error_text(), {path.string(), "", std::nullopt});
  state->file = Handle(id, H5Fclose);
  return Hdf5Store(std::move(state));
}

Hdf5Store Hdf5Store::open(const std::filesystem::path& path) {
  ensure_hdf5_zstd_filter();
  auto state = std::make_unique<State>();
  state->path = path;
  if (is_stdio(path)) {
    // HDF5 reads by name or from an image: standard input becomes an image,
    // checked against its seal before HDF5 sees it.
    const std::string bytes = read_file(path);
    const auto image = std::as_bytes(std::span<const char>(bytes.data(), bytes.size()));
    verify_hdf5_image(image, "standard input");
    Handle fapl = file_access(true);
    if (H5Pset_file_image(fapl.get(), const_cast<char*>(bytes.data()), bytes.size()) < 0)
      fail_input(path, "", "cannot read standard input as HDF5: " + hdf5_error_text());
    state->file = Handle(
        check(H5Fopen("gpufleet-stdin.h5", H5F_ACC_RDONLY, fapl.get()), path, "", "cannot open HDF5 data"), H5Fclose);
    return Hdf5Store(std::move(state));
  }
  check_input_file(path);  // missing, unreadable or a folder: say so, not "not HDF5"
  // The seal first: a damaged file never reaches libhdf5.
  if (verify_hdf5_file(path) == Hdf5Seal::kUnsealed && H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail_input(path, "", "not an HDF5 file");
  }
  state->file =
      Handle(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "", "cannot open HDF5 file"), H5Fclose);
  return Hdf5Store(std::move(state));
}

void Hdf5Store::write_tensor(const std::string& name, DType dtype, std::span<const std::int64_t> shape,
                             std::span<const std::byte> data, const TensorWriteOptions& options) {
  const auto& path = state_->path;
  if (!state_->writer) throw UsageError("store was opened read-only", {path.string(), name, std::nullopt});
  if (name.empty()) fail_input(path, name, "empty tensor name");
  if (contains(name)) fail_input(path, name, "tensor already exists");
  const auto numel = checked_numel(shape);
  if (!numel || *numel * dtype_size(dtype) != data.size()) {
    fail_input(path, name,
               "shape " + shape_to_string(shape) + " of " + std::string(dtype_name(dtype)) + " does not match " +
                   std::to_string(data.size()) + " bytes");
  }
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  if (dims.empty()) space = Handle(H5Screate(H5S_SCALAR), H5Sclose);

  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // Chunking (needed for a filter) only for non-empty arrays.
  const bool chunked = options.zstd_level.has_value() && !dims.empty() && *numel > 0;
  if (chunked) {
    auto chunk = chunk_dims(dims, dtype_size(dtype), options.target_chunk_bytes);
    check_status(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), path, name,
                 "cannot set chunking");
    const unsigned level = static_cast<unsigned>(*options.zstd_level);
    check_status(H5Pset_filter(dcpl.get(), kHdf5ZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), path, name,
                 "cannot enable zstd");
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle type = hdf5_type_for(dtype);
  Handle dataset(
      H5Dcreate2(state_->file.get(), name.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
      H5Dclose);
  if (!dataset.valid())
    throw IoError("cannot create dataset: " + hdf5_error_text(), {path.string(), name, std::nullopt});
  if (*numel > 0) {
    check_status(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), path, name,
                 "cannot write dataset");
  }
  dataset.reset();
  if (dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2)
    set_attribute(name, kDTypeAttr, std::string(dtype_name(dtype)));
  set_attribute(name, kChecksumAttr, std::bit_cast<std::int64_t>(content_checksum(data)));
}

bool Hdf5Store::contains(const std::string& name) const {
  if (name.empty()) return false;
  // Check each prefix: H5Lexists fails when an intermediate group is missing.
  std::size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    const htri_t exists = H5Lexists(state_->file.get(), prefix.c_str(), H5P_DEFAULT);
    if (exists <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (pos == std::string::npos) break;
  }
  Handle obj(H5Oopen(state_->file.get(), name.c_str(), H5P_DEFAULT), H5Oclose);
  return obj.valid() && H5Iget_type(obj.get()) == H5I_DATASET;
}

StoredTensorInfo Hdf5Store::info(const std::string& name) const {
  const auto& path = state_->path;
  if (!contains(name)) fail_input(path, name, "no such tensor");
  Handle dataset(check(H5Dopen2(state_->file.get(), name.c_str(), H5P_DEFAULT), path, name, "cannot open dataset"),
                 H5Dclose);
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  StoredTensorInfo info;
  auto dtype = dtype_of_hdf5_type(type.get());
  if (!dtype) fail_input(path, name, "unsupported HDF5 element type");
  info.dtype = *dtype;
  if (auto marker = find_attribute(name, kDTypeAttr)) {
    const auto* text = std::get_if<std::string>(&*marker);
    auto marked = text ? parse_dtype(*text) : std::nullopt;
    if (!marked || dtype_size(*marked) != dtype_size(info.dtype)) fail_input(path, name, "bad 'dtype' attribute");
    info.dtype = *marked;
  }
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail_input(path, name, "cannot read dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  info.shape.assign(dims.begin(), dims.end());
  info.stored_bytes = H5Dget_storage_size(dataset.get());
  Handle dcpl(H5Dget_create_plist(dataset.get()), H5Pclose);
  const int nfilters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0;
    size_t nelmts = 0;
    unsigned config = 0;
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nelmts, nullptr, 0, nullptr, &config);
    if (id == kHdf5ZstdFilterId) info.compressed = true;
  }
  return info;
}

StoredTensor Hdf5Store::read_tensor(const std::string& name, std::uint64_t max_bytes) const {
  const auto& path = state_->path;
  StoredTensorInfo meta = info(name);
  StoredTensor out;
  out.dtype = meta.dtype;
  out.shape = meta.shape;
  const auto numel = checked_numel(out.shape);
  if (!numel || *numel > max_bytes / dtype_size(out.dtype)) {
    fail_input(path, name,
               "dataset of shape " + shape_to_string(out.shape) + " is larger than the " + std::to_string(max_bytes) +
                   " bytes it may hold here");
  }
  std::optional<std::int64_t> checksum;
  if (auto stored = find_attribute(name, kChecksumAttr)) {
    const auto* value = std::get_if<std::int64_t>(&*stored);
    if (value == nullptr) fail_input(path, name, "bad checksum attribute");
    checksum = *value;
  } else if (require_checksums_) {
    fail_input(path, name, "tensor has no checksum");
  }
  out.data.resize(*numel * dtype_size(out.dtype));
  if (*numel == 0) return out;
  Handle dataset(check(H5Dopen2(state_->file.get(), name.c_str(), H5P_DEFAULT), path, name, "cannot open dataset"),
                 H5Dclose);
  Handle type = hdf5_type_for(out.dtype);
  if (H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data()) < 0) {
    fail_input(path, name, "cannot read dataset (corrupt data or unavailable filter): " + hdf5_error_text());
  }
  if (checksum && std::bit_cast<std::int64_t>(content_checksum(out.data)) != *checksum) {
    fail_input(path, name, "checksum mismatch: the data is corrupt");
  }
  return out;
}

std::vector<std::string> Hdf5Store::tensor_names() const {
  struct Visit {
    std::vector<std::string> names;
    std::string unreadable;                         // first object that could not be opened
    std::map<std::string, std::string> by_address;  // a dataset's address in the file -> its first name
    std::string duplicate;                          // "a and b": two names of one dataset (a hard link)
  } visit;
  // Every object must open: a damaged group would otherwise just vanish from the list.
  const herr_t status = H5Lvisit(
      state_->file.get(), H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        auto* v = static_cast<Visit*>(data);
        if (info->type != H5L_TYPE_HARD) return 0;
        Handle obj(H5Oopen(group, name, H5P_DEFAULT), H5Oclose);
        if (!obj.valid()) {
          v->unreadable = name;
          return -1;
        }
        if (H5Iget_type(obj.get()) == H5I_DATASET) {
      // Two names for one dataset (a hard link) would make two tensors
      // read the same bytes: each name must be its own data.
#if H5_VERSION_GE(1, 12, 0)
          const std::string address(reinterpret_cast<const char*>(&info->u.token), sizeof info->u.token);
#else
          const std::string address(reinterpret_cast<const char*>(&info->u.address), sizeof info->u.address);
#endif
          const auto [it, added] = v->by_address.emplace(address, name);
          if (!added) {
            v->duplicate = it->second + "' and '" + name;
            return -1;
          }
          v->names.emplace_back(name);
        }
        return 0;
      },
      &visit);
  if (!visit.duplicate.empty())
    fail_input(state_->path, "", "'" + visit.duplicate + "' are two names of the same data (a hard link)");
  if (status < 0) {
    fail_input(state_->path, visit.unreadable,
               "cannot list the file's objects (corrupt metadata): " + hdf5_error_text());
  }
  std::sort(visit.names.begin(), visit.names.end());
  return visit.names;
}

void Hdf5Store::set_attribute(const std::string& object, const std::string& key, const AttrValue& value) {
  const auto& path = state_->path;
  if (!state_->writer) throw UsageError("store was opened read-only", {path.string(), object, std::nullopt});
  Handle obj(state_->object(object), H5Oclose);
  if (H5Aexists(obj.get(), key.c_str()) > 0) H5Adelete(obj.get(), key.c_str());

  Handle type;
  Handle space;
  const void* buffer = nullptr;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          // Fixed-length UTF-8 string (h5py reads it as bytes): its size sits
          // in the checksummed object header, unlike a variable-length
          // string's heap entry, whose corruption crashes libhdf5 1.10.
          type = Handle(H5Tcopy(H5T_C_S1), H5Tclose);
          H5Tset_size(type.get(), std::max<std::size_t>(v.size(), 1));
          H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
          H5Tset_cset(type.get(), H5T_CSET_UTF8);
          space = Handle(H5Screate(H5S_SCALAR), H5Sclose);
          buffer = v.c_str();
        } else if constexpr (std::is_same_v<V, std::int64_t> || std::is_same_v<V, double>) {
          type = Handle(H5Tcopy(std::is_same_v<V, double> ? H5T_IEEE_F64LE : H5T_STD_I64LE), H5Tclose);
          space = Handle(H5Screate(H5S_SCALAR), H5Sclose);
          buffer = &v;
        } else {
          type = Handle(H5Tcopy(std::is_same_v<typename V::value_type, double> ? H5T_IEEE_F64LE : H5T_STD_I64LE),
                        H5Tclose);
          const hsize_t n = v.size();
          space = Handle(H5Screate_simple(1, &n, nullptr), H5Sclose);
          buffer = v.data();
        }
      },
      value);
  Handle attr(H5Acreate2(obj.get(), key.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid())
    throw IoError("cannot create attribute: " + hdf5_error_text(), {path.string(), object + "@" + key, std::nullopt});
  check_status(H5Awrite(attr.get(), type.get(), buffer), path, object + "@" + key, "cannot write attribute");
}

namespace {

AttrValue read_attribute(hid_t attr, const std::filesystem::path& path, const std::string& field) {
  Handle type(H5Aget_type(attr), H5Tclose);
  Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  const bool scalar = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
  switch (H5Tget_class(type.get())) {
    case H5T_STRING: {
      if (n != 1) fail_input(path, field, "string array attributes are not supported");
      if (H5Tis_variable_str(type.get()) > 0) {
        Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(mem.get(), H5T_VARIABLE);
        H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
        char* text = nullptr;
        check_status(H5Aread(attr, mem.get(), &text), path, field, "cannot read attribute");
        std::string out = text != nullptr ? text : "";
        H5free_memory(text);
        return out;
      }
      const size_t size = H5Tget_size(type.get());
      std::string out(size, '\0');
      check_status(H5Aread(attr, type.get(), out.data()), path, field, "cannot read attribute");
      out.resize(std::strlen(out.c_str()));  // fixed-length strings are NUL- or space-padded
      while (!out.empty() && out.back() == ' ') out.pop_back();
      return out;
    }
    case H5T_INTEGER: {
      std::vector<std::int64_t> values(static_cast<std::size_t>(n));
      check_status(H5Aread(attr, H5T_NATIVE_INT64, values.data()), path, field, "cannot read attribute");
      if (scalar) return values.at(0);
      return values;
    }
    case H5T_FLOAT: {
      std::vector<double> values(static_cast<std::size_t>(n));
      check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, values.data()), path, field, "cannot read attribute");
      if (scalar) return values.at(0);
      return values;
    }
    default:
      fail_input(path, field, "unsupported attribute type");
  }
}

}  // namespace

std::optional<AttrValue> Hdf5Store::find_attribute(const std::string& object, const std::string& key) const {
  Handle obj(state_->object(object), H5Oclose);
  if (H5Aexists(obj.get(), key.c_str()) <= 0) return std::nullopt;
  Handle attr(H5Aopen(obj.get(), key.c_str(), H5P_DEFAULT), H5Aclose);
  return read_attribute(attr.get(), state_->path, object + "@" + key);
}

AttrValue Hdf5Store::attribute(const std::string& object, const std::string& key) const {
  auto value = find_attribute(object, key);
  if (!value) fail_input(state_->path, (object.empty() ? "/" : object) + "@" + key, "missing attribute");
  return *value;
}

std::map<std::string, AttrValue> Hdf5Store::attributes(const std::string& object) const {
  Handle obj(state_->object(object), H5Oclose);
  struct Visit {
    const std::filesystem::path* path;
    std::string object;
    std::map<std::string, AttrValue> out;
    std::optional<InputError> error;
  } visit{&state_->path, object, {}, std::nullopt};
  H5Aiterate2(
      obj.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t location, const char* name, const H5A_info_t*, void* data) -> herr_t {
        auto* v = static_cast<Visit*>(data);
        if (std::strcmp(name, kChecksumAttr) == 0) return 0;  // the store's own, not the caller's
        Handle attr(H5Aopen(location, name, H5P_DEFAULT), H5Aclose);
        try {
          v->out.emplace(name, read_attribute(attr.get(), *v->path, v->object + "@" + name));
        } catch (const InputError& e) {
          v->error = e;  // never throw through HDF5's C frames
          return -1;
        }
        return 0;
      },
      &visit);
  if (visit.error) throw *visit.error;
  return visit.out;
}

std::uint64_t Hdf5Store::commit() {
  if (!state_->writer) throw UsageError("store was opened read-only", {state_->path.string(), "", std::nullopt});
  if (!state_->file.valid())
    throw IoError("internal: commit after a failed commit", {state_->path.string(), "", std::nullopt});
  const auto& path = state_->path;
  check_status(H5Fflush(state_->file.get(), H5F_SCOPE_GLOBAL), path, "", "cannot write");
  // Closing writes what is left; a failure here (a full disk) is an error,
  // and the handle is dropped either way so nothing closes it twice.
  const hid_t id = state_->file.get();
  state_->file.release();
  check_status(H5Fclose(id), path, "", "cannot write");
  seal_hdf5_file(state_->writer->temp_path());
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(state_->writer->temp_path(), ec);
  state_->writer->commit();
  return size;
}

void Hdf5Store::require_checksums(bool required) { require_checksums_ = required; }

}  // namespace fleet
