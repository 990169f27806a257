"""The one differential harness: a trace replayed over every engine path must give the same
outcome (the Python engine, engine.py, is the specification).

The paths:

* ``records``: the Python engine fed the reader's records one by one (``Engine.run``);
* ``file``: the Python engine reading the unpacker itself, as ``npusan analyze`` replays a
  file (``traces._replay``, the direct path), also with progress reports every 3 records;
* ``native``: the compiled core parsing the file's bytes (skipped when it is not built).

An outcome is the findings (every field the reports show), the counters and the reader's
verdict (truncated, warnings, END statistics, records read, position: the Python
paths only), or the one-line
error with its type. test_direct_replay.py and test_native_differential.py both check
their traces with :func:`check`.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple, Optional

import msgpack
from hypothesis import strategies as st

from npusan.analyzer.replay import native
from npusan.analyzer.replay import traces as replay
from npusan.analyzer.replay.engine import Engine, RecordError
from npusan.trace_format import TraceReader
from npusan.trace_format import records as R
from npusan.trace_format.errors import TraceFormatError

#: Every path, the reference first.
PATHS = ("records", "file", "file-progress", "native")


def paths() -> tuple:
    """The paths this build has (``native`` only when the compiled core is built)."""
    return PATHS if native.available() else PATHS[:-1]


class Outcome(NamedTuple):
    """What one replay gave; for an error, ``findings`` holds the message and ``kernels`` the
    exception's type name, the rest None."""

    status: str
    findings: Any
    kernels: Any = None
    events: Any = None
    dropped: Any = None
    truncated: Any = None
    ended_cleanly: Any = None
    end_stats: Any = None
    warnings: Any = None
    reader_events: Any = None
    definitions: Any = None
    unknown_types: Any = None
    capped: Any = None
    gave_up: Any = None
    records_read: Any = None
    position: Any = None
    notes: Any = None

    @property
    def message(self) -> str:
        assert self.status == "error", self
        return self.findings


def split(data: bytes):
    """A trace's header and its records, decoded."""
    up = msgpack.Unpacker(io.BytesIO(data[len(R.MAGIC):]), raw=False, strict_map_key=False)
    header = up.unpack()
    return header, list(up)


def join(header, recs) -> bytes:
    """A trace of ``header`` and ``recs`` (records, or bytes written as they are)."""
    pack = msgpack.Packer(use_bin_type=True).pack
    return R.MAGIC + pack(header) + b"".join(r if isinstance(r, bytes) else pack(r) for r in recs)


_atom = st.one_of(st.integers(-6, 40), st.none(), st.text(max_size=3), st.booleans(), st.floats(allow_nan=False),
                  st.integers(-(1 << 63), (1 << 64) - 1), st.just(17.0))
_field = st.one_of(_atom, st.lists(_atom, max_size=4))
#: Records of any shape and content (malformed, unknown types, not records at all).
junk = st.one_of(
    st.lists(_field, max_size=9).map(lambda r: [R.KERNEL] + r),  # kernels of any shape and content
    st.tuples(st.sampled_from(sorted(R.MIN_LENGTH)), st.lists(_field, max_size=6)).map(lambda t: [t[0]] + t[1]),
    st.lists(_field, max_size=5).map(lambda r: [130] + r),  # an unknown type (a private one)
    st.lists(_field, max_size=6),
    _atom,
    st.dictionaries(st.integers(0, 20), _atom, max_size=8),
)


def _side(a):
    r = a.replay  # the graph launch the access ran in (format 1.3)
    replay = None if r is None else (r.stream.index, tuple(r.stack), tuple(r.captured))
    return (a.stream.index, a.stream.device, a.stream.handle, a.stream.is_default,
            tuple(a.stream.created_stack), a.op, a.type, a.seq, tuple(a.stack), a.offset, a.nbytes, replay)


def _finding(f):
    b = f.block
    return (f.kind, _side(f.access), _side(f.previous), b.address, b.size,
            None if b.stream is None else b.stream.index, tuple(b.stack), f.count, f.first_seq, f.last_seq,
            list(f.addresses), list(f.occurrences), f.merged_ranges)


def replay_path(data: bytes, path: str, check_leaks: bool = True, source=None) -> tuple:
    """``data`` replayed over ``path``: (its :class:`Outcome`, the engine's findings or None).
    ``source``: a stream to read ``data`` from instead of a seekable buffer."""
    try:
        reader = TraceReader(source if source is not None else io.BytesIO(data))
    except TraceFormatError as e:
        return Outcome("error", str(e), type(e).__name__), None
    cls = native.NativeEngine if path == "native" else Engine
    eng = cls(reader.symbols, header=reader.header, check_leaks=check_leaks)
    seen = []
    saved = replay.PROGRESS_EVERY
    try:
        if path == "records":
            eng.run(reader.records())
        elif path == "file-progress":
            replay.PROGRESS_EVERY = 3
            replay._replay(eng, reader, 0, lambda i, done, total: seen.append(done))
        else:
            replay._replay(eng, reader, 0, None)
    except RecordError as e:
        return Outcome("error", f"{reader.where()}: {e}", "RecordError"), None
    except TraceFormatError as e:
        return Outcome("error", str(e), type(e).__name__), None
    finally:
        replay.PROGRESS_EVERY = saved
    if path == "file-progress":
        assert seen == sorted(seen) and seen[-1] == reader.position
    found = eng.finish()
    return Outcome("ok", [_finding(f) for f in found], eng.seq, eng.events, eng.dropped, reader.truncated,
                   reader.ended_cleanly, reader.end_stats, list(reader.warnings), reader.events,
                   reader.definition_counts, reader.unknown_types, eng.capped, eng.overlap_budget.gave_up,
                   reader.records_read, reader.position, list(eng.notes)), found


def outcome(data: bytes, path: str = "file", check_leaks: bool = True, source=None) -> Outcome:
    """:func:`replay_path`'s outcome alone."""
    return replay_path(data, path, check_leaks, source)[0]


def check(data: bytes, check_leaks: bool = True, over: Optional[tuple] = None) -> Outcome:
    """Replay ``data`` over every path (or those of ``over``) and assert that all agree; the
    Python paths' findings must also be equal as objects. Returns the outcome."""
    over = over or paths()
    ref, ref_found = replay_path(data, over[0], check_leaks)
    for path in over[1:]:
        got, found = replay_path(data, path, check_leaks)
        if path == "native":
            # The reader's position after a cut trace is not compared for the core: it stops
            # at the last complete record, where the Python paths' reader has read the cut
            # record's first bytes too (no report shows it; neither test compared it before).
            assert got._replace(position=None) == ref._replace(position=None), f"{path} differs from {over[0]}"
        else:
            assert got == ref, f"{path} differs from {over[0]}"
            assert found == ref_found
    return ref
