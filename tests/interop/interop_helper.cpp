// Writes and dumps safetensors and HDF5 files so that tests/interop/check.py
// can compare them with Python's safetensors, numpy, torch and h5py+hdf5plugin.
//
//   interop_helper write-safetensors OUT    tensors of every dtype, values from expected_value()
//   interop_helper write-h5 OUT              the same tensors plus attributes, zstd-compressed
//   interop_helper dump FILE                 JSON {tensors: {name: {dtype, shape, values}}, attributes/metadata}
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/hdf5_store.h"
#include "common/safetensors.h"
#include "dtype_samples.h"

namespace {

using fleet::DType;

// The value of element i of a tensor of `dtype`; check.py computes the same.
double expected_value(DType dtype, std::size_t i) {
  const double base = static_cast<double>((i * 37) % 23);
  if (dtype == DType::kBool) return i % 3 == 0 ? 1.0 : 0.0;
  if (fleet::dtype_is_float(dtype)) return (base - 11.0) * 0.25;
  const bool is_unsigned = dtype == DType::kU8 || dtype == DType::kU16 || dtype == DType::kU32 || dtype == DType::kU64;
  return is_unsigned ? base : base - 11.0;
}

std::vector<std::byte> encode(DType dtype, std::size_t n) {
  std::vector<std::byte> out(n * fleet::dtype_size(dtype));
  for (std::size_t i = 0; i < n; ++i) {
    fleet::testing::store_as(dtype, expected_value(dtype, i), out.data() + i * fleet::dtype_size(dtype));
  }
  return out;
}

// Every dtype Python can check (the F8 types have no numpy/torch-1.13 equivalent).
std::vector<DType> checked_dtypes() {
  std::vector<DType> out;
  for (DType d : fleet::kAllDTypes) {
    if (d != DType::kF8E4M3 && d != DType::kF8E5M2) out.push_back(d);
  }
  return out;
}

const std::vector<std::int64_t> kShape{3, 7};

nlohmann::json attr_to_json(const fleet::AttrValue& value) {
  return std::visit([](const auto& v) { return nlohmann::json(v); }, value);
}

int dump(const std::string& path) {
  nlohmann::json out;
  auto describe = [](DType dtype, const std::vector<std::int64_t>& shape, std::vector<double> values) {
    return nlohmann::json{{"dtype", fleet::dtype_name(dtype)}, {"shape", shape}, {"values", values}};
  };
  if (path.ends_with(".safetensors")) {
    fleet::SafetensorsFile file(path);
    for (const auto& t : file.tensors()) {
      const auto view = file.view(t.name);
      out["tensors"][t.name] = describe(view.dtype, view.shape, view.to_double());
    }
    out["metadata"] = file.metadata();
  } else {
    fleet::Hdf5Store store = fleet::Hdf5Store::open(path);
    for (const auto& name : store.tensor_names()) {
      const auto t = store.read_tensor(name);
      const fleet::TensorView view{t.dtype, t.shape, t.data};
      out["tensors"][name] = describe(t.dtype, t.shape, view.to_double());
      for (const auto& [key, value] : store.attributes(name)) out["attributes"][name][key] = attr_to_json(value);
    }
    for (const auto& [key, value] : store.attributes("")) out["attributes"]["/"][key] = attr_to_json(value);
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: interop_helper write-safetensors|write-h5|dump PATH\n";
    return 2;
  }
  const std::string command = argv[1];
  const std::string path = argv[2];
  try {
    const std::size_t n = static_cast<std::size_t>(kShape[0] * kShape[1]);
    if (command == "write-safetensors") {
      fleet::SafetensorsWriter writer;
      for (DType d : checked_dtypes()) writer.add_owned(std::string(fleet::dtype_name(d)), d, kShape, encode(d, n));
      writer.set_metadata("format", "pt");
      writer.set_metadata("written_by", "gpufleet");
      writer.write(path);
    } else if (command == "write-h5") {
      fleet::Hdf5Store store = fleet::Hdf5Store::create(path);
      for (DType d : checked_dtypes()) {
        store.write_tensor("tensors/" + std::string(fleet::dtype_name(d)), d, kShape, encode(d, n),
                           fleet::TensorWriteOptions{5, 64});  // small chunks: several per tensor
      }
      store.set_attribute("", "format", std::string("gpufleet-test"));
      store.set_attribute("", "version", std::int64_t{3});
      store.set_attribute("", "damp", 0.01);
      store.set_attribute("tensors/F32", "scales", std::vector<double>{0.5, 0.25});
      store.set_attribute("tensors/F32", "shape", std::vector<std::int64_t>{3, 7});
      store.commit();
    } else if (command == "dump") {
      return dump(path);
    } else {
      std::cerr << "unknown command " << command << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "interop_helper: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
