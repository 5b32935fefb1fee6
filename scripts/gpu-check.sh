#!/usr/bin/env bash
# The one check to run on a GPU machine without network access: builds the
# toolkit with CUDA against that machine's PyTorch libtorch, runs the tests
# labelled `gpu`, measures inference against transformers on the same GPU and
# a training step, and writes everything to one report. Only what the GPU
# tests and benchmarks need is built, for the local GPU's architecture only;
# with a tree built elsewhere (FLEET_PREBUILT below) the default sections
# take about 5 minutes on an H200 machine with 16 cores (tests 30 s,
# inference 70 s, training 25 s, kernel pairs 15 s, Orion's PyTorch pair
# 90 s per BE size).
#
#   scripts/gpu-deps.sh             (beforehand, where Debian's mirror is reachable:
#                                    the dependencies a bare machine lacks, in .gpu-deps/)
#   scripts/gpu-check.sh            on the GPU machine; report in $OUT (or gpu-check-out/), with
#                                   orion-data.tar.gz (Orion's captured profiles and raw results)
#
#   FLEET_TORCH_PREFIX=DIR          libtorch's CMake prefix (default: from python3's torch)
#   FLEET_GPU_ARCH=9.0              TORCH_CUDA_ARCH_LIST (default: the GPU's, from nvidia-smi)
#   scripts/gpu-check.sh serving    instead of the checks above: dz-serve's delta mode against
#                                   swap mode on the GPU (about 6 minutes: making the 8 variants
#                                   took 5 minutes two at a time on an H200 machine, now four;
#                                   a second call on the warm machine, which keeps build-gpu/)
#   scripts/gpu-check.sh SECTION... only these of: tests inference training orion-pairs
#                                   orion-exec orion-overhead serving (no argument: all but
#                                   serving; orion-overhead is part of orion-exec)
#   FLEET_PREBUILT=DIR              skip configure and build: DIR is a tree made by
#                                   scripts/gpu-prebuild.sh on another machine against the same
#                                   PyTorch wheel (same torch and CUDA version); its CTest files
#                                   are pointed at where it and the sources now are
# Users building for their cluster follow docs/gpu.md instead.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# What the checks run (scripts/gpu-prebuild.sh builds the same list).
gpu_targets=(test_devices_gpu test_model_gpu test_sailor_training_gpu test_deltazip_gpu test_deltazip_serving_gpu
             sailor-run dz-compress dz-serve bench_model_inference bench_dz_serve orion-run orion-profile orion_client orion_capture
             orion_static_cudart_app)
if [ "${1:-}" = targets ]; then echo "${gpu_targets[*]}"; exit 0; fi
all_sections=(tests inference training orion-pairs orion-exec orion-overhead serving)
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(tests inference training orion-pairs orion-exec)
for s in "${sections[@]}"; do
  [[ " ${all_sections[*]} " == *" $s "* ]] || { echo "gpu-check: unknown section '$s' (${all_sections[*]})" >&2; exit 2; }
done
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
report="$out/gpu-check-report.txt"
exec > >(tee "$report") 2>&1
build="$root/build-gpu"
started=$(date +%s)
failures=()
jobs=$(nproc)
section() { printf '\n== %s (%ds)\n' "$*" $(( $(date +%s) - started )); }
fail() { echo "FAILED: $*"; failures+=("$*"); }

section "machine"
date -u
uname -srm
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || fail "nvidia-smi"
nvcc --version | tail -n 1 || fail "no nvcc"
cmake --version | head -n 1 || { fail "no cmake"; exit 1; }
python=$(command -v python3)
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' ||
  fail "python3 has no torch"

section "dependencies"
deps="$root/.gpu-deps/root"
prefixes=()
runtime_libs=""
cmake_deps=()
if [ -d "$deps" ]; then
  echo "using the prepared prefix $deps"
  multiarch="$deps/usr/lib/x86_64-linux-gnu"
  prefixes+=("$deps/usr")
  runtime_libs="$multiarch:$multiarch/hdf5/serial"
  # pkg-config from the prefix, looking only there; HDF5 by path (its h5cc
  # wrapper names Debian's own folders).
  mkdir -p "$build/bin-shims"
  ln -sf "$deps/usr/bin/pkgconf" "$build/bin-shims/pkg-config"
  export PATH="$build/bin-shims:$PATH"
  export PKG_CONFIG_LIBDIR="$multiarch/pkgconfig:$deps/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$deps"
  export LD_LIBRARY_PATH="$runtime_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_deps=(-DFLEET_HDF5_INCLUDE_DIR="$deps/usr/include/hdf5/serial"
              -DFLEET_HDF5_LIBRARY="$multiarch/libhdf5_serial.so")
else
  echo "no .gpu-deps/: using the machine's own packages"
fi

if [ -n "${FLEET_PREBUILT:-}" ]; then
  section "prebuilt tree"
  build=$(cd "$FLEET_PREBUILT" && pwd) || { fail "no prebuilt tree $FLEET_PREBUILT"; exit 1; }
  # Its programs were linked against the wheel's libtorch elsewhere: here they
  # take this Python's torch and the CUDA libraries pip installed beside it.
  torch_libs=$("$python" -c 'import glob, os, torch
root = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([os.path.join(root, "torch", "lib")] + sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))))') ||
    { fail "no torch to run the prebuilt tree with"; exit 1; }
  export LD_LIBRARY_PATH="$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CTest files name the folders the tree was built from; point them here.
  [ -f "$build/prebuilt.env" ] || { fail "$build has no prebuilt.env (not made by scripts/gpu-prebuild.sh)"; exit 1; }
  built_source=$(sed -n 's/^source=//p' "$build/prebuilt.env")
  built_tree=$(sed -n 's/^build=//p' "$build/prebuilt.env")
  # (Through markers, so neither new path is rewritten again by the other rule.)
  find "$build" -name '*.cmake' -exec sed -i -e "s|$built_tree|@FLEET_TREE@|g" -e "s|$built_source|@FLEET_SOURCE@|g" \
    -e "s|@FLEET_TREE@|$build|g" -e "s|@FLEET_SOURCE@|$root|g" {} +
  printf 'source=%s\nbuild=%s\n' "$root" "$build" > "$build/prebuilt.env"  # where they point now
  echo "$build, built in $built_tree (libraries: $torch_libs)"
else
  section "configure"
  torch=${FLEET_TORCH_PREFIX:-$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
  [ -n "$torch" ] || { fail "no libtorch prefix"; exit 1; }
  arch=${FLEET_GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)}
  arch=${arch:-9.0}
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  prefix_path="$torch;$torch/../.."
  for p in "${prefixes[@]}"; do prefix_path+=";$p"; done
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DWITH_CUDA=ON -DFLEET_CCACHE=OFF \
    "-DCMAKE_PREFIX_PATH=$prefix_path" "-DTORCH_CUDA_ARCH_LIST=$arch" "-DCMAKE_CUDA_ARCHITECTURES=${arch/./}" \
    -DFLEET_PYTHON="$python" "${cmake_deps[@]}" ${FLEET_CMAKE_ARGS:-} || { fail "configure"; exit 1; }

  section "build (GPU tests, tools, benchmarks)"
  cmake --build "$build" -j "$jobs" --target "${gpu_targets[@]}" || { fail "build"; exit 1; }
fi
"$build/bin/sailor-run" --version

if want tests; then
section "tests labelled gpu"
(cd "$build" && ctest -L gpu --output-on-failure --timeout 300) | tee "$out/gpu-tests.txt" || fail "gpu tests"
# On a machine with a GPU, a skipped GPU test is a failure of the check.
if nvidia-smi >/dev/null 2>&1 && grep -q "Skipped" "$out/gpu-tests.txt"; then fail "gpu tests skipped on a GPU machine"; fi
fi

if want inference; then
section "inference: lib/model against transformers on the same GPU (bfloat16)"
if "$python" -c 'import transformers' 2>/dev/null; then
  FLEET_PYTHON="$python" DEVICE=cuda THREADS=$jobs scripts/bench/model/model_inference.sh "$build" || fail "inference benchmark"
else
  echo "transformers is not importable here: lib/model alone"
  tmp=$(mktemp -d)
  if "$build/bin/sailor-run" -q init --preset 100m -o "$tmp/100m"; then
    for shape in "1 128 32" "8 128 32"; do
      set -- $shape
      result=$("$build/bin/bench_model_inference" "$tmp/100m" "$1" "$2" "$3" "$jobs" 3 cuda 2>"$tmp/err") ||
        { fail "inference benchmark: $(head -n 1 "$tmp/err")"; break; }
      echo "100m $1 x $2 + $3: $result"
    done
  else
    fail "init for the inference benchmark"
  fi
  rm -rf "$tmp"
fi
fi

if want training; then
section "training steps on the GPU (100m preset, float32 weights, bfloat16 autocast)"
tmp=$(mktemp -d)
if "$build/bin/sailor-run" -q init --preset 100m -o "$tmp/init" &&
   "$build/bin/sailor-run" -q make-corpus --task base --lines 20000 -o "$tmp/base.txt"; then
  for device in cuda cpu; do
    steps=$([ "$device" = cuda ] && echo 40 || echo 4)
    "$build/bin/sailor-run" -q train --model "$tmp/init" --data "$tmp/base.txt" -o "$tmp/run-$device" --steps "$steps" \
      --batch-size 8 --seq-len 256 --lr 1e-3 --warmup 2 --device "$device" --threads "$jobs" --json \
      --metrics "$tmp/$device.jsonl" >"$tmp/$device.json" || fail "training on $device"
    "$python" - "$device" "$tmp/$device.json" "$tmp/$device.jsonl" <<'PY' || fail "training result on $device"
import json, sys
r = json.load(open(sys.argv[2]))
print("%s: loss %.3f -> %.3f in %d steps, %.0f tokens/s"
      % (sys.argv[1], r["first_loss"], r["last_loss"], r["last_step"], r["tokens_per_second"]))
steps = [json.loads(l) for l in open(sys.argv[3])]
measured = [s["energy_j"] for s in steps if s.get("energy_source") == "nvml"]
if sys.argv[1] == "cuda":
    # NVML's counter: every step on the GPU has a positive measured energy.
    assert len(measured) == len(steps) and all(e > 0 for e in measured), steps[:2]
    later = measured[len(measured) // 2:]
    print("cuda: measured GPU energy %.1f J per step (median of the second half), %.0f W"
          % (sorted(later)[len(later) // 2], sum(later) / sum(s["step_s"] for s in steps[len(steps) - len(later):])))
PY
  done
  section "per-layer times on the GPU for sailor-plan (the profile subcommand)"
  "$build/bin/sailor-run" profile --model "$tmp/init" --gpu-type H200 --mbs 1,4 --seq-len 512 --device cuda \
    --threads "$jobs" -o "$tmp/profile.json" || fail "profile on cuda"
fi
rm -rf "$tmp"
fi

if want orion-pairs || want orion-exec; then
  # The simulator's model of this GPU, from its name.
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)" in
    *H200*) orion_device=h200 ;; *H100*) orion_device=h100 ;; *A100*80GB*) orion_device=a100-80 ;;
    *A100*) orion_device=a100-40 ;; *V100*) orion_device=v100-16 ;;
    *) orion_device=h200; echo "no simulator model of this GPU: simulating an H200" ;;
  esac
fi

if want orion-pairs; then
section "orion: kernel pairs measured against the simulator (conv / batch norm, alone, sequential, together)"
KEEP="$out/orion-data/pairs" ORION_DEVICE="$orion_device" scripts/bench/orion/orion_pairs.sh "$build" "$python" ||
  fail "orion kernel pairs"
# The contention constants fitted to Orion's V100 pairs and these, each pair also predicted left out.
python3 scripts/orion_contention_fit.py "$build/bin/orion-run" "$out/orion-data/pairs:$orion_device" \
  --write "$out/orion-data/contention-fit.json" || fail "orion contention fit"
fi

if want orion-exec || want orion-overhead; then
  section "orion: what the interposer and the scheduler add to the PyTorch inference client alone"
  # VARIANT_LIBRARIES="NAME=FILE ...": also other interposer builds (see the script).
  HP_REQUESTS=2000 scripts/bench/orion/orion_hp_overhead.sh "$build" "$python" || fail "orion HP overhead"
fi
if want orion-exec; then
section "orion: PyTorch inference (HP) beside training (BE), alone / orion / mps, and the simulator on the same"
# Two BE jobs: batch 512, whose 1.4 ms matrix products outlast an HP request
# (no policy that cannot preempt a kernel keeps the HP tail then), and batch
# 64, whose 0.2 ms products do not (the regime of Orion's paper).
for be_batch in 512 64; do
  echo "-- BE batch $be_batch"
  HP_REQUESTS=2000 BE_SECONDS=20 BE_BATCH=$be_batch KEEP="$out/orion-data/exec-be$be_batch" ORION_DEVICE=$orion_device \
    scripts/bench/orion/orion_gpu.sh "$build" "$python" ||
    fail "orion on the GPU (BE batch $be_batch)"
done
fi
# The captured profiles and raw results, for the simulator off the GPU machine.
if [ -d "$out/orion-data" ]; then
  tar -C "$out" -czf "$out/orion-data.tar.gz" orion-data && rm -rf "$out/orion-data"
fi

if want serving; then
  section "dz-serve on the GPU: delta mode against swap mode, 8 fine-tunes of the 100m preset (Zipf 1.0)"
  tmp=$(mktemp -d)
  # Swap mode saturated below 1 request/s when it rebuilt on the host (80 requests, about 100 s
  # to drain); it now rebuilds on the GPU.
  BIN="$build/bin" DEVICE=cuda VARIANTS=8 PARALLEL=4 MODES="delta swap" RATES8="8" DURATION=10 SKIP_KERNELS=1 \
    THREADS="$jobs" FLEET_PYTHON="$python" timeout 480 scripts/bench/deltazip/dz_serve.sh "$tmp" || fail "dz-serve on the GPU"
  # The raw results (JSON lines, memory figures, server logs) beside the report; the models stay behind.
  mkdir -p "$out/serving" && cp "$tmp"/results/*.jsonl "$tmp"/results/*.txt "$tmp"/results/*.log "$out/serving/" 2>/dev/null
  rm -rf "$tmp"
fi

section "summary"
if [ ${#failures[@]} -eq 0 ]; then
  echo "gpu-check: all passed in $(( $(date +%s) - started )) s; report: $report"
else
  echo "gpu-check: ${#failures[@]} failed: ${failures[*]}"
  exit 1
fi
