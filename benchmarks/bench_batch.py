"""Batch analysis benchmark: 64 traces of 200k kernels, --jobs 2 vs --jobs 1, memory per
worker, and a Dask LocalCluster with 2 workers vs --jobs 2.

    .venv/bin/python benchmarks/bench_batch.py            # the full run (several minutes)
    .venv/bin/python benchmarks/bench_batch.py --quick    # a small smoke run (docs untouched)

One trace of the analyzer benchmark's synthetic program (4 streams, hand-offs, reallocation;
see bench_analyzer.py) is written and copied 64 times into a directory; every run is
``npusan analyze DIR --format json`` in a fresh process (what a CI job runs), timed by wall
clock. Targets: --jobs 2 at most 0.6x the time of --jobs 1 on a 2-core machine; the peak
RSS of a worker the same for 16 and for 64 traces (flat: a worker holds one trace at a time);
a 2-worker LocalCluster (``--scheduler``, workers opening the paths) within 1.3x of --jobs 2.

The cluster run in a fresh process pays a fixed cost that --jobs 2 does not: importing Dask's
client and connecting to the scheduler. To show what that fixed cost is and what the
analysis itself costs on the cluster, the same comparison is also made (a) through the
Python API in this process, where a long-running job has Dask imported and a client
connected already (``npusan.analyze(DIR, jobs=2)`` against ``npusan.analyze(DIR,
scheduler=client)``), and (b) with the command on 4x as many traces (a bigger night).
Results go to stdout and to the "Batch analysis" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_analyzer import machine, update_docs, write_trace  # noqa: E402

NPUSAN = [sys.executable, "-c", "import sys; from npusan.cli import main; sys.argv[0] = 'npusan'; main()"]


def analyze(target: str, *options: str) -> tuple[float, int]:
    """Wall seconds of one ``npusan analyze`` run, and the largest peak RSS (KiB) among the
    processes it waited for (its workers), or its own when it has none."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([*NPUSAN, "analyze", target, "--format", "json", "-o", os.devnull, *options],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"npusan analyze failed ({proc.returncode}): {proc.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(before, after) if after > before else after


def worker_rss(target: str, jobs: int) -> int:
    """Peak RSS (KiB) of the largest worker of ``--jobs N`` over ``target``, in a fresh process."""
    code = (
        "import resource, sys; from npusan.analyzer.runs.batch import BatchOptions, analyze_inputs;"
        f"analyze_inputs([{target!r}], BatchOptions(jobs={jobs}));"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def machine_parallelism(tasks: int = 8, n: int = 3_000_000) -> float:
    """Wall time of ``tasks`` pure-CPU tasks in 2 processes over 1 process: roughly what this
    shared machine gives two workers right now (1.0: no second core to be had; 0.5: two)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    for _ in range(tasks):
        _spin(n)
    serial = time.perf_counter() - t0
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_spin, [n] * 2))  # workers started
        t0 = time.perf_counter()
        list(pool.map(_spin, [n] * tasks))
        return (time.perf_counter() - t0) / serial


def rss_text(rss_q: int, rss_f: int, n_quarter: int, n_traces: int) -> str:
    """The worker memory comparison in words; 'not measured' where there was no worker
    (one trace: --jobs 2 analyzes it in its own process) to compare."""
    if not (rss_q and rss_f):
        return f"not measured ({n_traces} trace{'s' if n_traces != 1 else ''}: --jobs 2 started no worker)"
    return (f"{rss_q / 1024:.1f} MiB over {n_quarter} traces, {rss_f / 1024:.1f} MiB over {n_traces} "
            f"-> {rss_f / rss_q:.2f}x")


def best(runs: int, fn, *args, **kwargs) -> float:
    return min(fn(*args, **kwargs)[0] for _ in range(runs))


def api_wall(target: str, **options) -> tuple[float, int]:
    """Wall seconds of ``npusan.analyze(target, **options)`` in this process (and 0)."""
    import npusan

    t0 = time.perf_counter()
    npusan.analyze(target, **options)
    return time.perf_counter() - t0, 0


def import_wall() -> float:
    """Wall seconds of ``import distributed`` in a fresh process (best of 3)."""
    code = "import time; t = time.perf_counter(); import distributed; print(time.perf_counter() - t)"
    return min(float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                    text=True).stdout.split()[-1]) for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 traces of 20k kernels; docs are not updated")
    ap.add_argument("--traces", type=int, default=None)
    ap.add_argument("--kernels", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None, help="runs per configuration (best is kept)")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    n_traces = args.traces or (8 if args.quick else 64)
    n_kernels = args.kernels or (20_000 if args.quick else 200_000)
    repeats = args.repeats or (1 if args.quick else 2)
    if n_traces < 1:
        ap.error("--traces must be at least 1")
    # The memory check compares a worker over a quarter of the traces with one over all of
    # them; --jobs 2 starts workers only for 2 traces or more, so the quarter has at least 2.
    n_quarter = min(n_traces, max(2, n_traces // 4))

    tmp = tempfile.mkdtemp(prefix="npusan-batch-")
    try:
        print(f"machine: {machine()}")
        one = os.path.join(tmp, "one.npusan")
        t0 = time.perf_counter()
        kernels = write_trace(one, n_kernels)
        print(f"wrote one trace of {kernels:,} kernels ({os.path.getsize(one) / 1e6:.1f} MB) in "
              f"{time.perf_counter() - t0:.1f} s; copying it {n_traces} times")
        night = os.path.join(tmp, "night")
        quarter = os.path.join(tmp, "quarter")
        big = os.path.join(tmp, "big")
        os.makedirs(night)
        os.makedirs(quarter)
        os.makedirs(big)
        for i in range(n_traces):
            shutil.copyfile(one, os.path.join(night, f"rank{i:03d}.npusan"))
            if i < n_quarter:
                shutil.copyfile(one, os.path.join(quarter, f"rank{i:03d}.npusan"))
        for i in range(4 * n_traces):
            os.link(one, os.path.join(big, f"rank{i:03d}.npusan"))

        load0 = os.getloadavg()[0]
        par = min(machine_parallelism() for _ in range(2))
        print(f"this machine now: pure-CPU work in 2 processes takes {par:.2f}x of 1 process (a gauge of the free second vCPU)")
        t1 = best(repeats, analyze, night, "--jobs", "1")
        print(f"--jobs 1: {t1:.1f} s ({n_traces * kernels / t1 / 1e6:.2f} M kernels/s)")
        t2 = best(repeats, analyze, night, "--jobs", "2")
        print(f"--jobs 2: {t2:.1f} s -> {t2 / t1:.2f}x of --jobs 1 (target <= 0.6x)")
        rss_q = worker_rss(quarter, 2) if n_traces >= 2 else 0
        rss_f = worker_rss(night, 2) if n_traces >= 2 else 0
        rss_line = rss_text(rss_q, rss_f, n_quarter, n_traces)
        print(f"peak RSS of a --jobs 2 worker: {rss_line} (target: flat, <= 1.1x)")
        td = None
        if not args.no_dask:
            ta2 = best(repeats, api_wall, night, jobs=2)  # before Dask starts threads here (workers fork)
            tb2 = best(repeats, analyze, big, "--jobs", "2")
            t_imp = import_wall()
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                              silence_logs=50) as cluster:
                address = cluster.scheduler_address
                analyze(night, "--scheduler", address)  # warm the workers' imports
                td = best(repeats, analyze, night, "--scheduler", address)
                tbd = best(repeats, analyze, big, "--scheduler", address)
                with Client(address) as client:
                    tad = best(repeats, api_wall, night, scheduler=client)
            print(f"LocalCluster, 2 workers: {td:.1f} s -> {td / t2:.2f}x of --jobs 2 (target <= 1.3x)")
            print(f"  import distributed alone, fresh process: {t_imp:.2f} s")
            print(f"  API in one process, client connected: --jobs 2 {ta2:.2f} s, cluster {tad:.2f} s -> {tad / ta2:.2f}x")
            print(f"  {4 * n_traces} traces: --jobs 2 {tb2:.1f} s, cluster {tbd:.1f} s -> {tbd / tb2:.2f}x")
        load1 = os.getloadavg()[0]
        print(f"load average (1 min) before/after: {load0:.1f} / {load1:.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.quick or args.no_docs:
        return
    today = datetime.date.today().isoformat()
    dask_line = (f"| LocalCluster, 2 workers (`--scheduler`, paths) | {td:.1f} s | {td / t2:.2f}x of --jobs 2 | <= 1.3x |\n"
                 f"| API in one process: `jobs=2` | {ta2:.2f} s | | |\n"
                 f"| API in one process: `scheduler=client` (connected) | {tad:.2f} s | {tad / ta2:.2f}x of `jobs=2` | |\n"
                 f"| {4 * n_traces} traces, `--jobs 2` | {tb2:.1f} s | | |\n"
                 f"| {4 * n_traces} traces, LocalCluster | {tbd:.1f} s | {tbd / tb2:.2f}x of --jobs 2 | |\n"
                 if td is not None else "")
    import_line = (f"`import distributed` alone takes {t_imp:.2f} s in a fresh process (best of 3): the cluster run pays it, "
                   "--jobs 2 does not.\n\n" if td is not None else "")
    section = f"""## Batch analysis

`python benchmarks/bench_batch.py` ({today}; {machine()}; shared VM, load average
{load0:.1f} before, {load1:.1f} after). {n_traces} traces of {kernels:,} kernels each (copies of one
trace of the analyzer benchmark's program), analyzed as one directory by `npusan analyze DIR
--format json` in a fresh process; wall clock, best of {repeats}.

| configuration | time | ratio | target |
|---|---|---|---|
| `--jobs 1` | {t1:.1f} s | 1.00x | |
| `--jobs 2` | {t2:.1f} s | {t2 / t1:.2f}x of --jobs 1 | <= 0.6x |
{dask_line}
{import_line}Measured in the same run: pure-CPU work (a Python loop) split over 2 processes took {par:.2f}x
the time of 1 process: a rough gauge of how much of the second vCPU was free at that moment.

Peak RSS of the largest `--jobs 2` worker: {rss_line}: a worker holds one trace at a time, so its
memory does not grow with the number of traces.

"""
    print(f"updated {update_docs(section, 'Batch analysis')}")


if __name__ == "__main__":
    main()
