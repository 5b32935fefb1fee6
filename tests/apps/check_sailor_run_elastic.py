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
- SIGSTOP to one worker: lost after the heartbeat timeout, named, with the
  detection time recorded;
- a worker that meets bad input (binary training data): the job stops with
  exit 2, nothing re-planned;
- the last worker lost: exit 3, the checkpoint kept, resumable;
- bad elastic invocations: one clear error.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from elastic_jobs import Checks, elastic as start_elastic, finishes_on_new_plan, plan_workers, prepare, records, \
    reference as reference_run, run, same_losses as same

BIN = Path(sys.argv[1])
RUN = str(BIN / "sailor-run")
check = Checks()
failures = check.failures


def elastic(tmp, name, nprocs, plan, extra=(), act=None, after_step=3, launcher=()):
    """An elastic job with recovery "restart"; `act` gets the workers' pids in rank order."""
    return start_elastic(RUN, tmp, name, nprocs, plan, ["--recovery", "restart", *launcher], extra,
                         (lambda pids, launcher: act([pids[k] for k in sorted(pids)])) if act else None, after_step)


def same_losses(reference, steps, name, allowed_redone=1):
    same(check, reference, steps, name, allowed_redone)


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        plan = prepare(RUN, tmp, check)
        inputs = tmp / "inputs"
        reference = reference_run(RUN, tmp, plan, check)

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

        # SIGSTOP: a stopped worker is taken for lost after the heartbeat
        # timeout (3 s here), not after --timeout (300 s), and is named.
        stopped = []
        code, out, err, folder, metrics = elastic(tmp, "stopped", 4, plan, ["--checkpoint-every", "1"],
                                                  act=lambda pids: (stopped.append(pids[-1]),
                                                                    os.kill(pids[-1], signal.SIGSTOP)),
                                                  launcher=["--heartbeat-timeout", "3"])
        steps, events = records(metrics)
        check(code == 0 and finishes_on_new_plan(out, events),
              f"SIGSTOP: the job finishes on the new plan's workers (rc {code}) {err[-300:]}")
        same_losses(reference, steps, "SIGSTOP", allowed_redone=2)
        e = events[0] if events else {}
        check("rank 3 stopped" in e.get("cause", "") and 2.5 <= e.get("detection_s", -1) <= 30,
              f"SIGSTOP: the stopped worker is named and its detection took the heartbeat timeout: "
              f"{e.get('cause')}, detection_s {e.get('detection_s')}")

        # Bad input is not a lost worker: the job stops with it, nothing is re-planned.
        (tmp / "binary.dat").write_bytes(bytes(range(256)) * 64)
        code, out, err, folder, metrics = elastic(tmp, "bad-input", 4, plan, ["--data", tmp / "binary.dat"])
        check(code == 2 and "bad input" in err and "training data must be text" in err and "re-planned" not in err,
              f"bad input: exit 2 naming it, no re-plan (rc {code}): {err.strip()[-300:]}")

        # The last worker lost: no plan, exit 3, the checkpoint stays and resumes.
        code, out, err, folder, metrics = elastic(tmp, "alone", 1, None, ["--checkpoint-every", "1"],
                                                  act=lambda pids: os.kill(pids[-1], signal.SIGKILL))
        check(code == 3 and "admit no plan" in err and "the last checkpoint" in err,
              f"last worker lost: exit 3 naming the checkpoint (rc {code}): {err.strip()[-300:]}")
        r = run(RUN, "train", "--resume", "-o", folder, "--threads", "1", "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["last_step"] == 10, f"and it resumes: {r.stderr[-300:]}")

        # A cluster measured on one node (profile-net under launch --nprocs 2
        # records that node's 2 GPUs) cannot price a plan of 4 workers: the
        # job runs on the 2 it can price and the warning says what to measure.
        one_node = tmp / "one-node"
        shutil.copytree(inputs, one_node)
        cluster = json.loads((one_node / "cluster.json").read_text())
        cluster["gpu_types"]["cpu"]["gpus_per_node"] = 2
        (one_node / "cluster.json").write_text(json.dumps(cluster))
        r = run(RUN, "launch", "--elastic", one_node, "--nprocs", "4", "--", "train", "--model", tmp / "init",
                "--data", tmp / "base.txt", "-o", tmp / "one-node-run")
        check(r.returncode == 0 and "uses 2 of the 4 workers" in r.stderr
              and "cluster has no same_zone bandwidth" in r.stderr and "profile-net --link-class" in r.stderr,
              f"4 workers on a one-node cluster: runs on 2, saying what to measure (rc {r.returncode}): "
              f"{r.stderr[-400:]}")

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
