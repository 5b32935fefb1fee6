"""scripts/orion_contention_fit.py end to end, without a GPU.

Usage: check_orion_contention_fit.py BIN_DIR SOURCE_DIR

- Pairs "measured" on a simulated H200 whose contention constants are known
  (memory-bound kernels using 0.7 of the bandwidth, a 5 % same-class
  penalty): the fit recovers both from the three pairs, predicts each pair
  left out, and writes a model file that orion-run simulate reads back.
- Orion's V100 pairs alone with the four default constants: the fit says
  leave-one-out needs more points instead of printing it.
- A missing pairs folder or an unknown constant: an error, non-zero exit.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

BIN, SOURCE = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
ORION_RUN = str(BIN / "orion-run")
SCRIPT = SOURCE / "scripts" / "orion_contention_fit.py"
sys.path.insert(0, str(SCRIPT.parent))
import orion_contention_fit as fit  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run_fit(*args):
    return subprocess.run([sys.executable, str(SCRIPT), ORION_RUN, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    pairs = tmp / "pairs"
    pairs.mkdir()
    header = "Name,Profile,Memory_footprint,SM_usage,Duration\n"
    (pairs / "conv.csv").write_text(header + "conv,1,0,132,400000\n")
    (pairs / "bn.csv").write_text(header + "bn,0,0,132,250000\n")
    truth = fit.model_json({"memory_use.memory": 0.7, "same_class_penalty": 0.05}, "test truth")
    (tmp / "truth.json").write_text(json.dumps(truth))
    profiles = {"conv": pairs / "conv.csv", "bn": pairs / "bn.csv"}
    with open(pairs / "measured.jsonl", "w") as f:
        for pair in ("conv+bn", "conv+conv", "bn+bn"):
            a, b = pair.split("+")
            point = fit.Point(pair, "h200", profiles, a, b, 1, None)
            ratio = fit.simulate(ORION_RUN, point, tmp / "truth.json", tmp)
            f.write(json.dumps({"pair": pair, "sequential_ms": 1.0, "together_ms": ratio, "chain": 1}) + "\n")

    out = tmp / "fitted.json"
    r = run_fit(f"{pairs}:h200", "--no-reference", "--free", "memory_use.memory,same_class_penalty",
                "--write", str(out))
    print(r.stdout + r.stderr)
    check(r.returncode == 0, "the fit runs on a pairs folder")
    fitted = {m.group(1): float(m.group(2)) for m in re.finditer(r"(\S+) = ([0-9.]+)", r.stdout)}
    check(abs(fitted.get("memory_use.memory", -1) - 0.7) < 0.01, "memory use of memory-bound kernels recovered (0.7)")
    check(abs(fitted.get("same_class_penalty", -1) - 0.05) < 0.005, "same-class penalty recovered (0.05)")
    check("left out" in r.stdout.splitlines()[-2], "each pair is also predicted left out")
    model = json.loads(out.read_text()) if out.exists() else {}
    check(model.get("format") == "gpufleet-orion-contention" and model.get("device") == "h200",
          "the written model names its format and device")
    sim = subprocess.run([ORION_RUN, "-q", "simulate", "-w", str(SOURCE / "examples/orion/rnet50_inf_train.json"),
                          "-p", "mps", "--requests", "60", "--contention", str(out)], capture_output=True, text=True)
    check(sim.returncode == 0, "orion-run simulate reads the written model")

    r = run_fit()
    check(r.returncode == 0 and "leave-one-out needs at least 5 points" in r.stdout,
          "Orion's three pairs cannot be left out one by one with four constants free")
    r = run_fit(str(tmp / "nowhere"))
    check(r.returncode != 0 and "nowhere" in r.stderr and r.stderr.count("\n") <= 2,
          "a missing pairs folder is one error line")
    r = run_fit("--free", "memory_use.tensor")
    check(r.returncode == 2 and "unknown constant" in r.stderr, "an unknown constant is refused")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
