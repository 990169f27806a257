"""benchmarks/gpu_fidelity.py: its table runs as the tests it copies, and its verdicts.

The real column needs a GPU; here two rows run emulated only (``--no-real``), which is
what the script does on a machine without CUDA.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_fidelity.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_fidelity", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)
    return mod


def test_two_rows_run_emulated_and_meet_what_the_tests_expect(tmp_path):
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    p = subprocess.run([sys.executable, str(SCRIPT), "--no-real", "--jobs", "2", "--out", str(tmp_path),
                        "--only", "prefetch no-wait", "--only", "inline apis"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "real column skipped" in p.stdout
    doc = json.loads((tmp_path / "gpu_fidelity.json").read_text())
    got = {r["name"]: (r["verdict"], r["emulated"]["analyze_rc"], r["emulated"]["kinds"]) for r in doc["rows"]}
    assert got == {"prefetch no-wait": ("emulated ok", 1, ["data-race"]), "inline apis": ("emulated ok", 0, [])}
    assert (tmp_path / "gpu_fidelity.txt").read_text() == p.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["gpu_fidelity.json", "gpu_fidelity.txt"]  # no traces left


def _res(kinds, rc=1, record_rc=0):
    return {"record_rc": record_rc, "stdout_missing": [], "analyze_rc": rc, "kinds": kinds, "findings": len(kinds)}


def test_verdicts():
    g = _load()
    exact = g.Row("x", "p", (), 1, ("data-race",))
    at_least = g.Row("y", "p", (), 1, ("missing-record-stream",), exact=False)
    assert g.verdict(exact, _res(["data-race"]), _res(["data-race"]), True) == "agree"
    assert g.verdict(exact, _res(["data-race"]), None, False) == "emulated ok"
    assert g.verdict(exact, _res([], rc=0), _res(["data-race"]), True) == "NO: emulated != expected"
    assert g.verdict(exact, _res(["data-race"]), _res(["data-race"], record_rc=1), True) == "NO: real != expected"
    both = ["missing-record-stream", "reuse-race"]
    assert g.verdict(at_least, _res(both), _res(["missing-record-stream"]), True) == "NO: real != emulated"
    assert g.verdict(at_least, _res(both), _res(both), True) == "agree"


def test_inline_programs_are_the_tests_own():
    g = _load()
    assert set(g.INLINE) == set(g.INLINE_FROM)
    for name, src in g.INLINE.items():
        test = (ROOT / g.INLINE_FROM[name]).read_text()
        for line in src.splitlines():
            assert line in test, (name, line)
    for row in g.rows():
        assert row.prog in g.INLINE or (ROOT / row.prog).is_file(), row
        assert (ROOT / row.cite).is_file(), row


def test_the_table_shows_a_disagreement_and_the_failing_runs_stderr():
    """The real-device path of the report, which only a GPU machine runs for real."""
    g = _load()
    ok, bad = g.Row("prefetch no-wait", "p", (), 1, ("data-race",)), g.Row("graphs race", "q", (), 1, ("data-race",))
    real_bad = dict(_res([], rc=None), record_rc=1, kinds=None, stderr_tail="RuntimeError: boom", record_s=3.0)
    results = []
    for row, emu, real in [(ok, _res(["data-race"]), _res(["data-race"])), (bad, _res(["data-race"]), real_bad)]:
        emu.update(stderr_tail="", record_s=1.0)
        real.setdefault("stderr_tail", "")
        real.setdefault("record_s", 7.0)
        results.append({"name": row.name, "argv": [row.prog], "cite": "t.py", "expected": g._expected(row),
                        "emulated": emu, "real": real, "verdict": g.verdict(row, emu, real, True)})
    meta = {"device": "GPU", "torch": "t", "jobs": 2, "wall_s": 9.0, "real": True, "real_skipped": None,
            "not_run_extra": []}
    text = g.render(results, meta)
    assert "rc1 data-race (1) 7s" in text and "| agree" in text
    assert "RECORD rc=1 3s" in text and "NO: real != expected" in text
    assert "1 of 2 rows agree; 1 do not:" in text
    assert "real stderr (last 15 lines):\n      RuntimeError: boom" in text
    assert "real recordings: 10 s in all, slowest 7 s" in text
