"""Kernel pairs on a real GPU for the simulator's contention model: a
compute-bound kernel (ResNet50's 3x3 convolution, batch 32) and a
memory-bound one (its batch norm), each alone, two of them one after the
other in one stream, and two at once in two streams, timed with CUDA events
(median of --repeat runs), each side a chain of --chain runs. The pairs are
those Orion measured on a V100: compute+memory, compute+compute,
memory+memory.

  --measure [--chain K]      prints one JSON line per kernel and per pair; each
                             side runs its kernel K times (default 10)
  --capture KIND [--iters N] runs KIND (conv or bn) N times, each marked with
                             torch.cuda.profiler.start()/stop(), for
                             orion-profile capture
"""
import argparse
import json
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--measure", action="store_true")
p.add_argument("--capture", choices=["conv", "bn"])
p.add_argument("--iters", type=int, default=5)
p.add_argument("--repeat", type=int, default=20)
p.add_argument("--chain", type=int, default=10)
args = p.parse_args()
if not torch.cuda.is_available():
    print("no GPU", file=sys.stderr)
    sys.exit(77)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
torch.manual_seed(0)
# ResNet50's conv2_x shapes at batch 32: 64 channels at 56x56.
x_conv = torch.randn(32, 64, 56, 56, device=dev)
w_conv = torch.randn(64, 64, 3, 3, device=dev)
x_bn = torch.randn(32, 256, 56, 56, device=dev)
mean, var = torch.zeros(256, device=dev), torch.ones(256, device=dev)


def conv():
    torch.nn.functional.conv2d(x_conv, w_conv, padding=1)


def bn():
    torch.nn.functional.batch_norm(x_bn, mean, var, training=True)


OPS = {"conv": conv, "bn": bn}

if args.capture:
    op = OPS[args.capture]
    for _ in range(args.iters):
        torch.cuda.profiler.start()
        op()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    sys.exit(0)


def timed(run):
    """Median milliseconds of `run` over --repeat runs, after warm-up.

    The GPU first spins for a few milliseconds, and the start event follows
    the spin: every launch of `run` is queued by the time the window opens,
    so it measures the GPU's time, not Python's launch rate (a 0.1 ms kernel
    costs about as much to launch from Python as to run, which once made two
    streams look slower than one)."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(10_000_000)  # cycles: ~5 ms at the H200's boost clock
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def chained(op):
    def run():
        for _ in range(args.chain):
            op()
    return run


s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()


def together(a, b):
    def run():
        main = torch.cuda.current_stream()
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.cuda.stream(s1):
            a()
        with torch.cuda.stream(s2):
            b()
        main.wait_stream(s1)
        main.wait_stream(s2)
    return run


# Per kernel run: alone_ms is one run's share of a chain of K.
for name, op in OPS.items():
    print(json.dumps({"kernel": name, "alone_ms": timed(chained(op)) / args.chain}), flush=True)
for a, b in (("conv", "bn"), ("conv", "conv"), ("bn", "bn")):
    seq = timed(lambda: (chained(OPS[a])(), chained(OPS[b])()))
    both = timed(together(chained(OPS[a]), chained(OPS[b])))
    print(json.dumps({"pair": f"{a}+{b}", "chain": args.chain, "sequential_ms": seq, "together_ms": both}), flush=True)
