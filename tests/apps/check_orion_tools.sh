#!/usr/bin/env bash
# Usage: check_orion_tools.sh BIN_DIR SOURCE_DIR — orion-profile and orion-run
# end to end on the examples: outputs, exit codes, and bad input that leaves
# earlier outputs untouched.
set -u
bin=$1 src=$2
ex="$src/examples/orion"
source "$(dirname "$0")/testlib.sh"

# summarize: Orion's own profile, text and JSON.
expect_rc 0 "$bin/orion-profile" summarize "$ex/profiles/resnet50_4_fwd.csv"
grep -q "^kernels: *175$" "$tmp/out" || fail "summarize kernel count: $(cat "$tmp/out")"
expect_rc 0 "$bin/orion-profile" summarize --json "$ex/profiles/resnet50_4_fwd.csv"
grep -q '"kernels": 175' "$tmp/out" || fail "summarize --json"

# Every profile of Orion's in the examples: kernel count, time and the time per class
# equal an independent count of the CSV (Python's csv module; Profile 1 compute,
# 0 memory, anything else unknown).
for profile in "$ex"/profiles/*.csv; do
  expect_rc 0 "$bin/orion-profile" summarize --json "$profile"
  /usr/bin/python3 - "$profile" "$tmp/out" <<'PY' || fail "summarize disagrees with an independent count of $profile"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ours = json.load(open(sys.argv[2]))
ns = {"compute": 0, "memory": 0, "unknown": 0}
for r in rows:
    ns[{"1": "compute", "0": "memory"}.get(r["Profile"], "unknown")] += int(r["Duration"])
ok = ours["kernels"] == len(rows) and abs(ours["total_ms"] - sum(ns.values()) / 1e6) < 1e-9
ok = ok and all(abs(ours["classes"][k]["ms"] - v / 1e6) < 1e-9 for k, v in ns.items())
if not ok:
    print(len(rows), sum(ns.values()), ns, ours["kernels"], ours["total_ms"], ours["classes"])
sys.exit(0 if ok else 1)
PY
done

# import-ncu: both pages, then the result reads back.
expect_rc 0 "$bin/orion-profile" import-ncu "$ex/ncu_sample_raw.csv" --device a100-40 -o "$tmp/raw.csv"
expect_rc 0 "$bin/orion-profile" summarize "$tmp/raw.csv"
grep -q "^kernels: *2$" "$tmp/out" || fail "imported raw page"
grep -q "^measured on: a100-40$" "$tmp/out" || fail "the imported profile's GPU: $(cat "$tmp/out")"
# Its durations hold on that GPU only: a workload or exec run on another is refused.
cat >"$tmp/elsewhere.json" <<EOF
{"format": "gpufleet-orion-workload", "version": 1, "device": "h100", "clients": [
 {"name": "hp", "profile": "$tmp/raw.csv", "priority": "high", "kind": "inference",
  "arrivals": {"type": "closed"}, "requests": 20}]}
EOF
expect_rc 2 "$bin/orion-run" simulate -w "$tmp/elsewhere.json"
grep -q "raw.csv was measured on a100-40, not on h100" "$tmp/err" || fail "device mismatch: $(cat "$tmp/err")"
expect_rc 2 "$bin/orion-run" exec --hp "touch $tmp/ran" --profiles "$tmp/raw.csv"
grep -q "raw.csv was measured on a100-40, not on h200" "$tmp/err" || fail "exec device mismatch: $(cat "$tmp/err")"
[ ! -e "$tmp/ran" ] || fail "exec ran the command with a profile of another GPU"
sed -i 's/"device": "h100"/"device": "a100"/' "$tmp/elsewhere.json"
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/elsewhere.json" -p dedicated
expect_rc 0 "$bin/orion-profile" import-ncu "$ex/ncu_sample_details.csv" --device v100 -o "$tmp/details.csv"
head -n2 "$tmp/details.csv" | tail -n1 | grep -q "^conv_kernel,1,0,54,1250000," || fail "details import row: $(head -n2 "$tmp/details.csv")"

# Bad input: one error line, exit 2, the earlier output untouched.
cp "$tmp/raw.csv" "$tmp/raw.before"
printf 'ID,Kernel Name,Metric Name,Metric Unit,Metric Value\n0,k,Duration,fortnight,3\n' > "$tmp/bad.csv"
expect_rc 2 "$bin/orion-profile" import-ncu "$tmp/bad.csv" --device a100-40 -o "$tmp/raw.csv"
grep -q "^orion-profile: error: .*unknown unit 'fortnight'" "$tmp/err" || fail "bad unit message: $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "more than one error line: $(cat "$tmp/err")"
cmp -s "$tmp/raw.csv" "$tmp/raw.before" || fail "a failed import changed the earlier output"
expect_rc 2 "$bin/orion-profile" import-ncu "$ex/ncu_sample_raw.csv" --device tpu -o "$tmp/x.csv"
grep -q "unknown device 'tpu'" "$tmp/err" || fail "unknown device message"
expect_rc 2 "$bin/orion-profile" summarize "$tmp/absent.csv"

# simulate: one policy with every output, then the whole table as JSON.
expect_rc 0 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p orion --requests 150 \
  --trace "$tmp/trace.json" --csv "$tmp/table.csv" --latencies "$tmp/lat.csv"
grep -q "^orion " "$tmp/out" || fail "simulate table: $(cat "$tmp/out")"
head -c 15 "$tmp/trace.json" | grep -q '{"displayTimeU\|{"traceEvents"' || fail "trace is not a trace"
[ "$(wc -l < "$tmp/table.csv")" -eq 5 ] || fail "comparison CSV rows: $(cat "$tmp/table.csv")"
grep -q "^orion,resnet50-inf-b4,high,inference," "$tmp/table.csv" || fail "comparison CSV content"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  expect_rc 0 "$src/scripts/plot/orion_results.py" --table "$tmp/table.csv" --latencies "$tmp/lat.csv" -o "$tmp/plot.png"
  head -c 8 "$tmp/plot.png" | grep -q "PNG" || fail "plot is not a PNG"
  expect_rc 1 "$src/scripts/plot/orion_results.py" --table "$tmp/lat.csv" --latencies "$tmp/lat.csv" -o "$tmp/p2.png"
fi
# The trade-off report: one row per policy, orion's verdict line, and its plot.
expect_rc 0 /usr/bin/python3 "$src/scripts/bench/orion/orion_tradeoff.py" "$bin/orion-run" --requests 300 \
  --csv "$tmp/tradeoff.csv" "$ex/fig7_rnet_rnet.json"
grep -q "^  orion: HP p99 [0-9.]*x (bound 1.2x); MPS HP [0-9.]*x; BE +[0-9.]* over temporal" "$tmp/out" ||
  fail "trade-off report: $(cat "$tmp/out")"
[ "$(wc -l < "$tmp/tradeoff.csv")" -eq 6 ] || fail "trade-off CSV: $(cat "$tmp/tradeoff.csv")"
awk -F, '$2 == "temporal" && $7 + 0 != 0 { bad = 1 } $2 == "orion" && !($7 > 0.1) { bad = 1 } END { exit bad }' \
  "$tmp/tradeoff.csv" || fail "co-run fractions in the trade-off CSV: $(cat "$tmp/tradeoff.csv")"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  expect_rc 0 "$src/scripts/plot/orion_tradeoff.py" "$tmp/tradeoff.csv" -o "$tmp/tradeoff.png"
  head -c 8 "$tmp/tradeoff.png" | grep -q "PNG" || fail "trade-off plot is not a PNG"
  expect_rc 1 "$src/scripts/plot/orion_tradeoff.py" "$tmp/lat.csv" -o "$tmp/t2.png"
fi
# Without the bounded wait (--max-be-wait 0), an HP client in a closed loop
# without gaps starves the BE job under temporal sharing: no latencies and no
# ratios in its row (empty in the CSV), which the plot must take as well.
cat >"$tmp/closed.json" <<EOF
{"format": "gpufleet-orion-workload", "version": 1, "device": "h100", "seed": 3, "clients": [
 {"name": "be", "profile": "$ex/profiles/resnet50_32_fb1.csv", "priority": "best-effort", "kind": "training",
  "arrivals": {"type": "closed"}, "warmup": 1},
 {"name": "hp", "profile": "$ex/profiles/mobilenetv2_4_fwd.csv", "priority": "high", "kind": "inference",
  "arrivals": {"type": "closed"}, "requests": 150, "warmup": 5}]}
EOF
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/closed.json" -p temporal --max-be-wait 0 --csv "$tmp/closed.csv" \
  --latencies "$tmp/closed-lat.csv"
grep -q "^temporal,be,best-effort,training,0,,,,,0,,,.*,starved," "$tmp/closed.csv" ||
  fail "a starved client has empty latencies and ratios: $(cat "$tmp/closed.csv")"
grep -q "^temporal  *be  *BE  *0  *-  *-  *-  *starved" "$tmp/out" || fail "starved row in the table: $(cat "$tmp/out")"
# With it (default 100 ms), the waiting BE iteration has the GPU at the next boundary.
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/closed.json" -p temporal --csv "$tmp/fed.csv"
awk -F, '$1 == "temporal" && $2 == "be" && ($15 == "starved" || $10 < 1) { bad = 1 } END { exit bad }' "$tmp/fed.csv" ||
  fail "the BE job beside a closed-loop HP client under temporal sharing: $(cat "$tmp/fed.csv")"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  expect_rc 0 "$src/scripts/plot/orion_results.py" --table "$tmp/closed.csv" --latencies "$tmp/closed-lat.csv" \
    -o "$tmp/closed.png"
fi
# --hp-limit below what the HP training job takes alone: said, and the search goes to 0.
cat >"$tmp/hp-train.json" <<EOF
{"format": "gpufleet-orion-workload", "version": 1, "device": "v100", "clients": [
 {"name": "hp-train", "profile": "$ex/profiles/mobilenetv2_64_fb1.csv", "priority": "high", "kind": "training",
  "arrivals": {"type": "closed"}, "requests": 200, "warmup": 2},
 {"name": "be-train", "profile": "$ex/profiles/resnet50_32_fb1.csv", "priority": "best-effort", "kind": "training",
  "arrivals": {"type": "closed"}}]}
EOF
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/hp-train.json" -p orion --hp-limit 50
grep -q "warning: --hp-limit 50 ms is below the iteration time of 'hp-train' alone (75.24 ms)" "$tmp/err" ||
  fail "infeasible --hp-limit: $(cat "$tmp/err")"
grep -q "^orion: .*SM threshold 0 after" "$tmp/out" || fail "infeasible --hp-limit search: $(cat "$tmp/out")"
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/hp-train.json" -p orion --hp-limit 90
grep -q "warning" "$tmp/err" && fail "a feasible --hp-limit warned: $(cat "$tmp/err")"
expect_rc 0 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p all --requests 100 --json
grep -q '"policy": "mps"' "$tmp/out" || fail "--policy all --json lacks mps"
grep -q '"policy": "tick-tock"' "$tmp/out" && fail "tick-tock listed for an inference workload"
# Every one of Orion's figure configs in the examples (the HP client alone
# has no one to protect). Under the sanitizers (FLEET_SANITIZED, set by the
# build), where the simulator runs 50-100 times slower, 8 requests each: the
# same code, a tenth of the time.
fig_requests=40
[ -n "${FLEET_SANITIZED:-}" ] && fig_requests=8
for config in "$ex"/fig7_*.json "$ex"/fig10_*.json; do
  case $config in *_ideal_*) continue ;; esac
  expect_rc 0 "$bin/orion-run" simulate -w "$config" --profiles "$ex/profiles" -p orion --requests $fig_requests
done
# A list of policies: one table, dedicated first, then in the order given.
expect_rc 0 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p mps,temporal --requests 60 --csv "$tmp/list.csv"
[ "$(cut -d, -f1 "$tmp/list.csv" | sed 1d | uniq | tr '\n' ' ')" = "dedicated mps temporal " ] ||
  fail "policy list rows: $(cut -d, -f1 "$tmp/list.csv" | uniq | tr '\n' ' ')"
expect_rc 2 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p mps,mps
grep -q "'mps' is listed twice" "$tmp/err" || fail "repeated policy: $(cat "$tmp/err")"
# --launch-overhead-us: the workload's own value (4 us) gives the same table; at 40 us a
# ResNet50 request (175 kernels) is launch-bound, 7 ms at least; a negative value is refused.
expect_rc 0 "$bin/orion-run" -q simulate -w "$ex/rnet50_inf_train.json" -p dedicated --requests 80
cp "$tmp/out" "$tmp/own-launch.txt"
expect_rc 0 "$bin/orion-run" -q simulate -w "$ex/rnet50_inf_train.json" -p dedicated --requests 80 --launch-overhead-us 4
cmp -s "$tmp/out" "$tmp/own-launch.txt" || fail "--launch-overhead-us at the workload's value changes the results"
expect_rc 0 "$bin/orion-run" -q simulate -w "$ex/rnet50_inf_train.json" -p dedicated --requests 80 \
  --launch-overhead-us 40 --csv "$tmp/launch.csv" --json
grep -q '"launch_overhead_us": 40' "$tmp/out" || fail "--json lacks the launch overhead: $(head -c 300 "$tmp/out")"
awk -F, '$3 == "high" && $6 < 7.0 { bad = 1 } END { exit bad }' "$tmp/launch.csv" ||
  fail "40 us per launch did not make the HP request launch-bound: $(cat "$tmp/launch.csv")"
# It also replaces a client's own value: the HP client at 100 us per launch is launch-bound
# (17.5 ms a request) until the flag sets 4 us.
sed 's/"priority": "high",/"priority": "high", "launch_overhead_us": 100,/' "$ex/rnet50_inf_train.json" > "$tmp/own.json"
expect_rc 0 "$bin/orion-run" -q simulate -w "$tmp/own.json" --profiles "$ex/profiles" -p dedicated --requests 80 --csv "$tmp/own.csv"
awk -F, '$3 == "high" && $6 < 17.5 { bad = 1 } END { exit bad }' "$tmp/own.csv" ||
  fail "a client's own launch overhead was not used: $(cat "$tmp/own.csv")"
expect_rc 0 "$bin/orion-run" -q simulate -w "$tmp/own.json" --profiles "$ex/profiles" -p dedicated --requests 80 \
  --launch-overhead-us 4
cmp -s "$tmp/out" "$tmp/own-launch.txt" || fail "--launch-overhead-us did not replace a client's own value"
expect_rc 2 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" --launch-overhead-us -1
grep -q "launch-overhead-us" "$tmp/err" || fail "negative launch overhead: $(cat "$tmp/err")"

# An open-loop server is compared with its run alone on the same arrivals over the same
# window: its dedicated run goes on past the shared window (1.11x its dedicated throughput
# when that run stopped too early). At 1000 requests/s of 6.5 ms it is overloaded even alone:
# warned, its p99 ratio withheld, its offered load in the CSV.
cat >"$tmp/server.json" <<EOF
{"format": "gpufleet-orion-workload", "version": 1, "device": "v100", "seed": 17, "clients": [
 {"name": "hp", "profile": "$ex/profiles/mobilenetv2_4_fwd.csv", "priority": "high", "kind": "inference",
  "arrivals": {"type": "closed"}, "requests": 30},
 {"name": "server", "profile": "$ex/profiles/resnet50_4_fwd.csv", "priority": "best-effort", "kind": "inference",
  "arrivals": {"type": "poisson", "rate": 100}}]}
EOF
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/server.json" -p mps,streams --csv "$tmp/server.csv"
head -1 "$tmp/server.csv" | grep -q ",completed_in_window,offered_load,in_flight_at_window_end,hp_corun_fraction$" ||
  fail "CSV header: $(head -1 "$tmp/server.csv")"
awk -F, 'NR > 1 && $20 !~ /^[0-9]+$/ { bad = 1 } END { exit bad }' "$tmp/server.csv" ||
  fail "in_flight_at_window_end is not a count: $(cat "$tmp/server.csv")"
# The co-run fraction: the HP rows of shared runs only, a fraction; mps runs
# the server beside every HP request.
awk -F, 'NR == 1 { next }
         $3 == "high" && $1 != "dedicated" && ($21 == "" || $21 < 0 || $21 > 1) { bad = 1 }
         ($3 != "high" || $1 == "dedicated") && $21 != "" { bad = 1 }
         $1 == "mps" && $3 == "high" && $21 < 0.5 { bad = 1 } END { exit bad }' "$tmp/server.csv" ||
  fail "hp_corun_fraction: $(cat "$tmp/server.csv")"
awk -F, '$2 == "server" && $1 != "dedicated" && ($15 != "ok" || $12 > 1.0) { bad = 1 } END { exit bad }' "$tmp/server.csv" ||
  fail "the server beside the HP client above its dedicated throughput: $(cat "$tmp/server.csv")"
sed 's/"rate": 100/"rate": 1000/; s/"requests": 30}/"requests": 300}/' "$tmp/server.json" > "$tmp/overloaded.json"
expect_rc 0 "$bin/orion-run" simulate -w "$tmp/overloaded.json" -p mps --csv "$tmp/overloaded.csv"
grep -q "warning: 'server' is overloaded even alone" "$tmp/err" || fail "no overload warning: $(cat "$tmp/err")"
grep -q "^mps  *server  *BE .* overload " "$tmp/out" || fail "overloaded row in the table: $(cat "$tmp/out")"
awk -F, '$2 == "server" && ($15 != "overloaded" || $11 != "" || $12 == "" || $19 < 5) { bad = 1 } END { exit bad }' \
  "$tmp/overloaded.csv" || fail "overloaded rows in the CSV: $(cat "$tmp/overloaded.csv")"

expect_rc 2 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p fifo
grep -q "^orion-run: error: unknown policy 'fifo'" "$tmp/err" || fail "unknown policy message"
echo '{"format": "gpufleet-orion-workload", "version": 1, "device": "v100", "clients": [' > "$tmp/bad.json"
expect_rc 2 "$bin/orion-run" simulate -w "$tmp/bad.json"
grep -q "malformed JSON" "$tmp/err" || fail "malformed workload message: $(cat "$tmp/err")"
expect_rc 2 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" -p tick-tock
# A contention model: the built-in one as a file gives the same table; a bad value is refused.
expect_rc 0 "$bin/orion-run" -q simulate -w "$ex/rnet50_inf_train.json" -p mps --requests 80
cp "$tmp/out" "$tmp/builtin.txt"
expect_rc 0 "$bin/orion-run" -q simulate -w "$ex/rnet50_inf_train.json" -p mps --requests 80 \
  --contention "$ex/contention-v100.json"
cmp -s "$tmp/out" "$tmp/builtin.txt" || fail "the built-in contention model as a file changes the results"
echo '{"format": "gpufleet-orion-contention", "version": 1, "memory_use": {"memory": 1.5}}' > "$tmp/c.json"
expect_rc 2 "$bin/orion-run" simulate -w "$ex/rnet50_inf_train.json" --contention "$tmp/c.json"
grep -q "/memory_use/memory: must be between 0 and 1" "$tmp/err" || fail "bad contention message: $(cat "$tmp/err")"
expect_rc 2 "$bin/orion-run" simulate
echo "ok: orion-profile and orion-run"
