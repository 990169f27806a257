"""The run notes say once that a trace recorded part of the program coarsely (its NOTE
records starting with the ``coarse: `` prefix), however many traces and notes say it."""

from __future__ import annotations

import npusan
from npusan.trace_format import TraceWriter
from npusan.trace_format.records import COARSE_NOTE_PREFIX


def _trace(path, notes):
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.memory_allocated(0x1000, 0, size=64)
        for text in notes:
            w.note("info", text)
        w.kernel(0, "aten::k", reads=[0x1000])


def test_said_once_over_traces_and_repeats(tmp_path):
    text = COARSE_NOTE_PREFIX + "compiled code recorded as one access per region"
    _trace(tmp_path / "a.npusan", [text, text])
    _trace(tmp_path / "b.npusan", [text])
    _trace(tmp_path / "c.npusan", ["an ordinary note"])
    out = npusan.analyze(*(str(tmp_path / n) for n in ("a.npusan", "b.npusan", "c.npusan"))).render("text")
    assert out.count("recorded coarsely") == 1
    assert "recorded coarsely (in 2 traces): compiled code recorded as one access per region" in out
    assert "ordinary" not in out


def test_nothing_said_without_such_a_note(tmp_path):
    _trace(tmp_path / "a.npusan", ["recording stopped"])
    assert "coarsely" not in npusan.analyze(str(tmp_path / "a.npusan")).render("text")
