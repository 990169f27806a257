"""The compiled KERNEL packer of the kill-safe recorder (``_kernelpack``) writes exactly the
bytes the Python encoder's record packs to, or hands the kernel back to it."""

from __future__ import annotations

import collections
import os
import types

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torch

import npusan
from npusan import sim
from npusan.recorder import event_queue, kernelpack
from npusan.recorder.session import Recorder
from npusan.trace_format import records as R
from npusan.trace_format.encoder import RecordEncoder
from npusan.trace_format.writer import MappedFileSink

from .conftest import records
from .test_batching import _shape

pytestmark = pytest.mark.skipif(kernelpack.pack is None, reason="the _kernelpack extension is not built")

_PACK = msgpack.Packer(use_bin_type=True, unicode_errors="replace").pack
# every msgpack int size, at and beside each boundary, both signs
_EDGES = sorted({s * ((1 << b) + d) for b in (0, 5, 7, 8, 15, 16, 31, 32, 62) for d in (-1, 0, 1) for s in (1, -1)})
ints = st.one_of(st.sampled_from([e for e in _EDGES if e >= 0]), st.integers(0, (1 << 63) - 1))


def _python_side(blocks, names, streams, stacks):
    """A recorder stand-in with the state ``Recorder._kernel_record`` reads, and the records
    its encoder emits."""
    emitted = []
    enc = RecordEncoder(emitted.append)
    for base, (bid, size, extent) in blocks.items():
        enc._blocks[base] = [bid, size, extent]
        enc._bases.append(base)
    enc._bases.sort()
    fake = types.SimpleNamespace(enc=enc, _op_sids=dict(names), _sidx=dict(streams), _stack_ids=dict(stacks))
    fake._stack = lambda key: Recorder._stack(fake, key)
    fake.stacks = types.SimpleNamespace(resolve=lambda key: None)
    return fake, emitted


def _both(blocks, names, streams, stacks, name, device, handle, spans, key):
    """(compiled bytes or None, Python record, definitions the Python side emitted first,
    block table after each)."""
    fast, _ = _python_side(blocks, names, streams, stacks)
    data = kernelpack.pack(fast._op_sids, fast._sidx, fast._stack_ids, fast.enc._blocks,
                           name, device, handle, spans, key)
    slow, emitted = _python_side(blocks, names, streams, stacks)
    rec = Recorder._kernel_record(slow, name, device, handle, spans, key)
    return data, rec, emitted, fast.enc._blocks, slow.enc._blocks


@st.composite
def kernels(draw):
    nblocks = draw(st.integers(1, 6))
    blocks = {}
    for i in range(nblocks):
        base = 0x10000 * (i + 1)
        size = draw(st.one_of(st.none(), ints))
        blocks[base] = (draw(st.integers(0, 70000)), size, draw(st.integers(0, 1 << 40)))
    names = {"aten::mm": draw(ints), "aten::add_": 3}
    streams = {(0, 0): 0, (0, 0x7F00): draw(ints), (1, 5): 300}
    stacks = {("k", 1): draw(st.one_of(st.none(), ints)), ("k", 2): 70000}
    nspans = draw(st.sampled_from([0, 1, 2, 11, 12, 13, 40]))  # record arrays of 4 + n: 15/16/17 items
    spans = []
    for _ in range(nspans):
        base = draw(st.sampled_from(list(blocks) + [0x999999]))  # mostly known blocks
        off = draw(st.one_of(st.just(0), ints))
        ext = draw(ints)
        total = draw(st.sampled_from([ext, ext + 1, max(ext - 1, 0), draw(ints)]))
        view = draw(st.sampled_from([None] * 12 + [(4, ((2, 8),))]))
        spans.append((base, off, ext, total, draw(st.booleans()), view))
    name = draw(st.sampled_from(list(names) + ["aten::new_op"]))
    device, handle = draw(st.sampled_from(list(streams) + [(0, 0xBEEF)]))
    key = draw(st.sampled_from(list(stacks) + [None, ("k", 3)]))
    return blocks, names, streams, stacks, name, device, handle, spans, key


@settings(max_examples=400, deadline=None)
@given(kernels())
def test_compiled_bytes_are_the_python_records_packed(case):
    data, rec, emitted, fast_blocks, slow_blocks = _both(*case)
    if data is not None:
        assert emitted == []  # the compiled path is only taken when no definition is due
        assert data == _PACK(rec)
        assert fast_blocks == slow_blocks  # unknown-size blocks grew alike
        assert msgpack.unpackb(data, strict_map_key=False) == rec


def test_the_common_kernel_is_packed_natively():
    """The path is really taken: known op, stream, stack and blocks (one of unknown size),
    whole and partial accesses."""
    blocks = {0x1000: (5, 64, 1), 0x2000: (200, None, 8)}
    spans = [(0x1000, 0, 64, 64, True, None), (0x2000, 16, 32, 4096, False, None), (0x1000, 8, 8, 64, False, None)]
    case = (blocks, {"aten::mm": 1}, {(0, 7): 2}, {("k",): 3}, "aten::mm", 0, 7, spans, ("k",))
    data, rec, emitted, fast_blocks, slow_blocks = _both(*case)
    assert data == _PACK(rec) and emitted == []
    assert rec == [17, 2, 1, 3, ~5, [200, 16, 32], [5, 8, 8]]
    assert fast_blocks[0x2000] == slow_blocks[0x2000] == [200, None, 48]  # grew to 16 + 32


@pytest.mark.parametrize("why", ["new name", "new stream", "new stack", "new block", "strided view"])
def test_kernels_that_need_the_python_encoder_are_handed_back(why):
    spans = [(0x1000, 0, 64, 64, True, (8, ((2, 16),)) if why == "strided view" else None)]
    args = [{"aten::mm": 1}, {(0, 7): 2}, {("k",): 3}, {0x1000: [5, 64, 1]}, "aten::mm", 0, 7, spans, ("k",)]
    if why == "new name":
        args[4] = "aten::relu"
    elif why == "new stream":
        args[6] = 8
    elif why == "new stack":
        args[8] = ("other",)
    elif why == "new block":
        args[3] = {}
    assert kernelpack.pack(*args) is None


def _program():
    side = sim.Stream()
    w = torch.randn(4, 4)
    before = torch.ones(64)  # allocated before recording: a block of unknown size
    with npusan.record(str(_program.path), backend="sim"):
        for i in range(40):
            side.wait_stream(sim.current_stream())
            with sim.stream(side):
                h = torch.mm(w, w)
                h.relu_()
                before[i % 8:].add_(1)  # the unknown-size block grows
            sim.current_stream().wait_stream(side)
            h.record_stream(sim.current_stream())
            y = h.t() + 1.0  # a strided view: the Python encoder's VIEWS path
            z = torch.empty(1 << (i % 12))
            z.fill_(i)
            del h, y, z


def test_a_recorded_trace_is_the_same_with_and_without_the_compiled_path(tmp_path, monkeypatch):
    shapes = []
    calls = []
    compiled = event_queue._kop
    monkeypatch.setattr(event_queue, "_kop", lambda *a: calls.append(1) or compiled(*a))
    for mode in ("compiled", "python"):
        if mode == "python":
            monkeypatch.setattr(event_queue, "_kop", None)  # the Python encoder only
        _program.path = tmp_path / f"{mode}.npusan"
        _program()
        shapes.append(_shape(_program.path))
    assert shapes[0] == shapes[1]
    assert sum(1 for s in shapes[0] if s[0] == R.KERNEL) >= 40 * 5
    assert len(calls) >= 40 * 5


def test_a_long_run_grows_the_mapping_through_the_compiled_commit(tmp_path, monkeypatch):
    from npusan.trace_format.writer import MAP_STEP_MIN

    calls = []
    compiled = event_queue._kop
    monkeypatch.setattr(event_queue, "_kop", lambda *a: calls.append(compiled(*a)) or calls[-1])
    path = tmp_path / "long.npusan"
    x = torch.ones(4)
    n = 60000
    with npusan.record(str(path), backend="sim"):
        for _ in range(n):
            x.add_(1)
    assert os.path.getsize(path) > MAP_STEP_MIN  # past the first mapping: grown on the way
    recs, _ = records(path)
    assert sum(1 for r in recs if r[0] == R.KERNEL) == n
    assert calls.count(True) >= n - 2  # all but the first kernels packed natively
    assert torch.equal(x, torch.full((4,), float(n + 1)))


# -- the queue of one op: _kernelpack.drain against Recorder._drain ---------------------------

class _Stacks:
    depth = 32

    @staticmethod
    def resolve(key):
        return [("prog.py", len(key), "f")]


def _recorder():
    """A recorder with only what draining needs: its encoder packs into a list."""
    rec = Recorder.__new__(Recorder)
    out: list = []
    rec.enc = RecordEncoder(out.append)
    rec._stack_ids = {}
    rec._op_sids, rec._sidx = {}, {}
    rec.stacks = _Stacks()
    rec.engine = None
    rec._kernel_fn = rec._kernel
    rec._deferred = collections.deque()
    for handle in (0, 1):  # streams already defined
        rec.enc.stream(handle, 0)
    rec._stack(("known",))
    before = rec.enc.block(0x900000)  # a block of unknown size (from before recording)
    out.clear()
    return rec, out, before


def _queue(rec, ops):
    q = rec._deferred
    for op, a, b in ops:
        if op == "alloc":
            q.append((rec._alloc, (a, b % 3, 0, (None, 0, 16, 4096, 1 << 20)[b % 5], (None, ("known",), ("new", b))[b % 3])))
        elif op == "free":
            q.append((rec._free, (a, (None, ("known",), ("new", b))[b % 3])))
        elif op == "created":
            q.append((rec.enc.event_created, (b,)))
        elif op == "deleted":
            q.append((rec.enc.event_deleted, (b,)))
        elif op == "recorded":
            q.append((rec.enc.event_recorded, (b, a % 3, 0)))
        elif op == "waited":
            q.append((rec.enc.event_waited, (b, a % 3, 0)))
        elif op == "record_stream":  # not encoded natively: called, and its records packed in place
            q.append((rec._emit, ("record_stream", (a, b % 2, 0), ("known",))))
        else:  # a kernel queued by another thread
            q.append((rec._kernel_fn, ("aten::mm", 0, b % 3, [(a, 0, 16, 4096, True, None)], None)))


def _state(rec):
    e = rec.enc
    return (e._blocks, e._bases, sorted(e._free_bids), e._next_bid, e.counts, e._streams, rec._stack_ids)


ops = st.lists(st.tuples(st.sampled_from(["alloc", "alloc", "free", "free", "created", "deleted", "recorded",
                                          "waited", "record_stream", "kernel"]),
                         st.sampled_from([0x1000, 0x1010, 0x2000, 0x3000, 0x900000, 0x900008]),
                         st.integers(0, 1 << 40)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, min_size=1, max_size=4))
def test_compiled_drain_writes_what_the_python_drain_writes(batches):
    py, py_out, _ = _recorder()
    cc, cc_out, _ = _recorder()
    spec = cc._compiled_drain_spec(types.SimpleNamespace(_recs=cc_out, _pack=_PACK, _buf=bytearray()))
    want = got = b""
    for batch in batches:  # the state carries over from one op's queue to the next
        _queue(py, batch)
        _queue(cc, batch)
        py._drain()
        want += b"".join(_PACK(r) for r in py_out)
        py_out.clear()
        got += kernelpack.drain(spec, cc._deferred)
        assert not cc_out and not cc._deferred
    assert got == want
    assert _state(cc) == _state(py)


def test_compiled_drain_encodes_the_common_hooks_itself(monkeypatch):
    """Allocations, frees and event hooks that need no definition never reach Python."""
    rec, out, _ = _recorder()
    spec = rec._compiled_drain_spec(types.SimpleNamespace(_recs=out, _pack=_PACK, _buf=bytearray()))
    _queue(rec, [("alloc", 0x1000, 1), ("created", 0, 7), ("recorded", 1, 7), ("waited", 0, 7), ("deleted", 0, 7),
                 ("free", 0x1000, 1)])
    for name in ("_alloc", "_free", "_emit"):
        monkeypatch.setattr(Recorder, name, lambda *a: pytest.fail(f"{name} was called"), raising=True)
    queued = list(rec._deferred)
    rec._deferred.clear()
    rec._deferred.extend(queued)  # bound methods made before the patch: the compiled path must take them
    data = kernelpack.drain(spec, rec._deferred)
    u = msgpack.Unpacker()
    u.feed(data)
    assert [r[0] for r in u] == [R.ALLOC, R.EVENT_CREATED, R.EVENT_RECORD, R.EVENT_WAIT, R.EVENT_DELETED, R.FREE]


def test_an_error_while_draining_keeps_the_records_before_it():
    rec, out, _ = _recorder()
    buf = bytearray()
    spec = rec._compiled_drain_spec(types.SimpleNamespace(_recs=out, _pack=_PACK, _buf=buf))
    _queue(rec, [("created", 0, 5)])

    def boom():
        raise RuntimeError("boom")

    rec._deferred.append((boom, ()))
    _queue(rec, [("created", 0, 6)])
    with pytest.raises(RuntimeError):
        kernelpack.drain(spec, rec._deferred)
    assert bytes(buf) == _PACK([R.EVENT_CREATED, 5, None])
    assert len(rec._deferred) == 1  # what comes after the failing entry stays queued


def test_a_record_that_does_not_pack_keeps_the_ones_before_it_and_drops_the_rest():
    """As the sink's own deferred packing does (test_deferred_commit.py)."""
    rec, out, _ = _recorder()
    buf = bytearray()
    spec = rec._compiled_drain_spec(types.SimpleNamespace(_recs=out, _pack=_PACK, _buf=buf))
    out.extend([[R.NOTE, "info", "a"], [R.NOTE, "info", 1 << 70], [R.NOTE, "info", "c"]])  # 2^70 does not pack
    _queue(rec, [("created", 0, 5)])
    with pytest.raises(OverflowError):
        kernelpack.drain(spec, rec._deferred)
    assert bytes(buf) == _PACK([R.NOTE, "info", "a"])
    assert out == []
    assert len(rec._deferred) == 1  # nothing of the queue was encoded yet
