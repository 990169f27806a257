"""The direct replay path (engine reads the unpacker) against the generator path.

``analyze_traces`` replays through ``Engine.run_direct`` fed by ``TraceReader.direct_*``;
``Engine.run(reader.records())`` is the reference. On any trace (valid, truncated,
corrupt, with unknown or malformed records) both must give the same findings, counts,
reader state (truncated, warnings, END stats, records read, position) or the same error
message, record index and byte offset included.
"""

from __future__ import annotations

import io

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.analyzer.replay import traces as replay
from npusan.analyzer.replay.engine import Engine, RecordError
from npusan.analyzer.replay.traces import analyze_traces
from npusan.trace_format import Strided, TraceReader, TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError

HANDLES = [0, 0xA0, 0xB0]
BASE = 0x10000
SIZE = 0x100


def write_program(ops) -> bytes:
    """A valid trace from a list of small random operations (races included)."""
    buf = io.BytesIO()
    live = {}
    with TraceWriter(buf, backend="cuda", header={"default_streams": {0: 0}}) as w:
        for h in HANDLES:
            w.stream_created(h)
        for b in range(4):
            w.memory_allocated(BASE + b * SIZE, HANDLES[b % 3], size=SIZE, stack=[("p.py", b, "alloc")])
            live[b] = BASE + b * SIZE
        for kind, s, b, n, off in ops:
            h = HANDLES[s]
            ptr = live[b]
            if kind == "kernel":
                reads = [live[(b + i) % 4] for i in range(1, n)]
                w.kernel(h, f"aten::op{n}", reads=reads, writes=[ptr], stack=[("p.py", 10 + n, "step")])
            elif kind == "ranged":
                w.kernel(h, "aten::slice", reads=[(ptr + off, 16)], writes=[(ptr + off + 16, 8)])
            elif kind == "strided":  # columns: a VIEWS record before the kernel
                w.kernel(h, "aten::copy_", reads=[Strided(ptr + off, (4, 4), (16, 1), 1)],
                         writes=[Strided(ptr + off + 4 + n, (4, 4), (16, 1), 1)])
            elif kind == "handoff":
                w.event_created(b)
                w.event_recorded(b, h)
                w.event_waited(b, HANDLES[(s + 1) % 3])
            elif kind == "free":
                w.memory_freed(ptr)
                live[b] = ptr + 0x1000 * (off + 1)
                w.memory_allocated(live[b], h, size=SIZE)
            elif kind == "record_stream":
                w.record_stream(ptr, HANDLES[(s + 1) % 3])
            else:
                w.stream_synchronized(h)
    return buf.getvalue()


def split(data: bytes):
    up = msgpack.Unpacker(io.BytesIO(data[len(R.MAGIC):]), raw=False, strict_map_key=False)
    header = up.unpack()
    return header, list(up)


def join(header, recs) -> bytes:
    pack = msgpack.Packer(use_bin_type=True).pack
    return R.MAGIC + pack(header) + b"".join(r if isinstance(r, bytes) else pack(r) for r in recs)


def outcome_reference(data: bytes):
    """What the generator path gives (what analyze_traces did before the direct path)."""
    try:
        reader = TraceReader(io.BytesIO(data))
    except TraceFormatError as e:
        return ("error", type(e).__name__, str(e))
    engine = Engine(reader.symbols, header=reader.header, check_leaks=True)
    try:
        engine.run(reader.records())
    except RecordError as e:
        return ("error", "RecordError", f"{reader.where()}: {e}")
    except TraceFormatError as e:
        return ("error", type(e).__name__, str(e))
    return state(engine, reader)


def outcome_direct(data: bytes, progress_every=None):
    try:
        reader = TraceReader(io.BytesIO(data))
    except TraceFormatError as e:
        return ("error", type(e).__name__, str(e))
    engine = Engine(reader.symbols, header=reader.header, check_leaks=True)
    seen = []
    saved = replay.PROGRESS_EVERY
    if progress_every is not None:
        replay.PROGRESS_EVERY = progress_every
    try:
        replay._replay_records(engine, reader, 0, None if progress_every is None else
                               lambda i, done, total: seen.append(done))
    except RecordError as e:
        return ("error", "RecordError", f"{reader.where()}: {e}")
    except TraceFormatError as e:
        return ("error", type(e).__name__, str(e))
    finally:
        replay.PROGRESS_EVERY = saved
    if progress_every is not None:
        assert seen == sorted(seen) and seen[-1] == reader.position
    return state(engine, reader)


def state(engine, reader):
    return ("ok", engine.finish(), engine.seq, engine.events, reader.truncated, reader.ended_cleanly,
            reader.end_stats, list(reader.warnings), reader.records_read, reader.events, reader.position,
            reader.definition_counts, reader.unknown_types)


def check_same(data: bytes) -> tuple:
    ref = outcome_reference(data)
    assert outcome_direct(data) == ref
    assert outcome_direct(data, progress_every=3) == ref
    return ref


_op = st.tuples(st.sampled_from(["kernel", "kernel", "kernel", "ranged", "strided", "handoff", "free",
                                 "record_stream", "sync"]),
                st.integers(0, 2), st.integers(0, 3), st.integers(1, 5), st.integers(0, 3))
_atom = st.one_of(st.integers(-6, 40), st.none(), st.text(max_size=3), st.booleans(), st.floats(allow_nan=False),
                  st.integers(-(1 << 63), (1 << 64) - 1), st.just(17.0))
_field = st.one_of(_atom, st.lists(_atom, max_size=4))
_junk = st.one_of(
    st.lists(_field, max_size=9).map(lambda r: [R.KERNEL] + r),  # kernels of any shape and content
    st.tuples(st.sampled_from(sorted(R.MIN_LENGTH)), st.lists(_field, max_size=6)).map(lambda t: [t[0]] + t[1]),
    st.lists(_field, max_size=5).map(lambda r: [130] + r),  # an unknown type (a private one)
    st.lists(_field, max_size=6),
    _atom,
    st.dictionaries(st.integers(0, 20), _atom, max_size=8),
)
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(_op, max_size=40))
def test_same_on_valid_programs(ops):
    ref = check_same(write_program(ops))
    assert ref[0] == "ok" and ref[5] and not ref[4]


@FUZZ
@given(st.lists(_op, max_size=30), st.data())
def test_same_on_truncated_traces(ops, data):
    full = write_program(ops)
    cut = data.draw(st.integers(len(R.MAGIC), len(full) - 1))
    ref = check_same(full[:cut])
    assert ref[0] == "error" or ref[4]  # cut: a truncation warning, unless the cut made the tail corrupt


@FUZZ
@given(st.lists(_op, max_size=30), st.lists(st.tuples(st.integers(0, 1 << 30), _junk), max_size=4),
       st.booleans(), st.booleans())
def test_same_with_malformed_and_unknown_records(ops, inserts, drop_end, garbage_after):
    header, recs = split(write_program(ops))
    end = recs.pop()
    for where, rec in inserts:
        recs.insert(where % (len(recs) + 1), rec)
    if not drop_end:
        recs.append(end)
    data = join(header, recs) + (b"\x93\x01" if garbage_after else b"")
    check_same(data)


@FUZZ
@given(st.lists(_op, max_size=30), st.data())
def test_same_on_corrupted_bytes(ops, data):
    buf = bytearray(write_program(ops))
    start = len(R.MAGIC)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(start, len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "set", "delete", "insert"]))
        if op == "flip":
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "delete":
            del buf[i]
        else:
            buf.insert(i, data.draw(st.integers(0, 255)))
    check_same(bytes(buf))


def test_unknown_types_skipped_with_one_warning_and_counted():
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 5))
    end = recs.pop()
    recs[8:8] = [[25, 1, 2], [25], [26, "x"]]
    ref = check_same(join(header, recs + [end]))
    assert ref[0] == "ok" and ref[-1] == {25: 2, 26: 1}
    assert sum("unknown type" in w for w in ref[7]) == 2


@pytest.mark.parametrize("bad, says", [
    ([R.KERNEL, 0, 1], "fewer than"),  # a short kernel: the reader's check, not the engine's
    ([R.KERNEL, 99, 1, None, 0], "stream index 99"),  # an undefined stream, failing in the switch
    ([R.KERNEL, 0, 1, None, "x"], "is neither an int"),
    ([R.KERNEL, [0], 1, None, 0], "malformed kernel record"),  # an unhashable stream: TypeError in the switch
    ([R.EVENT_RECORD, 1], "fewer than"),
    ({"a": 1}, "is not a record"),
    ([R.STREAM_DEF, "x"], "stream-def"),
])
def test_errors_name_the_same_record_and_offset(bad, says):
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 5))
    end = recs.pop()
    recs.insert(9, bad)
    data = join(header, recs + [end])
    ref = check_same(data)
    assert ref[0] == "error" and says in ref[2]
    offset = len(join(header, recs[:9]))
    assert f"record 10 at byte offset {offset}" in ref[2]


def test_an_error_before_any_kernel_says_so():
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 2))
    end = recs.pop()
    recs.insert(0, [R.KERNEL, 99, 1, None, 0])
    ref = check_same(join(header, recs + [end]))
    assert ref[0] == "error" and "malformed kernel record before the first kernel:" in ref[2]
    recs.pop(0)
    recs.append([R.KERNEL, 99, 1, None, 0])  # (after both kernels)
    assert "malformed kernel record after kernel 2:" in check_same(join(header, recs + [end]))[2]


def test_corrupt_length_field_is_reported_not_truncated():
    header, recs = split(write_program([("kernel", 1, 1, 2, 0)] * 3))
    recs.pop()
    data = join(header, recs) + b"\xdd\xff\xff\xff\xff"  # an array of 4G elements
    ref = check_same(data)
    assert ref[0] == "error" and f"corrupt data at record {len(recs) + 1} at byte offset" in ref[2]


def test_analyze_traces_matches_the_generator_path(tmp_path):
    ops = [("kernel", s % 3, s % 4, 1 + s % 5, 0) for s in range(200)] + [("free", 1, 2, 1, 1)]
    data = write_program(ops)
    header, recs = split(data)
    recs.pop()  # the END record: written back below without it
    recs.insert(50, [23, "future"])
    path = tmp_path / "t.npusan"
    path.write_bytes(join(header, recs))  # no END: truncated
    ref = outcome_reference(path.read_bytes())
    res = analyze_traces([path], check_leaks=True)
    (s,) = res.traces
    def key(fs):  # analyze_traces also fills display fields (stream ordinals)
        return [(f.kind, f.fingerprint(), f.count, f.first_seq, f.last_seq, f.addresses, f.occurrences) for f in fs]

    assert key(res.findings) == key(ref[1]) and len(res.findings) > 0
    assert (s.kernels, s.events, s.truncated, s.warnings) == (ref[2], ref[3], True, ref[7])
    done = []
    res2 = analyze_traces([path], check_leaks=True, progress=lambda d, t: done.append((d, t)))
    assert key(res2.findings) == key(res.findings) and done[-1] == (len(path.read_bytes()), len(path.read_bytes()))


def test_direct_begin_after_the_end_reads_nothing():
    data = write_program([("kernel", 0, 0, 2, 0)])
    reader = TraceReader(io.BytesIO(data))
    engine = Engine(reader.symbols, header=reader.header)
    replay._replay_records(engine, reader, 0, None)
    kernels, events = engine.seq, engine.events
    assert reader.ended_cleanly and kernels == 1
    replay._replay_records(engine, reader, 0, None)
    assert (engine.seq, engine.events, reader.warnings) == (kernels, events, [])


def test_a_float_record_type_is_refused_the_same_way_on_both_paths():
    # 17.0 == KERNEL in Python; neither path may take it for a kernel record.
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 3))
    end = recs.pop()
    recs.insert(8, [17.0, 0, 1, None, 0])
    ref = check_same(join(header, recs + [end]))
    assert ref[0] == "error" and "not an integer" in ref[2]
