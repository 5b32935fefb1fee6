#!/usr/bin/env python3
"""Interop check: our safetensors/HDF5 files against Python's libraries, both ways.

Usage: check.py PATH/TO/interop_helper
Exits 0 when every comparison holds, 1 with the first difference otherwise.
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import hdf5plugin
import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file as np_save
from safetensors.torch import save_file as torch_save

HELPER = sys.argv[1]
SHAPE = (3, 7)
NUMPY_TYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
               "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
               "U8": np.uint8, "BOOL": np.bool_}


def expected(dtype_name, n=SHAPE[0] * SHAPE[1]):
    """Element values the helper writes (same formula as interop_helper.cpp)."""
    i = np.arange(n)
    base = (i * 37) % 23
    if dtype_name == "BOOL":
        return (i % 3 == 0).astype(np.float64)
    if dtype_name in ("F64", "F32", "F16", "BF16"):
        return (base - 11.0) * 0.25
    if dtype_name.startswith("U"):
        return base.astype(np.float64)
    return base - 11.0


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)


def helper(*args):
    result = subprocess.run([HELPER, *args], capture_output=True, text=True)
    check(result.returncode == 0, f"interop_helper {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def ours_written_python_reads(tmp):
    path = os.path.join(tmp, "ours.safetensors")
    helper("write-safetensors", path)
    with safe_open(path, framework="pt") as f:
        check(f.metadata() == {"format": "pt", "written_by": "gpufleet"}, f"metadata {f.metadata()}")
        names = sorted(f.keys())
    check(names == sorted(list(NUMPY_TYPES) + ["BF16"]), f"tensor names {names}")
    # numpy reads every dtype but BF16 (numpy has none); torch 1.13 reads BF16 but no U16-U64.
    with safe_open(path, framework="np") as f:
        for name, np_type in NUMPY_TYPES.items():
            array = f.get_tensor(name)
            check(array.dtype == np_type, f"{name}: numpy dtype {array.dtype}")
            check(array.shape == SHAPE, f"{name}: shape {array.shape}")
            check(np.array_equal(array.astype(np.float64).flatten(), expected(name)), f"safetensors {name}: {array}")
    with safe_open(path, framework="pt") as f:
        bf16 = f.get_tensor("BF16")
    check(bf16.dtype == torch.bfloat16 and tuple(bf16.shape) == SHAPE, f"BF16: {bf16.dtype} {tuple(bf16.shape)}")
    check(np.array_equal(bf16.to(torch.float64).flatten().numpy(), expected("BF16")), f"safetensors BF16: {bf16}")
    print("ok: safetensors written by us, read by safetensors with numpy (12 dtypes) and torch (BF16)")

    path = os.path.join(tmp, "ours.h5")
    helper("write-h5", path)
    with h5py.File(path, "r") as f:
        # The newest file format (superblock version 3: checksummed metadata).
        check(f.id.get_create_plist().get_version()[0] >= 2, f"superblock {f.id.get_create_plist().get_version()}")
        # Strings are fixed-length UTF-8, which h5py returns as bytes.
        check(f.attrs["format"] == b"gpufleet-test", f"root attr format {f.attrs['format']!r}")
        check(int(f.attrs["version"]) == 3 and abs(float(f.attrs["damp"]) - 0.01) < 1e-15, "root attrs")
        check(list(f["tensors/F32"].attrs["scales"]) == [0.5, 0.25], "dataset attr scales")
        check(list(f["tensors/F32"].attrs["shape"]) == [3, 7], "dataset attr shape")
        for name in list(NUMPY_TYPES) + ["BF16"]:
            ds = f["tensors/" + name]
            check(ds.shape == SHAPE, f"h5 {name}: shape {ds.shape}")
            check("32015" in ds._filters, f"h5 {name}: filters {ds._filters} lack zstd 32015")
            data = ds[()]
            if name in NUMPY_TYPES:
                check(data.dtype == NUMPY_TYPES[name], f"h5 {name}: numpy dtype {data.dtype}")
            check(np.array_equal(data.astype(np.float64).flatten(), expected(name)), f"h5 {name}: values {data}")
            # Every tensor carries FNV-1a (64-bit) of its decoded little-endian bytes.
            raw = data
            if name == "BF16":  # h5py converts bfloat16 to float16: read the stored bits instead
                raw = np.empty(ds.shape, dtype=np.uint16)
                ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ds.id.get_type())
            check(int(ds.attrs["fnv1a64"]) & (2**64 - 1) == fnv1a64(raw.tobytes()), f"h5 {name}: checksum")
    print("ok: HDF5 written by us (zstd 32015), read by h5py + hdf5plugin with identical values and attributes")


def fnv1a64(data):
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & (2**64 - 1)
    return h


def python_written_we_read(tmp):
    rng = np.random.default_rng(5)
    arrays = {
        "f64": rng.standard_normal((4, 5)), "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f16": rng.standard_normal(9).astype(np.float16), "i64": rng.integers(-2**40, 2**40, (3,)),
        "i32": rng.integers(-1000, 1000, (6,)).astype(np.int32), "i16": np.array([-3, 4], dtype=np.int16),
        "i8": np.array([-128, 127, 0], dtype=np.int8), "u8": np.arange(10, dtype=np.uint8),
        "u16": np.array([65535, 1], dtype=np.uint16), "u32": np.array([4294967295], dtype=np.uint32),
        "u64": np.array([2**53], dtype=np.uint64), "bool": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float32), "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = os.path.join(tmp, "theirs.safetensors")
    np_save(arrays, path, metadata={"source": "numpy", "unicode": "température"})
    bf16 = torch.randn(5, 3).to(torch.bfloat16)
    torch_path = os.path.join(tmp, "theirs_torch.safetensors")
    torch_save({"bf16": bf16, "half": torch.randn(4).half()}, torch_path)

    dumped = json.loads(helper("dump", path))
    check(dumped["metadata"] == {"source": "numpy", "unicode": "température"}, f"metadata {dumped['metadata']}")
    for name, array in arrays.items():
        got = dumped["tensors"][name]
        check(tuple(got["shape"]) == array.shape, f"{name}: shape {got['shape']} vs {array.shape}")
        check(np.array_equal(np.array(got["values"], dtype=np.float64), array.astype(np.float64).flatten()),
              f"safetensors {name}: values differ")
    dumped = json.loads(helper("dump", torch_path))
    check(dumped["tensors"]["bf16"]["dtype"] == "BF16", "bf16 dtype")
    check(np.array_equal(np.array(dumped["tensors"]["bf16"]["values"]), bf16.to(torch.float64).flatten().numpy()),
          "bf16 values differ")
    print("ok: safetensors written by numpy and torch (incl. BF16, scalars, empty tensors) read by us")

    h5_path = os.path.join(tmp, "theirs.h5")
    with h5py.File(h5_path, "w") as f:
        f.attrs["title"] = "written by h5py"
        f.attrs["count"] = np.int64(7)
        f.attrs["ratio"] = 0.125
        f.attrs["dims"] = np.array([1, 2, 3], dtype=np.int64)
        for name, array in arrays.items():
            if array.ndim == 0 or array.size == 0:
                f.create_dataset("plain/" + name, data=array)
            else:
                f.create_dataset("zstd/" + name, data=array, chunks=True, **hdf5plugin.Zstd(clevel=9))
        f["zstd/f32"].attrs["note"] = "dataset attribute"
    dumped = json.loads(helper("dump", h5_path))
    attrs = dumped["attributes"]["/"]
    check(attrs == {"title": "written by h5py", "count": 7, "ratio": 0.125, "dims": [1, 2, 3]}, f"attrs {attrs}")
    check(dumped["attributes"]["zstd/f32"]["note"] == "dataset attribute", "dataset attribute")
    for name, array in arrays.items():
        key = ("plain/" if array.ndim == 0 or array.size == 0 else "zstd/") + name
        got = dumped["tensors"][key]
        check(tuple(got["shape"]) == array.shape, f"h5 {key}: shape {got['shape']}")
        check(np.array_equal(np.array(got["values"], dtype=np.float64), array.astype(np.float64).flatten()),
              f"h5 {key}: values differ")
    print("ok: HDF5 written by h5py + hdf5plugin.Zstd read by us with identical values and attributes")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ours_written_python_reads(tmp)
        python_written_we_read(tmp)
    print("interop: 4 passed, 0 failed")


if __name__ == "__main__":
    main()
