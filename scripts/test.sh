#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs every CPU test with
# CTest (the kernel and serving tests also with the CPU kernels capped at
# AVX2 and at portable code), then the tests of everything that builds
# without libtorch (common, orion, the programs, interop, tokenizers) again
# under AddressSanitizer + UBSan (less three long simulator runs), and the
# process tests (label "load": signals, launchers, servers, supervisors)
# once more with every core kept busy by other processes, as on a loaded CI
# machine.
# Exits non-zero on any failure.
#
#   scripts/test.sh                 everything
#   FLEET_BUILD_DIR=dir             build folder (default build)
#   FLEET_SKIP_SANITIZERS=1         skip the ASan/UBSan pass
#   FLEET_SKIP_LOAD=1               skip the process tests run with every core kept busy
#   FLEET_JOBS=N                    parallel build jobs (default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${FLEET_BUILD_DIR:-build}
jobs=${FLEET_JOBS:-2}
# Each phase's heading says how long the script has run, so a slow CI run
# shows where its time went.
phase() { echo "== $* (at $((SECONDS / 60)) min $((SECONDS % 60)) s)"; }

scripts/install-deps.sh

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

phase "configure ($build)"
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake -S . -B "$build" >/dev/null
phase build
cmake --build "$build" -j "$jobs"
phase test
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600)
# Results of the CPU kernels depend on the vector width (summation order, and
# which product path a batch takes), so the kernel and serving tests run again
# with the kernels capped as on CPUs without AVX-512 or AVX2.
# OpenBLAS picks its kernels itself: with AVX2 it also runs its AVX2 ones
# (Haswell's), as on such a CPU, which moves the small-batch row limit.
blas_avx2=()
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then blas_avx2=(OPENBLAS_CORETYPE=Haswell); fi
for isa in avx2 portable; do
  blas=()
  [ "$isa" = avx2 ] && blas=("${blas_avx2[@]}")
  phase "kernel and serving tests with GPUFLEET_CPU_ISA=$isa ${blas[*]}"
  (cd "$build" && env "${blas[@]}" GPUFLEET_CPU_ISA=$isa ctest --output-on-failure -j "$jobs" --timeout 600 -LE gpu \
      -R '^(Serving|ServingModes|Sbmm|SmallBatchLinear|Llama|CpuIsa)\.')
done

if [ "${FLEET_SKIP_LOAD:-0}" != 1 ]; then
  # A busy loop per core: the tests must wait for states, never for times.
  cores=$(nproc 2>/dev/null || echo 2)
  phase "process tests with all $cores cores kept busy by other processes"
  busy=()
  for _ in $(seq "$cores"); do
    (trap - INT TERM; while :; do :; done) &
    busy+=($!)
  done
  trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
  (cd "$build" && ctest --output-on-failure -j 1 --timeout 1800 -L load)
  kill "${busy[@]}" 2>/dev/null || true
  trap - EXIT
fi

if [ "${FLEET_SKIP_SANITIZERS:-0}" != 1 ]; then
  san="$build-asan"
  phase "AddressSanitizer + UBSan: tests without libtorch ($san)"
  [ -f "$san/CMakeCache.txt" ] || cmake -S . -B "$san" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
      -DSANITIZE=address,undefined -DWITH_TORCH=OFF -DWITH_CUDA=OFF
  cmake --build "$san" -j "$jobs"
  phase "AddressSanitizer + UBSan: run"
  # Left out: three simulator tests that check the policies' numeric targets
  # on long runs (50-100 times slower unoptimised and instrumented, 9 minutes
  # of the pass); the shorter simulator tests run the same code.
  # allocator_may_return_null: a damaged HDF5 file can make libhdf5 ask for
  # an impossible size (exabytes); malloc then fails, as it does without
  # ASan, and the library reports an error, which the container fuzz tests
  # expect, instead of ASan aborting the process.
  (cd "$san" && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j "$jobs" -L 'common|orion|apps|interop|tokenizer|model_core|deltazip' \
        -E '^Simulator\.(OrionMeetsItsTargetOnTheReferenceWorkload|OrionsSlowdownLimitTradesTheHpTailForBestEffortWork)$|^SimulatorOutcomes\.OrionTunesTheSmThresholdOfATrainingHpClientOnline$')
fi
phase "all tests passed"
