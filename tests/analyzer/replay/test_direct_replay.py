"""The direct replay path (engine reads the unpacker) against the generator path.

``analyze_traces`` replays through ``Engine.run_direct`` fed by ``TraceReader.direct_*``;
``Engine.run(reader.records())`` is the reference. On any trace (valid, truncated,
corrupt, with unknown or malformed records) every path of differential.py (the compiled
core's too) must give the same findings, counts, reader state (truncated, warnings, END
stats, records read, position) or the same error message, record index and byte offset
included.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.analyzer.replay import traces as replay
from npusan.analyzer.replay.engine import Engine
from npusan.analyzer.replay.traces import analyze_traces
from npusan.trace_format import Strided, TraceReader, TraceWriter
from npusan.trace_format import records as R

from .differential import check, join, junk, replay_path, split

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


_op = st.tuples(st.sampled_from(["kernel", "kernel", "kernel", "ranged", "strided", "handoff", "free",
                                 "record_stream", "sync"]),
                st.integers(0, 2), st.integers(0, 3), st.integers(1, 5), st.integers(0, 3))
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(_op, max_size=40))
def test_same_on_valid_programs(ops):
    ref = check(write_program(ops))
    assert ref.status == "ok" and ref.ended_cleanly and not ref.truncated


@FUZZ
@given(st.lists(_op, max_size=30), st.data())
def test_same_on_truncated_traces(ops, data):
    full = write_program(ops)
    cut = data.draw(st.integers(len(R.MAGIC), len(full) - 1))
    ref = check(full[:cut])
    assert ref.status == "error" or ref.truncated  # cut: a truncation warning, unless the cut made the tail corrupt


@FUZZ
@given(st.lists(_op, max_size=30), st.lists(st.tuples(st.integers(0, 1 << 30), junk), max_size=4),
       st.booleans(), st.booleans())
def test_same_with_malformed_and_unknown_records(ops, inserts, drop_end, garbage_after):
    header, recs = split(write_program(ops))
    end = recs.pop()
    for where, rec in inserts:
        recs.insert(where % (len(recs) + 1), rec)
    if not drop_end:
        recs.append(end)
    data = join(header, recs) + (b"\x93\x01" if garbage_after else b"")
    check(data)


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
    check(bytes(buf))


def test_unknown_types_skipped_with_one_warning_and_counted():
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 5))
    end = recs.pop()
    recs[8:8] = [[125, 1, 2], [125], [126, "x"]]  # (24-26: the graph records of 1.3)
    ref = check(join(header, recs + [end]))
    assert ref.status == "ok" and ref.unknown_types == {125: 2, 126: 1}
    assert sum("unknown type" in w for w in ref.warnings) == 2


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
    ref = check(data)
    assert ref.status == "error" and says in ref.message
    offset = len(join(header, recs[:9]))
    assert f"record 10 at byte offset {offset}" in ref.message


def test_an_error_before_any_kernel_says_so():
    header, recs = split(write_program([("kernel", 0, 0, 3, 0)] * 2))
    end = recs.pop()
    recs.insert(0, [R.KERNEL, 99, 1, None, 0])
    ref = check(join(header, recs + [end]))
    assert ref.status == "error" and "malformed kernel record before the first kernel:" in ref.message
    recs.pop(0)
    recs.append([R.KERNEL, 99, 1, None, 0])  # (after both kernels)
    assert "malformed kernel record after kernel 2:" in check(join(header, recs + [end])).message


def test_corrupt_length_field_is_reported_not_truncated():
    header, recs = split(write_program([("kernel", 1, 1, 2, 0)] * 3))
    recs.pop()
    data = join(header, recs) + b"\xdd\xff\xff\xff\xff"  # an array of 4G elements
    ref = check(data)
    assert ref.status == "error" and f"corrupt data at record {len(recs) + 1} at byte offset" in ref.message


def test_analyze_traces_matches_the_generator_path(tmp_path):
    ops = [("kernel", s % 3, s % 4, 1 + s % 5, 0) for s in range(200)] + [("free", 1, 2, 1, 1)]
    data = write_program(ops)
    header, recs = split(data)
    recs.pop()  # the END record: written back below without it
    recs.insert(50, [124, "future"])
    path = tmp_path / "t.npusan"
    path.write_bytes(join(header, recs))  # no END: truncated
    ref, found = replay_path(path.read_bytes(), "records")
    res = analyze_traces([path], check_leaks=True)
    (s,) = res.traces
    def key(fs):  # analyze_traces also fills display fields (stream ordinals)
        return [(f.kind, f.fingerprint(), f.count, f.first_seq, f.last_seq, f.addresses, f.occurrences) for f in fs]

    assert key(res.findings) == key(found) and len(res.findings) > 0
    assert (s.kernels, s.events, s.truncated, s.warnings) == (ref.kernels, ref.events, True, ref.warnings)
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
    ref = check(join(header, recs + [end]))
    assert ref.status == "error" and "not an integer" in ref.message
