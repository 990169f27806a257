"""Analyzer rate on CUDA graph launches (format 1.3): a 1,000-kernel graph captured once and
launched many times, against the same kernels written out one record each.

A launch is one record in the trace; the analyzer replays the captured kernels at each
launch. Printed: kernels replayed per second by each engine for both traces, and the
trace sizes.

    python benchmarks/bench_graphs.py [LAUNCHES]
"""

from __future__ import annotations

import io
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))

from npusan.analyzer.replay import native  # noqa: E402
from npusan.analyzer.replay import traces as replay  # noqa: E402
from npusan.trace_format.writer import TraceWriter  # noqa: E402

KERNELS = 1000
BLOCKS = 64
SIDE = 0x10


def _program(w, stream):
    for k in range(KERNELS):
        a, b = k % BLOCKS, (k * 7 + 3) % BLOCKS
        w.kernel(stream, "aten::add", reads=[0x100000 * (a + 1)], writes=[0x100000 * (b + 1)],
                 stack=[("model.py", 10 + k % 50, "forward")])


def trace(launches: int, graph: bool) -> bytes:
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        for i in range(BLOCKS):
            w.memory_allocated(0x100000 * (i + 1), 0, size=4096)
        w.stream_created(SIDE)
        if graph:
            w.graph_begin(1, 0)
            _program(w, 0)
            w.graph_end(1)
        for _ in range(launches):
            if graph:
                w.graph_launch(1, 0)
            else:
                _program(w, 0)
            w.kernel(SIDE, "aten::copy_", reads=[0x100000], writes=[])  # outside work between launches
    return buf.getvalue()


def rate(data: bytes, engine: str) -> float:
    os.environ["NPUSAN_ENGINE"] = engine
    t = time.perf_counter()
    _, summary = replay.analyze_trace(io.BytesIO(data))
    return summary.kernels / (time.perf_counter() - t)


def main() -> None:
    launches = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    engines = ["native", "python"] if native.available() else ["python"]
    for graph in (True, False):
        data = trace(launches, graph)
        what = "graph launches " if graph else "plain kernels  "
        rates = ", ".join(f"{e} {rate(data, e) / 1e6:.2f} M kernels/s" for e in engines)
        print(f"{what} {launches} x {KERNELS} kernels, trace {len(data) / 1e6:.2f} MB: {rates}")


if __name__ == "__main__":
    main()
