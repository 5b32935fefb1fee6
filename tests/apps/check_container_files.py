#!/usr/bin/env python3
"""Damaged and hand-made delta containers through dz-compress inspect and decompress.

Usage: check_container_files.py BIN_DIR [FLIPS]

1. Byte flips spread over a real container, and truncations spread over it:
   every run ends with exit 2 and one error line, within a time limit (no
   crash, no hang, no memory exhaustion: the address space is capped).
2. Files made by hand with h5py (no seal, as another tool would write them):
   a dense tensor declared far larger than the model, a dataset hard-linked
   under a second name, a missing and an extra entry, a `bits` attribute
   of 2^32 + 4, an embedding row index past the vocabulary (checksum
   recomputed), a row delta without scales and a low-rank delta whose
   factors do not chain. inspect and decompress refuse each with the same
   message.
3. A low-rank container (--rank) read with h5py and numpy alone: each
   layer's up · down equals what decompress adds to the base.
FLIPS (default 40) sets how many flips and cuts; the by-hand check that the
issue tracker asked for used 700.
"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile

import h5py
import hdf5plugin  # noqa: F401  (registers the zstd filter for h5py)
import numpy as np

BIN = os.path.abspath(sys.argv[1])
FLIPS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
LIMIT_S = 120          # far above a normal run (~0.5 s); a hang shows as a timeout
MEMORY_CAP = 4 << 30   # address space of each run: a believed huge size fails instead of swapping


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(*args, cwd):
    try:
        return subprocess.run([os.path.join(BIN, args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True,
                              timeout=LIMIT_S, preexec_fn=cap_memory)
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(args)} ran past {LIMIT_S} s")


def refused(args, cwd, what):
    """Runs args; it must exit 2 with one 'error:' line. Returns that line."""
    r = run(*args, cwd=cwd)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or ": error: " not in lines[0]:
        fail(f"{what}: {' '.join(args)} exited {r.returncode} (want 2 and one error line): {r.stderr.strip()}")
    return lines[0].split(": error: ", 1)[1]


def both_refuse(work, name, what, expect):
    """inspect and decompress refuse `name` with the same message, which contains `expect`."""
    a = refused(["dz-compress", "inspect", name], work, what)
    b = refused(["dz-compress", "decompress", "--base", "base", name, "-o", "out", "--force"], work, what)
    if a != b:
        fail(f"{what}: inspect says '{a}', decompress says '{b}'")
    if expect not in a:
        fail(f"{what}: '{a}' does not say '{expect}'")
    if os.path.exists(os.path.join(work, "out")):
        fail(f"{what}: decompress wrote a model")


def fnv1a64(data):
    """FNV-1a 64 of `data` with the store's offset basis (docs/formats.md), as a signed int64."""
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= 1 << 63 else h


def copy_unsealed(src, dst, edit):
    """Copies every object and attribute of container `src` into a new file
    written by h5py (no seal), letting `edit(f)` change it before it is closed."""
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        for key, value in s.attrs.items():
            d.attrs[key] = value
        for key in s:
            s.copy(s[key], d, name=key)
        edit(d)


def read_safetensors(path):
    """name -> float64 array of a float32 safetensors file, parsed here (no toolkit code)."""
    import json
    import struct
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            fail(f"{path}: {name} is {info['dtype']}, not F32")
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


def decode_packed(group):
    """A dense packed matrix (docs/formats.md): codes LSB first, scale x (code - zero) per row."""
    codes = group["codes"]
    rows, cols = (int(v) for v in codes.attrs["shape"])
    bits = int(codes.attrs["bits"])
    sparsity = codes.attrs["sparsity"]
    if (sparsity.decode() if isinstance(sparsity, bytes) else str(sparsity)) != "none" or int(codes.attrs["group_size"]) != cols:
        fail(f"{group.name}: a low-rank factor must be dense with one scale per row")
    stream = np.unpackbits(codes[()], bitorder="little")[: rows * cols * bits].reshape(rows * cols, bits)
    values = (stream.astype(np.int64) << np.arange(bits)).sum(axis=1).reshape(rows, cols)
    scales = group["scales"][()].astype(np.float64).reshape(rows, 1)
    zeros = group["zeros"][()].astype(np.float64).reshape(rows, 1)
    return scales * (values - zeros)


def main():
    with tempfile.TemporaryDirectory() as work:
        def tool(*args):
            r = run(*args, cwd=work)
            if r.returncode != 0:
                fail(f"{' '.join(args)}: {r.stderr}")
        tool("sailor-run", "-q", "init", "--preset", "tiny", "--seed", "1", "-o", "base")
        tool("sailor-run", "-q", "init", "--preset", "tiny", "--seed", "2", "-o", "tuned")
        tool("dz-compress", "-q", "compress", "--base", "base", "--target", "tuned", "-o", "d.h5", "--method", "rtn",
             "--bits", "2", "--sparsity", "2:4", "--threads", "1")
        original = open(os.path.join(work, "d.h5"), "rb").read()

        # 1. Flips and cuts spread over the file.
        for k in range(FLIPS):
            pos = k * len(original) // FLIPS + (k * 7919) % max(1, len(original) // FLIPS)
            data = bytearray(original)
            data[pos] ^= (0x01, 0x80, 0xff, 0x10)[k % 4]
            with open(os.path.join(work, "flip.h5"), "wb") as f:
                f.write(data)
            message = refused(["dz-compress", "inspect", "flip.h5"], work, f"byte {pos} flipped")
            if "damaged" not in message:
                fail(f"byte {pos} flipped: '{message}' does not say the file is damaged")
            if k % 4 == 0:
                refused(["dz-compress", "decompress", "--base", "base", "flip.h5", "-o", "out"], work,
                        f"byte {pos} flipped")
        for k in range(FLIPS):
            size = k * len(original) // FLIPS
            with open(os.path.join(work, "cut.h5"), "wb") as f:
                f.write(original[:size])
            refused(["dz-compress", "inspect", "cut.h5"], work, f"cut at {size} bytes")

        # 2. Made by hand: the reader's own checks, the same in both programs.
        unsealed = os.path.join(work, "copy.h5")
        copy_unsealed(os.path.join(work, "d.h5"), unsealed, lambda f: None)
        r = run("dz-compress", "inspect", "copy.h5", cwd=work)
        if r.returncode != 0:
            fail(f"an unsealed copy made by h5py is not read: {r.stderr}")

        def huge_dense(f):
            del f["dense/model.norm.weight"]
            f.create_dataset("dense/model.norm.weight", shape=(65536, 65536), dtype=np.float16, chunks=(256, 4096),
                             compression=hdf5plugin.Zstd())  # 8 GiB declared, nothing written: a few KB on disk
            f["dense/model.norm.weight"].attrs["kind"] = np.bytes_("delta")
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "huge.h5"), huge_dense)
        if os.path.getsize(os.path.join(work, "huge.h5")) > 4 << 20:
            fail("the hand-made file is not small")
        both_refuse(work, "huge.h5", "a 65536 x 65536 dense tensor", "model.norm.weight: shape [65536, 65536]")

        def hard_link(f):
            del f["dense/model.layers.0.input_layernorm.weight"]
            f["dense/model.layers.0.input_layernorm.weight"] = f["dense/model.norm.weight"]  # a second name
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "link.h5"), hard_link)
        both_refuse(work, "link.h5", "a hard-linked dataset", "two names of the same data")

        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "missing.h5"),
                      lambda f: f.__delitem__("dense/model.norm.weight"))
        both_refuse(work, "missing.h5", "a missing entry", "no entry for the model's tensor 'model.norm.weight'")

        def extra(f):
            f.create_dataset("dense/model.layers.7.extra.weight", data=np.zeros(4, dtype=np.float16))
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "extra.h5"), extra)
        both_refuse(work, "extra.h5", "an extra entry", "is not a tensor of the model")

        def huge_bits(f):
            name = next(k for k in f["linear"])
            f["linear"][name]["codes"].attrs["bits"] = np.int64(2**32 + 4)
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "bits.h5"), huge_bits)
        both_refuse(work, "bits.h5", "bits = 2^32 + 4", "bits is 4294967300")

        # The embedding's row delta: a row index past the vocabulary (its
        # checksum recomputed, so only the reader's own check can catch it)
        # and a row delta without its scales.
        def row_past_the_end(f):
            rows = f["rows/model.embed_tokens.weight/rows"]
            values = rows[:]
            values[-1] = 100000
            del f["rows/model.embed_tokens.weight/rows"]
            d = f.create_dataset("rows/model.embed_tokens.weight/rows", data=values.astype(np.int32))
            d.attrs["fnv1a64"] = np.int64(fnv1a64(values.astype("<i4").tobytes()))
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "row.h5"), row_past_the_end)
        both_refuse(work, "row.h5", "a kept row past the vocabulary", "kept row 100000 outside the tensor")
        copy_unsealed(os.path.join(work, "d.h5"), os.path.join(work, "noscales.h5"),
                      lambda f: f.__delitem__("rows/model.embed_tokens.weight/scales"))
        both_refuse(work, "noscales.h5", "a row delta without scales", "needs 'rows', 'codes' and 'scales'")

        # 3. Low rank: decoded here, independently of the toolkit, against decompress.
        tool("dz-compress", "-q", "compress", "--base", "base", "--target", "tuned", "-o", "lr.h5", "--method", "rtn",
             "--rank", "5", "--bits", "4", "--threads", "1")
        tool("dz-compress", "-q", "decompress", "lr.h5", "--base", "base", "-o", "lr-model")
        base, rebuilt = (read_safetensors(os.path.join(work, d, "model.safetensors")) for d in ("base", "lr-model"))
        with h5py.File(os.path.join(work, "lr.h5"), "r") as f:
            names = []
            f["lowrank"].visit(lambda n: names.append(n[: -len("/up")]) if n.endswith("/up") else None)
            if len(names) < 7:
                fail(f"a --rank container holds {len(names)} low-rank layers")
            for name in names:
                up, down = (decode_packed(f["lowrank"][name][factor]) for factor in ("up", "down"))
                if up.shape[1] != 5 or down.shape[0] != 5:
                    fail(f"{name}: factors {up.shape} x {down.shape}, not of rank 5")
                want = rebuilt[name].astype(np.float64) - base[name]
                got = up.astype(np.float64) @ down
                if not np.allclose(got, want, rtol=1e-4, atol=1e-6):
                    fail(f"{name}: up · down differs from what decompress added by {np.abs(got - want).max()}")

        def broken_chain(f):
            name = []
            f["lowrank"].visit(lambda n: name.append(n) if n.endswith("/up") else None)
            codes = f["lowrank"][name[0]]["codes"]
            codes.attrs["shape"] = np.array([codes.attrs["shape"][0], 4], dtype=np.int64)
        copy_unsealed(os.path.join(work, "lr.h5"), os.path.join(work, "chain.h5"), broken_chain)
        both_refuse(work, "chain.h5", "factors that do not chain", "do not make the model's")

        leftovers = [n for n in os.listdir(work) if n.startswith(".")]
        if leftovers:
            fail(f"left behind: {leftovers}")
    print(f"container files: {FLIPS} flips and {FLIPS} cuts refused, 8 hand-made files refused alike, a low-rank container decoded independently")


if __name__ == "__main__":
    main()
