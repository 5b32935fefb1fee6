#!/bin/bash
# examples/slurm/train.sbatch end to end on this machine, with a stand-in for
# srun (tests/apps/fake-slurm/srun: N local copies with SLURM's variables):
# profile, profile-net, plan, then train with the plan from SLURM_PROCID et al.
# Usage: check_slurm_example.sh BIN_DIR SOURCE_DIR
set -u
bin=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# The batch script serves its rendezvous on port 20000 + SLURM_JOB_ID % 20000.
# A job id whose port is free now and below Linux's ephemeral range (32768
# up), where the free ports other tests running beside this one get from the
# system live: a random id could land on one of theirs and wait out the
# 300 s rendezvous timeout.
free_job_id() {
  python3 - <<'PY'
import random, socket
while True:
    port = random.randint(20001, 32767)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port - 20000)
    break
PY
}
"$bin/sailor-run" -q init --preset tiny -o "$tmp/model" || fail "init"
"$bin/sailor-run" -q make-corpus --task base --lines 500 -o "$tmp/base.txt" || fail "corpus"
(cd "$tmp" && PATH="$src/tests/apps/fake-slurm:$PATH" SLURM_JOB_ID=$(free_job_id) SLURM_NTASKS=2 \
  SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NUM_NODES=1 FLEET_BIN="$bin" MODEL="$tmp/model" DATA="$tmp/base.txt" \
  SEQ_LEN=32 GLOBAL_BATCH=8 STEPS=6 OUT="$tmp/run" bash "$src/examples/slurm/train.sbatch") >"$tmp/log" 2>&1 ||
  fail "the batch script failed: $(tail -20 "$tmp/log")"
for f in inputs/profile.json inputs/model.json inputs/cluster.json plan.json checkpoint/trainer_state.json \
  metrics.jsonl trace.json; do
  [ -s "$tmp/run/$f" ] || fail "no $f"
done
steps=$(wc -l < "$tmp/run/metrics.jsonl")
[ "$steps" -eq 6 ] || fail "metrics has $steps lines, expected 6"
grep -q '"step": 6' "$tmp/run/checkpoint/trainer_state.json" || fail "the checkpoint is not at step 6"
# The planner may use fewer than the 2 tasks on this machine's measured numbers.
ranks=$(python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))
print(sum(len(s["replicas"]) * s["tp"] for s in p["stages"]))' "$tmp/run/plan.json")
[ "$ranks" -ge 1 ] && [ "$ranks" -le 2 ] || fail "the plan uses $ranks ranks of 2"
grep -q "on $ranks rank(s)" "$tmp/log" || fail "training did not run on the plan's $ranks ranks: $(tail -5 "$tmp/log")"

# The same with ELASTIC=1: a controller on the batch host, the tasks register with it.
(cd "$tmp" && PATH="$src/tests/apps/fake-slurm:$PATH" SLURM_JOB_ID=$(free_job_id) SLURM_NTASKS=2 \
  SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NUM_NODES=1 FLEET_BIN="$bin" MODEL="$tmp/model" DATA="$tmp/base.txt" \
  SEQ_LEN=32 GLOBAL_BATCH=8 STEPS=6 OUT="$tmp/elastic" ELASTIC=1 CONTROL_HOST=127.0.0.1 \
  bash "$src/examples/slurm/train.sbatch") >"$tmp/elastic.log" 2>&1 ||
  fail "the elastic batch script failed: $(tail -20 "$tmp/elastic.log")"
steps=$(grep -c '"generation"' "$tmp/elastic/metrics.jsonl")
[ "$steps" -eq 6 ] || fail "elastic: metrics has $steps step lines, expected 6: $(tail -5 "$tmp/elastic.log")"
grep -q '"step": 6' "$tmp/elastic/checkpoint/trainer_state.json" || fail "elastic: the checkpoint is not at step 6"
grep -q "registered with the elastic controller" "$tmp/elastic.log" || fail "elastic: the tasks did not register"
echo OK
