"""Report rendering benchmark: 10,000 distinct findings rendered in every format.

    .venv/bin/python benchmarks/bench_report.py            # 10,000 findings, 200,000 kernels
    .venv/bin/python benchmarks/bench_report.py --quick    # 1,000 findings, 20,000 kernels
    .venv/bin/python benchmarks/bench_report.py --profile html   # cProfile of one format

The trace is a racy training step written with the public TraceWriter: ``--causes``
batches (root causes); in each, the default stream writes ``findings / causes`` fresh
blocks, each with its own op and its own source line, and a side stream reads them without
waiting, then waits (event record + wait) before the next batch. Each read races with its
write: every finding is distinct (its own ops and stack), and one wait per batch would fix
the batch (one root cause). Filler kernels on a block of the default stream's own bring the
trace to ``--kernels``. Stacks name generated source files next to the trace (model files of
small functions), so reports quote source and suggest fixes as they do for a real program. The trace is analyzed once; then each format
renders the same report ``--rounds`` times (best time kept: CPU seconds of this process,
which a busy machine inflates less than wall time, and wall time), and the time and output size
are printed against the targets (2 s per format; the HTML page under 10 MB).

The baseline, measured in the same run (once before each format, best kept), is the JSON
report's document written with one compact ``json.dumps``: the least any report of these
findings costs to write out. Each format's time is also printed as a ratio to it, which a
shared machine's load moves far less than the seconds (both slow down together).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from npusan.trace_format import TraceWriter  # noqa: E402

DEFAULT, SIDE = 0, 0x5A5A00
BASE = 0x7F0000000000
BLOCK = 4096
FORMATS = ("text", "short", "json", "sarif", "junit", "html")
TARGET_SECONDS = 2.0
TARGET_HTML_BYTES = 10 * 1000 * 1000
#: Ops per generated function, functions per generated file (each op is one source line).
OPS_PER_FUNCTION = 8
FUNCTIONS_PER_FILE = 50


def write_sources(folder: str, ops: int) -> list:
    """Generated model files, ``OPS_PER_FUNCTION`` ops (``y = op{i}(x)``) per function and
    ``FUNCTIONS_PER_FILE`` functions per file, each called from ``main``; returns, per op,
    ``(file, line, function)`` of its line."""
    where = []
    per_file = OPS_PER_FUNCTION * FUNCTIONS_PER_FILE
    for k in range(-(-ops // per_file)):
        path = os.path.join(folder, f"model_{k}.py")
        lines = ["import torch", ""]
        for fn in range(FUNCTIONS_PER_FILE):
            lines += ["", f"def block_{fn}(x):"]
            for j in range(OPS_PER_FUNCTION):
                i = k * per_file + fn * OPS_PER_FUNCTION + j
                lines.append(f"    x = torch.ops.bench.op{i}(x)")
                where.append((path, len(lines), f"block_{fn}"))
            lines.append("    return x")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    main = os.path.join(folder, "train.py")
    with open(main, "w") as f:
        f.write("import model_0\n\n\ndef main():\n    for _ in range(10):\n        step()\n")
    return where[:ops]


def write_trace(path: str, findings: int, causes: int, kernels: int) -> None:
    folder = os.path.dirname(path)
    where = write_sources(folder, 2 * findings)
    main = os.path.join(folder, "train.py")

    def stack(op: int) -> list:
        return [(main, 6, "main"), where[op]]

    per = findings // causes
    filler = max(0, kernels - 2 * findings)
    filler_each = filler // causes
    with TraceWriter(path, backend="cuda", header={"default_streams": {0: DEFAULT}, "device_count": 1}) as w:
        w.stream_created(SIDE, stack=[(main, 5, "main")])
        w.memory_allocated(BASE, DEFAULT, BLOCK, stack=[(main, 5, "main")])
        ptr = BASE + BLOCK
        n = 0
        for c in range(causes):
            for _ in range(filler_each):
                w.kernel(DEFAULT, "aten::add_", reads=[BASE], writes=[BASE])
            blocks = []
            for _ in range(per):
                w.memory_allocated(ptr, DEFAULT, BLOCK, stack=stack(2 * n))
                w.kernel(DEFAULT, f"bench::op{2 * n}", writes=[ptr], stack=stack(2 * n))
                blocks.append((ptr, n))
                ptr += BLOCK
                n += 1
            for p, i in blocks:
                w.kernel(SIDE, f"bench::op{2 * i + 1}", reads=[p], stack=stack(2 * i + 1))
            w.event_created(c + 1)
            w.event_recorded(c + 1, DEFAULT)
            w.event_waited(c + 1, SIDE)


def analyze(path: str):
    from npusan.analyzer.runs import pipeline

    options = pipeline.AnalysisOptions.from_files(source_root=os.path.dirname(path))
    result = pipeline.replay_inputs([path], options)
    report = pipeline.make_report(result, options)
    return report, pipeline.render_options(options)


def render(fmt: str, report, options) -> str:
    from npusan.analyzer.report import get_reporter

    return get_reporter(fmt).render(report, options)


def baseline(doc: dict) -> float:
    """CPU seconds of one compact ``json.dumps`` of the JSON report's document."""
    c = time.process_time()
    json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 findings, 20,000 kernels")
    ap.add_argument("--findings", type=int, default=None)
    ap.add_argument("--causes", type=int, default=10)
    ap.add_argument("--kernels", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--profile", default=None, metavar="FORMAT", help="print a cProfile of rendering FORMAT")
    ap.add_argument("--keep", default=None, metavar="DIR", help="write the trace and the outputs to DIR")
    args = ap.parse_args()
    findings = args.findings or (1_000 if args.quick else 10_000)
    kernels = args.kernels or (20_000 if args.quick else 200_000)

    folder = args.keep or tempfile.mkdtemp(prefix="npusan-bench-report-")
    os.makedirs(folder, exist_ok=True)
    trace = os.path.join(folder, "racy.npusan")
    t = time.perf_counter()
    write_trace(trace, findings, args.causes, kernels)
    print(f"trace: {findings} findings in {args.causes} root causes, {kernels} kernels, "
          f"{os.path.getsize(trace) / 1e6:.1f} MB, written in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    report, options = analyze(trace)
    print(f"analyzed in {time.perf_counter() - t:.1f} s: {len(report.groups)} findings, "
          f"{len(report.causes)} root causes")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        render(args.profile, report, options)
        prof.disable()
        pstats.Stats(prof).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(35)
        return
    from npusan.analyzer.report.json_report import report_json

    doc = report_json(report, options)
    base = baseline(doc)
    print(f"{'format':8} {'CPU s':>8} {'wall s':>8} {'MB':>8} {'ratio':>7}  target (CPU seconds: the machine may be shared)")
    rows = []
    failed = False
    for fmt in args.formats.split(","):
        best = wall = None
        for _ in range(args.rounds):
            base = min(base, baseline(doc))
            t, c = time.perf_counter(), time.process_time()
            out = render(fmt, report, options)
            took, w = time.process_time() - c, time.perf_counter() - t
            best = took if best is None else min(best, took)
            wall = w if wall is None else min(wall, w)
        size = len(out.encode("utf-8", "surrogateescape"))
        ok = best <= TARGET_SECONDS and (fmt != "html" or size < TARGET_HTML_BYTES)
        failed |= not ok
        target = f"<= {TARGET_SECONDS:g} s" + (f", < {TARGET_HTML_BYTES / 1e6:g} MB" if fmt == "html" else "")
        rows.append((fmt, best))
        print(f"{fmt:8} {best:8.2f} {wall:8.2f} {size / 1e6:8.2f} {best / base:6.1f}x  {target}: {'ok' if ok else 'MISSED'}")
        if args.keep:
            with open(os.path.join(folder, f"report.{fmt}"), "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(out)
    print(f"baseline: the JSON document written with one json.dumps, {base:.2f} s CPU (best of {len(rows) * args.rounds + 1}); "
          "ratio: each format's CPU time / the baseline's")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
