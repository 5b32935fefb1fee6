# Sourced by the benchmarks that run `orion-run exec` on the stand-in driver
# (tests/orion/fake_cuda), with $build set: the test program and orion-run
# of that build ($app, $orion), quiet logs, and a scratch folder $tmp,
# removed at exit unless KEEP is set.
app="$build/fake-cuda/fake_cuda_app"
orion="$build/bin/orion-run"
[ -x "$app" ] || { echo "no $app: build with the CUDA toolkit's headers present" >&2; exit 2; }
export ORION_QUIET=1
tmp=$(mktemp -d)
if [ -n "${KEEP:-}" ]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
