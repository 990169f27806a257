"""The compiled core against the Python engine (the specification), on generated traces.

Every trace is replayed over every path of differential.py: as ``npusan analyze`` replays
it, through the Python engine (reading the msgpack unpacker) and through the compiled core
(parsing the file's bytes itself), and through the Python engine fed records one by one. Findings (kinds, streams, ops, stacks, accesses, blocks, counts, occurrences,
addresses), counters and the reader's verdict (truncated, warnings, END statistics), or
the one-line error, must be identical. Programs use every record type (the host's accesses
of format 1.2 among them), whole-block and
ranged accesses, frees and re-allocations, memory from before recording, record_stream and
erase_stream; malformed records, truncation and corrupted bytes are mixed in.
"""

from __future__ import annotations

import io
from unittest import mock

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.analyzer.replay import engine as engine_mod
from npusan.analyzer.replay import native, traces as replay
from npusan.analyzer.replay import strided as strided_mod
from npusan.analyzer.replay.engine import Engine, RecordError
from npusan.trace_format import TraceWriter
from npusan.trace_format import records as R

from tests.trace_format.test_reader_errors import _one_damaged_byte_cases

from .differential import check, join, junk, outcome, split

pytestmark = pytest.mark.skipif(not native.available(), reason=f"compiled core not built ({native.IMPORT_ERROR})")


@pytest.fixture(scope="module", autouse=True, params=["queue-from-8MiB", "queue-always"])
def _queue(request):
    """Every test twice: as analyze runs (these small traces never reach the size from which
    the core queues accesses that cannot race) and with every such access queued."""
    keep = native.QUEUE_FROM
    native.QUEUE_FROM = 0 if request.param == "queue-always" else keep
    yield
    native.QUEUE_FROM = keep

HANDLES = [0, 0xA0, 0xB0, 0xC0]
BASE = 0x100000
SIZE = 0x100
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_op = st.one_of(
    st.tuples(st.just("kernel"), st.integers(0, 3), st.lists(st.tuples(st.integers(0, 5), st.booleans()),
                                                            min_size=0, max_size=4)),
    st.tuples(st.just("ranged"), st.integers(0, 3), st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, SIZE + 32), st.integers(0, 96)),
        min_size=1, max_size=4)),
    st.tuples(st.just("record"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("wait"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("event"), st.sampled_from(["event_created", "event_deleted", "event_synchronized"]),
              st.integers(0, 3)),
    st.tuples(st.just("sync"), st.sampled_from(["stream", "device", "device0", "device1"]), st.integers(0, 3)),
    st.tuples(st.just("free"), st.integers(0, 5), st.integers(0, 3), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("record_stream"), st.integers(0, 5), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("created"), st.integers(0, 3)),
    # an allocation on stream s, never used: where the frees pending on s are judged
    st.tuples(st.just("alloc"), st.integers(0, 3)),
    # the host's accesses (format 1.2): whole blocks and byte ranges, a write or a read
    st.tuples(st.just("host"), st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=0, max_size=3)),
    st.tuples(st.just("host-ranged"), st.lists(
        st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, SIZE), st.integers(0, 96)), min_size=1, max_size=3)),
)


def write_program(ops) -> bytes:
    """A valid trace from random operations (races, missing record_streams, reuse, graphs:
    a "capture" op begins a capture, or ends the one open)."""
    buf = io.BytesIO()
    live = {}
    capturing = None
    fresh = 0
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0, 1: 0}}) as w:
        for b in range(4):
            live[b] = BASE + b * 0x1000
            w.memory_allocated(live[b], HANDLES[b % 4], size=SIZE if b != 3 else None,
                               stack=[("p.py", b, "alloc")])
        live[4] = BASE + 0x40000  # memory allocated before recording: BLOCK_DEF on first use
        live[5] = BASE + 0x50000

        def dev(s):
            return 1 if s == 3 else 0

        for item in ops:
            kind = item[0]
            if kind == "kernel":
                s = item[1]
                reads = [live[b] for b, wr in item[2] if not wr]
                writes = [live[b] for b, wr in item[2] if wr]
                w.kernel(HANDLES[s], f"aten::k{len(reads)}{len(writes)}", reads=reads, writes=writes,
                         device=dev(s), stack=[("p.py", 10 + s, "step")] if s % 2 else None)
            elif kind == "ranged":
                s = item[1]
                reads = [(live[b] + off, n) for b, wr, off, n in item[2] if not wr]
                writes = [(live[b] + off, n) for b, wr, off, n in item[2] if wr]
                w.kernel(HANDLES[s], "aten::slice", reads=reads, writes=writes, device=dev(s),
                         stack=[("p.py", 20, "views")])
            elif kind == "host":
                w.host_access("numpy", reads=[live[b] for b, wr in item[1] if not wr],
                              writes=[live[b] for b, wr in item[1] if wr], stack=[("p.py", 50, "host")])
            elif kind == "host-ranged":
                w.host_access("aten::copy_", reads=[(live[b] + off, n) for b, wr, off, n in item[1] if not wr],
                              writes=[(live[b] + off, n) for b, wr, off, n in item[1] if wr])
            elif kind == "record":
                w.event_recorded(item[1], HANDLES[item[2]], device=dev(item[2]))
            elif kind == "wait":
                w.event_waited(item[1], HANDLES[item[2]], device=dev(item[2]))
            elif kind == "event":
                getattr(w, item[1])(item[2])
            elif kind == "sync":
                if item[1] == "stream":
                    w.stream_synchronized(HANDLES[item[2]], device=dev(item[2]))
                else:
                    w.device_synchronized(**({} if item[1] == "device" else {"device": int(item[1][-1])}))
            elif kind == "free":
                _, b, s, shift, known = item
                w.memory_freed(live[b], stack=[("p.py", 30, "free")])
                if b < 4 or shift:  # re-allocated at the same base or overlapping it
                    live[b] = live[b] + 0x80 * shift
                    w.memory_allocated(live[b], HANDLES[s], size=SIZE if known else None, device=dev(s))
            elif kind == "alloc":
                fresh += 1
                w.memory_allocated(BASE + 0x200000 + fresh * 0x1000, HANDLES[item[1]], size=SIZE, device=dev(item[1]))
            elif kind == "record_stream":
                _, b, s, erase = item
                (w.erase_stream if erase else w.record_stream)(live[b], HANDLES[s], device=dev(s))
            elif kind == "capture":
                if capturing is None:
                    capturing = item[1]
                    w.graph_begin(item[1], HANDLES[item[2]], device=dev(item[2]), stack=[("p.py", 60, "capture")])
                else:
                    w.graph_end(capturing)
                    capturing = None
            elif kind == "launch":
                w.graph_launch(item[1], HANDLES[item[2]], device=dev(item[2]), stack=[("p.py", 70, "replay")])
            else:
                w.stream_created(HANDLES[item[1]], device=dev(item[1]), stack=[("p.py", 40, "make")])
        if capturing is not None:
            w.graph_end(capturing)
    return buf.getvalue()


def check_capped(header: dict, recs: list, max_segments: int) -> None:
    """check() on ``recs`` (END appended) with at most ``max_segments`` segments a block;
    the trace must be valid."""
    recs.append([R.END, {}])
    with mock.patch.object(engine_mod, "MAX_SEGMENTS", max_segments):
        assert check(join(header, recs))[0] == "ok"


@FUZZ
@given(st.lists(_op, max_size=60), st.booleans())
def test_same_findings_on_valid_programs(ops, check_leaks):
    ref = check(write_program(ops), check_leaks)
    assert ref[0] == "ok" and ref[6]


#: The operations of valid programs with graphs (format 1.3): captures (begun and ended by
#: "capture" ops, so any operation may fall inside one) and launches on any stream, of
#: graphs captured or not.
_graph_op = st.one_of(
    _op,
    st.tuples(st.just("capture"), st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.just("launch"), st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.just("launch"), st.integers(0, 2), st.integers(0, 3)),
)


@FUZZ
@given(st.lists(_graph_op, max_size=80), st.booleans())
def test_same_findings_on_valid_programs_with_graphs(ops, check_leaks):
    ref = check(write_program(ops), check_leaks)
    assert ref[0] == "ok" and ref[6] is not None


_grid_op = st.one_of(
    st.tuples(st.just("ranged"), st.integers(0, 3), st.lists(
        st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from(range(0, SIZE, 32)), st.sampled_from([32, 64])),
        min_size=1, max_size=3)),
    st.tuples(st.just("kernel"), st.integers(0, 3), st.lists(st.tuples(st.integers(0, 2), st.booleans()),
                                                            min_size=1, max_size=2)),
    st.tuples(st.just("record"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("wait"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("free"), st.integers(0, 2), st.integers(0, 3), st.integers(0, 1), st.booleans()),
)


@FUZZ
@given(st.lists(_grid_op, max_size=80), st.sampled_from([3, 5, 32]))
def test_same_findings_on_grid_aligned_ranges(ops, max_segments):
    """Accesses on a grid of sub-ranges hit existing segments exactly (the core's no-split
    path), next to splits, whole-block accesses and, with a small cap, merges."""
    with mock.patch.object(engine_mod, "MAX_SEGMENTS", max_segments):
        check(write_program(ops))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 9), st.integers(0, 95),
                          st.integers(0, 3)), min_size=1, max_size=120),
       st.sampled_from([4, 5, 16, 64, 96, 256]))
def test_same_findings_on_buffers_cut_in_equal_parts(ops, max_segments):
    """The core's grid form: three blocks cut into 16, 64 and 96 parts of 16 bytes (96: a
    bitmap of parts that ends inside its second word), each access one part (the grid), the
    whole block (every part's state in byte order, the base once), or now and then a range
    off the grid or across parts (the index rebuilt from the parts), by three streams with
    and without hand-offs, with caps below, at and above the number of parts."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    sizes = (256, 1024, 1536)
    recs += [[R.ALLOC, b, 0x1000 * (b + 1), sizes[b], b % 2, None] for b in range(3)]
    for s, b, form, part, sync in ops:
        size = sizes[b]
        part %= size // 16
        if form < 5:  # one part, read (0-2) or written (3-4)
            acc = [~b if form >= 3 else b, 16 * part, 16]
        elif form < 8:  # the whole block, read (5-6) or written (7)
            acc = ~b if form == 7 else b
        else:  # off the grid (8: inside a part, 9: across two parts), read or written
            off, n = (16 * part + 4, 8) if form == 8 else (16 * part + 8, 16)
            acc = [~b if part % 2 else b, min(off, size - n), n]
        recs.append([R.KERNEL, s, 0, None, acc])
        if sync == 0:
            recs += [[R.EVENT_RECORD, 0, s, None], [R.EVENT_WAIT, 0, (s + 1) % 3, None]]
    check_capped(header, recs, max_segments)


def test_same_findings_when_a_whole_read_joins_the_parts_of_a_grid():
    """Parts split off by reads become one segment again when one stream reads the whole
    block (coalesce joins the equal neighbours); later ranges off the grid then split that
    one segment, and a cap of 5 merges what they make. Had the core kept the parts apart,
    the cap would merge other segments and mark other findings as merged. Then a whole-block
    write of a block in the grid form, and ranges off the grid after it."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(4)]
    recs += [[R.ALLOC, 0, 0x1000, 256, 0, None], [R.KERNEL, 0, 0, None, ~0]]
    recs += [[R.KERNEL, 1, 0, None, [0, 64 * k, 64]] for k in (1, 3)]  # the grid: 4 parts of 64 bytes
    recs += [[R.KERNEL, 1, 0, None, 0]]  # every part now holds the same state
    for s, off in ((2, 0), (2, 96), (3, 160), (3, 224), (2, 40), (3, 130)):
        recs.append([R.KERNEL, s, 0, None, [~0, off, 16]])
    recs += [[R.KERNEL, 1, 0, None, [~0, 0, 256]]]
    # a whole-block write of a block in the grid form leaves one state: what later ranges split
    recs += [[R.ALLOC, 1, 0x2000, 256, 0, None]] + [[R.KERNEL, 1, 0, None, [1, 64 * k, 64]] for k in (0, 2)]
    recs += [[R.KERNEL, 2, 0, None, ~1]]
    for s, off in ((3, 8), (0, 72), (3, 136), (0, 200), (3, 100)):
        recs.append([R.KERNEL, s, 0, None, [~1, off, 16]])
    check_capped(header, recs, 5)


def test_same_findings_when_every_part_was_written_alone():
    """A block written whole by stream 1, then part by part by stream 0 (after a hand-off):
    no byte holds stream 1's write any more, so a whole-block read by stream 2 races with
    stream 0's four writes only. (The core's grid form keeps the state the block had before
    its parts were touched, as the base of untouched parts: with every part touched, that
    state is no byte's and must not be checked.)"""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x1000, 256, 0, None], [R.KERNEL, 1, 0, None, ~0]]
    recs += [[R.EVENT_RECORD, 0, 1, None], [R.EVENT_WAIT, 0, 0, None]]
    recs += [[R.KERNEL, 0, 0, None, [~0, 64 * k, 64]] for k in (2, 0, 3, 1)]
    recs += [[R.KERNEL, 2, 0, None, 0], [R.KERNEL, 2, 0, None, ~0]]
    check_capped(header, recs, 256)


def test_same_findings_when_a_whole_read_makes_parts_equal_with_their_reads_in_another_order():
    """Two parts read by streams 1 and 2 in opposite orders, then the whole block read by
    both: every part then holds the same accesses, and the Python engine joins them into one
    segment that keeps the first part's order. A write by stream 3 to the second part then
    meets the two reads in that order (so the findings come in that order); the core's grid
    form keeps a state per part and must give the second part the first one's order. On a
    second block the first part's order is the other one, and the untouched parts take it."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(4)]
    recs += [[R.ALLOC, 0, 0x1000, 256, 0, None], [R.KERNEL, 0, 0, None, ~0]]
    recs += [[R.EVENT_RECORD, 0, 0, None], [R.EVENT_WAIT, 0, 1, None], [R.EVENT_WAIT, 0, 2, None]]
    recs += [[R.KERNEL, s, 0, None, [0, off, 16]] for s, off in ((1, 0), (2, 0), (2, 16), (1, 16))]
    recs += [[R.KERNEL, 1, 0, None, 0], [R.KERNEL, 2, 0, None, 0]]
    recs += [[R.KERNEL, 3, 0, None, [~0, 16, 16]], [R.KERNEL, 3, 0, None, [~0, 64, 16]]]
    recs += [[R.KERNEL, 0, 0, None, [~0, 0, 8]]]  # off the grid: the index from the parts
    # the first part read in the order opposite to the whole block's: the parts after it
    # join it and take its order
    # (another op: findings of the same ops would be these of the first block)
    recs += [[R.STR, 1, "op2"], [R.ALLOC, 1, 0x2000, 256, 0, None], [R.KERNEL, 0, 1, None, ~1]]
    recs += [[R.EVENT_RECORD, 0, 0, None], [R.EVENT_WAIT, 0, 1, None], [R.EVENT_WAIT, 0, 2, None]]
    recs += [[R.KERNEL, 2, 1, None, [1, 0, 16]], [R.KERNEL, 1, 1, None, [1, 0, 16]]]
    recs += [[R.KERNEL, 1, 1, None, 1], [R.KERNEL, 2, 1, None, 1], [R.KERNEL, 3, 1, None, [~1, 80, 16]]]
    for cap in (256, 3):
        check_capped(header, list(recs), cap)


def test_same_findings_when_a_whole_read_makes_two_touched_parts_equal_in_another_order():
    """Blocks of two parts, each part with a state of its own, or the first one the block's
    (untouched) state: stream 1's whole read replaces its read of one part in place and adds
    a read to the other, so the two parts then hold the same accesses in different orders;
    the index form joins them, keeping the first one's order, and stream 3's unordered write
    of the second part must report its races in that order."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STR, 1, "op1"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(4)]
    recs += [[R.ALLOC, 0, 0x10000, 32, 0, None], [R.ALLOC, 1, 0x20000, 32, 0, None],
             [R.KERNEL, 0, 0, None, ~0, ~1], [R.EVENT_RECORD, 0, 0, None],
             [R.EVENT_WAIT, 0, 1, None], [R.EVENT_WAIT, 0, 2, None]]
    # block 0: stream 1 reads part 0, stream 2 part 1; stream 2, then stream 1 read it whole
    recs += [[R.KERNEL, 1, 0, None, [0, 0, 16]], [R.KERNEL, 2, 0, None, [0, 16, 16]],
             [R.KERNEL, 2, 0, None, 0], [R.KERNEL, 1, 0, None, 0]]
    # block 1: stream 1 reads part 1 (part 0 stays the block's); stream 2, then stream 1 read it whole
    recs += [[R.KERNEL, 1, 1, None, [1, 16, 16]], [R.KERNEL, 2, 1, None, 1], [R.KERNEL, 1, 1, None, 1]]
    recs += [[R.KERNEL, 3, 0, None, [~0, 16, 16]], [R.KERNEL, 3, 1, None, [~1, 16, 16]], [R.END, {}]]
    ref = check(join(header, recs))
    races = [(f[1][7], f[2][7]) for f in ref[1] if f[0].value == "data-race"]
    # (seq, earlier seq): block 0 keeps part 0's order (stream 1's read first), block 1 the block's
    assert races == [(9, 5), (9, 4), (10, 7), (10, 8)]


def test_same_findings_when_racing_whole_reads_make_a_part_equal_to_the_untouched_ones():
    """As the test before, with every read racing with the block's write (no event): the
    core then checks each part the general way instead of its quick path for reads that
    cannot race. A part read by stream 2 alone, then the whole block read by streams 1 and
    2: the part holds the reads in the order 2, 1 and the untouched parts 1, 2, the same
    accesses, which the Python engine joins in the untouched parts' order; stream 3's write
    to the part must meet them in that order."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(4)]
    recs += [[R.ALLOC, 0, 0x1000, 256, 0, None], [R.KERNEL, 0, 0, None, ~0]]
    recs += [[R.KERNEL, 2, 0, None, [0, 16, 16]], [R.KERNEL, 1, 0, None, 0], [R.KERNEL, 2, 0, None, 0]]
    recs += [[R.KERNEL, 3, 0, None, [~0, 16, 16]]]
    for cap in (256, 3):
        check_capped(header, list(recs), cap)


def test_same_findings_with_accesses_a_segment_cannot_pack():
    """The core packs a segment's accesses when their values are small (offsets and sizes
    below 2^32, an access index below 2^16); others are kept whole. Both kinds, side by
    side in one segment and merged, must give the Python engine's findings."""
    buf = io.BytesIO()
    x, y = BASE, BASE + (1 << 40)
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.memory_allocated(x, HANDLES[0], size=1 << 36)
        w.memory_allocated(y, HANDLES[1], size=1 << 36)
        for i, (off, n) in enumerate([(8, 8), ((1 << 32) - 4, 8), (1 << 33, 1 << 32), (0, (1 << 32) + 1),
                                      (16, 8), ((1 << 35) + 3, 5)]):
            w.kernel(HANDLES[i % 4], f"aten::k{i}", reads=[(x + off, n)], writes=[(y + off, n)])
        # the last accesses of a long kernel: indexes past 2^16, one 2^16 after an access to the
        # bytes just before it (the two segments must not be merged as one access's)
        z = BASE + (1 << 41) + 100  # a block of its own: small accesses only
        w.memory_allocated(z - 100, HANDLES[2], size=4096)
        w.kernel(HANDLES[1], "aten::cat", reads=[(z, 8)] + [y] * ((1 << 16) - 1) + [(z + 8, 8)],
                 writes=[(x + (1 << 33), 8), (y + (1 << 33), 16)])
        w.kernel(HANDLES[3], "aten::zero_", reads=[], writes=[(z + 10, 2)])
        w.kernel(HANDLES[2], "aten::fill_", reads=[], writes=[(x, 1 << 34), (y + 8, 1 << 34)])
        w.kernel(HANDLES[3], "aten::sum", reads=[x, y], writes=[])
    ref = check(buf.getvalue())
    assert ref[0] == "ok" and len(ref[1]) > 5


#: Values around the limits of the core's compact form of a segment's state (three accesses
#: in one cache line): offsets and sizes below 2^28, op ids below 2^24 - 4, stack ids below
#: 2^24 - 1, an access's position in its kernel below 64.
_P3_OFFS = [0, 8, (1 << 28) - 16, (1 << 28) - 1, 1 << 28, (1 << 32) + 8]
_P3_SIZES = [1, 8, (1 << 28) - 1, 1 << 28]
_P3_OPS = [0, (1 << 24) - 5, (1 << 24) - 4, (1 << 24) - 1]  # (ids are below 2^24)
_P3_STACKS = [None, 0, (1 << 24) - 2, (1 << 24) - 1]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from(_P3_OFFS), st.sampled_from(_P3_SIZES),
                          st.sampled_from(_P3_OPS), st.sampled_from(_P3_STACKS), st.sampled_from([0, 1, 62, 63, 64]),
                          st.integers(0, 3)), max_size=40),
       st.sampled_from([3, 256]))
def test_same_findings_at_the_limits_of_the_compact_segment_form(ops, max_segments):
    """Three streams read and write ranges of one large block, with values on both sides of
    the limits of the core's compact form of a segment's state: a segment's accesses move
    between its three forms (three small accesses in a line, two larger ones, any number
    on the heap) as they are read, written, split and merged, and every field of every
    access must come back as the Python engine has it."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, o, f"op{o}"] for o in _P3_OPS] + [[R.STR, 1, "f.py"], [R.STR, 2, "step"]]
    recs += [[R.FRAME, 0, 1, 7, 2]] + [[R.STACK, k, [0]] for k in _P3_STACKS if k is not None]
    recs += [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x10000, 1 << 33, 0, None], [R.ALLOC, 1, 0x300000000, 64, 1, None]]
    for s, write, off, n, op, stack, idx, sync in ops:
        filler = [1] * idx  # the access of interest is at position idx of its kernel
        recs.append([R.KERNEL, s, op, stack, *filler, [~0 if write else 0, off, n]])
        if sync == 0:
            recs += [[R.EVENT_RECORD, 0, s, None], [R.EVENT_WAIT, 0, (s + 1) % 3, None]]
    check_capped(header, recs, max_segments)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1), st.booleans(), st.integers(0, 4095),
                          st.sampled_from([1, 8, 16, 64, 200]), st.integers(0, 99)), min_size=50, max_size=400),
       st.sampled_from([40, 256]))
def test_same_findings_on_blocks_of_many_segments(ops, max_segments):
    """Hundreds of ranges of uneven sizes on two blocks of 4 KiB split them into up to 256
    segments, merged at a cap of 40 or 256 and returned to one by whole-block writes. (The
    core guesses where a range's segment is, from the range's offset, before it searches;
    the guess is a hint that range_access checks, so a wrong one costs time, not findings.)"""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x10000, 4096, 0, None], [R.ALLOC, 1, 0x20000, 4096, 1, None]]
    for s, b, write, off, n, kind in ops:
        a = ~b if write else b
        if kind == 0:  # the whole block (a write returns it to one segment)
            recs.append([R.KERNEL, s, 0, None, a])
        else:
            recs.append([R.KERNEL, s, 0, None, [a, off if b == 0 else off // 8 * 8, n]])
        if kind < 10:
            recs += [[R.EVENT_RECORD, 0, s, None], [R.EVENT_WAIT, 0, (s + 1) % 3, None]]
    check_capped(header, recs, max_segments)


#: Offsets and sizes around the edges of the core's two forms of a block's index of segment
#: ends (one word per segment below 2^48 - 1, a wide form from there up) and of 2^64.
_EDGES = [0, 8, 64, (1 << 47), (1 << 48) - 9, (1 << 48) - 2, (1 << 48) - 1, 1 << 48, (1 << 48) + 8,
          (1 << 63), (1 << 64) - 9, (1 << 64) - 1]
_SIZES = [1, 8, 64, 1 << 16, (1 << 48) - 1, 1 << 48, 1 << 63, (1 << 64) - 1]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans(), st.sampled_from(_EDGES),
                          st.sampled_from(_SIZES), st.integers(0, 3)), max_size=40),
       st.sampled_from([3, 5, 256]))
def test_same_findings_with_ends_past_2_48_and_2_64(ops, max_segments):
    """Ranges whose ends lie below, at and past 2^48 - 1 and 2^64, on a block of unknown size
    (an unbounded last segment), one of known size 2^49 and one of size 2^64 - 1: the core's
    index of segment ends changes form as such an end arrives, and must split, find, merge
    (small caps) and report exactly as the Python engine."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.BLOCK_DEF, 0, 0x1000, None], [R.ALLOC, 1, 0x2000, 1 << 49, 1, None],
             [R.ALLOC, 2, 0x3000, (1 << 64) - 1, 2, None]]
    for s, b, write, off, n, sync in ops:
        a = ~b if write else b
        recs.append([R.KERNEL, s, 0, None, [b, off // 2, 8], [a, off, n]])
        if sync == 0:
            recs += [[R.EVENT_RECORD, 0, s, None], [R.EVENT_WAIT, 0, (s + 1) % 3, None]]
    check_capped(header, recs, max_segments)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 39), st.integers(0, 1), st.booleans(), st.integers(0, 4)), max_size=120))
def test_same_findings_with_many_streams_on_one_block(ops):
    """Up to 40 streams read, write and use two blocks: a block's list of readers and of
    uses grows past the 15 entries and 16 stream slots the core finds without scanning,
    and is emptied and refilled by writes."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(40)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.ALLOC, 1, 0x20000, 256, 1, None]]
    # 24 streams read both blocks first: the lists of readers and of uses pass the 15
    # entries the core places, and the entries after them must be found by scanning
    recs += [[R.KERNEL, s, 0, None, 0, 1] for s in range(39, 15, -1)]
    for s, b, write, sync in ops:
        recs.append([R.KERNEL, s, 0, None, ~b if write else b])
        if sync == 0:
            recs += [[R.EVENT_RECORD, 0, s, None], [R.EVENT_WAIT, 0, (s * 7 + 1) % 40, None]]
    recs += [[R.FREE, 0, None], [R.FREE, 1, None], [R.END, {}]]
    ref = check(join(header, recs))
    assert ref[0] == "ok"


_OP_STACK = st.sampled_from([(0, None), (3, 5), (0, 6)])  # (op, stack): the kernel's names
_part = st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from(range(0, 256, 16)))  # block, write, offset
_qop = st.one_of(
    # a ranged access (stream, block, write, offset, size); its block's own stream's queue up
    st.tuples(st.just("ranged"), st.integers(0, 4), st.integers(0, 2), st.booleans(), st.sampled_from(range(0, 256, 16)),
              st.sampled_from([16, 32, 256])),
    # one kernel of several 16-byte ranges (of one block or more), with its op and stack
    st.tuples(st.just("parts"), st.integers(0, 4), st.lists(_part, min_size=1, max_size=4), _OP_STACK),
    st.tuples(st.just("whole"), st.integers(0, 4), st.integers(0, 2), st.booleans()),
    # stream s's work so far ordered before stream t's next
    st.tuples(st.just("sync"), st.integers(0, 4), st.integers(0, 4)),
    # free and allocate again on stream s (a reuse ghost if another stream used it unordered)
    st.tuples(st.just("free"), st.integers(0, 4), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("record_stream"), st.integers(0, 4), st.integers(0, 2)),
    # the block's own stream, n times: a queue that fills (256 accesses) and is made midway
    st.tuples(st.just("burst"), st.integers(0, 2), st.sampled_from([40, 150])),
)


@FUZZ
@given(st.lists(_qop, max_size=40), st.booleans())
def test_same_findings_when_accesses_wait_in_the_queue(ops, realloc_same_id):
    """The core queues a ranged access of a block's own stream when everything else on the
    block happens before it, and makes the queue's accesses later, in batches: before
    anything else touches or frees their block, when 256 wait, and at the end of each call.
    Five streams (more other streams on a block than its summary holds), frees with the
    block struct reused at once, ghosts and record_stream around queued accesses, and
    kernels of several parts with their ops and stacks (the core queues a kernel whose
    accesses all can wait straight from its record)."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STR, 3, "read"], [R.STR, 1, "f.py"], [R.STR, 2, "step"], [R.FRAME, 0, 1, 7, 2],
            [R.FRAME, 1, 1, 9, 2], [R.STACK, 5, [0]], [R.STACK, 6, [1, 0]]]
    recs += [[R.STREAM_DEF, s, 0, 16 * s] for s in range(5)]
    owner, bid, ev, nxt = [0, 1, 2], [0, 1, 2], 0, 3
    recs += [[R.ALLOC, b, 0x10000 * (b + 1), 256, b, None] for b in range(3)]
    for item in ops:
        kind = item[0]
        if kind == "ranged":
            _, s, b, write, off, n = item
            recs.append([R.KERNEL, s, 0, None, [~bid[b] if write else bid[b], off, n]])
        elif kind == "parts":
            _, s, parts, (op, stack) = item
            recs.append([R.KERNEL, s, op, stack] + [[~bid[b] if write else bid[b], off, 16] for b, write, off in parts])
        elif kind == "whole":
            _, s, b, write = item
            recs.append([R.KERNEL, s, 0, None, ~bid[b] if write else bid[b]])
        elif kind == "sync":
            ev += 1
            recs += [[R.EVENT_RECORD, ev, item[1], None], [R.EVENT_WAIT, ev, item[2], None]]
        elif kind == "free":
            _, s, b, write = item
            recs.append([R.FREE, bid[b], None])
            if not realloc_same_id:
                bid[b], nxt = nxt, nxt + 1
            owner[b] = s
            recs.append([R.ALLOC, bid[b], 0x10000 * (b + 1), 256, s, None])
            recs.append([R.KERNEL, s, 0, None, [~bid[b] if write else bid[b], 0, 16]])
        elif kind == "record_stream":
            recs.append([R.RECORD_STREAM, bid[item[2]], item[1], None])
        else:
            _, b, n = item
            recs += [[R.KERNEL, owner[b], 3 * (k % 2), 5 if k % 5 == 1 else None,
                      [~bid[b] if k % 3 == 0 else bid[b], 16 * (k % 16), 16]] for k in range(n)]
    recs.append([R.END, {}])
    assert check(join(header, recs))[0] == "ok"


def test_a_range_off_the_grid_of_a_block_with_queued_parts_is_made_at_once():
    """A block in the grid form (16-byte parts) whose own stream's part accesses wait in the
    queue, then an access of that stream across two parts: it changes the block's form, so it
    cannot wait with them; a later unordered read of the second part races with it."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(2)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.KERNEL, 0, 0, None, [~0, 0, 16]]]
    # stream 1's read, ordered after stream 0 and before what follows, starts the grid
    recs += [[R.EVENT_RECORD, 0, 0, None], [R.EVENT_WAIT, 0, 1, None], [R.KERNEL, 1, 0, None, [0, 160, 16]],
             [R.EVENT_RECORD, 1, 1, None], [R.EVENT_WAIT, 1, 0, None]]
    recs += [[R.KERNEL, 0, 0, None, [~0, 16 * k, 16]] for k in (5, 3)]
    recs += [[R.KERNEL, 0, 0, None, [~0, 16, 32]], [R.KERNEL, 0, 0, None, [0, 64, 16]]]
    recs += [[R.KERNEL, 1, 0, None, [0, 32, 16]], [R.END, {}]]
    ref = check(join(header, recs))
    races = [(f[1][7], f[2][7]) for f in ref[1] if f[0].value == "data-race"]
    assert races == [(7, 5)]  # (seq, earlier seq): the read of part 2 and the write across parts 1-2


def test_a_queued_first_read_of_a_part_keeps_what_the_whole_block_held():
    """Stream 1 writes the whole block; after hand-offs, stream 0's reads of parts start the
    grid and then wait in the queue, one of them the first access of its part: that part
    must still hold stream 1's write (the base state), which stream 2's unordered read of
    the part then races with."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.KERNEL, 1, 0, None, ~0],
             [R.EVENT_RECORD, 0, 1, None], [R.EVENT_WAIT, 0, 0, None]]
    recs += [[R.KERNEL, 0, 0, None, [0, 0, 16]], [R.KERNEL, 1, 0, None, [0, 240, 16]],
             [R.EVENT_RECORD, 1, 1, None], [R.EVENT_WAIT, 1, 0, None]]
    recs += [[R.KERNEL, 0, 0, None, [0, 80, 16]], [R.KERNEL, 2, 0, None, [0, 80, 16]], [R.END, {}]]
    ref = check(join(header, recs))
    races = [(f[1][7], f[2][7]) for f in ref[1] if f[0].value == "data-race"]
    assert races == [(5, 1)]  # (seq, earlier seq): stream 2's read and stream 1's whole write


def test_a_queued_read_of_a_full_part_keeps_its_op_and_stack():
    """Streams 1 and 2 read a part that stream 0 wrote, ordered both ways: the part's compact
    state is full (a write and reads of two streams), so stream 0's queued read of it (op,
    stack and position in its kernel away from zero) moves the state to the general form;
    stream 1's later unordered write races with that read (and with stream 2's), which the
    report names in full."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STR, 3, "read"], [R.STR, 1, "f.py"], [R.STR, 2, "step"], [R.FRAME, 0, 1, 7, 2],
            [R.STACK, 5, [0]]]
    recs += [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.ALLOC, 1, 0x20000, 256, 0, None],
             [R.KERNEL, 0, 0, None, [~0, 32, 16]], [R.EVENT_RECORD, 0, 0, None]]
    for s in (1, 2):
        recs += [[R.EVENT_WAIT, 0, s, None], [R.KERNEL, s, 0, None, [0, 32, 16]],
                 [R.EVENT_RECORD, s, s, None], [R.EVENT_WAIT, s, 0, None]]
    recs += [[R.KERNEL, 0, 3, 5, [1, 0, 16], [0, 32, 16]], [R.KERNEL, 1, 0, None, [~0, 32, 16]], [R.END, {}]]
    ref = check(join(header, recs))
    races = [(f[1][7], f[2][5], f[2][7], f[2][8]) for f in ref[1] if f[0].value == "data-race"]
    assert [r[:3] for r in races] == [(5, "op", 3), (5, "read", 4)]  # (seq, earlier op, earlier seq)
    assert races[1][3]  # stream 0's read's stack


def test_queued_accesses_see_a_third_other_stream_and_strided_entries():
    """A block's summary of other streams' accesses holds two streams: a third makes its
    own stream's accesses wait in no queue, so that they are checked as they come. And an
    access next to strided entries is made at once: a write covering one drops it, which
    the entry's stream's later readers must see."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(4)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.ALLOC, 1, 0x20000, 256, 0, None]]
    # block 0: streams 1 and 2 read it, ordered before stream 0; stream 3 writes, unordered
    recs += [[R.KERNEL, 1, 0, None, [0, 0, 16]], [R.KERNEL, 2, 0, None, [0, 16, 16]],
             [R.EVENT_RECORD, 1, 1, None], [R.EVENT_WAIT, 1, 0, None],
             [R.EVENT_RECORD, 2, 2, None], [R.EVENT_WAIT, 2, 0, None],
             [R.KERNEL, 3, 0, None, [~0, 64, 16]], [R.KERNEL, 0, 0, None, [0, 64, 16]]]
    # block 1: stream 1 writes a strided view of it, ordered before stream 0, which writes
    # over the view; stream 2, unordered with both, then reads inside the view
    recs += [[R.VIEWS, [~1, 0, 52, 4, 4, 16]], [R.KERNEL, 1, 0, None, [~1, 0, 52]],
             [R.EVENT_RECORD, 3, 1, None], [R.EVENT_WAIT, 3, 0, None],
             [R.KERNEL, 0, 0, None, [~1, 0, 64]], [R.KERNEL, 2, 0, None, [1, 16, 4]], [R.END, {}]]
    ref = check(join(header, recs))
    races = sorted((f[1][7], f[2][7]) for f in ref[1] if f[0].value == "data-race")
    assert races == [(4, 3), (7, 6)]  # (seq, earlier seq): stream 3's write; stream 0's write only


def test_part_accesses_of_a_block_with_a_reuse_ghost_are_checked_against_it():
    """Stream 1 reads part 2 of a block that is then freed without record_stream and
    allocated again at the same address on stream 0, whose write of part 0 starts the grid
    (and keeps the ghost: it does not meet it). Stream 0's next kernel, of two parts of the
    block, could otherwise wait in the queue: its write of part 2 meets the ghost, a reuse
    race."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(2)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.KERNEL, 1, 0, None, [0, 32, 16]],
             [R.FREE, 0, None], [R.ALLOC, 0, 0x10000, 256, 0, None], [R.KERNEL, 0, 0, None, [~0, 0, 16]],
             [R.KERNEL, 0, 0, None, [~0, 16, 16], [~0, 32, 16]], [R.END, {}]]
    ref = check(join(header, recs))
    kinds = sorted((f[0].value, f[1][7]) for f in ref[1])
    assert kinds == [("missing-record-stream", 0), ("reuse-race", 3)], kinds  # (kind, seq: the free has none)


def test_a_part_write_over_a_strided_entry_of_a_block_in_the_grid_form_drops_it():
    """Stream 1 writes a strided view inside one 16-byte part of a block, ordered before
    stream 0, whose write of another part starts the grid (the view's entry kept beside it);
    stream 0's next kernel writes the view's part (and another): the entry is dropped.
    Stream 2, unordered with both, then reads inside the view: it races with stream 0's
    write only."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None],
             [R.VIEWS, [~0, 16, 12, 4, 2, 8]], [R.KERNEL, 1, 0, None, [~0, 16, 12]],
             [R.EVENT_RECORD, 1, 1, None], [R.EVENT_WAIT, 1, 0, None], [R.KERNEL, 0, 0, None, [~0, 64, 16]],
             [R.KERNEL, 0, 0, None, [~0, 16, 16], [~0, 96, 16]], [R.KERNEL, 2, 0, None, [0, 16, 4]], [R.END, {}]]
    ref = check(join(header, recs))
    races = sorted((f[1][7], f[2][7]) for f in ref[1] if f[0].value == "data-race")
    assert races == [(4, 3)], races  # (seq, earlier seq): stream 0's write only


def test_a_kernel_of_queued_parts_moves_its_streams_clock_and_takes_its_views():
    """Stream 1's reads, ordered before stream 0, start the grid (16-byte parts) of two of
    stream 0's blocks. Stream 0's kernels of parts then all wait in the queue. Stream 1 waits
    on an event recorded after the first two, then writes the part the second wrote: no race
    (the event carries that kernel's clock). The third, refined by a VIEWS record to a
    strided write inside a part of the other block, is after the event: stream 1's read of
    bytes of that part outside the view races with nothing."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(2)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.ALLOC, 1, 0x20000, 256, 0, None],
             [R.KERNEL, 1, 0, None, [0, 128, 16], [1, 128, 16]], [R.EVENT_RECORD, 0, 1, None],
             [R.EVENT_WAIT, 0, 0, None], [R.KERNEL, 0, 0, None, [~0, 0, 16], [~0, 48, 16]],
             [R.KERNEL, 0, 0, None, [0, 64, 16], [~0, 32, 16]], [R.EVENT_RECORD, 1, 0, None],
             [R.EVENT_WAIT, 1, 1, None], [R.VIEWS, [~1, 16, 16, 4, 2, 12]],
             [R.KERNEL, 0, 0, None, [~1, 16, 16], [~0, 96, 16]],
             [R.KERNEL, 1, 0, None, [~0, 32, 16]], [R.KERNEL, 1, 0, None, [1, 20, 8]], [R.END, {}]]
    ref = check(join(header, recs))
    assert [f for f in ref[1] if f[0].value == "data-race"] == []


def test_a_range_after_a_strided_access_of_its_block_in_one_kernel_is_made_at_once():
    """One kernel of a block's own stream writes a strided view of the block, then a range
    covering the view: the block has a strided entry by the time the range is made, so the
    range cannot wait in the queue (though it could when the kernel began), and it drops the
    entry. A later unordered read inside the view races with the range's write alone."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(2)]
    recs += [[R.ALLOC, 0, 0x10000, 256, 0, None], [R.VIEWS, [~0, 0, 52, 4, 4, 16]],
             [R.KERNEL, 0, 0, None, [~0, 0, 52], [~0, 0, 64]], [R.KERNEL, 1, 0, None, [0, 16, 4]], [R.END, {}]]
    ref = check(join(header, recs))
    races = [(f[1][7], f[1][9], f[2][7], f[2][9]) for f in ref[1] if f[0].value == "data-race"]
    assert races == [(2, 16, 1, 0)]  # (seq, offset, earlier seq, offset): the read and the range


def test_same_on_kernel_records_cut_at_every_byte():
    """Kernel records whose ints take their widest quick encodings (the core reads a record
    without testing the end before each int when the rest of the buffer is long enough for
    any such record), cut at every byte."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 70003, "op"], [R.STREAM_DEF, 70004, 0, 16], [R.STREAM_DEF, 70000, 0, 32]]
    recs += [[R.ALLOC, 70001, 0x10000000, 0x80000, 70004, None]]
    recs += [[R.KERNEL, 70000, 70003, None, [~70001, 0x10000, 0x20000], [70001, 0x30000, 0x10000]]]
    recs += [[R.KERNEL, 70004, 70003, None, [~70001, 0x20000, 0x10000], [70001, 0x10000, 0x12345]]] * 2
    full = join(header, recs + [[R.END, {}]])
    start = len(join(header, recs[:4]))
    for cut in range(start, len(full) + 1):
        check(full[:cut])


def test_records_of_unknown_types_are_skipped_by_the_core_and_counted_by_type():
    """After the first record of an unknown type (which the reader warns about) the core
    skips that type's records itself; the counts by type, the warnings, the record count
    and the findings are the Python engine's, across chunk boundaries (the core reads
    256 KiB at a time), for a type of any width, and for a record cut short at the end."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 1, "op"], [R.STREAM_DEF, 1, 0, 16], [R.STREAM_DEF, 2, 0, 32]]
    recs += [[R.ALLOC, 1, 0x10000000, 0x1000, 1, None]]
    odd = [[200], [201, "x", {"k": [1, 2]}], [1 << 40, b"\0"], [(1 << 64) - 1]]
    for i in range(60_000):
        recs.append(odd[i % len(odd)])
        if i % 20_000 == 0:
            recs.append([R.KERNEL, 1 + (i // 20_000) % 2, 1, None, [1, 0, 0x1000]])
    full = join(header, recs + [[R.END, {}]])
    ref = check(full)
    assert ref.unknown_types == {200: 15_000, 201: 15_000, 1 << 40: 15_000, (1 << 64) - 1: 15_000}
    assert len(ref.warnings) == 4 and ref.findings
    check(full[:-len(msgpack.packb([R.END, {}])) - 3])  # cut inside the last unknown record


def test_same_findings_for_frees_judged_at_a_later_allocation_or_at_the_end():
    """Frees pending on two streams, judged at allocations on their own stream (one after a
    wait that covers the use, one not) and at the end of the trace, in the order found."""
    ops = [("kernel", 1, [(0, False), (1, False), (2, False)]), ("kernel", 2, [(1, False), (0, False)]),
           ("free", 0, 3, 0, True), ("free", 1, 3, 0, True), ("free", 2, 3, 0, True),
           ("alloc", 2), ("record", 7, 1), ("wait", 7, 0), ("alloc", 0), ("alloc", 1)]
    for check_leaks in (False, True):
        ref = check(write_program(ops), check_leaks)
        assert [f[0].value for f in ref[1]].count("missing-record-stream") == 3, ref[1]


def test_the_generator_produces_every_kind_of_finding():
    ops = [("kernel", 1, [(0, True)]), ("kernel", 2, [(0, False)]),  # a data race
           ("kernel", 1, [(2, False)]), ("free", 2, 0, 0, True),  # a missing record_stream
           ("kernel", 0, [(2, True)]),  # and its reuse
           ("ranged", 2, [(1, True, 8, 8)]), ("ranged", 3, [(1, False, 12, 8)])]
    ref = check(write_program(ops))
    assert {f[0].value for f in ref[1]} == {"data-race", "missing-record-stream", "reuse-race"}


@pytest.mark.parametrize("name, bad, words", _one_damaged_byte_cases())
def test_same_error_for_a_damaged_length_inside_a_kernel_record(name, bad, words):
    """One length byte damaged mid-trace makes a record claim the rest of the file: both
    engines refuse the trace with the same message, from a file, a pipe or a gzip stream
    (the core hands the unfinished record's bytes to the reader; the Python engine's reader
    looks them up in the file, or keeps them as it reads a stream)."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.BLOCK_DEF, 1, 0x1000, 4096, None]]
    data = join(header, [*recs, bad, *([R.KERNEL, 0, 0, None, [1, 16 * k, 16]] for k in range(200))])
    ref = check(data)
    assert ref[0] == "error" and words in ref[1]
    for kind in ("pipe", "gzip"):  # (the unfinished record's bytes as read: no looking back)
        got = outcome_of_stream(data, "file", kind)
        assert got == ref and got == outcome_of_stream(data, "native", kind)


@pytest.mark.parametrize("kind", ["pipe", "gzip"])
def test_same_error_for_corrupt_data_read_as_a_stream(kind):
    """Invalid UTF-8 mid-trace, read from a pipe or decompressed as it is read: the core
    knows where the record starts, the Python engine's reader cannot look back to find it;
    both name the record alone (the core named its offset too)."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    bad = msgpack.packb([R.STR, 5, "ab"])
    bad = bad[:-2] + b"\xcd\xff"
    recs = [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.BLOCK_DEF, 1, 0x1000, 4096, None]]
    recs += [[R.KERNEL, 0, 0, None, [1, 16 * (k % 200), 16]] for k in range(30_000)] + [bad, [R.END, {}]]
    data = join(header, recs)
    ref = outcome_of_stream(data, "file", kind)
    assert ref[0] == "error" and "not valid UTF-8" in ref[1] and "record 30004" in ref[1]
    assert outcome_of_stream(data, "native", kind) == ref
    assert check(data)[1].startswith(ref[1].split(" (")[0] + " at byte offset")  # a file: the offset too


@pytest.mark.parametrize("access", [
    [[1] * 100_000, 0, 16],  # a block id that is a long list
    [1, 0, [[["x" * 100] * 20] * 20]],  # a size nested deep
    {"block": list(range(50_000))},  # not an access at all
])
def test_the_error_for_a_huge_malformed_access_is_one_short_line(access):
    """A damaged record can make an access of a kernel a list of thousands of elements: the
    message quotes it cut short (it quoted all of it: a 4 KB line, cut only at the end)."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.BLOCK_DEF, 1, 0x1000, 4096, None],
            [R.KERNEL, 0, 0, None, 1, access], [R.END, {}]]
    ref = check(join(header, recs))
    assert ref[0] == "error" and "kernel access" in ref[1] and len(ref[1]) < 400 and "\n" not in ref[1]


@FUZZ
@given(st.lists(_op, max_size=40), st.data())
def test_same_on_truncated_traces(ops, data):
    full = write_program(ops)
    check(full[:data.draw(st.integers(len(R.MAGIC), len(full) - 1))])


@FUZZ
@given(st.lists(_op, max_size=40), st.lists(st.tuples(st.integers(0, 1 << 30), junk), max_size=4),
       st.booleans(), st.booleans())
def test_same_with_malformed_and_unknown_records(ops, inserts, drop_end, garbage_after):
    header, recs = split(write_program(ops))
    end = recs.pop()
    for where, rec in inserts:
        recs.insert(where % (len(recs) + 1), rec)
    if not drop_end:
        recs.append(end)
    check(join(header, recs) + (b"\x93\x01" if garbage_after else b""))


@FUZZ
@given(st.lists(_op, max_size=40), st.data())
def test_same_on_corrupted_bytes(ops, data):
    buf = bytearray(write_program(ops))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(len(R.MAGIC), len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "set", "delete", "insert"]))
        if op == "flip":
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x90, 0x9F, 0xC0, 0xC1, 0xC3, 0xCB, 0xD9, 0xDB, 0xDC,
                                                0xDD, 0xDF, 0xC6, 0xD7, 0xED, 0xFF]))
        elif op == "delete":
            del buf[i]
        else:
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=6))
    check(bytes(buf))


@pytest.mark.parametrize("tail", [
    b"\xdd\xff\xff\xff\xff",  # an array claiming 4G elements
    b"\xdb\xff\xff\xff\xff",  # a str claiming 4 GB
    b"\x91" * 2000 + b"\x00",  # a nesting bomb
    b"\x94\x11\x00\x00\xc0" + b"\x91" * 1100,  # a kernel access nested deeper than msgpack allows
    b"\x94\x11\x00\x00\xa2\xed\xa0",  # invalid UTF-8 in a field
    b"\x94\x11\x00\x00\x81\x91\x00\x01",  # an unhashable map key
    b"\x94\x11\x00\x00\xd7\xff" + b"\xff" * 8,  # an invalid timestamp extension
    b"\x95\x11\x00\x00\xc0\xc1",  # a byte msgpack never uses
    b"\x96\x11\x00\x00\xc0\xd6\x05\x00\x00\x00\x00\x00",  # an extension value as an access
    b"\x9a\xd5\x80\x00\x00",  # an extension of a negative type other than the timestamp's (-1)
    b"\x94\x11\x00\x00\xd4\xfe\x00",  # the same in a kernel
])
def test_same_error_on_hostile_tails(tail):
    header, recs = split(write_program([("kernel", 1, [(0, True)])]))
    recs.pop()
    ref = check(join(header, recs) + tail)
    assert ref[0] == "error" or ref[5]  # refused, or read as a cut trace


def test_huge_ids_allocate_nothing_dense():
    # Every id at the top of its range: sparse tables keep this trace tiny in memory.
    top = (1 << 24) - 1
    recs = [[R.STREAM_DEF, top, 0, 5], [R.STR, top, "op"], [R.ALLOC, top, 0x1000, 64, top, None],
            [R.KERNEL, top, top, None, ~top], [R.EVENT_RECORD, (1 << 64) - 1, top, None],
            [R.BLOCK_DEF, top - 1, 0x9000, None], [R.KERNEL, top, top, None, top - 1], [R.FREE, top, None],
            [R.END, {}]]
    ref = check(join({"format": [1, 0]}, recs))
    assert ref[0] == "ok" and ref[2] == 2


@FUZZ
@given(st.lists(_op, max_size=40), st.lists(st.one_of(st.integers(-(1 << 63), (1 << 64) - 1), st.text(max_size=5), st.none(),
                                                      st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2),
                                                      st.lists(st.integers(0, 9), max_size=3)), min_size=1, max_size=3))
def test_trailing_fields_of_a_newer_minor_version_are_ignored(ops, extra):
    # Format 1.x may add trailing fields to any record but KERNEL and HOST_ACCESS (whose
    # trailing fields are accesses): both engines ignore them, and find exactly what they
    # find without them.
    header, recs = split(write_program(ops))
    padded = [r + extra if r[0] not in (R.KERNEL, R.HOST_ACCESS, R.END) else r for r in recs]
    plain = check(join(header, recs))
    assert check(join(header, padded))[1:3] == plain[1:3]


def test_traces_of_a_newer_minor_version_replay_through_the_python_engine(capsys):
    from npusan.trace_format.symbols import SymbolTable

    assert native.NATIVE_FORMAT == (1, 3)
    for fmt in ([1, 0], [1, 1], [1, 2], [1, 3]):  # strided views (1.1), host accesses (1.2), graphs (1.3)
        assert isinstance(native.make_engine(SymbolTable(), header={"format": fmt}), native.NativeEngine)
        assert isinstance(native.make_engine(SymbolTable(), file=True, header={"format": fmt}), native.NativeEngine)
        assert native.newer_than_core({"format": fmt}) is None
    newer = (native.NATIVE_FORMAT[0], native.NATIVE_FORMAT[1] + 1)
    assert type(native.make_engine(SymbolTable(), header={"format": list(newer)})) is Engine
    assert "pure-Python engine" in native.newer_than_core({"format": list(newer)})
    assert capsys.readouterr().err == ""  # nothing printed: the trace's summary carries the warning
    header, recs = split(write_program([("kernel", 1, [(0, True)])]))
    header["format"] = list(newer)
    _, summary = replay.analyze_trace(io.BytesIO(join(header, recs)))
    assert any("newer than the compiled replay core" in w for w in summary.warnings)


# -- strided views (format 1.1 VIEWS records) ------------------------------------------------

_VIEWS = getattr(R, "VIEWS", None)
_dims = st.lists(st.tuples(st.integers(2, 4), st.integers(1, 40)), min_size=1, max_size=3)
_strided = st.tuples(st.integers(0, 2), st.booleans(), st.integers(1, 8), _dims, st.integers(0, 64))
_vop = st.one_of(
    st.tuples(st.just("views"), st.integers(0, 2), st.lists(_strided, min_size=1, max_size=3), st.booleans()),
    st.tuples(st.just("plain"), st.integers(0, 2), st.integers(0, 2), st.booleans(), st.integers(0, 200),
              st.integers(0, 80)),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2)),
)


def views_program(ops) -> bytes:
    """Kernels on 3 blocks of 256 bytes with strided, ranged and whole accesses from 3 streams."""
    header = {"format": [1, 1], "backend": "cuda", "default_streams": {0: 0}}
    recs = [[R.STR, 0, "op"], [R.STR, 1, "view"]]
    for s in range(3):
        recs.append([R.STREAM_DEF, s, 0, 16 * s])
    for b in range(3):
        recs.append([R.ALLOC, b, 0x10000 * (b + 1), 256, b, None])
    ev = 0
    for item in ops:
        if item[0] == "views":
            _, s, accesses, hull_only = item
            entries, accs = [], []
            for b, write, run, dims, off in accesses:
                nb = run + sum((n - 1) * st_ for n, st_ in dims)
                off = off % max(1, 257 - nb)
                a = ~b if write else b
                if [a, off, nb] in accs:
                    continue
                accs.append([a, off, nb])
                entries.append([a, off, nb] if hull_only else [a, off, nb, run] + [x for d in dims for x in d])
            recs.append([_VIEWS] + entries)
            recs.append([R.KERNEL, s, 1, None] + accs)
        elif item[0] == "plain":
            _, s, b, write, off, n = item
            a = ~b if write else b
            recs.append([R.KERNEL, s, 0, None, a if n == 0 else [a, off, n]])
        else:
            recs.append([R.EVENT_RECORD, ev, item[1], None])
            recs.append([R.EVENT_WAIT, ev, item[2], None])
            ev += 1
    recs.append([R.END, {}])
    return join(header, recs)


@FUZZ
@given(st.lists(_vop, max_size=50), st.booleans())
def test_same_findings_with_strided_views(ops, check_leaks):
    ref = check(views_program(ops), check_leaks)
    assert ref[0] == "ok"


@FUZZ
@given(st.lists(_vop, max_size=50), st.sampled_from([1, 2]))
def test_same_findings_when_strided_entries_are_merged_into_segments(ops, max_views):
    """With room for one or two strided entries per block, nearly every strided access
    merges an older entry into the segments over its hull (its writes and reads, and the
    segments' writes among their reads): both engines the same way."""
    with mock.patch.object(strided_mod, "MAX_VIEWS", max_views):
        ref = check(views_program(ops))
    assert ref[0] == "ok"


@FUZZ
@given(st.lists(_vop, max_size=20), st.lists(st.tuples(st.integers(0, 1 << 30), st.lists(
    st.one_of(st.integers(-3, 300), st.none(), st.lists(st.integers(-3, 300), max_size=8)), max_size=4)), max_size=3))
def test_same_errors_with_malformed_views(ops, inserts):
    header, recs = split(views_program(ops))
    for where, fields in inserts:
        recs.insert(where % len(recs), [_VIEWS] + fields)
    check(join(header, recs))


def _views_entry(a: int, lo: int, run: int, dims) -> list:
    return [a, lo, run + sum((n - 1) * d for n, d in dims), run] + [x for dim in dims for x in dim]


def _views_trace(*pairs, blocks=((0x10000, None),)) -> bytes:
    """A 1.1 trace: streams 0-2, blocks allocated on stream 0, then ``(stream, views, accesses)``."""
    recs = [[R.STR, 0, "op"]] + [[R.STREAM_DEF, s, 0, 16 * s] for s in range(3)]
    recs += [[R.ALLOC, b, ptr, size, 0, None] for b, (ptr, size) in enumerate(blocks)]
    for stream, views, accs in pairs:
        if views is not None:
            recs.append([_VIEWS] + views)
        recs.append([R.KERNEL, stream, 0, None] + accs)
    recs.append([R.END, {}])
    return join({"format": [1, 1], "backend": "cuda"}, recs)


def test_same_budget_warning_on_costly_views():
    # The exact comparison of these two would need a long search: both engines give up after
    # the same budget, answer "overlap" (one report) and count it (analyze's warning).
    a = _views_entry(-1, 45, 1, ((130, 4412), (73, 2358), (73, 826)))
    b = _views_entry(-1, 35, 1, ((171, 3917), (77, 2590), (52, 654)))
    ref = check(_views_trace((1, [a], [a[:3]]), (2, [b], [b[:3]])))
    assert ref[0] == "ok" and [f[0].value for f in ref[1]].count("data-race") == 1 and ref.gave_up == 1


def test_same_when_the_whole_trace_budget_runs_out(monkeypatch):
    # Many costly comparisons: the trace's total budget runs out, then every further test
    # that needs a search is answered "overlap" at once, in both engines alike.
    from npusan.analyzer.replay import overlap

    monkeypatch.setattr(overlap, "TOTAL_BUDGET", 5000)
    a = _views_entry(-1, 45, 1, ((130, 4412), (73, 2358), (73, 826)))
    b = _views_entry(-1, 35, 1, ((171, 3917), (77, 2590), (52, 654)))
    pairs = [(1 + i % 2, [a if i % 2 == 0 else b], [(a if i % 2 == 0 else b)[:3]]) for i in range(12)]
    ref = check(_views_trace(*pairs))
    assert ref[0] == "ok" and ref.gave_up >= 3


def test_same_when_views_overflow_a_block():
    # More strided entries than a block keeps (strided.MAX_VIEWS): the oldest are merged into
    # the byte-range segments, conservatively; then ranged and whole accesses meet them.
    pairs = []
    for i in range(40):
        e = _views_entry(~0 if i % 3 else 0, (i * 7) % 64, 2 + i % 3, ((4, 16 + i % 5),))
        pairs.append((i % 3, [e], [e[:3]]))
        if i % 7 == 0:
            pairs.append(((i + 1) % 3, None, [[~0 if i % 2 else 0, i, 9]]))
    pairs.append((2, None, [0]))
    pairs.append((1, None, [~0]))
    ref = check(_views_trace(*pairs, blocks=((0x10000, 256),)))
    assert ref[0] == "ok" and ref[1]


BIG = (1 << 64) - 1


@pytest.mark.parametrize("views", [
    [0],  # an entry that is not an array
    [[0, 0]],  # too short
    [[0, 0, 0]],  # nbytes 0
    [[0, -1, 8]],  # a negative offset
    [[0, BIG, BIG]],  # the largest offset and size
    [[-(1 << 63), 0, 8, 4, 2, 4]],  # the smallest block field
    [[0, 0, 8, 0, 2, 4]],  # run 0
    [[0, 0, 8, 4, 2, 4, 2]],  # an odd number of dims fields
    [[0, 0, 8, 4, 1, 4]],  # a size below 2
    [[0, 0, 8, 4, 2, -4]],  # a negative stride
    [[0, 0, 8, 4, 2, 0]],  # stride 0
    [[0, 0, 8, 4, 2, 5]],  # dims span 9 bytes, not 8
    [[0, 0, BIG, 1, BIG, BIG]],  # huge counts and strides: the span check, no overflow
    [[0, 0, BIG, 1, 2, BIG - 1]],  # valid, 64-bit span
    [[0, 0, 8, 4] + [2, 1] * 9],  # more than MAX_DIMS dims
    [[0, 0, 8, 4, [2], 4]],  # a nested size
    [[0, 0, 8, 4, 2, {"a": 1}]],  # a map as a stride
    [[0, 0, 8, 4, 2, 4.0]],  # a float
    [[0, 0, 8, 4, 2, True]],  # a bool is not an int here
    [[0, 0, 8, 4, 2, 4], [0, 0, 8, 4, 2, 4]],  # the same triple twice
    [[0, 0, 8, 4, 2, 4], [0, 0, 8]],  # the same triple twice, once as a hull
    [[0, 0, 8], [~0, 0, 8], [0, 8, 8, 4, 2, 4]],  # fine
    [[[[[[0]]]]]],  # nested arrays as an entry
])
def test_same_errors_on_hostile_views(views):
    data = _views_trace((1, views, [[0, 0, 8]]), (2, None, [~0]))
    ref = check(data)
    assert ref[0] == "error" or ref[0] == "ok"


@pytest.mark.parametrize("tail", [
    b"\x92\x15\xdd\xff\xff\xff\xff",  # a views entry claiming 4G fields
    b"\xdd\x7f\xff\xff\xff\x15",  # a views record claiming 2G entries
    b"\x92\x15" + b"\x91" * 2000 + b"\x00",  # a nesting bomb inside a views record
    b"\x93\x15\x93\x00\x00\x08" + b"\x91" * 1100,  # a second entry nested deeper than msgpack allows
    b"\x92\x15\x96\x00\x00\x08\x04\x02\xc1",  # a byte msgpack never uses
    b"\x91\x15",  # fewer fields than a views record needs
])
def test_same_error_on_hostile_views_tails(tail):
    header, recs = split(_views_trace((1, None, [0])))
    recs.pop()
    ref = check(join(header, recs) + tail)
    assert ref[0] == "error" or ref[5]


class _Pipe(io.RawIOBase):
    """Bytes read as from a pipe: no seeking back."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self._data.readinto(b)


def outcome_of_stream(data: bytes, path: str, kind: str):
    """As :func:`outcome`, reading ``data`` through a pipe or decompressed from gzip/zstd."""
    import gzip

    import zstandard

    from npusan.trace_format.compression import DecompressingReader

    if kind == "pipe":
        source = io.BufferedReader(_Pipe(data))
    else:
        packed = gzip.compress(data) if kind == "gzip" else zstandard.ZstdCompressor().compress(data)
        source = DecompressingReader(io.BytesIO(packed), kind)
    # (the reader's position is not compared for the core: see differential.check)
    return outcome(data, path, check_leaks=False, source=source)._replace(position=None)


@pytest.mark.parametrize("kind", ["pipe", "gzip", "zstd"])
@pytest.mark.parametrize("tail", [
    b"\0",
    b"\0" * 4096,  # a killed mapped writer's zero tail
    b"\0" * (native.CHUNK + 17),  # longer than the core's read
    b"\0" * 100 + b"\x01" + b"\0" * 100,  # a non-zero byte after the zeros: corrupt
    b"\0" * (native.CHUNK + 5) + b"\x90",
])
def test_same_verdict_on_zero_tails_read_as_streams(kind, tail):
    """Both engines read a zero tail as the cut (or a corrupt tail as an error) when the
    trace cannot seek back, as for a plain file (compare with the seekable ``check``)."""
    header, recs = split(write_program([("kernel", 1, [(0, True)]), ("kernel", 2, [(0, False)])]))
    recs.pop()
    data = join(header, recs) + tail
    ref = outcome_of_stream(data, "file", kind)
    assert outcome_of_stream(data, "native", kind) == ref
    plain = check(data, check_leaks=False)
    if tail.count(0) == len(tail):
        assert ref[0] == "ok" and ref[5] and ref[1] == plain[1]  # truncated, same findings
    else:
        assert ref == plain and ref[0] == "error"


_STACK_PREFIX = {  # each event record type up to (not including) its stack field, on stream 1 / block 0
    R.STREAM_CREATED: [R.STREAM_CREATED, 1], R.EVENT_CREATED: [R.EVENT_CREATED, 7],
    R.EVENT_DELETED: [R.EVENT_DELETED, 7], R.EVENT_RECORD: [R.EVENT_RECORD, 7, 1],
    R.EVENT_WAIT: [R.EVENT_WAIT, 7, 1], R.EVENT_SYNC: [R.EVENT_SYNC, 7], R.STREAM_SYNC: [R.STREAM_SYNC, 1],
    R.DEVICE_SYNC: [R.DEVICE_SYNC, None], R.ALLOC: [R.ALLOC, 9, 0x900000, 16, 1], R.FREE: [R.FREE, 0],
    R.RECORD_STREAM: [R.RECORD_STREAM, 0, 1], R.ERASE_STREAM: [R.ERASE_STREAM, 0, 1], R.KERNEL: [R.KERNEL, 1, 2],
}


@pytest.mark.parametrize("t", sorted(_STACK_PREFIX))
@pytest.mark.parametrize("stack", [{"a": 1}, [1], "s", 1.5, True, b"\x01"])
def test_same_error_for_a_stack_id_of_the_wrong_type(t, stack):
    """docs/security.md: "a map as a stack id" is a corrupt trace (a stack is an id or nil),
    in every event record, refused by both engines with the same line (it was read as no stack)."""
    header, recs = split(write_program([("kernel", 1, [(0, True)])]))
    end = recs.pop()
    rec = _STACK_PREFIX[t] + [stack] + ([-1] if t == R.KERNEL else [])
    ref = check(join(header, recs + [rec, end]))
    assert ref[0] == "error" and "a field has the wrong type: the stack id is" in ref[1], ref
    assert f"malformed {R.RECORD_NAMES[t]} record" in ref[1] and "not an integer or nil" in ref[1]
    for ok in (None, 0, 1 << 40):  # nil, or any integer (one naming no stack is no stack)
        rec = _STACK_PREFIX[t] + [ok] + ([-1] if t == R.KERNEL else [])
        assert check(join(header, recs + [rec, end]))[0] == "ok"


@pytest.mark.parametrize("cls", [Engine, native.NativeEngine])
def test_online_a_map_as_a_stack_id_is_refused(cls):
    from npusan.trace_format.symbols import SymbolTable

    eng = cls(SymbolTable())
    eng.feed([R.STREAM_DEF, 1, 0, 0xA0])
    with pytest.raises(RecordError, match="the stack id is a map, not an integer or nil"):
        eng.feed([R.KERNEL, 1, 2, {"a": 1}, -1])
        eng.flush()


@pytest.mark.parametrize("access", [
    [0, -1, 8], [~0, 8, -8], [0, -(1 << 40), 8], [0, 8, None], [0, None, 8], [None, 0, 8], [0, 8], [0, 0, 8, 1],
    [0, 1 << 63, 8], [~0, 8, (1 << 64) - 1], ["x", 0, 8], [0, 0.5, 8], -(1 << 63), 1 << 63, None, 7, ~7,
])
@pytest.mark.parametrize("fields", [(1, 2, None), (1, None, -3), (None, 2, None), (1 << 63, 2, None), (1, "op", None)])
def test_same_verdict_on_kernel_fields_of_every_encoding(access, fields):
    """The core reads a kernel record whose fields are all small ints (and nil) without the
    general reader; anything else (negative offsets and lengths, nil, other types, values
    of 64 bits) goes to the general reader. Both must end as the Python engine does, with
    the access before and after well-formed ones."""
    header, recs = split(write_program([("kernel", 1, [(0, True)])]))
    end = recs.pop()
    rec = [R.KERNEL, *fields, [0, 16, 8], access, [~0, 0, 4]]
    assert check(join(header, recs + [rec, end]))[0] in ("ok", "error")


def test_notes_kept_alike_by_both_engines():
    """NOTE records: both engines keep their distinct (level, text), cleaned, at most
    MAX_NOTES, whichever path reads them (the report's run notes read them)."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.note("info", "coarse: compiled code")
        w.memory_allocated(BASE, 0, size=SIZE)
        w.kernel(0, "aten::k", reads=[BASE])
        w.note("info", "coarse: compiled code")  # a repeat: kept once
        w.note("warning", "a\x1b[31m red\nline")  # cleaned
        for i in range(engine_mod.MAX_NOTES + 4):
            w.note("info", f"n{i}")
    got = check(buf.getvalue())
    assert got.notes[0] == ("info", "coarse: compiled code")
    assert len(got.notes) == engine_mod.MAX_NOTES
    assert "\x1b" not in got.notes[1][1] and "\n" not in got.notes[1][1]
