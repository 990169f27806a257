"""Fixes for a program whose source npusan cannot read: the trace's recorded lines (format
1.1) still name the streams and tensors, and the report says once, not per fix, why the
file was not read."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

from npusan.analyzer.report.describe import fix, tensors
from npusan.analyzer.report.sources import SourceCache

from tests.recorder.conftest import NPUSAN, analyze, run_record

from .test_safe_fixes import SIM

RACE = """
import torch
from npusan import sim


def main():
    copy_stream = sim.Stream()
    out = torch.empty(1024)
    copy_stream.wait_stream(sim.current_stream())
    with sim.stream(copy_stream):
        out.fill_(1.0)
    total = out.sum()
    xd = torch.ones(256)
    with sim.stream(copy_stream):
        y = xd * 2
    del xd
    z = torch.zeros(8)
    sim.synchronize()
    print(float(total), float(y.sum()), float(z.sum()))


main()
"""


def _recorded(tmp_path):
    proc, trace = run_record(tmp_path, RACE)
    assert proc.returncode == 0, proc.stderr
    return trace


def test_unread_source_names_come_from_the_recorded_lines(tmp_path):
    """Recorded: a race on ``out`` with ``copy_stream``, and ``xd`` freed while
    ``copy_stream`` may use it. Without any source root the fixes still say
    ``copy_stream`` and ``xd`` (the recorded creation and use lines show them), and the
    record_stream fix names the tensor as the ``tensors:`` line does."""
    trace = _recorded(tmp_path)
    found = analyze(trace)
    nowhere = SourceCache([])  # no root: nothing is read, only the recorded lines
    [race] = [f for f in found if f.kind.value == "data-race" and not f.previous.stream.is_default]
    lines = fix(race, SIM, nowhere)
    assert lines[1].strip() == "npusan.sim.current_stream().wait_stream(copy_stream)", lines
    assert "where copy_stream is stream #1 (sim:0)" in "\n".join(lines)
    assert "<s1>" not in "\n".join(lines)
    [rs] = [f for f in found if f.kind.value == "missing-record-stream"]
    lines = fix(rs, SIM, nowhere)
    assert lines[1].strip().startswith("xd.record_stream(copy_stream)    # xd: the 1.0 KiB tensor"), lines
    assert "wait_stream(copy_stream)" in lines[2]
    one = SimpleNamespace(groups=[SimpleNamespace(findings=[rs])])
    assert [t["name"] for t in tensors(one, nowhere)] == ["xd"]


def test_a_name_the_site_neither_reads_nor_assigns_in_its_function_stays_a_placeholder(tmp_path):
    """Unchecked names are used only where the recorded lines show them: a stream created in
    another function, not read on the fix line, is still ``<s1>``."""
    code = RACE.replace("def main():\n    copy_stream = sim.Stream()",
                        "def make():\n    copy_stream = sim.Stream()\n    return copy_stream\n\n\n"
                        "def main():\n    side = make()").replace("(copy_stream)", "(side)").replace(
        "    copy_stream.wait_stream", "    side.wait_stream")
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    [race] = [f for f in analyze(trace) if f.kind.value == "data-race" and not f.previous.stream.is_default]
    lines = fix(race, SIM, SourceCache([]))
    assert lines[1].strip() == "npusan.sim.current_stream().wait_stream(<s1>)", lines


def test_the_report_says_once_why_the_source_was_not_read(tmp_path):
    """``npusan analyze`` outside any git or pyproject folder: three fixes, one explanation;
    the root cause's ``tensors:`` line and its record_stream fix name the same variable."""
    trace = _recorded(tmp_path)
    os.remove(tmp_path / "prog.py")  # nor is it found next to the trace
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    out = subprocess.run([*NPUSAN, "analyze", str(trace), "--no-color"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120).stdout
    assert out.count("was not read") == 1, out
    assert out.count("the names in this fix are not checked against prog.py either") == 2, out
    assert "<s1>" not in out and "<x>" not in out
