"""Muting the recording in one thread (what a runtime does on the user's behalf while it
stands in for one kernel: Triton's interpreter copying its arguments)."""

from __future__ import annotations

import threading

import torch

import npusan
from npusan import sim
from npusan.recorder.quiet import ANY, is_muted, muted
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader


def _kernels(path) -> list:
    with TraceReader(str(path)) as r:
        return [r.symbols.string(rec[2]) for rec in r.records() if rec[0] == R.KERNEL]


def test_muted_ops_are_not_recorded_and_nesting_unwinds(tmp_path):
    trace = tmp_path / "t.npusan"
    x = torch.zeros(8)
    with npusan.record(str(trace), backend="sim"):
        x.add_(1)
        with muted():
            with muted():
                x.mul_(2)
                assert is_muted()
            x.sub_(1)
            assert is_muted()
        assert not is_muted() and ANY[0] == 0
        x.div_(1)
    assert _kernels(trace) == ["aten::add_.Tensor", "aten::div_.Tensor"]
    assert torch.equal(x, torch.ones(8))  # muted ops still run


def test_muting_one_thread_leaves_the_others_recorded(tmp_path):
    trace = tmp_path / "t.npusan"
    x, y = torch.zeros(8), torch.zeros(8)
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait(10)
        y.add_(1)  # while the main thread is muted
        done.set()

    with npusan.record(str(trace), backend="sim"):
        t = threading.Thread(target=other)
        t.start()
        with muted():
            inside.set()
            done.wait(10)
            x.add_(1)
        t.join()
        sim.synchronize()
    assert _kernels(trace) == ["aten::add_.Tensor"]  # y's, not x's
    assert torch.equal(x, torch.ones(8)) and torch.equal(y, torch.ones(8))
