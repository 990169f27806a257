"""Byte ranges, record_stream/erase_stream, reuse races, leaks, dedupe, bad input."""

from __future__ import annotations

import pytest

from npusan.analyzer.replay.engine import MAX_SEGMENTS, Engine
from npusan.analyzer.findings.model import Kind
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError
from npusan.trace_format.symbols import SymbolTable

from ..engine_prog import Prog, new_engine

pytestmark = pytest.mark.usefixtures("engine")

S0, S1, S2 = 0, 0x11, 0x22
X = 0x10000


def blocks(p: Prog, *ptrs, size=1024, stream=S0):
    for ptr in ptrs:
        p.memory_allocated(ptr, stream, size=size)


# -- byte ranges ---------------------------------------------------------------------------


def test_view_write_then_whole_block_read_is_a_race():
    # x[10:] written on one stream, x read on another: CSAN keys both by data_ptr() and
    # never compares them; npusan compares byte ranges.
    p = Prog()
    blocks(p, X)
    p.kernel(S1, "aten::fill_", writes=[(X + 40, 400)])
    p.kernel(S2, "aten::sum", reads=[X])
    (f,) = p.races()
    assert (f.previous.offset, f.previous.nbytes) == (40, 400)
    assert f.access.offset is None and f.block.address == X


def test_disjoint_slices_written_by_two_streams_do_not_race():
    p = Prog()
    blocks(p, X)
    p.kernel(S1, "aten::fill_", writes=[(X, 512)])
    p.kernel(S2, "aten::fill_", writes=[(X + 512, 512)])
    p.kernel(S1, "aten::add_", reads=[(X, 512)], writes=[(X + 100, 10)])
    p.kernel(S2, "aten::add_", reads=[(X + 600, 100)])
    assert p.races() == []


def test_overlapping_slices_race():
    p = Prog()
    blocks(p, X)
    p.kernel(S1, "aten::fill_", writes=[(X, 512)])
    p.kernel(S2, "aten::fill_", writes=[(X + 500, 100)])
    (f,) = p.races()
    assert (f.access.type, f.previous.type) == ("write", "write")


def test_sub_range_write_keeps_the_rest_of_the_block_state():
    p = Prog()
    blocks(p, X)
    p.write(S1, X)  # whole block written on S1
    p.wait_stream(S2, S1, event=1)
    p.kernel(S2, "aten::fill_", writes=[(X, 100)])  # S2 overwrites the first 100 bytes
    p.kernel(S0, "aten::sum", reads=[(X + 200, 8)])  # still S1's write: race with S1
    (f,) = p.races()
    assert f.previous.stream.handle == S1
    assert not f.merged_ranges  # (a report says so when a block's ranges were merged)


def test_whole_block_write_after_ranges_checks_every_range():
    p = Prog()
    blocks(p, X)
    p.kernel(S1, "aten::sum", reads=[(X, 8)])
    p.kernel(S2, "aten::sum", reads=[(X + 64, 8)])
    p.write(S0, X)
    assert sorted(f.previous.stream.handle for f in p.races()) == [S1, S2]


def test_adjacent_slices_up_to_the_cap_are_kept_apart():
    """A flat buffer whose neighbouring slices are written by two unsynchronized streams
    (a bucket of gradients, a chunked pipeline) is not a race while it has fewer slices
    than the cap: each keeps its own segment (with a cap of 32 this reported one race from
    33 slices on)."""
    p = Prog()
    blocks(p, X, size=1 << 20)
    for i in range(MAX_SEGMENTS - 8):
        p.kernel(S1 if i % 2 else S2, "aten::fill_", writes=[(X + 64 * i, 64)])
    assert p.races() == []
    assert p.engine.capped == 0  # (no warning that ranges were merged)


def test_many_ranges_are_capped_and_merged_conservatively():
    p = Prog()
    blocks(p, X, size=1 << 20)
    for i in range(4 * MAX_SEGMENTS):
        p.kernel(S1 if i % 2 else S2, "aten::fill_", writes=[(X + 64 * i, 32)])
    assert p.engine.capped == 1  # one block merged (analyze warns that its reports may be false)
    if isinstance(p.engine, Engine):  # the compiled core is held to the same state by the differential tests
        assert len(p.engine.blocks[0].segments) <= MAX_SEGMENTS
    assert p.races() == []
    # Nothing is lost by merging: each stream's writes still race with an unsynced read.
    p.kernel(S0, "aten::sum", reads=[(X + 64 * 3, 8)])
    assert {f.previous.stream.handle for f in p.races()} >= {S1}
    # and each such report says that its earlier access may be a merged neighbour's
    assert all(f.merged_ranges for f in p.races())


def test_over_the_cap_pieces_of_one_stream_are_merged_before_pieces_of_two():
    """Two unsynchronized streams fill their own halves of one buffer, 200 pieces each (a
    bucket of gradients), and read them back: they never share a byte. Over the cap of
    segments, neighbouring pieces are merged, and the narrowest pair here is the last piece
    of one half with the first of the other: merged, each stream's accesses to it would meet
    the other's write (a false race, reported by the earlier rule, narrowest first). Pairs of
    pieces of the same streams are merged first."""
    p = Prog()
    widths = [4096] * 199 + [64, 64] + [4096] * 199
    offs = [sum(widths[:i]) for i in range(len(widths))]
    blocks(p, X, size=sum(widths))
    for half, s in ((range(200), S1), (range(200, 400), S2)):
        for i in half:
            p.kernel(s, "aten::copy_", writes=[(X + offs[i], widths[i])])
    for half, s in ((range(200), S1), (range(200, 400), S2)):
        for i in half:
            p.kernel(s, "aten::sum", reads=[(X + offs[i], widths[i])])
    assert p.races() == []
    # merged or not, what a third stream does without waiting is still a race with both
    p.kernel(S0, "aten::zero_", writes=[(X + offs[199], 128)])
    assert {f.previous.stream.handle for f in p.races()} == {S1, S2}


def test_each_occurrence_keeps_the_byte_ranges_of_its_accesses():
    """One line reads slice after slice of a buffer another stream wrote: one finding whose
    occurrences touch different bytes; each keeps its two accesses' ranges (what
    ``--no-group`` shows), the whole-block ones as None."""
    p = Prog()
    blocks(p, X)
    for i in range(4):
        p.kernel(S1, "aten::fill_", writes=[(X + 100 * i, 100)])
    for i in (1, 3):
        p.kernel(S2, "aten::sum", reads=[(X + 100 * i, 100)])
    (f,) = p.races()
    assert [o[3:] for o in f.occurrences] == [(100, 100, 100, 100), (300, 100, 300, 100)]
    q = Prog()
    blocks(q, X)
    q.kernel(S1, "aten::fill_", writes=[X])
    q.kernel(S2, "aten::sum", reads=[(X + 8, 8)])
    (g,) = q.races()
    assert [o[3:] for o in g.occurrences] == [(8, 8, None, None)]


# -- record_stream / erase_stream ----------------------------------------------------------


def test_record_stream_then_erase_stream_brings_the_finding_back():
    p = Prog()
    blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X)
    p.record_stream(X, S1)
    p.erase_stream(X, S1)
    p.memory_freed(X)
    assert p.kinds() == ["missing-record-stream"]


def test_record_stream_of_another_stream_does_not_cover_the_use():
    p = Prog()
    blocks(p, X)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X)
    p.record_stream(X, S2)
    p.memory_freed(X)
    assert p.kinds() == ["missing-record-stream"]


def test_use_overwritten_by_a_third_stream_is_still_checked_at_free():
    p = Prog()
    blocks(p, X)
    p.read(S1, X)  # S1's read is dropped from the race state by S2's write below
    p.wait_stream(S2, S1, event=1)
    p.write(S2, X)
    p.wait_stream(S0, S2, event=2)  # S0 now knows S2 and (through it) S1
    p.memory_freed(X)
    assert p.findings() == []
    q = Prog()
    blocks(q, X)
    q.read(S1, X)
    q.write(S2, X)  # races with S1's read; S1's use is folded into the uses
    q.memory_freed(X)
    assert q.kinds() == ["data-race", "missing-record-stream", "missing-record-stream"]


def test_block_seen_without_allocation_has_no_record_stream_check():
    p = Prog(check_leaks=True)
    p.read(S1, X)  # BLOCK_DEF: allocated before recording
    p.memory_freed(X)
    assert p.findings() == []


# -- reuse races ---------------------------------------------------------------------------


def _freed_with_unsynced_use(p: Prog):
    blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X, op="aten::old_use")
    p.memory_freed(X)  # missing record_stream: S1 may still read X
    p.memory_allocated(X, S0, size=1024)  # the allocator hands X out again on S0


def test_reuse_race_is_reported():
    p = Prog()
    _freed_with_unsynced_use(p)
    p.write(S0, X, op="aten::new_use")
    p.write(S0, X, op="aten::new_use")
    kinds = p.kinds()
    assert kinds == ["missing-record-stream", "reuse-race"]
    (f,) = [f for f in p.findings() if f.kind is Kind.REUSE_RACE]
    assert f.access.op == "aten::new_use" and f.previous.op == "aten::old_use"
    assert f.count == 1


def test_reuse_race_with_a_smaller_block_inside_the_old_range():
    p = Prog()
    _freed_with_unsynced_use(p)
    p.memory_freed(X)
    p.memory_allocated(X + 256, S0, size=128)
    p.write(S0, X + 256, op="aten::new_use")
    assert "reuse-race" in p.kinds()


def test_reuse_not_reported_when_ordered_after_the_old_use():
    p = Prog()
    _freed_with_unsynced_use(p)
    p.wait_stream(S0, S1, event=2)
    p.write(S0, X, op="aten::new_use")
    assert p.kinds() == ["missing-record-stream"]


def test_reuse_not_reported_for_an_unrelated_address():
    p = Prog()
    _freed_with_unsynced_use(p)
    p.memory_allocated(X + 4096, S0, size=1024)
    p.write(S0, X + 4096)
    assert p.kinds() == ["missing-record-stream"]


def _freed_with_unsynced_range_use(p: Prog):
    blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.kernel(S1, "aten::old_use", reads=[(X, 100)])  # bytes 0..100 only
    p.memory_freed(X)  # missing record_stream


def test_reuse_race_needs_a_byte_of_the_old_use():
    """The new block holds only bytes the old use never touched: no reuse race."""
    p = Prog()
    _freed_with_unsynced_range_use(p)
    p.memory_allocated(X + 512, S0, size=512)
    p.write(S0, X + 512, op="aten::new_use")
    assert p.kinds() == ["missing-record-stream"]


def test_reuse_race_is_the_first_access_that_meets_the_old_use():
    """An access elsewhere in the new block is not the race (nor does it use the ghost up);
    the first one on the old use's bytes is."""
    p = Prog()
    _freed_with_unsynced_range_use(p)
    p.memory_allocated(X, S0, size=1024)
    p.kernel(S0, "aten::elsewhere", writes=[(X + 512, 100)])
    p.kernel(S0, "aten::overlapping", writes=[(X + 50, 10)])
    p.kernel(S0, "aten::again", writes=[(X + 40, 10)])
    (f,) = [f for f in p.findings() if f.kind is Kind.REUSE_RACE]
    assert f.access.op == "aten::overlapping" and f.previous.op == "aten::old_use" and f.count == 1


@pytest.mark.parametrize("base, raced", [(X, True), (X + 200, True), (X + 512, False)])
def test_reuse_race_on_a_block_of_unknown_size_written_whole(base, raced):
    """A whole-block access to a block of unknown size may touch any byte from its base up:
    it meets an old use above its base (bytes 256..356 of the freed block), not one below."""
    p = Prog()
    blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.kernel(S1, "aten::old_use", reads=[(X + 256, 100)])
    p.memory_freed(X)
    p.memory_allocated(base, S0, size=None)
    p.write(S0, base, op="aten::new_use")
    assert ("reuse-race" in p.kinds()) is raced


# -- leaks, dedupe, callbacks --------------------------------------------------------------


def _unfreed_cross_stream_use(p: Prog):
    blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X)


def test_leak_check_only_with_the_option():
    p = Prog()
    _unfreed_cross_stream_use(p)
    assert p.findings() == []
    q = Prog(check_leaks=True)
    _unfreed_cross_stream_use(q)
    (f,) = q.findings()
    assert f.kind is Kind.MISSING_RECORD_STREAM and "never freed" in f.access.op
    assert len(q.findings()) == 1  # the check runs once


def test_same_bug_repeated_is_one_finding_with_a_count():
    p = Prog()
    for step in range(1000):
        ptr = X + 0x1000 * (step % 20)
        p.memory_allocated(ptr, S0, size=64)
        p.write(S0, ptr, stack="producer")
        p.read(S1, ptr, stack="consumer")
        p.memory_freed(ptr)
    races = p.races()
    assert len(races) == 1
    f = races[0]
    assert f.count == 1000
    assert len(f.addresses) == 16 and len(set(f.addresses)) == 16
    assert len(f.occurrences) == 1000 and f.occurrences[0] == (2, 1, X, None, None, None, None)
    assert f.first_seq == 2 and f.last_seq == 2000
    assert [fr.function for fr in f.access.stack] == ["consumer"]
    missing = [x for x in p.findings() if x.kind is Kind.MISSING_RECORD_STREAM]
    assert len(missing) == 1 and missing[0].count == 1000


def test_tensors_from_different_allocation_sites_are_separate_findings_with_their_own_block():
    # ``a, b = load()`` then one kernel reading both on another stream, then both freed by
    # the same line: the same code, but two tensors, each reported with its own block
    p = Prog()
    for ptr, maker in ((X, "make_a"), (X + 0x1000, "make_b")):
        p.memory_allocated(ptr, S0, size=64, stack=p._stack(maker))
        p.write(S0, ptr)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X, X + 0x1000, stack="use")
    p.memory_freed(X)
    p.memory_freed(X + 0x1000)
    missing = [x for x in p.findings() if x.kind is Kind.MISSING_RECORD_STREAM]
    assert sorted((m.block.address, m.block.stack[0].function, m.count) for m in missing) == [
        (X, "make_a", 1), (X + 0x1000, "make_b", 1)]


def test_on_finding_is_called_once_per_distinct_finding_at_first_occurrence():
    seen = []
    p = Prog(on_finding=lambda f: seen.append((f.kind, f.access.seq, p.engine.seq)))
    blocks(p, X)
    p.write(S0, X)
    for _ in range(5):
        p.read(S1, X)
    assert seen == [(Kind.DATA_RACE, 2, 2)]


def test_on_finding_exceptions_propagate_unchanged():
    class Stop(Exception):
        pass

    def boom(f):
        raise Stop(f.kind)

    p = Prog(on_finding=boom)
    blocks(p, X)
    p.write(S0, X)
    with pytest.raises(Stop):
        p.read(S1, X)


def test_stream_refs_carry_creation_stack_and_default_flag():
    p = Prog(header={"default_streams": {"0": 0}})
    p.stream_created(S1, stack=p.enc.stack([("train.py", 3, "main")]))
    blocks(p, X)
    p.write(S0, X)
    p.read(S1, X)
    (f,) = p.races()
    assert f.previous.stream.is_default and not f.access.stream.is_default
    assert [str(fr) for fr in f.access.stream.created_stack] == ["train.py:3 in main"]


# -- malformed records ---------------------------------------------------------------------


def _engine_with_stream():
    sym = SymbolTable()
    eng = new_engine(sym)
    eng.feed([R.STREAM_DEF, 0, 0, 0])
    eng.feed([R.STR, 0, "op"])  # the op kernels name
    eng.feed([R.ALLOC, 0, 0x100, 64, 0, None])
    return eng


@pytest.mark.parametrize(
    "rec, words",
    [
        ([R.KERNEL, 5, 0, None, 0], "stream index 5"),
        ([R.KERNEL, 0, 0, None, 7], "block id 7"),
        ([R.KERNEL, 0, 0, None, ~9], "block id 9"),
        ([R.KERNEL, 0, 0, None, [0, -1, 4]], "malformed"),
        ([R.KERNEL, 0, 0, None, [0, 1]], "neither"),
        ([R.KERNEL, 0, 0, None, "x"], "neither"),
        ([R.KERNEL, 0, 77, None, 0], "the op is string id 77, which is not defined"),
        ([R.KERNEL, 0, "aten::add", None, 0], "the op is a string, not a string id"),
        ([R.KERNEL, 0, [0], None, 0], "the op is an array"),
        ([R.KERNEL, 0, True, None, 0], "the op is a boolean"),
        ([R.KERNEL, 0, -1, None, 0], "the op is string id -1"),
        ([R.KERNEL], "malformed kernel"),
        ([R.FREE, 3, None], "block id 3"),
        ([R.ALLOC, 1, "p", 64, 0, None], "malformed pointer"),
        ([R.ALLOC, 1, 0x200, 64, 9, None], "stream index 9"),
        ([R.EVENT_RECORD, [1], 0, None], "event id"),
        ([R.DEVICE_SYNC, "gpu", None], "device"),
        ([R.STREAM_SYNC], "malformed stream-synchronize"),
        ("junk", "malformed"),
        ([[1], 2], "malformed"),
    ],
)
def test_malformed_records_raise_trace_format_error(rec, words):
    eng = _engine_with_stream()
    with pytest.raises(TraceFormatError, match=words):
        eng.run([rec])


def test_a_nil_op_is_accepted():
    eng = _engine_with_stream()
    eng.run([[R.KERNEL, 0, None, None, 0]])
    assert eng.seq == 1


@pytest.mark.parametrize("sid", [63, 64, 4095, 4096, 70_000, (1 << 24) - 1])
def test_an_op_may_name_any_string_id_below_the_limit(sid):
    """The compiled core keeps string ids as bits grown to the largest one defined: ids on
    both sides of a word and of its first growth, and the largest id a trace may use."""
    eng = _engine_with_stream()
    eng.feed([R.STR, sid, "aten::add"])
    eng.run([[R.KERNEL, 0, sid, None, 0]])
    assert eng.seq == 1
    with pytest.raises(TraceFormatError, match=f"the op is string id {sid - 1}, which is not defined"):
        eng.run([[R.KERNEL, 0, sid - 1, None, 0]])


def test_kernel_on_a_freed_block_is_rejected():
    eng = _engine_with_stream()
    eng.run([[R.FREE, 0, None]])
    with pytest.raises(TraceFormatError, match="freed"):
        eng.run([[R.KERNEL, 0, 0, None, 0]])


def test_block_def_ids_are_materialized_on_first_use():
    p = Prog()
    p.read(S1, X)  # BLOCK_DEF + kernel
    p.write(S2, X)
    (f,) = p.races()
    assert f.block.address == X and f.block.stream is None and f.block.size is None


@pytest.mark.parametrize("bid", [1, 63, 64, 100, 127, 128, 129, 1000])
@pytest.mark.parametrize("write", [False, True])
def test_undefined_block_ids_never_alias_a_live_block(bid, write):
    # The fast path indexes arrays with the encoded access; an id past the arrays' halves
    # must not land on block 0's slots even when stream 0 owns block 0.
    eng = _engine_with_stream()
    eng.run([[R.KERNEL, 0, 0, None, 0, ~0]])  # stream 0 now owns block 0 (read and write)
    with pytest.raises(TraceFormatError, match=f"block id {bid}"):
        eng.run([[R.KERNEL, 0, 0, None, ~bid if write else bid]])


def test_block_def_ids_beyond_the_arrays_are_materialized():
    p = Prog()
    p.memory_allocated(X, S0, size=64)
    p.symbols.define([R.BLOCK_DEF, 5000, 0x99000, None])  # as a reader would, unseen by the engine
    p.engine.run([[R.KERNEL, 0, p.enc.string("op"), None, ~5000]])
    p.read(S1, X)
    p.engine.run([[R.KERNEL, 1, p.enc.string("op"), None, 5000]])
    assert {f.block.address for f in p.races()} == {0x99000}


def test_online_block_redefinition_starts_a_fresh_block():
    # Online, a BLOCK_DEF for an id that is live in the engine means the producer reused
    # the id: the old block's accesses must not be compared with the new block's.
    sym = SymbolTable()
    eng = new_engine(sym)
    for rec in ([R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 7], [R.STR, 0, "op"],
                [R.BLOCK_DEF, 0, 0x100, None], [R.KERNEL, 0, 0, None, ~0],
                [R.BLOCK_DEF, 0, 0x900, None], [R.KERNEL, 1, 0, None, 0]):
        eng.feed(rec)
    assert eng.finish() == []
    eng.feed([R.KERNEL, 0, 0, None, ~0])  # the same new block, unsynchronized: a race
    (f,) = eng.finish()
    assert f.block.address == 0x900


def test_ghost_pruning_is_amortized_when_a_stream_never_syncs_back(monkeypatch):
    # Every free leaves an unsynchronized use that nothing ever orders: the ghost list stays
    # full. Scanning it on every new ghost made such traces ~100x slower; the scan now runs
    # at most once per MAX_GHOSTS // 2 new ghosts.
    from npusan.analyzer.replay import engine as E

    calls = []
    real = E.Engine.prune_ghosts
    monkeypatch.setattr(E.Engine, "prune_ghosts", lambda self: calls.append(1) or real(self))
    p = Prog()
    p.engine = E.Engine(p.symbols)
    frees = 4 * E.MAX_GHOSTS
    for i in range(frees):
        ptr = X + 0x1000 * (i % 50)
        p.memory_allocated(ptr, S0, size=64)
        p.read(S1, ptr)
        p.memory_freed(ptr)
    assert len(p.engine.ghosts) == E.MAX_GHOSTS
    assert len(calls) <= frees // (E.MAX_GHOSTS // 2)
