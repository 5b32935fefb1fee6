"""sailor-run launch --elastic --recovery restart: a job that loses workers
re-plans for the ones left and continues from its checkpoint.

Usage: check_sailor_run_elastic.py BIN_DIR

Real worker processes on loopback, one CPU thread each; the planner's inputs
are measured here (sailor-run profile, profile-net). Training is layout-
independent, so every run's per-step losses must equal an uninterrupted
run's within 1e-5 relative:
- kill -9 one of 4 workers (DP=2 x PP=2) after step 3 of 10: the job
  finishes all 10 steps on the plan made for the 3 left (which may use
  fewer than 3), at most two steps are redone, the reconfiguration is in
  the metrics with its cause, plans and phase times;
- SIGTERM to one worker: it leaves at the step boundary, nothing is redone;
- the last worker lost: exit 3, the checkpoint kept, resumable;
- bad elastic invocations: one clear error.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.argv[1])
RUN = str(BIN / "sailor-run")
failures = []
COMMON = ["--seq-len", "32", "--lr", "3e-3", "--warmup", "1", "--adam-eps", "1e-6", "--threads", "1",
          "--log-every", "0", "--steps", "10"]


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failures.append(message)


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def records(path):
    lines = [json.loads(l) for l in Path(path).read_text().splitlines()] if Path(path).exists() else []
    steps = [l for l in lines if "event" not in l]
    events = [l for l in lines if l.get("event") == "reconfiguration"]
    return steps, events


def worker_pids(output):
    """pids of the `train` workers writing to `output`."""
    r = subprocess.run(["pgrep", "-f", f"sailor-run train .*-o {output} "], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def elastic(tmp, name, nprocs, plan, extra=(), act=None, after_step=3):
    """Starts an elastic job; once `after_step` steps are in its metrics, calls act(pids)."""
    out, metrics = tmp / name, tmp / f"{name}.jsonl"
    args = [RUN, "launch", "--elastic", tmp / "inputs", "--recovery", "restart", "--nprocs", str(nprocs)]
    if plan:
        args += ["--plan", plan]
    args += ["--", "train", "--model", tmp / "init", "--data", tmp / "base.txt", "-o", out, "--metrics", metrics,
             *COMMON, *extra]
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if act:
        deadline = time.time() + 120
        while time.time() < deadline and len(records(metrics)[0]) < after_step and p.poll() is None:
            time.sleep(0.02)
        act(worker_pids(out))
    stdout, stderr = p.communicate(timeout=300)
    return p.returncode, stdout, stderr, out, metrics


def plan_workers(plan):
    return sum(len(s["replicas"]) * s.get("tp", 1) for s in plan["stages"])


def finishes_on_new_plan(out, events):
    """The job ends on the workers of the last re-plan. With 3 workers left the
    planner may use fewer than 3 (on the measured profiles, fewer can be
    faster), so the count comes from the record, never assumed."""
    if not events:
        return False
    n = plan_workers(events[-1]["new_plan"])
    return n <= events[-1]["workers_after"] and f"on {n} rank(s)" in out


def same_losses(reference, steps, name, allowed_redone=1):
    ref = {s["step"]: s["loss"] for s in reference}
    by_step = {}
    for s in steps:
        by_step.setdefault(s["step"], []).append(s["loss"])
    worst = max(abs(l - ref[k]) / abs(ref[k]) for k, ls in by_step.items() for l in ls)
    redone = sum(len(ls) - 1 for ls in by_step.values())
    check(sorted(by_step) == list(range(1, 11)), f"{name}: every step 1..10 trained ({sorted(by_step)})")
    check(worst <= 1e-5, f"{name}: losses equal the uninterrupted run's (worst relative difference {worst:.2e})")
    check(redone <= allowed_redone, f"{name}: {redone} step(s) redone (at most {allowed_redone})")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        subprocess.run([RUN, "init", "--preset", "tiny", "-o", tmp / "init", "-q"], check=True)
        subprocess.run([RUN, "make-corpus", "--task", "base", "--lines", "400", "-o", tmp / "base.txt", "-q"],
                       check=True)
        inputs = tmp / "inputs"
        inputs.mkdir()
        r = run(RUN, "profile", "--model", tmp / "init", "--gpu-type", "cpu", "--mbs", "1,2", "--seq-len", "32",
                "--repeats", "3", "--threads", "1", "-o", inputs / "profile.json")
        check(r.returncode == 0, f"profile: {r.stderr[-500:]}")
        r = run(RUN, "launch", "--nprocs", "2", "--", "profile-net", "--gpu-type", "cpu", "--max-bytes", "1048576",
                "-o", inputs / "cluster.json")
        check(r.returncode == 0, f"profile-net: {r.stderr[-500:]}")
        cluster = json.loads((inputs / "cluster.json").read_text())
        cluster["gpu_types"]["cpu"]["gpus_per_node"] = 8  # every worker of this job runs on this machine
        (inputs / "cluster.json").write_text(json.dumps(cluster))
        (inputs / "job.json").write_text(json.dumps({"format": "gpufleet-sailor-job", "version": 1, "model": "init",
                                                     "global_batch": 8, "sequence_length": 32, "precision": "fp32"}))
        plan = tmp / "dp2pp2.json"
        plan.write_text(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 2, "global_batch": 8,
                                    "stages": [{"layers": [a, b], "tp": 1,
                                                "replicas": [{"gpu": "cpu", "zone": "local"}] * 2}
                                               for a, b in [(0, 4), (4, 6)]]}))
        r = run(RUN, "launch", "--plan", plan, "--", "train", "--model", tmp / "init", "--data", tmp / "base.txt",
                "-o", tmp / "ref", "--metrics", tmp / "ref.jsonl", *COMMON)
        check(r.returncode == 0, f"uninterrupted DP=2 x PP=2 run: {r.stderr[-500:]}")
        reference, _ = records(tmp / "ref.jsonl")

        # kill -9 one of four workers after step 3.
        code, out, err, folder, metrics = elastic(tmp, "killed", 4, plan, ["--checkpoint-every", "1"],
                                                  act=lambda pids: os.kill(pids[-1], signal.SIGKILL))
        steps, events = records(metrics)
        check(code == 0 and finishes_on_new_plan(out, events), f"kill -9: the job finishes on the new plan's "
                                                               f"workers (rc {code}): {out.strip()[-200:]} {err[-300:]}")
        # At most the step in flight and the one whose background checkpoint had
        # not committed yet when the worker died (docs/training-runtime.md).
        same_losses(reference, steps, "kill -9", allowed_redone=2)
        if events:
            e = events[0]
            check(e["workers_before"] == 4 and e["workers_after"] == 3 and "killed by signal 9" in e["cause"]
                  and len(e["old_plan"]["stages"]) == 2 and 1 <= plan_workers(e["new_plan"]) <= 3,
                  f"kill -9: the reconfiguration record names cause and plans: {e['cause']}, {e['workers_after']}")
            check(all(e.get(k, -1) >= 0 for k in ("stop_s", "plan_s", "restart_s", "recovery_s")),
                  f"kill -9: phase times recorded: { {k: e.get(k) for k in ('stop_s', 'plan_s', 'restart_s', 'recovery_s')} }")
        else:
            check(False, "kill -9: no reconfiguration record in the metrics")

        # SIGTERM: a preemption notice; nothing is redone.
        code, out, err, folder, metrics = elastic(tmp, "preempted", 4, plan, ["--checkpoint-every", "100"],
                                                  act=lambda pids: os.kill(pids[-1], signal.SIGTERM))
        steps, events = records(metrics)
        check(code == 0 and finishes_on_new_plan(out, events),
              f"SIGTERM: the job finishes on the new plan's workers (rc {code}) {err[-300:]}")
        same_losses(reference, steps, "SIGTERM", allowed_redone=0)
        check(events and events[0].get("steps_redone") == 0 and "preempted" in events[0]["cause"],
              f"SIGTERM: recorded as a preemption with no step redone: {events[:1]}")

        # The last worker lost: no plan, exit 3, the checkpoint stays and resumes.
        code, out, err, folder, metrics = elastic(tmp, "alone", 1, None, ["--checkpoint-every", "1"],
                                                  act=lambda pids: os.kill(pids[-1], signal.SIGKILL))
        check(code == 3 and "admit no plan" in err and "the last checkpoint" in err,
              f"last worker lost: exit 3 naming the checkpoint (rc {code}): {err.strip()[-300:]}")
        r = run(RUN, "train", "--resume", "-o", folder, "--threads", "1", "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["last_step"] == 10, f"and it resumes: {r.stderr[-300:]}")

        # Bad invocations.
        for args, expect in [
            (["--elastic", inputs, "--nprocs", "2", "--", "profile-net", "--gpu-type", "cpu", "-o", "x"], "train"),
            (["--elastic", inputs, "--nprocs", "2", "--", "train", "--model", tmp / "init"], "-o DIR"),
            (["--elastic", inputs, "--recovery", "teleport", "--nprocs", "2", "--", "train", "-o", tmp / "x"], "inplace"),
            (["--elastic", tmp / "nowhere", "--nprocs", "2", "--", "train", "-o", tmp / "x"], "nowhere"),
        ]:
            r = run(RUN, "launch", *args)
            check(r.returncode == 2 and expect in r.stderr, f"launch {' '.join(map(str, args[2:5]))}: exit 2 naming "
                                                            f"'{expect}' (rc {r.returncode}: {r.stderr.strip()[-200:]})")

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all elastic checks passed")


main()
