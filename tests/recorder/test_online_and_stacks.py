"""Online mode (raise / warn, like CSAN) and stack capture (exact lines, depth, folding)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import npusan
from npusan import sim
from npusan.recorder.stacks import StackCapture
from npusan.trace_format import records as R

from .conftest import records, write_script


def _racy():
    side = sim.Stream()
    x = torch.zeros(10)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        x.add_(1)  # the earlier write
    return x * 2  # the racing read


def test_online_raise_stops_at_the_racing_op_with_both_stacks():
    npusan.enable(mode="raise", backend="sim")
    try:
        with pytest.raises(npusan.RaceError) as ei:
            _racy()
    finally:
        npusan.disable()
    msg = str(ei.value)
    assert msg.startswith("data race")
    assert "aten::mul.Tensor" in msg and "aten::add_.Tensor" in msg
    here = os.path.basename(__file__)
    assert f"{here}:{_racy.__code__.co_firstlineno + 6} in _racy" in msg  # the read
    assert f"{here}:{_racy.__code__.co_firstlineno + 5} in _racy" in msg  # the write
    assert ei.value.finding.kind.value == "data-race"
    # Worded like `npusan analyze`: streams named, and a fix to apply.
    assert "stream #1 (sim:0)" in msg and "default stream (sim:0)" in msg
    assert "\n  fix: " in msg and "wait_stream" in msg
    # Live there is no --full-stacks option: folded frames say how to see them.
    assert "--full-stacks shows them" not in msg
    if " frames (" in msg or " frame (" in msg:
        assert "npusan analyze --full-stacks" in msg


def test_online_warn_continues_and_computes_the_same(capfd):
    npusan.enable(mode="warn", backend="sim")
    try:
        y, z = [_racy() for _ in range(2)]  # the same bug twice (same stacks): reported once
    finally:
        npusan.disable()
    err = capfd.readouterr().err
    assert err.count("npusan: warning: data race") == 1
    assert torch.equal(y, torch.full((10,), 2.0)) and torch.equal(z, y)


def test_online_mode_from_environment(tmp_path):
    script = write_script(tmp_path, """
        import npusan, torch
        from npusan import sim
        s = sim.Stream()
        x = torch.zeros(4)
        s.wait_stream(sim.current_stream())
        with sim.stream(s):
            x.fill_(1)
        try:
            x.sum()
        except npusan.RaceError:
            print("caught RaceError")
        """)
    env = dict(os.environ, NPUSAN_ONLINE="raise", NPUSAN_BACKEND="sim")
    env.pop("NPUSAN_TRACE", None)
    out = subprocess.run([sys.executable, "-c", "import npusan.auto, runpy, sys; runpy.run_path(sys.argv[1])",
                          str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "caught RaceError" in out.stdout


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(
            self.lin(x)
        )


def _deep(n, f):
    return f() if n == 0 else _deep(n - 1, f)


def test_stacks_exact_lines_folded_torch_frames_and_depth(tmp_path):
    path = tmp_path / "s.npusan"
    m = Block()
    with npusan.record(str(path), backend="sim"):
        m(torch.ones(2, 4))
    recs, reader = records(path)
    sy = reader.symbols
    stacks = {}
    for r in recs:
        if r[0] == R.KERNEL and r[3] is not None:
            frames = [sy.frames[f] for f in sy.stacks[r[3]]]
            stacks[sy.strings[r[2]]] = [(sy.strings[f], line, sy.strings[fn]) for f, line, fn in frames]
    relu = stacks["aten::relu"]
    assert all("/torch/" not in f for f, _, _ in relu)  # torch's frames folded away
    assert relu[-1][1] == Block.forward.__code__.co_firstlineno + 1 and relu[-1][2] == "Block.forward"
    addmm = stacks["aten::addmm"]
    assert addmm[-1][2] == "Block.forward" and addmm[-1][1] == Block.forward.__code__.co_firstlineno + 2

    cap = StackCapture(depth=3)
    key = _deep(10, lambda: cap.key(0))
    frames = cap.resolve(key)
    assert len(frames) == 3 and [f[2] for f in frames] == ["_deep", "_deep", "test_stacks_exact_lines_folded_torch_frames_and_depth.<locals>.<lambda>"]

    full = StackCapture(depth=64, keep_internal=True)
    k2 = full.key(0)
    assert any("/_pytest/" in f[0] or "pluggy" in f[0] for f in full.resolve(k2))
    assert StackCapture(depth=0).key() is None


def test_keep_internal_frames_keeps_torch_frames(tmp_path):
    path = tmp_path / "k.npusan"
    m = Block()
    with npusan.record(str(path), backend="sim", keep_internal_frames=True):
        m(torch.ones(2, 4))
    recs, reader = records(path)
    sy = reader.symbols
    files = {sy.strings[sy.frames[f][0]] for r in recs if r[0] == R.KERNEL and r[3] is not None for f in sy.stacks[r[3]]}
    assert any(os.sep + "torch" + os.sep in f for f in files)
