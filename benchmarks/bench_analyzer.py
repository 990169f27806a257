"""Analyzer benchmark: replay rate per trace shape against CSAN and msgpack, memory, start-up.

    .venv/bin/python benchmarks/bench_analyzer.py            # the full run (several minutes)
    .venv/bin/python benchmarks/bench_analyzer.py --quick    # a small smoke run

Shapes (each a trace file; the synthetic ones are written with the public TraceWriter,
without stacks):

* ``own``: 4 streams, 2000 live blocks, each stream keeps to its own 500 (a kernel reads
  two and writes one); every 100 kernels a stream hands a block to the next stream and gets
  it back (event record + wait); a free and re-allocation every 20,000 kernels;
* ``pool``: 4 streams take turns on one pool of 2000 blocks, 50 kernels each, then an
  event record on that stream and a wait on the next (correctly synchronized);
* ``ranged16`` / ``ranged256``: as ``own``, but each access is one of 16 / 256 byte ranges
  of its block;
* ``strided``: as ``own``, but each kernel writes, instead of a block of its own, its
  stream's column quarter ``buf[:, 16*s:16*(s+1)]`` of one of 64 shared 64x64 float32
  matrices (a strided view: a VIEWS record and the exact overlap test per kernel), without
  synchronization: correct, the quarters share no byte (format 1.1: the compiled core
  replays VIEWS records itself);
* ``real``: a 2-layer transformer training loop with a prefetch stream (the next batch
  copied on a side stream, ``wait_stream`` + ``record_stream``) recorded on the simulated
  device by this script, with stacks: about half its records are allocations and frees.

For each shape, in rounds that each time every shape once (best and median reported):
npusan's ``analyze_traces`` (the compiled core when built, reading included, CPU seconds
of this process: one core), ``msgpack.Unpacker`` merely decoding the file, and CSAN's
``torch.cuda._sanitizer.EventHandler`` fed the same events (derived from the trace)
through its ``_handle_*`` methods with ``traceback.StackSummary.extract`` patched out;
once, after the rounds, the pure-Python engine (the fallback) on the recorded trace.
Also: peak RSS analyzing ``own`` and the same program 10 times longer (fresh processes),
trace bytes per kernel event, and the wall time of ``npusan analyze`` on a tiny trace.
Results go to stdout and to the "Analyzer" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import resource
import subprocess
import statistics
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from npusan.trace_format import Strided, TraceWriter  # noqa: E402

STREAMS = [0, 0x100, 0x200, 0x300]
BLOCKS_PER_STREAM = 500
BLOCK_SIZE = 0x8000
BASE = 0x7F0000000000
HANDOFF_EVERY = 100
REALLOC_EVERY = 20_000
BURST = 8  # consecutive kernels on one stream
TURN = 50  # pool shape: kernels per stream's turn
#: The shapes the issue's speed targets name (strided is measured, but not one of them).
TARGET_SHAPES = ("own", "pool", "ranged16", "ranged256")


def program(n_kernels: int, shape: str = "own", seed: int = 0):
    """A synthetic event program: yields ``(name, args...)`` tuples (TraceWriter methods)."""
    rng = random.Random(seed)
    rand = rng.randrange
    for s in STREAMS:
        yield ("stream_created", s)
    for e in range(8):
        yield ("event_created", e)
    owned = []
    next_ptr = BASE
    for s in STREAMS:
        mine = []
        for _ in range(BLOCKS_PER_STREAM):
            yield ("memory_allocated", next_ptr, s, BLOCK_SIZE)
            mine.append(next_ptr)
            next_ptr += BLOCK_SIZE
        owned.append(mine)
    if shape == "pool":
        pool = [p for mine in owned for p in mine]
        n = len(pool)
        for i in range(n_kernels):
            si = (i // TURN) % len(STREAMS)
            yield ("kernel", STREAMS[si], "aten::add", (pool[rand(n)], pool[rand(n)]), (pool[rand(n)],))
            if i % TURN == TURN - 1:
                ev = (i // TURN) % 8
                yield ("event_recorded", ev, STREAMS[si])
                yield ("event_waited", ev, STREAMS[(si + 1) % len(STREAMS)])
        return
    parts = {"ranged16": 16, "ranged256": 256}.get(shape)
    if shape == "strided":  # 64 shared 64x64 float32 matrices; stream si writes columns 16si..16si+15
        shared = []
        for _ in range(64):
            yield ("memory_allocated", next_ptr, STREAMS[0], 64 * 64 * 4)
            shared.append(next_ptr)
            next_ptr += 64 * 64 * 4
        quarters = [[Strided(p + 64 * si, (64, 16), (64, 1), 4) for p in shared] for si in range(len(STREAMS))]
    ev = 0
    for i in range(n_kernels):
        si = (i // BURST) % len(STREAMS)
        s = STREAMS[si]
        mine = owned[si]
        n = len(mine)
        r1, r2, w = mine[rand(n)], mine[rand(n)], mine[rand(n)]
        if r1 == w or r2 == w:
            r1 = r2 = mine[(mine.index(w) + 1) % n]
        reads = (r1, r2) if r1 != r2 else (r1,)
        if parts:
            width = BLOCK_SIZE // parts
            reads = tuple((p + width * rand(parts), width) for p in reads)
            writes = ((w + width * rand(parts), width),)
        elif shape == "strided":
            writes = (quarters[si][rand(64)],)
        else:
            writes = (w,)
        yield ("kernel", s, "aten::add", reads, writes)
        if i % HANDOFF_EVERY == HANDOFF_EVERY - 1:
            c = STREAMS[(si + 1) % len(STREAMS)]
            ev = (ev + 1) % 8
            yield ("event_recorded", ev, s)
            yield ("event_waited", ev, c)
            yield ("kernel", c, "aten::mul", (w,), (owned[(si + 1) % len(STREAMS)][rand(n)],))
            ev = (ev + 1) % 8
            yield ("event_recorded", ev, c)
            yield ("event_waited", ev, s)
        if i % REALLOC_EVERY == REALLOC_EVERY - 1:
            k = rand(n)
            yield ("memory_freed", mine[k])
            yield ("memory_allocated", next_ptr, s, BLOCK_SIZE)
            mine[k] = next_ptr
            next_ptr += BLOCK_SIZE


def write_trace(path: str, n_kernels: int, shape: str = "own") -> int:
    """Write a synthetic program with the public TraceWriter; return the number of kernels."""
    kernels = 0
    with TraceWriter(path, backend="sim", header={"default_streams": {0: 0}, "device_count": 1}) as w:
        kernel = w.kernel
        for item in program(n_kernels, shape):
            name = item[0]
            if name == "kernel":
                kernel(item[1], item[2], item[3], item[4])
                kernels += 1
            elif name == "memory_allocated":
                w.memory_allocated(item[1], item[2], size=item[3])
            else:
                getattr(w, name)(*item[1:])
    return kernels


def repeat_trace(src: str, dst: str, times: int) -> None:
    """Write ``dst``: the trace ``src`` with its records after the definitions repeated.

    The first copy keeps every record; later copies leave out definitions (already
    defined) and the END record, which closes the file once. A repeated program is a
    valid program (the same blocks are freed and re-allocated, events re-recorded), so
    this makes a long trace in seconds instead of minutes of TraceWriter calls.
    """
    import msgpack

    from npusan.trace_format import records as R

    with open(src, "rb") as f:
        assert f.read(len(R.MAGIC)) == R.MAGIC
        unpacker = msgpack.Unpacker(f, raw=False, strict_map_key=False)
        header = unpacker.unpack()
        recs = [r for r in unpacker]
    end = recs.pop()
    assert end[0] == R.END
    pack = msgpack.Packer(use_bin_type=True).pack
    first = b"".join(pack(r) for r in recs)
    body = b"".join(pack(r) for r in recs if r[0] not in R.DEFINITIONS)
    with open(dst, "wb") as out:
        out.write(R.MAGIC + pack(header) + first)
        for _ in range(times - 1):
            out.write(body)
        out.write(pack(end))


# ---------------------------------------------------------------------- the real trace

REAL_PROGRAM = r'''
import sys, torch
import npusan
from npusan import sim

torch.manual_seed(0)
steps = int(sys.argv[2])
layer = lambda: torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True,
                                                 dropout=0.0)
model = torch.nn.Sequential(torch.nn.Embedding(512, 64), layer(), layer(), torch.nn.Linear(64, 512))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = [torch.randint(0, 512, (8, 32)) for _ in range(4)]
with npusan.record(sys.argv[1], backend="sim", stack_depth=16):
    copy = sim.Stream()
    main = sim.current_stream()

    def prefetch(i):
        copy.wait_stream(main)
        with sim.stream(copy):
            x = batches[i % 4] * 1
        return x

    nxt = prefetch(0)
    for step in range(steps):
        main.wait_stream(copy)
        x = nxt
        x.record_stream(main)
        nxt = prefetch(step + 1)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 512), x.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def record_real(path: str, steps: int) -> None:
    """Record the transformer loop on the simulated device (in a fresh process)."""
    script = os.path.join(os.path.dirname(path), "real_loop.py")
    with open(script, "w") as f:
        f.write(REAL_PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    subprocess.run([sys.executable, script, path, str(steps)], check=True, env=env, capture_output=True)


# ---------------------------------------------------------------------- measuring


def count_kernels(path: str) -> tuple[int, int]:
    """(kernel records, all records) of a trace."""
    import msgpack

    from npusan.trace_format import records as R

    kernels = total = 0
    with open(path, "rb") as f:
        f.read(len(R.MAGIC))
        up = msgpack.Unpacker(f, raw=False, strict_map_key=False, read_size=1 << 18)
        up.unpack()
        for rec in up:
            total += 1
            kernels += rec[0] == R.KERNEL
    return kernels, total


def raw_decode_cpu(path: str) -> float:
    """CPU seconds for ``msgpack.Unpacker`` merely to decode the file."""
    import msgpack

    c0 = time.process_time()
    with open(path, "rb") as f:
        f.read(8)
        for _ in msgpack.Unpacker(f, raw=False, strict_map_key=False, read_size=1 << 18):
            pass
    return time.process_time() - c0


def analyze_cpu(path: str, engine: str) -> tuple[float, object]:
    """CPU seconds of ``analyze_traces`` with the compiled core or the Python engine."""
    from npusan.analyzer.replay.traces import analyze_traces

    saved = os.environ.get("NPUSAN_ENGINE")
    os.environ["NPUSAN_ENGINE"] = engine
    try:
        c0 = time.process_time()
        res = analyze_traces([path])
        return time.process_time() - c0, res
    finally:
        if saved is None:
            del os.environ["NPUSAN_ENGINE"]
        else:
            os.environ["NPUSAN_ENGINE"] = saved


def csan_calls(path: str, max_kernels: int) -> tuple[int, list]:
    """CSAN ``EventHandler`` calls for the events of a trace (its first ``max_kernels``
    kernels), as ``(method name, args)``: bound to a fresh handler for each timed run."""
    import msgpack

    from npusan.trace_format import records as R

    streams, blocks, strings, calls = {}, {}, {}, []
    kernels = 0

    def handle(sidx):
        dev, hd = streams[sidx]
        return hd + (dev << 48)

    def ptr(a):
        if isinstance(a, list):
            x, off = a[0], a[1]
            return (blocks[~x if x < 0 else x] + off, x < 0)
        return (blocks[~a if a < 0 else a], a < 0)

    with open(path, "rb") as f:
        f.read(len(R.MAGIC))
        up = msgpack.Unpacker(f, raw=False, strict_map_key=False, read_size=1 << 18)
        up.unpack()
        for rec in up:
            t = rec[0]
            if t == R.STREAM_DEF:
                streams[rec[1]] = (rec[2], rec[3])
            elif t == R.STR:
                strings[rec[1]] = rec[2]
            elif t == R.BLOCK_DEF:
                blocks[rec[1]] = rec[2]
            elif t == R.ALLOC:
                blocks[rec[1]] = rec[2]
                calls.append(("_handle_memory_allocation", (rec[2],)))
            elif t == R.FREE:
                calls.append(("_handle_memory_deallocation", (blocks[rec[1]],)))
            elif t == R.KERNEL:
                accs = [ptr(a) for a in rec[4:]]
                writes = {p for p, w in accs if w}
                reads = {p for p, w in accs if not w} - writes
                calls.append(("_handle_kernel_launch",
                              (handle(rec[1]), reads, writes, writes, strings.get(rec[2], "op"),
                               {p: [] for p, _ in accs})))
                kernels += 1
                if kernels >= max_kernels:
                    break
            elif t == R.STREAM_CREATED:
                calls.append(("_handle_stream_creation", (handle(rec[1]),)))
            elif t == R.EVENT_CREATED:
                calls.append(("_handle_event_creation", (rec[1],)))
            elif t == R.EVENT_DELETED:
                calls.append(("_handle_event_deletion", (rec[1],)))
            elif t == R.EVENT_RECORD:
                calls.append(("_handle_event_record", (rec[1], handle(rec[2]))))
            elif t == R.EVENT_WAIT:
                calls.append(("_handle_event_wait", (rec[1], handle(rec[2]))))
            elif t == R.EVENT_SYNC:
                calls.append(("_handle_event_synchronization", (rec[1],)))
            elif t == R.STREAM_SYNC:
                calls.append(("_handle_stream_synchronization", (handle(rec[1]),)))
            elif t == R.DEVICE_SYNC:
                calls.append(("_handle_device_synchronization", ()))
    return kernels, calls


def csan_cpu(calls: list) -> float:
    """CPU seconds of a fresh CSAN ``EventHandler`` making ``calls`` (binding them is not
    timed; CSAN reads its arguments and keeps references, it never changes them)."""
    import torch.cuda._sanitizer as csan

    csan.traceback.StackSummary.extract = classmethod(lambda cls, *a, **k: traceback.StackSummary())
    h = csan.EventHandler()
    bound = [(getattr(h, name), args) for name, args in calls]
    c0 = time.process_time()
    for fn, args in bound:
        try:
            fn(*args)
        except Exception:  # CSAN asserts on some orders (e.g. an event deleted twice): not ours to judge
            pass
    return time.process_time() - c0


def peak_rss() -> int:
    """Peak resident set size of this process in KiB (VmHWM: this address space only)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_rss_of_analysis(path: str) -> int:
    """Peak RSS (KiB) of a fresh process that analyzes ``path``."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_analyze-rss", path], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def startup_wall(runs: int) -> tuple[float, float]:
    """Best wall time of ``npusan analyze`` on a tiny trace (a fresh process each): with the
    bytecode cache written first (as an installed package has it), and without one (every
    run compiles npusan's sources, as in a shell with ``PYTHONDONTWRITEBYTECODE`` set)."""
    from bench_startup import analyze_startup

    return analyze_startup(runs, cached=True)[0], analyze_startup(runs, cached=False)[0]


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        import torch

        torch_version = f", torch {torch.__version__}"
    except ImportError:
        torch_version = ""
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}{torch_version}"


def update_docs(section: str, heading: str = "Analyzer") -> str:
    """Replace (or append) the ``## heading`` section of docs/benchmarks.md (its text up to
    the next heading: ``###`` subsections written by hand stay)."""
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^##+ |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda m: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class Shape:
    """One trace shape's file and the CPU times of its timed runs, round by round."""

    def __init__(self, name: str, path: str, csan_kernels: int) -> None:
        self.name, self.path = name, path
        self.kernels, self.records = count_kernels(path)
        self.size = os.path.getsize(path)
        self.native: list[float] = []
        self.msgpack: list[float] = []
        self.csan: list[float] = []
        self.findings = None
        try:
            self.csan_kernels, self.csan_calls = csan_calls(path, csan_kernels)
        except ImportError:  # no torch: no CSAN column
            self.csan_kernels, self.csan_calls = 0, None

    def run_once(self) -> None:
        """One timed run of each contender on this shape."""
        cpu, res = analyze_cpu(self.path, "native")
        self.native.append(cpu)
        self.findings = len(res.findings)
        self.msgpack.append(raw_decode_cpu(self.path))
        if self.csan_calls is not None:
            self.csan.append(csan_cpu(self.csan_calls))

    def row(self, python_too: bool) -> dict:
        best, med = min(self.native), statistics.median(self.native)
        row = {"shape": self.name, "kernels": self.kernels, "records": self.records,
               "bytes_per_kernel": self.size / self.kernels, "native_cpu": best,
               "native_rate": self.kernels / best, "native_rate_median": self.kernels / med,
               "records_rate": self.records / best, "msgpack_rate": self.records / min(self.msgpack),
               "findings": self.findings, "python_rate": None, "csan_rate": None, "ratio": None}
        if python_too:
            cpu, _ = analyze_cpu(self.path, "python")
            row["python_rate"] = self.kernels / cpu
        if self.csan:
            row["csan_rate"] = self.csan_kernels / min(self.csan)
            row["ratio"] = row["native_rate"] / row["csan_rate"]
        line = (f"{self.name:10s} {self.kernels:>9,} kernels ({self.records:,} records, "
                f"{self.size / self.kernels:.1f} B/kernel): native {row['native_rate']:,.0f} kernels/s "
                f"(median {row['native_rate_median']:,.0f}; {row['records_rate']:,.0f} records/s; msgpack "
                f"alone decodes {row['msgpack_rate']:,.0f} records/s)")
        if row["python_rate"]:
            line += f"; Python engine {row['python_rate']:,.0f}/s"
        if row["csan_rate"]:
            line += f"; CSAN {row['csan_rate']:,.0f}/s -> {row['ratio']:.0f}x"
        print(line + f"; {row['findings']} findings", flush=True)
        return row


def make_trace(shape: str, path: str, n: int, quick: bool) -> None:
    """Write the trace of one shape: synthetic ones with ``n`` kernels, or the recorded loop."""
    if shape == "real":
        record_real(path, 4 if quick else 40)
        return
    base = min(n, 200_000)
    write_trace(path + ".base", base, shape)
    if n > base:
        repeat_trace(path + ".base", path, n // base)
        os.unlink(path + ".base")
    else:
        os.replace(path + ".base", path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run (smoke test); docs are not updated")
    ap.add_argument("--kernels", type=int, default=None, help="kernel events per synthetic shape (default 1M)")
    ap.add_argument("--csan-kernels", type=int, default=None, help="kernels replayed by CSAN (default 100k)")
    ap.add_argument("--shapes", default="own,pool,ranged16,ranged256,strided,real")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    ap.add_argument("--_analyze-rss", dest="analyze_rss", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.analyze_rss:
        from npusan.analyzer.replay.traces import analyze_traces

        analyze_traces([args.analyze_rss])
        print(peak_rss())
        return

    from npusan.analyzer.replay import native

    n = args.kernels or (20_000 if args.quick else 1_000_000)
    n_csan = args.csan_kernels or (5_000 if args.quick else 100_000)
    repeats = 2 if args.quick else 5
    names = [s for s in args.shapes.split(",") if s]
    tmp = tempfile.mkdtemp(prefix="npusan-bench-")
    rows = []
    try:
        print(f"machine: {machine()}; compiled core: {'built' if native.available() else native.IMPORT_ERROR}")
        shapes = []
        for name in names:
            path = os.path.join(tmp, f"{name}.npusan")
            t0 = time.perf_counter()
            make_trace(name, path, n, args.quick)
            shapes.append(Shape(name, path, n_csan))
            print(f"  ({name}: trace made in {time.perf_counter() - t0:.0f} s)", flush=True)
        # Rounds, each timing every shape once: this VM's speed drifts over minutes, and a
        # slow spell then lowers one run of every shape rather than every run of one shape.
        load0 = os.getloadavg()[0]
        for r in range(repeats):
            t0 = time.perf_counter()
            for shape in shapes:
                shape.run_once()
            print(f"  (round {r + 1} of {repeats}: {time.perf_counter() - t0:.0f} s)", flush=True)
        rows = [shape.row(python_too=shape.name == "real" or args.quick) for shape in shapes]
        shapes.clear()  # (the CSAN calls)
        load1 = os.getloadavg()[0]
        own = os.path.join(tmp, "own.npusan")
        rss_short = rss_long = None
        if os.path.exists(own):
            long_ = os.path.join(tmp, "long.npusan")
            repeat_trace(own, long_, 10)
            rss_short = peak_rss_of_analysis(own)
            rss_long = peak_rss_of_analysis(long_)
            os.unlink(long_)
            print(f"peak RSS analyzing own: {rss_short / 1024:.1f} MiB; 10x longer: {rss_long / 1024:.1f} MiB "
                  f"-> {rss_long / rss_short:.2f}x (target <= 1.2x)")
        startup, startup_uncached = startup_wall(3 if args.quick else 7)
        print(f"npusan analyze on a 10-kernel trace: {startup:.3f} s wall with the bytecode cached, "
              f"{startup_uncached:.3f} s compiling every run (best of runs; target <= 0.3 s)")
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)

    results = {"rows": rows, "rss_short_kib": rss_short, "rss_long_kib": rss_long, "startup_s": startup,
               "startup_uncached_s": startup_uncached,
               "load_average": [load0, load1], "native": native.available()}
    if args.json:
        print(json.dumps(results))
    if args.quick or args.no_docs:
        return
    today = datetime.date.today().isoformat()
    synthetic = [r for r in rows if r["shape"] in TARGET_SHAPES]
    met = [r["shape"] for r in synthetic if r["native_rate"] >= 5e6 and (r["ratio"] or 0) >= 50]
    missed = [f"{r['shape']} ({' and '.join(m for m, bad in (('rate', r['native_rate'] < 5e6), ('ratio', (r['ratio'] or 0) < 50)) if bad)})"
              for r in synthetic if r["shape"] not in met]
    real = [r for r in rows if r["shape"] == "real"]
    verdict = (f"Targets (>= 5M kernel events/s and >= 50x CSAN on each synthetic shape): met by "
               f"{', '.join(met) or 'none'}" + (f"; not met by {', '.join(missed)}." if missed else "."))
    if real:
        verdict += (f" The recorded training trace replays at {real[0]['records_rate']:,.0f} records/s, "
                    f"{'faster' if real[0]['records_rate'] > real[0]['msgpack_rate'] else 'slower'} than "
                    f"msgpack alone decodes it ({real[0]['msgpack_rate']:,.0f}/s).")
    table = "\n".join(
        f"| {r['shape']} | {r['kernels']:,} | {r['native_rate']:,.0f} | {r['native_rate_median']:,.0f} | "
        f"{r['records_rate']:,.0f} | "
        f"{r['msgpack_rate']:,.0f} | {r['csan_rate'] or 0:,.0f} | {r['ratio'] or 0:,.0f}x | "
        f"{'' if r['python_rate'] is None else format(r['python_rate'], ',.0f')} |"
        for r in rows)
    section = f"""## Analyzer

Measured {today} on {machine()} (one core used; shared VM, 1-minute load average
{load0:.2f} before and {load1:.2f} after the timed runs) with
`.venv/bin/python benchmarks/bench_analyzer.py`: `analyze_traces` with the compiled core,
reading included, kernel events per CPU second of the process, the best and the median of
{repeats} rounds; each round times every shape once, so a slow spell of the VM lowers one
run of each shape, not all runs of one. CSAN is `torch.cuda._sanitizer.EventHandler`
(a fresh one each run) fed the same events (derived from each trace) through its
`_handle_*` methods with `traceback.StackSummary.extract` patched out, first {n_csan:,}
kernels, in the same rounds, best run; building its arguments is not timed. "msgpack
alone" is `msgpack.Unpacker` merely decoding the same file (records per CPU second, best
run). Rates and ratios use each contender's best run. Shapes are described in the
script's docstring.

| shape | kernels | npusan kernels/s | median | npusan records/s | msgpack alone records/s | CSAN kernels/s | npusan / CSAN | Python engine kernels/s |
|---|---|---|---|---|---|---|---|---|
{table}

| measure | result | target |
|---|---|---|
| peak RSS, own shape, {rows[0]['kernels']:,} vs 10x as many kernel events | {(rss_short or 0) / 1024:.1f} MiB vs {(rss_long or 0) / 1024:.1f} MiB ({(rss_long or 0) / (rss_short or 1):.2f}x) | <= 1.2x |
| trace size, own shape | {rows[0]['bytes_per_kernel']:.1f} bytes per kernel event | <= 16 |
| `npusan analyze` start-up on a 10-kernel trace, bytecode cached (as installed) | {startup:.3f} s wall (best of 7) | <= 0.3 s |
| the same, compiling npusan's sources every run (`PYTHONDONTWRITEBYTECODE`, no cache) | {startup_uncached:.3f} s wall (best of 7) | |

{verdict}

Rates are per CPU second of the process because this 2-core VM is shared with other jobs
and wall-clock rates swing with their load (a load average near 4 on 2 cores means the
caches are shared with twice as many busy processes as there are cores: the rates above
are lower bounds of what the same code does on a quiet core, and two runs minutes apart
differ by up to 2x). Where the time goes (cachegrind and perf; the subsections below):
`own` and `pool` spend about 800 and 900 instructions per kernel, reading the record and
applying three whole-block accesses. In ranged16 and ranged256 a kernel by a block's own
stream cannot race (everything other streams did to the block happens before it), and its
record is read straight into a queue of such accesses, made in batches (docs/native.md):
about 860 and 1,060 instructions per kernel. ranged16's state (2000 blocks of 16 parts,
about 2 MiB) fits the caches. ranged256's does not: 2000 blocks of 256 parts are over 30
MiB of part states, and its time goes largely to cache misses, which the queue overlaps by
requesting a batch's lines before it makes the accesses; the hand-offs' whole-block reads
visit every part of the block (about 185 of its instructions per kernel).
"""
    path = update_docs(section)
    print(f"updated {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
