"""The analyzer benchmark runs end to end (a small --quick run; no speed assertions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_benchmark_runs_and_reports():
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_analyzer.py"), "--quick", "--json",
         "--shapes", "own,pool,ranged16"],
        capture_output=True,
        text=True,
        timeout=280,
        check=True,
    ).stdout
    results = json.loads(out.strip().splitlines()[-1])
    rows = {r["shape"]: r for r in results["rows"]}
    assert set(rows) == {"own", "pool", "ranged16"}
    for r in rows.values():
        assert r["kernels"] >= 20_000 and r["native_rate"] > 0 and r["python_rate"] > 0
        assert 0 < r["native_rate_median"] <= r["native_rate"]  # best and median of the rounds
    assert rows["own"]["bytes_per_kernel"] <= 16  # the trace-size target holds at any length
    assert rows["pool"]["findings"] == 0  # the turns are synchronized: nothing to report
    assert 0.5 < results["rss_long_kib"] / results["rss_short_kib"] < 1.5
    assert "peak RSS" in out and "npusan analyze on a" in out
