"""A ``torch.compile``'d training step (CPU Inductor, simulated device), recorded vs not.

    python benchmarks/bench_compile.py [--steps N] [--repeat R] [--width W]

Compiles a small MLP's forward and backward (Inductor, C++ kernels on the CPU) and an SGD
step, warms it up (compilation is not timed: it happens once, before the first timed
round), then times ``--steps`` steps without npusan and with a recorder writing a trace
file, interleaved ``--repeat`` times; prints the best and the median per-step wall and CPU
time of each and the ratios recorded / unrecorded (target <= 1.5x; the machine's load moves
the medians, the best runs are the steadier comparison). It also checks that the recorded run compiled
(Dynamo's counters) and that each step recorded its compiled regions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
from torch._dynamo.utils import counters

import npusan
from npusan import sim  # noqa: F401 - the simulated device the recorder uses
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader


def make_step(width: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, width), torch.randn(32, 1)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def timed(step, steps: int) -> tuple:
    """(wall, CPU) seconds per step; CPU time is the steadier one on a shared machine."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: steadier timings)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    step = make_step(args.width)
    t0 = time.perf_counter()
    step()  # compiles forward and backward
    compile_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "warm.npusan")
        with npusan.record(path, backend="sim"):
            step()  # the recorder's own first-time costs (hook install, first definitions)
        plain, recorded = [], []
        for r in range(args.repeat):
            plain.append(timed(step, args.steps))
            path = os.path.join(d, f"t{r}.npusan")
            with npusan.record(path, backend="sim"):
                recorded.append(timed(step, args.steps))
        with TraceReader(path) as rd:
            ops = [rec[2] for rec in rd.records() if rec[0] == R.KERNEL]
            names = [rd.symbols.string(op) for op in ops]
    regions = sum(n.startswith("compiled:") for n in names)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, first step (compile) {compile_s:.1f} s")
    print(f"dynamo calls_captured={counters['stats']['calls_captured']}, "
          f"compiled regions recorded per step={regions / args.steps:.1f}, kernels per step={len(names) / args.steps:.1f}")
    for i, what in ((0, "wall"), (1, "CPU")):
        for how, pick in (("best", min), ("median", statistics.median)):
            p, q = pick(t[i] for t in plain), pick(t[i] for t in recorded)
            print(f"{what:4} {how:6}: unrecorded {p * 1e6:9.1f} us/step, recorded {q * 1e6:9.1f} us/step, "
                  f"ratio recorded/unrecorded {q / p:.2f}x (target <= 1.5x)")
    return 0 if regions else 1


if __name__ == "__main__":
    sys.exit(main())
