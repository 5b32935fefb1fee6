#!/usr/bin/env python3
"""Our simulator beside SAILOR's on SAILOR's ten best plans, term by term:
iteration time, the per-micro-batch slot of the slowest stage, the
gradient synchronisation and the optimizer step (docs/sailor-model.md,
"Where SAILOR's simulator and ours differ").

  python3 scripts/bench/sailor/sailor_simulators.py SAILOR_CHECKOUT [BUILD_DIR]

SAILOR_CHECKOUT is a clone of github.com/eth-easl/sailor (commit cf2c8e3)
in a folder named `sailor` (its simulator reads PARENT/sailor/sailor/providers).
SAILOR's simulator is imported from there and run on the same profiles,
model sizes and plans as ours (examples/sailor/sailor-data); it needs a
Python with torch and pandas. The clusters get room for every plan (quota
1024 per GPU type in us-central1-a).
"""
import contextlib
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    checkout = Path(sys.argv[1]).resolve()
    build = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build"
    sys.path.insert(0, str(checkout))
    from sailor.Planner.simulations.runtime_simulator import Simulator  # noqa: E402  (SAILOR's own code)

    ex = ROOT / "examples/sailor"
    data = ex / "sailor-data"
    llm_info = json.loads((data / "llm_info.json").read_text())
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for m in ("opt-350", "gpt-neo-2.7"):
            shutil.copytree(ex / m, tmp / m)
            c = json.loads((tmp / m / "cluster.json").read_text())
            c["zones"]["us-central1-a"]["quotas"].update({"A100-40": 1024, "V100-16": 1024})
            (tmp / m / "cluster.json").write_text(json.dumps(c))
        print("| plan | stages | N | SAILOR s | ours s | ours vs SAILOR | slowest slot s (SAILOR / ours) "
              "| sync s (SAILOR / ours exposed) | step s (SAILOR / ours) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for plan_file in sorted(glob.glob(str(data / "best_plans/*.json"))):
            name = os.path.basename(plan_file)[:-5]
            opt = name.startswith("opt")
            model = "OPT-350" if opt else "GPT-Neo-2.7"
            cfg = json.loads((data / "configs" / ("training_config_opt_350.json" if opt else
                                                   "training_config_gpt_neo27.json")).read_text())
            profiles = {model: {Path(f).parent.name: json.loads(Path(f).read_text())
                                for f in glob.glob(str(data / "profiles" / model / "*/profile.json"))}}
            sim = Simulator(str(checkout.parent), cfg, llm_info, True, profiles, "us-central1-a")
            with contextlib.redirect_stdout(io.StringIO()) as log:
                theirs, _, _ = sim.simulate_iteration_time(json.loads(Path(plan_file).read_text()))
            lines = log.getvalue().splitlines()
            pipe = [l for l in lines if l.startswith("num_micro_batches")][-1]
            terms = dict(kv.split(": ") for kv in pipe.replace("num_micro_batches ", "nb: ").split(", "))
            sync = float([l for l in lines if l.startswith("***")][-1].split("T_sync is ")[1].split(",")[0])
            r = subprocess.run([str(build / "bin/sailor-plan"), "-q", "simulate", "-i", str(tmp / ("opt-350" if opt else
                                "gpt-neo-2.7")), "-p", plan_file, "--json"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"| {name} | ours failed: {r.stderr.strip()[-120:]} |")
                continue
            o = json.loads(r.stdout)
            st = o["stages"]
            blocking = True  # the job's runtime is DeepSpeed: a stage also waits out its inbound transfers
            slot = max(s["compute_s"] + s["send_s"] + (st[i - 1]["send_s"] if blocking and i > 0 else 0)
                       for i, s in enumerate(st))
            print(f"| {name} | {len(st)} | {o['microbatches']} | {theirs:.3f} | {o['iteration_s']:.3f} | "
                  f"{o['iteration_s'] / theirs - 1:+.1%} | {float(terms['straggler']):.4f} / {slot:.4f} | "
                  f"{sync:.3f} / {max(s['allreduce_exposed_s'] for s in st):.3f} | "
                  f"{float(terms['update_time']):.4f} / {max(s['update_s'] for s in st):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
