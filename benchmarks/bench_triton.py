"""A hand-written Triton kernel's launch, recorded vs not (Triton's interpreter, CPU,
simulated device).

    python benchmarks/bench_triton.py [--launches N] [--repeat R] [--block B]

Times ``--launches`` launches of a one-program vector add (``TRITON_INTERPRET=1``: the
interpreter runs it on the CPU) without npusan and with a recorder writing a trace file,
interleaved ``--repeat`` times; prints the best per-launch CPU time of each and the
difference, the recording's cost per launch. An interpreted launch costs milliseconds, so
that difference is small against it; on a GPU a compiled launch costs microseconds, so the
script also times the recording hook alone, around a launch that does nothing (what the
recording adds to a compiled launch). It checks that each recorded launch is in the trace.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import npusan  # noqa: E402
from npusan.recorder import triton_kernels  # noqa: E402
from npusan.trace_format import records as R  # noqa: E402
from npusan.trace_format.reader import TraceReader  # noqa: E402


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class _NoLaunch:
    """A kernel object whose launch does nothing: the hook's own cost, measured alone."""

    def __init__(self) -> None:
        self.fn = add.fn
        self.arg_names = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]


def cpu_per_call(call, n: int) -> float:
    c0 = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - c0) / n


def kernels_in(path: str) -> int:
    with TraceReader(path) as r:
        return sum(1 for rec in r.records() if rec[0] == R.KERNEL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--block", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(1)
    n = a.block
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)

    def launch() -> None:
        add[(1,)](x, y, out, n, BLOCK=a.block)

    hook = triton_kernels._wrap(lambda self, *args, grid, warmup, **kw: None, interpreted=False)
    dummy = _NoLaunch()

    def hooked_noop() -> None:
        hook(dummy, x, y, out, n, grid=(1,), warmup=False, BLOCK=a.block)

    launch()  # the interpreter rewrites the kernel once
    plain, recorded, hook_only = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.repeat):
            plain.append(cpu_per_call(launch, a.launches))
            path = os.path.join(d, f"t{r}.npusan")
            with npusan.record(path, backend="sim"):
                recorded.append(cpu_per_call(launch, a.launches))
            got = kernels_in(path)
            if got != a.launches:
                print(f"error: {got} kernels recorded for {a.launches} launches", file=sys.stderr)
                return 1
            with npusan.record(os.path.join(d, f"h{r}.npusan"), backend="sim"):
                hook_only.append(cpu_per_call(hooked_noop, a.launches))
    p, rec, h = min(plain), min(recorded), min(hook_only)
    print(f"interpreted launch, BLOCK={a.block}, best of {a.repeat} x {a.launches} (CPU time):")
    print(f"  unrecorded  {p * 1e6:9.1f} us/launch")
    print(f"  recorded    {rec * 1e6:9.1f} us/launch  (+{(rec - p) * 1e6:.1f} us, {rec / p:.3f}x)")
    print(f"  recording hook alone (launch that does nothing): {h * 1e6:.1f} us/launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
