"""sailor-run train on several processes against one process.

Usage: check_sailor_run_parallel.py BIN_DIR

Real worker processes over loopback (one CPU thread each), started by
`sailor-run launch` or by hand with torchrun's variables. Every layout —
DP=2, PP=2 with an unequal split, DP=2 x PP=2, PP=3, TP=2, DP=2 x PP=2 x
TP=2, PP=3 with TP 2 / 1 / 2 — trains the same global batch as world size 1; the losses must equal
the single process's within 1e-5 and the final weights (read back with the
`safetensors` library, the sharded checkpoints through their index) bit
for bit without TP, within 1e-5 in norm with it. A pipeline checkpoint loads in transformers, resumes under DP=2 and
under one process. Bad plans, a worker with other model files, an
unreachable master and a worker killed mid-step each end with one clear
error and a non-zero exit instead of a hang.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from elastic_jobs import measure_planner_inputs, wait_until

try:
    import torch
    from safetensors.torch import load_file
    import transformers
except ImportError as e:  # the project's Python environment lacks a package
    print(f"SKIP: {e}; run scripts/install-deps.sh")
    sys.exit(77)

BIN = Path(sys.argv[1])
RUN = str(BIN / "sailor-run")
failures = []
TOLERANCE = 1e-5


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def run(*args, env=None, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weights(folder):
    """Every tensor of a model folder (single file or sharded)."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(load_file(str(folder / f)))
    return out


def relative_difference(a, b):
    """Largest difference in a tensor over that tensor's largest entry."""
    worst = 0.0
    for name, t in a.items():
        scale = max(t.abs().max().item(), 1e-12)
        worst = max(worst, (t - b[name]).abs().max().item() / scale)
    return worst


def norm_difference(a, b):
    """‖a − b‖ / ‖a‖ over all weights."""
    num = sum((t - b[name]).double().pow(2).sum().item() for name, t in a.items())
    den = sum(t.double().pow(2).sum().item() for t in a.values())
    return (num / den) ** 0.5


def plan(tmp, name, splits, dp, mbs, global_batch=8, tp=1):
    stages = [{"layers": [a, b], "tp": tp, "replicas": [{"gpu": "cpu", "zone": "local"}] * dp} for a, b in splits]
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"format": "gpufleet-sailor-plan", "version": 1, "mbs": mbs,
                                "global_batch": global_batch, "stages": stages}))
    return path


# AdamW's epsilon at 1e-6 rather than 1e-8: with 1e-8 an entry whose gradient
# is ~1e-8 moves by ±lr on a rounding difference of its gradient, and the
# tensor-parallel runs (which round differently) land 2e-3 apart there.
COMMON = ["--seq-len", "32", "--lr", "3e-3", "--warmup", "1", "--adam-eps", "1e-6", "--threads", "1", "--json",
          "--log-every", "0"]
TRAIN = ["--steps", "4", *COMMON]


def train(tmp, out, *extra, launch=None):
    """Runs a training job; returns (losses, output folder)."""
    head = [RUN, "launch", *launch, "--"] if launch else [RUN]
    r = run(*head, "train", "--model", tmp / "init", "--data", tmp / "base.txt", "-o", tmp / out, *TRAIN, *extra)
    if r.returncode != 0:
        check(False, f"{out}: exit {r.returncode}: {r.stderr[-2000:]}")
        return None, tmp / out
    return json.loads(r.stdout)["losses"], tmp / out


def compare(name, reference, candidate, exact=True):
    """Data and pipeline parallelism sum the same float32 terms exactly (in
    float64), so their weights must equal one process's bit for bit.
    Tensor parallelism splits the row-parallel products into partial sums,
    which rounds differently: its weights must agree within 1e-5 in norm."""
    ref_losses, ref_dir = reference
    losses, folder = candidate
    if losses is None:
        return
    check(len(losses) == len(ref_losses), f"{name}: {len(losses)} losses")
    loss_gap = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    ref, got = weights(ref_dir), weights(folder)
    check(set(ref) == set(got), f"{name}: the checkpoint holds other tensors")
    if set(ref) != set(got):
        return
    weight_gap, norm_gap = relative_difference(ref, got), norm_difference(ref, got)
    print(f"{name}: loss relative difference {loss_gap:.2e}, weights {weight_gap:.2e} "
          f"(largest entry), {norm_gap:.2e} (norm)", flush=True)
    check(loss_gap <= TOLERANCE, f"{name}: losses differ by {loss_gap:.2e}: {losses} vs {ref_losses}")
    if exact:
        check(weight_gap == 0, f"{name}: weights differ by {weight_gap:.2e}")
    else:
        check(norm_gap <= TOLERANCE, f"{name}: weights differ by {norm_gap:.2e} in norm")


def expect_failure(name, result, code, text):
    ok = result.returncode == code and text in result.stderr
    check(ok, f"{name}: expected exit {code} and '{text}', got exit {result.returncode}: {result.stderr[-1500:]}")


def start_worker(tmp, rank, world, port, model, out, steps="4", timeout="20", *extra):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    args = [RUN, "train", "--model", str(model), "--data", str(tmp / "base.txt"), "-o", str(tmp / out), *COMMON,
            "--steps", steps, "--timeout", timeout, *[str(e) for e in extra]]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # A tied model (the head shares the embedding, so pipeline stages
        # must sum the two copies' gradients) of 4 blocks: planner layers 0..5.
        subprocess.run([RUN, "init", "--preset", "tiny", "-o", tmp / "init", "-q"], check=True)
        subprocess.run([RUN, "make-corpus", "--task", "base", "--lines", "400", "-o", tmp / "base.txt", "-q"],
                       check=True)
        reference = train(tmp, "ws1", "--batch-size", "2", "--grad-accumulation", "4",
                          "--metrics", tmp / "ws1.jsonl")
        if reference[0] is None:
            return
        lines = [json.loads(l) for l in (tmp / "ws1.jsonl").read_text().splitlines()]
        check([l["step"] for l in lines] == [1, 2, 3, 4] and all("loss" in l for l in lines), f"metrics: {lines}")
        # Energy per step: measured where the driver reports it, else the
        # plan's prediction; with neither (CPU, no plan) none is made up.
        check(all("energy_j" not in l for l in lines), f"no energy without a meter or a plan: {lines[0]}")
        predicted = plan(tmp, "one", [(0, 6)], 1, 2)
        doc = json.loads(predicted.read_text())
        doc["predictions"] = {"energy_j_per_iteration": 123.5, "iterations_per_s": 1.0}
        predicted.write_text(json.dumps(doc))
        train(tmp, "with-plan", "--batch-size", "2", "--grad-accumulation", "4", "--plan", predicted,
              "--metrics", tmp / "plan.jsonl")
        lines = [json.loads(l) for l in (tmp / "plan.jsonl").read_text().splitlines()]
        check(len(lines) == 4 and all(l.get("energy_j") == 123.5 and l.get("energy_source") == "model" for l in lines),
              f"the plan's predicted energy per step in the metrics: {lines[:1]}")

        compare("DP=2", reference, train(tmp, "dp2", "--batch-size", "2", "--grad-accumulation", "2",
                                         launch=["--nprocs", "2"]))
        compare("PP=2 [0,2) [2,6)", reference,
                train(tmp, "pp2", launch=["--plan", plan(tmp, "pp2", [(0, 2), (2, 6)], 1, 2)]))
        compare("DP=2 x PP=2", reference,
                train(tmp, "dp2pp2", launch=["--plan", plan(tmp, "dp2pp2", [(0, 4), (4, 6)], 2, 2)]))
        compare("PP=3", reference,
                train(tmp, "pp3", launch=["--plan", plan(tmp, "pp3", [(0, 1), (1, 3), (3, 6)], 1, 2)]))
        compare("TP=2", reference, train(tmp, "tp2", launch=["--plan", plan(tmp, "tp2", [(0, 6)], 1, 2, tp=2)]),
                exact=False)
        compare("DP=2 x PP=2 x TP=2", reference,
                train(tmp, "dp2pp2tp2", launch=["--plan", plan(tmp, "dp2pp2tp2", [(0, 3), (3, 6)], 2, 2, tp=2)]),
                exact=False)
        # A TP degree per stage (as SAILOR's plans have): TP 2, 1, 2 (a tied model needs the same on
        # its first and last stage); activations fan out from 1 rank to 2, and in from 2 ranks to 1.
        mixed = plan(tmp, "pp3-tp212", [(0, 2), (2, 4), (4, 6)], 1, 2, tp=2)
        spec = json.loads(mixed.read_text())
        spec["stages"][1]["tp"] = 1
        mixed.write_text(json.dumps(spec))
        compare("PP=3, TP 2 / 1 / 2", reference, train(tmp, "pp3tp212", launch=["--plan", mixed]), exact=False)

        # The pipeline's sharded checkpoint is a model folder transformers reads.
        try:
            hf = transformers.LlamaForCausalLM.from_pretrained(str(tmp / "pp2"))
            ours = weights(tmp / "pp2")
            check(torch.equal(hf.model.embed_tokens.weight.detach(), ours["model.embed_tokens.weight"]),
                  "transformers reads other embedding weights")
        except Exception as e:  # noqa: BLE001 - any failure to load is the finding
            check(False, f"transformers cannot load the PP=2 checkpoint: {e}")

        # Stop a PP=2 run half way; resume under DP=2 and under one process.
        pp_plan = plan(tmp, "pp2b", [(0, 3), (3, 6)], 1, 2)
        for name, resume_launch in (("PP=2 -> DP=2", ["--nprocs", "2"]), ("PP=2 -> one process", None)):
            out = name.replace(" ", "_").replace(">", "").replace("=", "")
            first = train(tmp, out, "--stop-after", "2", launch=["--plan", pp_plan])
            if first[0] is None:
                continue
            saved = weights(tmp / out)
            head = [RUN, "launch", *resume_launch, "--"] if resume_launch else [RUN]
            r = run(*head, "train", "--resume", "-o", tmp / out, "--threads", "1", "--json", "--log-every", "0",
                    "--stop-after", "0")
            check(r.returncode == 0, f"{name}: resume failed: {r.stderr[-1500:]}")
            if r.returncode == 0:
                compare(name, reference, (first[0] + json.loads(r.stdout)["losses"], tmp / out))
            check(len(saved) == len(weights(tmp / "ws1")), f"{name}: the checkpoint lacks tensors")

        # A tensor-parallel checkpoint holds whole tensors: one process resumes it.
        first = train(tmp, "tp2-resumed", "--stop-after", "2",
                      launch=["--plan", plan(tmp, "tp2b", [(0, 3), (3, 6)], 1, 2, tp=2)])
        if first[0] is not None:
            r = run(RUN, "train", "--resume", "-o", tmp / "tp2-resumed", "--threads", "1", "--json", "--log-every", "0")
            check(r.returncode == 0, f"TP=2 -> one process: resume failed: {r.stderr[-1500:]}")
            if r.returncode == 0:
                compare("PP=2 x TP=2 -> one process", reference,
                        (first[0] + json.loads(r.stdout)["losses"], tmp / "tp2-resumed"), exact=False)

        # Killed while checkpoints are written in the background (one per
        # step): the output always holds a whole earlier checkpoint that resumes.
        # The kill comes once the first, third and sixth checkpoints are there
        # (states, not delays: a loaded machine may take any time to reach them).
        names = set(weights(tmp / "ws1"))

        def checkpointed_step():
            try:
                return json.loads((tmp / "crash" / "trainer_state.json").read_text())["step"]
            except (OSError, ValueError, KeyError):
                return 0  # not written yet (each checkpoint replaces the file whole)
        for target in (1, 3, 6):
            shutil.rmtree(tmp / "crash", ignore_errors=True)
            proc = subprocess.Popen([RUN, "launch", "--plan", str(pp_plan), "--", "train", "--model", str(tmp / "init"),
                                     "--data", str(tmp / "base.txt"), "-o", str(tmp / "crash"), *COMMON, "--steps",
                                     "100000", "--checkpoint-every", "1", "--force"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda: checkpointed_step() >= target or proc.poll() is not None, timeout=300)
            for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
                os.kill(int(pid), signal.SIGKILL)
            proc.wait(timeout=60)
            try:
                state = json.loads((tmp / "crash" / "trainer_state.json").read_text())
                check(set(weights(tmp / "crash")) == names, f"crash after checkpoint {target}: the checkpoint lacks tensors")
                check(len(state["history"]) == state["step"], f"crash after checkpoint {target}: history of {state['step']}")
            except Exception as e:  # noqa: BLE001 - an unreadable checkpoint is the finding
                check(False, f"crash after checkpoint {target}: no whole checkpoint: {e}")
        r = run(RUN, "train", "--resume", "-o", tmp / "crash", "--threads", "1", "--stop-after", "1", "--json")
        check(r.returncode == 0, f"resume after crashes: {r.stderr[-800:]}")
        stale = [p.name for p in tmp.iterdir() if p.name.startswith(".crash.staging-")]
        check(not stale, f"unfinished staging folders left after a resume: {stale}")

        # The planner's inputs measured here: per-layer profile and model, the
        # loopback link's bandwidth curve; sailor-plan simulates a plan on them.
        inputs = tmp / "inputs"
        if measure_planner_inputs(RUN, tmp / "init", inputs, check):
            profile = json.loads((inputs / "profile.json").read_text())
            entries = {e["mbs"]: e for e in profile["gpus"]["cpu"]}
            check(sorted(entries) == [1, 2] and all(len(e["layers"]) == 6 for e in entries.values()),
                  f"profile entries: {sorted(entries)}")
            check(all(t > 0 for e in entries.values() for layer in e["layers"][1:] for t in layer),
                  "a block's forward, backward or update time is not positive")
            # Activations kept for backward grow with the micro-batch: twice the sequences, twice the bytes.
            for layer in range(1, 5):
                one, two = entries[1]["activation_bytes"][layer], entries[2]["activation_bytes"][layer]
                check(one > 0 and abs(two / one - 2) < 0.2, f"block {layer}: {one} bytes at mbs 1, {two} at mbs 2")
            model = json.loads((inputs / "model.json").read_text())
            check(len(model["layers"]) == 6, "model.json layers")
            cluster = json.loads((inputs / "cluster.json").read_text())
            fit = cluster["network"]["intra_node"]["cpu"]
            check(len(fit["fit"]) == 3 and fit["max_bytes_per_s"] > 1e6, f"bandwidth fit: {fit}")
            (inputs / "job.json").write_text(json.dumps({"format": "gpufleet-sailor-job", "version": 1,
                                                         "model": "init", "global_batch": 8,
                                                         "sequence_length": 32, "precision": "fp32"}))
            pp = plan(tmp, "pp2-cpu", [(0, 3), (3, 6)], 1, 2)
            r = run(BIN / "sailor-plan", "simulate", "-i", inputs, "-p", pp, "--json")
            check(r.returncode == 0 and json.loads(r.stdout)["iteration_s"] > 0,
                  f"sailor-plan simulate on measured inputs: {r.stderr[-800:]}")

            # Tensor parallelism measured on two ranks (each rank its slices, the group's
            # collectives in the timings): an entry per TP degree, less kept per rank at TP 2,
            # and a TP plan simulates on them.
            tp_inputs = tmp / "tp-inputs"
            tp_inputs.mkdir()
            r = run(RUN, "launch", "--nprocs", "2", "--", "profile", "--model", tmp / "init", "--gpu-type", "cpu",
                    "--mbs", "2", "--tp", "1,2", "--seq-len", "32", "--repeats", "2", "--threads", "1",
                    "-o", tp_inputs / "profile.json")
            check(r.returncode == 0, f"profile --tp 1,2 on two ranks: {r.stderr[-800:]}")
            if r.returncode == 0:
                tp_entries = {(e["mbs"], e["tp"]): e for e in
                              json.loads((tp_inputs / "profile.json").read_text())["gpus"]["cpu"]}
                check(sorted(tp_entries) == [(2, 1), (2, 2)] and
                      all(t > 0 for layer in tp_entries[(2, 2)]["layers"][1:] for t in layer),
                      f"profile entries per (mbs, TP): {sorted(tp_entries)}")
                blocks = json.loads((tp_inputs / "model.json").read_text())["layers"][1:5]
                check(all(0 < b["act_memory"]["2"] < b["act_memory"]["1"] for b in blocks),
                      f"activations kept per rank shrink at TP 2: {[b['act_memory'] for b in blocks]}")
                shutil.copy(inputs / "cluster.json", tp_inputs)
                shutil.copy(inputs / "job.json", tp_inputs)
                r = run(BIN / "sailor-plan", "simulate", "-i", tp_inputs, "-p",
                        plan(tmp, "tp2-cpu", [(0, 6)], 1, 2, tp=2), "--json")
                check(r.returncode == 0 and json.loads(r.stdout)["iteration_s"] > 0,
                      f"sailor-plan simulate of a TP=2 plan on measured inputs: {r.stderr[-800:]}")
            r = run(RUN, "profile", "--model", tmp / "init", "--gpu-type", "cpu", "--tp", "2",
                    "-o", tp_inputs / "alone.json")
            expect_failure("profile --tp 2 in one process", r, 2, "launch --nprocs 2")

        # Bad input: one clear error, non-zero exit, no hang.
        r = run(RUN, "launch", "--plan", plan(tmp, "short", [(0, 2), (2, 5)], 1, 2), "--", "train", "--model",
                tmp / "init", "--data", tmp / "base.txt", "-o", tmp / "bad1", *TRAIN)
        expect_failure("plan for another model", r, 2, "but the model has 6")
        r = run(RUN, "launch", "--nprocs", "3", "--plan", plan(tmp, "two", [(0, 2), (2, 6)], 1, 2), "--", "train",
                "--model", tmp / "init", "--data", tmp / "base.txt", "-o", tmp / "bad2", *TRAIN)
        expect_failure("launch with too many ranks", r, 2, "the plan needs 2 ranks")
        r = run(RUN, "launch", "--nprocs", "3", "--", "train", "--plan", tmp / "two.json", "--model", tmp / "init",
                "--data", tmp / "base.txt", "-o", tmp / "bad3", *TRAIN)
        expect_failure("plan needing fewer ranks than started", r, 2, "needs 2 ranks but 3 were started")
        untied = plan(tmp, "pp2-tp21", [(0, 3), (3, 6)], 1, 2, tp=2)
        spec = json.loads(untied.read_text())
        spec["stages"][1]["tp"] = 1
        untied.write_text(json.dumps(spec))
        r = run(RUN, "launch", "--plan", untied, "--", "train", "--model", tmp / "init", "--data", tmp / "base.txt",
                "-o", tmp / "bad-tied", *TRAIN)
        expect_failure("tied model, TP 2 then 1", r, 2, "same TP degree")

        # A worker whose model differs from rank 0's.
        subprocess.run([RUN, "init", "--preset", "tiny", "--seed", "9", "-o", tmp / "other", "-q"], check=True)
        port = free_port()
        workers = [start_worker(tmp, 0, 2, port, tmp / "init", "bad4"),
                   start_worker(tmp, 1, 2, port, tmp / "other", "bad4")]
        for rank, w in enumerate(workers):
            _, err = w.communicate(timeout=120)
            check(w.returncode == 2 and "rank 1's model files differ from rank 0's" in err,
                  f"differing model, rank {rank}: exit {w.returncode}: {err[-800:]}")

        # Nobody serves the rendezvous: an error after --timeout, not a hang.
        started = time.monotonic()
        w = start_worker(tmp, 1, 2, free_port(), tmp / "init", "bad5", "4", "3")
        _, err = w.communicate(timeout=120)
        waited = time.monotonic() - started
        check(w.returncode == 1 and "cannot join the rendezvous" in err and waited < 60,
              f"unreachable master: exit {w.returncode} after {waited:.0f} s: {err[-800:]}")
        # The same for a profile rank (its default wait is 10 minutes).
        started = time.monotonic()
        env = dict(os.environ, RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
        r = subprocess.run([RUN, "profile", "--model", tmp / "init", "--gpu-type", "cpu", "--tp", "1,2", "--mbs", "1",
                            "--seq-len", "16", "--threads", "1", "--timeout", "3", "-o", tmp / "never.json"],
                           env=env, capture_output=True, text=True, timeout=120)
        waited = time.monotonic() - started
        check(r.returncode == 1 and "cannot join the rendezvous" in r.stderr and waited < 60
              and not (tmp / "never.json").exists(),
              f"profile, unreachable master: exit {r.returncode} after {waited:.0f} s: {r.stderr[-800:]}")

        # A worker killed mid-run: its peer fails within the timeout.
        port = free_port()
        workers = [start_worker(tmp, r, 2, port, tmp / "init", "bad6", "100000", "20", "--plan", tmp / "two.json",
                                "--metrics", tmp / "bad6.jsonl")
                   for r in range(2)]
        # Killed once the pair trains (rank 0 logged a step), however slow the start was.
        wait_until(lambda: (tmp / "bad6.jsonl").exists() and (tmp / "bad6.jsonl").read_text(), timeout=120)
        workers[1].send_signal(signal.SIGKILL)
        try:
            _, err = workers[0].communicate(timeout=90)
            check(workers[0].returncode not in (0, None), f"the surviving worker exited {workers[0].returncode}")
        except subprocess.TimeoutExpired:
            workers[0].kill()
            check(False, "the surviving worker hung after its peer was killed")
        workers[1].communicate()

        # Under the launcher, a killed worker stops the job with its status.
        proc = subprocess.Popen([RUN, "launch", "--nprocs", "2", "--", "train", "--model", str(tmp / "init"),
                                 "--data", str(tmp / "base.txt"), "-o", str(tmp / "bad7"), *COMMON, "--steps", "100000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        def launched():
            return subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        wait_until(lambda: len(launched()) >= 2 or proc.poll() is not None, timeout=120)
        children = launched()
        check(len(children) == 2, f"the launcher runs {len(children)} workers")
        if children:
            os.kill(int(children[-1]), signal.SIGKILL)
        try:
            _, err = proc.communicate(timeout=90)
            check(proc.returncode == 128 + signal.SIGKILL and "worker 1 killed by signal 9" in err,
                  f"launcher after a killed worker: exit {proc.returncode}: {err[-800:]}")
        except subprocess.TimeoutExpired:
            proc.kill()
            check(False, "the launcher hung after a worker was killed")
        # The launcher has exited and reaped its workers: none may be left.
        left = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        check(not left, f"workers left running: {left}")


main()
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("OK")
