"""What the multi-process training checks share: the planner inputs of a
tiny model measured on this machine, an uninterrupted reference run,
starting an elastic job and acting on it once it has trained some steps,
and reading its metrics.

Training is layout-independent, so every run's per-step losses must equal
the uninterrupted run's within 1e-5 relative."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

COMMON = ["--seq-len", "32", "--lr", "3e-3", "--warmup", "1", "--adam-eps", "1e-6", "--threads", "1",
          "--log-every", "0", "--steps", "10"]


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, condition, message):
        print(("ok   " if condition else "FAIL ") + message, flush=True)
        if not condition:
            self.failures.append(message)


def run(*args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


def stop_between_requests(run_bin, pid, controller, attempts=10):
    """Stops `pid` (SIGSTOP) at a moment it is not half-way through a request
    to the controller's store, and returns `sailor-run status --json` as read
    then. c10d's store server in libtorch 1.13 reads one request at a time to
    its end: a client stopped between the pieces of one (a heartbeat, a step's
    commit) makes every other client, the controller included, wait until it
    runs again (docs/training-runtime.md). A stop that caught one is undone
    and tried again."""
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        try:
            return run(run_bin, "status", "--controller", controller, "--json", timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)
    return subprocess.CompletedProcess([], 1, "", f"the store at {controller} never answered with {pid} stopped")


def records(path):
    lines = [json.loads(l) for l in Path(path).read_text().splitlines()] if Path(path).exists() else []
    steps = [l for l in lines if "event" not in l]
    events = [l for l in lines if l.get("event") == "reconfiguration"]
    return steps, events


def wait_until(condition, timeout=60, every=0.02):
    """Polls `condition` until it holds or `timeout` seconds pass; returns its last value."""
    deadline = time.time() + timeout
    while not (held := condition()) and time.time() < deadline:
        time.sleep(every)
    return held


def worker_pids(output):
    """{worker id: pid} of the `train` workers writing to `output` (the id is
    SAILOR_WORKER_ID under --recovery inplace, RANK otherwise)."""
    r = subprocess.run(["pgrep", "-f", f"sailor-run train .*-o {output} "], capture_output=True, text=True)
    pids = {}
    for pid in map(int, r.stdout.split()):
        try:
            env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
        except OSError:
            continue
        key = env.get("SAILOR_WORKER_ID", env.get("RANK"))
        if key is not None:
            pids[int(key)] = pid
    return pids


def measure_planner_inputs(run_bin, model, inputs, check):
    """profile.json and model.json (per-layer times, mbs 1 and 2, 32 tokens)
    and cluster.json (the loopback link between two ranks) measured here
    into the new folder `inputs`; returns whether profile-net succeeded."""
    inputs.mkdir()
    r = run(run_bin, "profile", "--model", model, "--gpu-type", "cpu", "--mbs", "1,2", "--seq-len", "32",
            "--repeats", "3", "--threads", "1", "-o", inputs / "profile.json")
    check(r.returncode == 0, f"profile: {r.stderr[-800:]}")
    r = run(run_bin, "launch", "--nprocs", "2", "--", "profile-net", "--gpu-type", "cpu", "--max-bytes", "1048576",
            "-o", inputs / "cluster.json")
    check(r.returncode == 0, f"profile-net: {r.stderr[-800:]}")
    return r.returncode == 0


def prepare(run_bin, tmp, check, measured_network=True):
    """Model, corpus and planner inputs in tmp; returns the DP=2 x PP=2 plan.
    Without `measured_network` the link is a fixed 50 GB/s, so that the
    planner's choices depend on the measured compute only."""
    subprocess.run([run_bin, "init", "--preset", "tiny", "-o", tmp / "init", "-q"], check=True)
    subprocess.run([run_bin, "make-corpus", "--task", "base", "--lines", "400", "-o", tmp / "base.txt", "-q"],
                   check=True)
    inputs = tmp / "inputs"
    measure_planner_inputs(run_bin, tmp / "init", inputs, check)
    cluster = json.loads((inputs / "cluster.json").read_text())
    cluster["gpu_types"]["cpu"]["gpus_per_node"] = 8  # every worker of this job runs on this machine
    if not measured_network:
        cluster["network"]["intra_node"]["cpu"] = {"fit": [0, 0, 50], "max_bytes_per_s": 50e9}
    (inputs / "cluster.json").write_text(json.dumps(cluster))
    (inputs / "job.json").write_text(json.dumps({"format": "gpufleet-sailor-job", "version": 1, "model": "init",
                                                 "global_batch": 8, "sequence_length": 32, "precision": "fp32"}))
    plan = tmp / "dp2pp2.json"
    plan.write_text(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": 2, "global_batch": 8,
                                "stages": [{"layers": [a, b], "tp": 1,
                                            "replicas": [{"gpu": "cpu", "zone": "local"}] * 2}
                                           for a, b in [(0, 4), (4, 6)]]}))
    return plan


def reference(run_bin, tmp, plan, check):
    """Per-step records of an uninterrupted run under `plan`."""
    r = run(run_bin, "launch", "--plan", plan, "--", "train", "--model", tmp / "init", "--data", tmp / "base.txt",
            "-o", tmp / "ref", "--metrics", tmp / "ref.jsonl", *COMMON)
    check(r.returncode == 0, f"uninterrupted DP=2 x PP=2 run: {r.stderr[-500:]}")
    return records(tmp / "ref.jsonl")[0]


def elastic(run_bin, tmp, name, nprocs, plan, launcher=(), extra=(), act=None, after_step=3):
    """Starts an elastic job; once `after_step` steps are in its metrics,
    calls act({worker: pid}, launcher_pid). Returns (rc, stdout, stderr, output, metrics)."""
    out, metrics = tmp / name, tmp / f"{name}.jsonl"
    args = [run_bin, "launch", "--elastic", tmp / "inputs", "--nprocs", str(nprocs), *launcher]
    if plan:
        args += ["--plan", plan]
    args += ["--", "train", "--model", tmp / "init", "--data", tmp / "base.txt", "-o", out, "--metrics", metrics,
             *COMMON, *extra]
    p = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if act:
        deadline = time.time() + 120
        while time.time() < deadline and len(records(metrics)[0]) < after_step and p.poll() is None:
            time.sleep(0.02)
        # Every worker's pid, read while the job runs: a process list taken
        # while one is being read can miss it, so look again briefly (a job
        # may also run fewer workers than it was given).
        pids = worker_pids(out)
        deadline = time.time() + 2
        while len(pids) < nprocs and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
            pids = worker_pids(out)
        if p.poll() is None:
            act(pids, p.pid)
        else:  # the job ended first: its own output says why, and the caller's checks fail
            print(f"{name}: the job ended before the test could act on it", flush=True)
    stdout, stderr = p.communicate(timeout=300)
    return p.returncode, stdout, stderr, out, metrics


def plan_workers(plan):
    return sum(len(s["replicas"]) * s.get("tp", 1) for s in plan["stages"])


def finishes_on_new_plan(out, events):
    """The job ends on the workers of the last re-plan. The planner may use
    fewer than the workers left (on the measured profiles, fewer can be
    faster), so the count comes from the record, never assumed."""
    if not events:
        return False
    n = plan_workers(events[-1]["new_plan"])
    return n <= events[-1]["workers_after"] and f"on {n} rank(s)" in out


def same_losses(check, reference_steps, steps, name, allowed_redone=1):
    ref = {s["step"]: s["loss"] for s in reference_steps}
    by_step = {}
    for s in steps:
        by_step.setdefault(s["step"], []).append(s["loss"])
    worst = max((abs(l - ref[k]) / abs(ref[k]) for k, ls in by_step.items() for l in ls), default=1.0)
    redone = sum(len(ls) - 1 for ls in by_step.values())
    check(sorted(by_step) == list(range(1, 11)), f"{name}: every step 1..10 trained ({sorted(by_step)})")
    check(worst <= 1e-5, f"{name}: losses equal the uninterrupted run's (worst relative difference {worst:.2e})")
    check(redone <= allowed_redone, f"{name}: {redone} step(s) redone (at most {allowed_redone})")
    return redone
