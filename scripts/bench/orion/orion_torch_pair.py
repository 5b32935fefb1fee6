"""A PyTorch inference client (HP) and a training job (BE) for orion-run exec
on a real GPU. Each request / iteration is marked with
torch.cuda.profiler.start() / stop() (cuProfilerStart / Stop), which is how
orion-run exec and orion-profile capture see request boundaries.

  --role hp --requests N [--think-ms T]   prints {"role":"hp","p50_ms":...,"p99_ms":...}
  --role be --iterations N (0: until SIGTERM) [--be-batch B]   prints {"role":"be","iterations_per_s":...}
                      (B rows through an 8-layer 8192-wide MLP: each matrix product is
                      B x 8192 x 8192 in float32, about 1.4 ms at 512 on an H200)
  --ready-file PATH   BE creates PATH once warmed up; HP waits for it before its
                      measured requests, so the two overlap (starting torch and
                      CUDA takes seconds, the HP requests themselves about one)
"""
import argparse
import json
import os
import signal
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--role", choices=["hp", "be"], required=True)
p.add_argument("--requests", type=int, default=200)
p.add_argument("--iterations", type=int, default=0)
p.add_argument("--think-ms", type=float, default=2.0)
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--be-batch", type=int, default=512)
p.add_argument("--ready-file")
p.add_argument("--ready-timeout-s", type=float, default=120)
args = p.parse_args()

if not torch.cuda.is_available():
    print("no GPU", file=sys.stderr)
    sys.exit(77)
torch.manual_seed(0)
dev = torch.device("cuda")


def mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(dev)


if args.role == "hp":
    # Inference: a small batch through a deep MLP, latency-bound, in bfloat16.
    model = mlp(4096, 12).to(torch.bfloat16).eval()
    x = torch.randn(8, 4096, device=dev, dtype=torch.bfloat16)
    latencies = []
    with torch.no_grad():
        for r in range(args.warmup + args.requests):
            if r == args.warmup and args.ready_file:
                deadline = time.monotonic() + args.ready_timeout_s
                while not os.path.exists(args.ready_file) and time.monotonic() < deadline:
                    time.sleep(0.01)
                if not os.path.exists(args.ready_file):
                    print(f"hp: {args.ready_file} did not appear within {args.ready_timeout_s} s; measuring alone",
                          file=sys.stderr)
            t0 = time.perf_counter()
            torch.cuda.profiler.start()
            model(x)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            if r >= args.warmup:
                latencies.append((time.perf_counter() - t0) * 1e3)
            time.sleep(args.think_ms / 1e3)
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print(json.dumps({"role": "hp", "requests": len(latencies), "p50_ms": pick(0.5), "p99_ms": pick(0.99)}), flush=True)
else:
    # Training: a wide MLP with a large batch, throughput-bound.
    model = mlp(8192, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.be_batch, 8192, device=dev)
    stop = False

    def on_term(*_):
        global stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    done, started = 0, None
    i = 0
    while not stop and (args.iterations == 0 or i < args.warmup + args.iterations):
        torch.cuda.profiler.start()
        loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        i += 1
        if i == args.warmup:
            started = time.perf_counter()
            if args.ready_file:
                open(args.ready_file, "w").close()
        elif i > args.warmup:
            done += 1
    elapsed = time.perf_counter() - started if started else 0
    print(json.dumps({"role": "be", "iterations": done, "iterations_per_s": done / elapsed if elapsed else 0}),
          flush=True)
