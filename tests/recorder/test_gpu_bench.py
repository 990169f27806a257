"""benchmarks/bench_gpu.py runs from a bare checkout and behaves without a GPU.

The benchmark itself needs CUDA (see docs/benchmarks.md); these tests only check that the
script starts with ``PYTHONPATH=src`` and no npusan install, exits 0 with a message when
there is no GPU, and computes its ratios against the plain runs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_exits_cleanly_without_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: running the benchmark here would take minutes")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OUT=str(tmp_path))
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written


def test_unknown_mode_is_a_usage_error(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("mode names are checked after the CUDA check")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--modes", "plain,bogus"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert proc.returncode == 2 and "bogus" in proc.stderr


def test_report_ratios_use_the_mean_of_the_plain_runs():
    bench = _load()
    results = [
        {"mode": "plain", "median_ms": 10.0, "mean_ms": 10.5},
        {"mode": "npusan", "median_ms": 21.0, "mean_ms": 22.0, "trace_bytes_per_step": 2048,
         "findings": 0, "finding_kinds": [], "analyze_s": 0.5},
        {"mode": "csan", "error": "CUDASanitizerErrors: detected 1 error"},
        {"mode": "plain", "median_ms": 11.0, "mean_ms": 11.0},
    ]
    text = bench._report(results, {"device": "X", "torch": "t", "steps": 3, "warmup": 1})
    assert results[1]["ratio_vs_plain"] == pytest.approx(2.0)
    assert results[0]["ratio_vs_plain"] == pytest.approx(10.0 / 10.5)
    assert "CUDASanitizerErrors" in text and "0 findings" in text
    assert "ratio_vs_plain" not in results[2]
