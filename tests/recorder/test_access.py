"""Access classification per op overload, and the byte ranges recorded for views."""

from __future__ import annotations

import torch

from npusan import sim
from npusan.recorder.access import op_info, span
from npusan.trace_format import records as R
from npusan.trace_format.records import decode_access

from .conftest import records

aten = torch.ops.aten


def test_pure_views_produce_no_event():
    for op in (aten.view.default, aten.t.default, aten.transpose.int, aten.detach.default, aten._unsafe_view.default,
               aten.select.int, aten.expand.default, aten.as_strided.default, aten.alias.default, aten.slice.Tensor,
               aten.unsqueeze.default, aten.squeeze.dim, aten.permute.default, aten.split.Tensor, aten.unbind.int):
        assert op_info(op).view, op


def test_classification_of_writes_and_reads():
    add_ = op_info(aten.add_.Tensor)
    assert not add_.view
    assert [(s.name, s.write) for s in add_.slots] == [("self", True), ("other", False)]
    out = op_info(aten.add.out)
    assert {s.name: s.write for s in out.slots} == {"self": False, "other": False, "out": True}
    cat = op_info(aten.cat.default)
    assert [(s.name, s.write, s.is_list) for s in cat.slots] == [("tensors", False, True)]
    # factories: inputs lend only metadata; outputs are writes
    for op in (aten.new_empty.default, aten.new_zeros.default, aten.empty_like.default, aten.zeros_like.default,
               aten.randn_like.default):
        info = op_info(op)
        assert info.slots == () and info.returns == (0,), op
    topk = op_info(aten.topk.default)
    assert topk.returns == (0, 0)
    assert op_info(aten.record_stream.default).record_stream
    bn = op_info(aten.native_batch_norm.default)
    assert {s.name for s in bn.slots if s.write} == {"running_mean", "running_var"}


def _kernels(path):
    recs, reader = records(path)
    out = []
    for r in recs:
        if r[0] == R.KERNEL:
            out.append((reader.symbols.strings[r[2]], [decode_access(a) for a in r[4:]]))
    return out, recs, reader


def test_recorded_accesses(sim_recording):
    rec, path = sim_recording
    x = torch.zeros(100)  # float32
    y = torch.ones(100)
    x.view(10, 10).t()  # views: nothing
    x[10:].add_(1)  # write, offset 40
    torch.add(x, y, out=y)  # out=: write to y, reads x and y
    c = torch.cat([x, y])  # list: reads both, writes c
    n = x.new_zeros(3)  # new_*: a write, no read of x
    e = torch.empty_like(y)  # *_like: a write, no read of y
    vals, idx = torch.topk(x, 3)  # all outputs are writes
    z = torch.zeros(0)  # zero-size: no access
    z.add_(1)
    xs = x[::2]  # 50 elements, stride 2: bytes [0, 396)
    xs.mul_(1)
    rec.stop()
    ks, recs, reader = _kernels(path)
    names = [k[0] for k in ks]
    assert "aten::view" not in names and "aten::t" not in names and "aten::slice.Tensor" not in names
    by = {}
    for name, acc in ks:
        by.setdefault(name, acc)  # first occurrence
    # x[10:].add_(1): one write of x's block at byte 40 for 360 bytes
    (bid, w, off, nb), = by["aten::add_.Tensor"][:1]
    assert w and off == 40 and nb == 360
    add_out = by["aten::add.out"]
    assert [a[1] for a in add_out] == [False, False, True]
    assert all(a[2] is None for a in add_out)  # whole blocks
    assert add_out[0][0] != add_out[2][0]
    cat = by["aten::cat"]
    assert [a[1] for a in cat] == [False, False, True]
    assert len({a[0] for a in cat}) == 3
    assert [a[1] for a in by["aten::new_zeros"]] == [True]
    assert [a[1] for a in by["aten::empty_like"]] == [True]
    assert [a[1] for a in by["aten::topk"]] == [False, True, True]
    strided = by["aten::mul_.Tensor"]
    assert strided[0][1] is True and strided[0][2] == 0 and strided[0][3] == (49 * 2 + 1) * 4
    adds = [acc for name, acc in ks if name == "aten::add_.Tensor"]
    assert len(adds) == 2 and adds[1] == []  # zero-size: the kernel is recorded, with no access
    del c, n, e, vals, idx


def test_span_of_views():
    x = torch.zeros(100, dtype=torch.float64)
    assert span(x[10:]) == (x.untyped_storage().data_ptr(), 80, 720, 800, None)
    m = torch.zeros(4, 8)
    col = m[:, 2]
    base, off, ext, total, view = span(col)
    assert off == 8 and ext == (3 * 8 + 1) * 4 and total == 128
    assert view == (4, ((4, 32),))  # 4 elements of 4 bytes, 32 bytes apart
    assert span(m.t())[2:] == (128, 128, None)  # a transpose touches exactly its range
    assert span(torch.zeros(0)) is None


def test_record_stream_becomes_an_event_not_a_kernel(sim_recording):
    rec, path = sim_recording
    s = sim.Stream()
    x = torch.ones(4)
    x.record_stream(s)
    sim.record_stream(x, sim.default_stream())
    rec.stop()
    recs, reader = records(path)
    rs = [r for r in recs if r[0] == R.RECORD_STREAM]
    assert len(rs) == 2
    assert reader.symbols.streams[rs[0][2]] == (0, s.handle)
    assert reader.symbols.streams[rs[1][2]] == (0, 0)
    assert not any(r[0] == R.KERNEL and "record_stream" in reader.symbols.strings[r[2]] for r in recs)
