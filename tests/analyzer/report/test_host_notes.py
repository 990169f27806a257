"""The run notes say once what the host watch did not see: accesses outside torch ops when
the page-fault watch was off (and why), or the part of pinned memory it left to torch ops;
nothing when it watched everything."""

from __future__ import annotations

import npusan
from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R

SEEN = "host accesses outside torch ops (numpy views, raw pointers) are not seen"


def _trace(path, watch, notes):
    with TraceWriter(str(path), backend="cuda",
                     header={"default_streams": {0: 0}, R.HOST_ACCESSES_KEY: watch}) as w:
        w.memory_allocated(0x1000, 0, size=64)
        for text in notes:
            w.note("info", text)
        w.kernel(0, "aten::k", reads=[0x1000])


def _notes(*paths):
    return npusan.analyze(*(str(p) for p in paths)).render("text")


def test_off_says_why_once(tmp_path):
    off = [R.HOST_WATCH_NOTE, R.HOST_FAULTS_OFF_NOTE + "off, set NPUSAN_HOST_FAULTS=1 to turn it on"]
    _trace(tmp_path / "a.npusan", R.HOST_WATCH_TORCH, off)
    _trace(tmp_path / "b.npusan", R.HOST_WATCH_TORCH, off)
    out = _notes(tmp_path / "a.npusan", tmp_path / "b.npusan")
    assert out.count(SEEN) == 1
    assert f"(in 2 traces): {SEEN} (page-fault watch: off, set NPUSAN_HOST_FAULTS=1 to turn it on)" in out


def test_on_says_nothing_unless_it_left_memory_to_torch_ops(tmp_path):
    _trace(tmp_path / "a.npusan", R.HOST_WATCH_FAULTS, [R.HOST_WATCH_NOTE])
    assert SEEN not in _notes(tmp_path / "a.npusan")
    why = "a pinned buffer that does not start on a page boundary"
    _trace(tmp_path / "b.npusan", R.HOST_WATCH_FAULTS, [R.HOST_WATCH_NOTE, R.HOST_FAULTS_PART_NOTE + why])
    out = _notes(tmp_path / "b.npusan")
    assert f"some {SEEN} (page-fault watch: {why})" in out
