"""PyTorch's own CUDA sanitizer (CSAN, ``torch.cuda._sanitizer``) runs under the emulator
(it reads the same ``torch.cuda._gpu_trace`` hooks npusan's CUDA backend does): one
recording of ``progs/csan.py`` runs CSAN and npusan side by side on the same programs, and
the test pins down where they agree and what CSAN misses.

| scenario                   | CSAN        | npusan                                   |
|----------------------------|-------------|------------------------------------------|
| ok_prefetch                | clean       | clean                                    |
| bug_data_race              | data race   | data-race                                |
| bug_rmw_race (in place)    | data race   | data-race                                |
| bug_missing_record_stream  | **clean**   | missing-record-stream (+ reuse-race)     |
| bug_collective_no_wait     | **clean**   | data-race (comm stream vs default)       |

CSAN has no model of the caching allocator (a free is forgotten, ``record_stream`` is not
an access to it) and sees a c10d collective as an ordinary op on the current stream (its
schema carries no alias annotation, so an in-place ``all_reduce`` is a read there, on the
stream current at the launch).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch.cuda._sanitizer")

from npusan.analyzer.replay.traces import analyze_traces  # noqa: E402
from npusan.analyzer.report.sources import user_site  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROG = Path(__file__).with_name("progs") / "csan.py"
SOURCE = PROG.read_text()
SCENARIOS = [n.name for n in ast.parse(SOURCE).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith(("ok_", "bug_"))]


def _line(marker: str) -> int:
    return next(i for i, t in enumerate(SOURCE.splitlines(), 1) if t.rstrip().endswith(marker))


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("csan")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    trace = tmp / "c.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(trace), "--",
                        sys.executable, str(PROG), *SCENARIOS],
                       env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp))
    assert p.returncode == 0, p.stderr[-4000:]
    csan = dict(line.split()[1:3] for line in p.stdout.splitlines() if line.startswith("CSAN "))
    assert set(csan) == set(SCENARIOS), p.stdout
    result = analyze_traces([str(trace)])
    found: dict = {}
    for f in result.findings:
        fn = next((fr.function for fr in reversed(f.access.stack)
                   if os.path.basename(fr.filename) == PROG.name and fr.function in SCENARIOS), "?")
        found.setdefault(fn, []).append(f)
    return csan, found, p.stderr


def test_csan_runs_under_the_emulator_and_agrees_on_the_plain_races(both):
    csan, found, stderr = both
    assert csan["ok_prefetch"] == "clean" and "ok_prefetch" not in found
    for name in ("bug_data_race", "bug_rmw_race"):
        assert csan[name] == "data-race"
        kinds = {f.kind.value for f in found[name]}
        assert kinds == {"data-race"}, (name, kinds)
        tag = name[4:]
        f = found[name][0]
        assert user_site(f.access.stack).lineno == _line(f"LATER:{tag}")
        assert user_site(f.previous.stack).lineno == _line(f"EARLIER:{tag}")
    # CSAN names the same lines (its report quotes them)
    for marker in ("LATER:data_race", "EARLIER:data_race", "LATER:rmw_race", "EARLIER:rmw_race"):
        assert f"# {marker}" in stderr, marker


def test_what_csan_misses_record_stream_and_collectives(both):
    csan, found, _ = both
    assert csan["bug_missing_record_stream"] == "clean"
    assert "missing-record-stream" in {f.kind.value for f in found["bug_missing_record_stream"]}
    assert csan["bug_collective_no_wait"] == "clean"
    fs = found["bug_collective_no_wait"]
    assert [f.kind.value for f in fs] == ["data-race"] and fs[0].previous.op == "all_reduce"
    assert set(found) == {"bug_data_race", "bug_rmw_race", "bug_missing_record_stream", "bug_collective_no_wait"}
