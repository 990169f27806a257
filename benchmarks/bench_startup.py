"""What the ``npusan.pth`` start-up hook costs a Python process that does not record.

    python benchmarks/bench_startup.py [--iters N] [--repeat R]

Installing npusan puts ``npusan.pth`` into site-packages, and Python's ``site`` module runs
its one line at every interpreter start-up of the environment. With ``NPUSAN_TRACE`` and
``NPUSAN_ONLINE`` unset that line must cost next to nothing. Measured in this process, with
both variables removed from the environment:

- ``hook``: ``site.addpackage`` processing the installed ``npusan.pth`` (open, read, compile
  and run the line), what every start-up pays;
- ``baseline``: the same for a ``.pth`` whose line is ``import os`` (the least any
  executable ``.pth`` line costs), measured interleaved with ``hook``;
- ``check``: the condition alone (two dictionary lookups in ``os.environ``);
- for scale, the wall time of a whole ``python -c pass`` start-up (median of 20);
- ``npusan analyze`` on a tiny trace (10 kernels, written with ``bench_analyzer.write_trace``):
  wall and CPU time of a fresh process, best and median of ``--analyze-runs``, after one
  run that writes the bytecode cache (as an installed package has it; with
  ``PYTHONDONTWRITEBYTECODE`` set and no cache, every run compiles npusan's sources again,
  so that case is measured too, as "no bytecode cache"). Target: <= 0.3 s wall.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import site
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit


def per_call_us(fn, iters: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / iters * 1e6


def analyze_startup(runs: int, cached: bool) -> tuple:
    """``(wall best, wall median, cpu best, cpu median)`` of ``npusan analyze`` on a tiny trace."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_analyzer import write_trace

    script = os.path.join(os.path.dirname(sys.executable), "npusan")
    cmd = [script] if os.path.isfile(script) else [sys.executable, "-m", "npusan"]
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "tiny.npusan")
        write_trace(trace, 10)
        if cached:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            subprocess.run(cmd + ["analyze", trace], env=env, capture_output=True)  # writes the bytecode
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            import npusan

            for folder, dirs, _ in os.walk(os.path.dirname(npusan.__file__)):
                if "__pycache__" in dirs:
                    shutil.rmtree(os.path.join(folder, "__pycache__"))
        walls, cpus = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd + ["analyze", trace], env=env, capture_output=True)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(walls), statistics.median(walls), min(cpus), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--analyze-runs", type=int, default=9, help="runs of `npusan analyze` per case (0: skip)")
    args = ap.parse_args()

    installed = os.path.join(sysconfig.get_paths()["purelib"], "npusan.pth")
    if not os.path.isfile(installed):
        sys.exit(f"bench_startup: {installed} is missing: install npusan into this environment first")
    for var in [v for v in os.environ if v.startswith("NPUSAN_")]:
        del os.environ[var]

    with tempfile.TemporaryDirectory() as d:
        shutil.copy(installed, os.path.join(d, "npusan.pth"))
        with open(os.path.join(d, "baseline.pth"), "w") as f:
            f.write("import os\n")
        hook = lambda: site.addpackage(d, "npusan.pth", set())  # noqa: E731
        base = lambda: site.addpackage(d, "baseline.pth", set())  # noqa: E731
        hook_us, base_us = [], []
        for _ in range(3):  # interleaved, so that load changes hit both alike
            hook_us.append(per_call_us(hook, args.iters, args.repeat))
            base_us.append(per_call_us(base, args.iters, args.repeat))
    check = timeit.Timer("'NPUSAN_TRACE' in os.environ or 'NPUSAN_ONLINE' in os.environ", globals={"os": os})
    check_us = min(check.repeat(args.repeat, args.iters * 50)) / (args.iters * 50) * 1e6

    starts = []
    env = {k: v for k, v in os.environ.items()}
    for _ in range(20):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
        starts.append(time.perf_counter() - t0)
    start_ms = statistics.median(starts) * 1e3

    hook_best, base_best = min(hook_us), min(base_us)
    print(f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"npusan.pth processed (variables unset): {hook_best:8.2f} us   (runs: {', '.join(f'{x:.2f}' for x in hook_us)})")
    print(f"baseline .pth ('import os'):            {base_best:8.2f} us   (runs: {', '.join(f'{x:.2f}' for x in base_us)})")
    print(f"hook minus baseline:                    {hook_best - base_best:8.2f} us   "
          f"(ratio hook/baseline {hook_best / base_best:.2f}x)")
    print(f"the condition alone (2 lookups):        {check_us:8.3f} us")
    print(f"'python -c pass' start-up (median/20):  {start_ms:8.1f} ms   "
          f"(hook = {hook_best / (start_ms * 1e3) * 100:.3f}% of it)")
    if args.analyze_runs > 0:
        for cached, label in ((True, "bytecode cached"), (False, "no bytecode cache")):
            wb, wm, cb, cm = analyze_startup(args.analyze_runs, cached)
            print(f"npusan analyze, 10-kernel trace, {label + ':':18s} wall best {wb:.3f} s, median {wm:.3f} s; "
                  f"CPU best {cb:.3f} s, median {cm:.3f} s (runs: {args.analyze_runs}; target <= 0.3 s wall)")
        print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
