"""Timeline export benchmark: peak memory of `npusan export --all` on a trace and on one 4x longer.

    .venv/bin/python benchmarks/bench_export.py            # 50k and 200k steps (a few minutes)
    .venv/bin/python benchmarks/bench_export.py --quick    # 5k and 20k steps

Each step of the synthetic program allocates a block, writes it on the default stream,
hands it to a side stream (event record + wait), reads it there, record_streams and frees
it: two kernels and six other records. Each export runs in a fresh subprocess and reports
its peak RSS (ru_maxrss) and time; the baseline, measured in the same run, is the same
document built in memory and written with one ``json.dumps`` (how export worked before it
streamed). Flat memory means the streaming export's peak barely moves when the trace gets
4x longer, while the baseline's grows with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from npusan.trace_format import TraceWriter  # noqa: E402


def make_trace(path: str, steps: int) -> None:
    with TraceWriter(path, backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(5, stack=[("bench.py", 1, "main")])
        for i in range(steps):
            p = 0x10000 + (i % 64) * 0x1000
            w.memory_allocated(p, 0, 4096, stack=[("bench.py", 2, "main")])
            w.kernel(0, "aten::add_", writes=[p], stack=[("bench.py", 3, "main")])
            w.event_created(100)
            w.event_recorded(100, 0)
            w.event_waited(100, 5)
            w.kernel(5, "aten::mul", reads=[p], stack=[("bench.py", 4, "main")])
            w.record_stream(p, 5)
            w.memory_freed(p)


CHILD = """
import json, resource, sys, time
sys.path.insert(0, {src!r})
from npusan.analyzer.export.timeline import ExportLimits, export_chrome, write_chrome
mode, trace, out = sys.argv[1:4]
t = time.perf_counter()
with open(out, "w") as f:
    if mode == "stream":
        write_chrome(trace, f, ExportLimits())
    else:
        f.write(json.dumps(export_chrome(trace), separators=(",", ":"), ensure_ascii=False))
print(json.dumps({{"seconds": time.perf_counter() - t,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def run(mode: str, trace: str, out: str) -> dict:
    code = CHILD.format(src=os.path.join(ROOT, "src"))
    proc = subprocess.run([sys.executable, "-c", code, mode, trace, out], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args()
    steps = args.steps or (5_000 if args.quick else 50_000)
    with tempfile.TemporaryDirectory() as d:
        rows = {}
        for n in (steps, 4 * steps):
            trace = os.path.join(d, f"t{n}.bin")
            make_trace(trace, n)
            for mode in ("stream", "memory"):
                out = os.path.join(d, f"{mode}{n}.json")
                rows[(mode, n)] = run(mode, trace, out) | {"json_mib": os.path.getsize(out) / 2**20}
        print(f"kernels | mode | peak RSS MiB | seconds | JSON MiB   (python {sys.version.split()[0]})")
        for (mode, n), r in rows.items():
            print(f"{2 * n:>7} | {mode:6} | {r['rss_mib']:12.1f} | {r['seconds']:7.1f} | {r['json_mib']:.1f}")
        for mode in ("stream", "memory"):
            ratio = rows[(mode, 4 * steps)]["rss_mib"] / rows[(mode, steps)]["rss_mib"]
            print(f"{mode}: peak RSS at 4x the kernels = {ratio:.2f}x")


if __name__ == "__main__":
    main()
