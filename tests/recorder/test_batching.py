"""The recorder queues events and encodes them in batches: the trace must not depend on
when the queue is drained, and an op's allocations carry the op's own stack."""

from __future__ import annotations

import sys

import torch

import npusan
from npusan import sim
from npusan.trace_format import records as R

from .conftest import records


def _program():
    side = sim.Stream()
    w = torch.randn(4, 4)
    for _ in range(30):
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            h = torch.mm(w, w)
            h.relu_()
        sim.current_stream().wait_stream(side)
        h.record_stream(sim.current_stream())
        y = h.t() + 1.0
        del h, y


def _shape(path):
    """Record types and their non-pointer fields, in order (pointers differ per run)."""
    recs, _ = records(path)
    out = []
    for r in recs:
        if r[0] == R.ALLOC:
            out.append((r[0], r[1], r[3], r[4]))  # bid, size, stream (not the pointer)
        elif r[0] in (R.EVENT_CREATED, R.EVENT_RECORD, R.EVENT_WAIT, R.EVENT_DELETED):
            out.append((r[0],) + tuple(r[2:]))  # event ids differ per run
        else:
            out.append(tuple(x if not isinstance(x, list) else tuple(x) for x in r))
    return out


def test_trace_does_not_depend_on_the_batch_size(tmp_path):
    shapes = []
    for qmax in (1, 7, 100000):
        path = tmp_path / f"q{qmax}.npusan"
        with npusan.record(str(path), backend="sim") as rec:
            rec._qmax = rec._kmax = qmax
            _program()
            if qmax == 100000:
                assert len(rec._deferred) > 100  # really queued until stop
        shapes.append(_shape(path))
    assert shapes[0] == shapes[1] == shapes[2]
    assert sum(1 for s in shapes[0] if s[0] == R.KERNEL) == 1 + 30 * 3  # randn, then mm, relu_, add per iteration


def test_allocation_of_an_output_carries_the_ops_stack(tmp_path):
    path = tmp_path / "s.npusan"
    with npusan.record(str(path), backend="sim"):
        line = sys._getframe().f_lineno + 1
        y = torch.ones(8)  # noqa: F841
    recs, reader = records(path)
    alloc = next(r for r in recs if r[0] == R.ALLOC)
    kernel = next(r for r in recs if r[0] == R.KERNEL)
    assert alloc[5] == kernel[3] and alloc[5] is not None
    frames = reader.symbols.frames_of(alloc[5])
    assert frames[-1][1] == line and frames[-1][0] == __file__
