"""Strided views end to end: real PyTorch programs under ``npusan record --backend sim``.

Two streams writing disjoint strided views of one tensor (column halves, interleaved rows,
NCHW channels, transposed slices, ``as_strided`` rows, ``unfold`` windows) without
synchronizing are correct programs: the views share no byte. The same programs with views
that really overlap race, and each race is found at its own line.
"""

from __future__ import annotations

import pytest
import torch

import npusan
from npusan import sim
from npusan.trace_format import records as R

from .conftest import analyze, line_of, records, run_record, user_lines

PROLOGUE = """
import torch
from npusan import sim

cur = sim.current_stream()
s1, s2 = sim.Stream(), sim.Stream()
buf = torch.zeros(64, 64)
x = torch.zeros(4096)
img = torch.zeros(2, 3, 8, 8)
t = torch.zeros(16, 16)
a = torch.zeros(100)
u = torch.zeros(64)
s1.wait_stream(cur)
s2.wait_stream(cur)
"""

CORRECT = PROLOGUE + """
with sim.stream(s1):
    buf[:, :32].fill_(1)                           # column halves
    x[0::2].fill_(1)                               # interleaved elements
    img[:, 0].fill_(1)                             # NCHW channel 0
    t.t()[:8].fill_(1)                             # a transposed slice: columns 0-7 of t
    a.as_strided((5, 4), (20, 1), 0).fill_(1)      # rows of 4 every 20 elements
    u.unfold(0, 4, 8).fill_(1)                     # windows 0-3, 8-11, ...
with sim.stream(s2):
    buf[:, 32:].fill_(2)
    x[1::2].fill_(2)
    img[:, 1].fill_(2)
    img[:, 2].fill_(3)
    t.t()[8:].fill_(2)
    a.as_strided((5, 4), (20, 1), 4).fill_(2)
    u[4:].unfold(0, 4, 8).fill_(2)                 # windows 4-7, 12-15, ...
cur.wait_stream(s1)
cur.wait_stream(s2)
print(float(buf.sum()), float(x.sum()), float(img.sum()), float(t.sum()), float(a.sum()), float(u.sum()))
"""

RACY = PROLOGUE + """
with sim.stream(s1):
    buf[:, :33].fill_(1)                           # WRITE 1: one column too many
    x[0::2].fill_(1)                               # WRITE 2: evens
    img[:, 1, 2].fill_(1)                          # WRITE 3: a row of channel 1
    t.t()[:9].fill_(1)                             # WRITE 4: columns 0-8
    a.as_strided((5, 4), (20, 1), 0).fill_(1)      # WRITE 5: rows
    u.unfold(0, 4, 8).fill_(1)                     # WRITE 6: windows
with sim.stream(s2):
    buf[:, 32:].fill_(2)                           # RACE 1: column 32
    x[0::3].fill_(2)                               # RACE 2: every sixth element is even
    img[:, 1].fill_(2)                             # RACE 3: channel 1
    t.t()[8:].fill_(2)                             # RACE 4: column 8
    a.as_strided((5, 4), (20, 1), 2).fill_(2)      # RACE 5: rows shifted by 2
    u[3:].unfold(0, 4, 8).fill_(2)                 # RACE 6: windows shifted by 3
cur.wait_stream(s1)
cur.wait_stream(s2)
"""


def test_disjoint_strided_views_are_clean(tmp_path):
    proc, trace = run_record(tmp_path, CORRECT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "6144.0"  # the program computed what it computes unrecorded
    assert analyze(trace) == []
    recs, _ = records(trace)
    entries = [e for r in recs if r[0] == R.VIEWS for e in r[1:]]
    assert len(entries) == 13 and all(len(e) > 3 for e in entries)  # the 13 views, exactly


def test_overlapping_strided_views_race_at_their_lines(tmp_path):
    proc, trace = run_record(tmp_path, RACY)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    assert {f.kind.value for f in found} == {"data-race"}
    pairs = sorted((user_lines(f.access.stack)[-1], user_lines(f.previous.stack)[-1]) for f in found)
    expected = sorted((line_of(RACY, f"# RACE {i}:"), line_of(RACY, f"# WRITE {i}:")) for i in range(1, 7))
    assert pairs == expected


def test_online_mode_sees_views_as_their_bytes():
    npusan.enable(mode="raise", backend="sim")
    try:
        side = sim.Stream()
        buf = torch.zeros(8, 8)
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            buf[:, :4].fill_(1)
        buf[:, 4:].fill_(2)  # the other columns: no race
        with pytest.raises(npusan.RaceError) as ei:
            buf[:, 3:].sum()  # column 3 was written on the side stream
    finally:
        npusan.disable()
    assert "aten::sum" in str(ei.value) and "aten::fill_" in str(ei.value)
