"""Online mode numbers streams as ``npusan analyze`` does: one number per stream for the
whole run, from the trace's stream table, not per message (where "stream #1" used to name
whichever stream came first in each finding)."""

from __future__ import annotations

import re

import torch

import npusan
from npusan import sim
from npusan.analyzer.replay.traces import analyze_traces


def _two_races():
    s1, s2, s3 = sim.Stream(), sim.Stream(), sim.Stream()
    a, b = torch.zeros(10), torch.zeros(10)
    for s in (s1, s2, s3):
        s.wait_stream(sim.current_stream())
    with sim.stream(s1):
        a.add_(1)
    with sim.stream(s2):
        a.mul_(2)  # races with s1's write
        b.add_(1)
    with sim.stream(s3):
        b.mul_(2)  # races with s2's write
    sim.synchronize()


def _numbers(findings) -> dict:
    """``{stream handle: ordinal}`` over every stream the findings name."""
    out: dict = {}
    for f in findings:
        for s in (f.access.stream, f.previous.stream):
            assert out.setdefault(s.handle, s.ordinal) == s.ordinal, f"stream {s.handle:#x} numbered twice"
    return out


def test_online_messages_number_streams_like_analyze(tmp_path, capfd):
    trace = tmp_path / "online.npusan"
    rec = npusan.enable(mode="warn", backend="sim", trace=str(trace))
    try:
        _two_races()
    finally:
        npusan.disable()
    err = capfd.readouterr().err
    warnings = [w for w in err.split("npusan: warning: ")[1:] if w.startswith("data race")]
    assert len(warnings) == 2, err
    assert len(rec.found) == 2

    online = _numbers(rec.found)
    offline = _numbers(analyze_traces([str(trace)]).findings)
    assert online == offline
    assert sorted(online.values()) == [1, 2, 3], online
    # Each message names its streams by those numbers: the second race is between #2 and #3.
    first, second = (set(re.findall(r"stream #(\d+)", w)) for w in warnings)
    assert first == {"1", "2"} and second == {"2", "3"}, warnings
