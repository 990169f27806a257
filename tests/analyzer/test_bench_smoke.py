"""The analyzer benchmark runs end to end (a small --quick run; no speed assertions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_benchmark_runs_and_reports():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_analyzer.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    ).stdout
    results = json.loads(out.strip().splitlines()[-1])
    assert results["kernels"] >= 20_000
    assert results["bytes_per_kernel"] <= 16  # the trace-size target holds at any length
    assert results["npusan_rate"] > 0
    assert 0.5 < results["rss_long_kib"] / results["rss_short_kib"] < 1.5
    assert "bytes per kernel event" in out and "peak RSS" in out
