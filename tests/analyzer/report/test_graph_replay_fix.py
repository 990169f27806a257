"""A race of a kernel a graph launch replayed: the report says which launch ran it, and the
fix goes at that launch (``g.replay()``), not inside the capture, where a wait would be
captured into the graph and order nothing outside it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

from npusan.analyzer.report.describe import fix

from tests.analyzer.replay.differential import replay_path
from tests.analyzer.replay.test_graph_launch_sites import _program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HEADER = {"backend": "cuda", "default_streams": {0: 0}}


def _race():
    _, found = replay_path(_program(), "records")
    (f,) = [f for f in found if f.kind.value == "data-race"]
    return f


def test_the_fix_waits_right_before_the_launch_line():
    lines = fix(_race(), HEADER)
    assert "right before line 20 add" in lines[0], lines
    assert "line 11" not in lines[0]  # not inside the capture
    assert lines[1].strip().startswith("torch.cuda.current_stream().wait_stream(")
    assert any("captured in a graph" in ln and "p.py:20" in ln for ln in lines), lines


def test_a_kernel_the_program_ran_itself_gets_the_fix_it_always_had():
    f = _race()
    plain = dataclasses.replace(f, access=dataclasses.replace(f.access, replay=None))
    lines = fix(plain, HEADER)
    assert "right before line 11 add" in lines[0], lines
    assert not any("captured in a graph" in ln for ln in lines)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
    return env


def test_the_text_report_names_the_launch(tmp_path):
    trace = tmp_path / "t.npusan"
    trace.write_bytes(_program())
    p = subprocess.run([sys.executable, "-m", "npusan", "analyze", str(trace)], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    out = p.stdout
    assert "replayed:  by the graph launch at p.py:20 on default stream (cuda:0); captured at p.py:10" in out, out
    assert "right before line 20 add" in out


def test_an_earlier_access_a_launch_replayed_is_waited_for_at_its_launch():
    f = _race()
    swapped = dataclasses.replace(f, access=f.previous, previous=f.access)  # the launch's read came first
    lines = fix(swapped, HEADER)
    assert "wait for the read at p.py:20; right before line 19 add" in lines[0], lines
    assert any("it ran when the graph was launched at p.py:20" in ln for ln in lines), lines


def test_the_json_and_html_reports_name_the_launch(tmp_path):
    import json

    trace = tmp_path / "t.npusan"
    trace.write_bytes(_program())
    p = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(trace)], env=_env(),
                       capture_output=True, text=True, timeout=120)
    (f,) = json.loads(p.stdout)["findings"]
    r = f["access"]["replay"]
    assert [fr["line"] for fr in r["stack"]] == [20] and [fr["line"] for fr in r["captured_at"]] == [10]
    assert r["stream"]["default"] and f["previous"]["replay"] is None
    html = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "html", "-o", str(html), str(trace)],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert "by the graph launch at p.py:20" in html.read_text(), p.stderr
