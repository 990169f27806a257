"""The compiled replay core (``csrc/_core.c``) behind the interface of the Python engine.

:class:`NativeEngine` replays exactly what :class:`~npusan.analyzer.replay.engine.Engine` replays
(the Python engine is the specification; ``tests/analyzer/replay/test_native_differential.py``
holds the two to the same findings and errors). The state of the sync-state matrix,
blocks, byte ranges, record_stream bookkeeping, reuse ghosts and deduplicated findings
lives in C; Python builds :class:`~npusan.analyzer.findings.model.Finding` objects from what
the core hands back, with the Python engine's own code.

Records reach the core as msgpack bytes: from a trace file, the core parses the file's
bytes itself (:meth:`NativeEngine.replay_file`) and hands back only what it does not replay
(definitions, notes, the END record, malformed data), which the trace reader checks and
absorbs as usual, through its public raw-reading members only (``read_raw``, ``raw_sync``,
``check_record``, ``absorb_definition``, ``raw_failed``, ``raw_exhausted``, ``raw_end``,
``tail.zeros_to_end``: see :mod:`npusan.trace_format.reader`); online, records are packed
in batches (:meth:`NativeEngine.flush`).

:func:`make_engine` picks the compiled core when it is built, else the Python engine
(saying once on stderr why); ``NPUSAN_ENGINE=python`` selects the Python engine.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import msgpack

from ...trace_format import records as R
from ...trace_format import reader as _reader
from ...trace_format.errors import TraceFormatError
from ...trace_format.symbols import SymbolTable
from . import engine as E
from . import core_codes, overlap, strided
from . import graphs as G
from .engine import Access, Engine, RecordError
from ..findings.model import Finding, Kind

try:
    from . import _core
except ImportError as e:  # not built (no compiler at install time) or a broken build
    _core = None
    IMPORT_ERROR: Optional[str] = str(e) or type(e).__name__
else:
    IMPORT_ERROR = None

#: Online records buffered before they are replayed (``flush`` replays them earlier).
BATCH = 4096
#: Bytes read from a trace file at a time.
CHUNK = 1 << 18
#: From this many bytes of byte-range state in all blocks, the core queues the ranged accesses
#: that cannot race (a block's own stream, everything else on it ordered before) and makes
#: them in batches, so that their cache misses overlap. Below it the state mostly stays in
#: the cache and the queue costs more than it saves. Findings are the same either way
#: (tests set 0 to queue everything they can).
QUEUE_FROM = 8 << 20

_NEED, _SLOW, _BAD, _ERROR = 0, 1, 2, 3
#: The largest record type the core skips itself (the largest msgpack int).
_MAX_SKIP_TYPE = (1 << 64) - 1
#: The core's error codes as the built core exports them (core_codes.py defines them; the
#: build writes them into the core); without the core, only so that the names exist.
ERROR_CODES: dict = dict(_core.ERRORS) if _core is not None else core_codes.codes()
_E_STREAM_UNDEFINED = ERROR_CODES["STREAM_UNDEFINED"]
_E_TOO_MANY_STREAMS = ERROR_CODES["TOO_MANY_STREAMS"]
_E_EVENT = ERROR_CODES["EVENT"]
_E_DEVICE = ERROR_CODES["DEVICE"]
_E_BID_RANGE = ERROR_CODES["BID_RANGE"]
_E_MALFORMED_BLOCK = ERROR_CODES["MALFORMED_BLOCK"]
_E_BLOCK_UNDEFINED = ERROR_CODES["BLOCK_UNDEFINED"]
_E_ACCESS_SHAPE = ERROR_CODES["ACCESS_SHAPE"]
_E_ACCESS_MALFORMED = ERROR_CODES["ACCESS_MALFORMED"]
_E_VIEWS = ERROR_CODES["VIEWS"]
_E_STACK = ERROR_CODES["STACK"]
_E_OP = ERROR_CODES["OP"]
_KINDS = (Kind.DATA_RACE, Kind.MISSING_RECORD_STREAM, Kind.REUSE_RACE)
_UNPACK = dict(raw=False, strict_map_key=False, max_str_len=_reader.MAX_STR_LEN, max_bin_len=_reader.MAX_BIN_LEN,
               max_array_len=_reader.MAX_ARRAY_LEN, max_map_len=_reader.MAX_MAP_LEN, max_ext_len=_reader.MAX_EXT_LEN)
_EVENT_TYPES = frozenset(range(R.STREAM_CREATED, R.KERNEL + 1)) | {R.VIEWS, R.HOST_ACCESS}
_KERNELS = (R.KERNEL, R.HOST_ACCESS)  # records whose fields from 4 on are accesses

_warned = False
_warned_choice = False

#: The values of ``NPUSAN_ENGINE`` (any case; unset or empty: ``native``).
ENGINE_CHOICES = ("native", "python")


def available() -> bool:
    """Whether the compiled core is built and importable."""
    return _core is not None


def engine_choice() -> str:
    """``NPUSAN_ENGINE`` as one of :data:`ENGINE_CHOICES`; any other value is warned about
    once on stderr (a typo must not pass for a choice) and means ``native``."""
    global _warned_choice
    choice = os.environ.get("NPUSAN_ENGINE", "").strip().lower() or "native"
    if choice in ENGINE_CHOICES:
        return choice
    if not _warned_choice:
        _warned_choice = True
        sys.stderr.write(f"npusan: warning: NPUSAN_ENGINE={os.environ['NPUSAN_ENGINE']!r} is not one of "
                         f"{', '.join(ENGINE_CHOICES)}; using the default engine\n")
    return "native"


def engine_class() -> type:
    """The engine ``npusan analyze`` and online mode use (see the module docstring)."""
    global _warned
    if engine_choice() == "python":
        return Engine
    if _core is not None:
        return NativeEngine
    if not _warned:
        _warned = True
        sys.stderr.write(f"npusan: note: the compiled replay core is not available ({IMPORT_ERROR}); "
                         "using the pure-Python engine, which is much slower. Reinstall npusan with a C "
                         "compiler and the Python headers to build it.\n")
    return Engine


#: The newest trace format version whose every record the compiled core replays (strided
#: views, the VIEWS records of format 1.1, the host accesses of 1.2, and the graphs of 1.3
#: -- their capture and launch handled here, their kernels replayed by the core -- included); a trace declaring a newer minor
#: version is replayed by the Python engine (same findings, slower); the trace's summary
#: says so (:func:`newer_than_core`). FRAME's 1.1 source text and root are definitions, which the reader defines for
#: both engines (the core hands every definition to Python), so they need no core support.
NATIVE_FORMAT = (1, 3)

def make_engine(symbols: SymbolTable, *, file: bool = False, **kwargs):
    """An engine for one trace: ``engine_class()``, unless the trace's format is newer
    than the compiled core knows (see :data:`NATIVE_FORMAT`, :func:`newer_than_core`).
    ``file`` is accepted for callers of earlier versions and changes nothing."""
    cls = engine_class()
    if cls is NativeEngine and _format(kwargs.get("header")) > NATIVE_FORMAT:
        cls = Engine
    return cls(symbols, **kwargs)


def newer_than_core(header) -> Optional[str]:
    """The warning for a trace the compiled core leaves to the Python engine because its
    format is newer (a trace summary's warning, so every report says it, and an unreadable
    trace gets only its error line); None otherwise."""
    fmt = _format(header)
    if engine_class() is not NativeEngine or fmt <= NATIVE_FORMAT:
        return None
    return (f"the trace is format {fmt[0]}.{fmt[1]}, newer than the compiled replay core knows "
            f"({NATIVE_FORMAT[0]}.{NATIVE_FORMAT[1]}): replayed by the pure-Python engine, which is much slower")


def _format(header) -> tuple:
    fmt = header.get("format") if isinstance(header, dict) else None
    try:
        return (int(fmt[0]), int(fmt[1]))
    except (TypeError, ValueError, IndexError, KeyError):
        return (0, 0)


def _bid_of(a) -> object:
    """The block id a kernel access (or a plain id field) names, for messages."""
    x = a[0] if a.__class__ is list and len(a) == 3 else a
    return ~x if x.__class__ is int and x < 0 else x


def problem(code: int, rec: list, field: int) -> str:
    """The Python engine's words for an error the core reports as (code, field)."""
    v = rec[field]
    if code == _E_STREAM_UNDEFINED:
        return E.stream_undefined(v)
    if code == _E_TOO_MANY_STREAMS:
        return E.too_many_streams()
    if code == _E_EVENT:
        return E.bad_event(v)
    if code == _E_DEVICE:
        return E.bad_device(v)
    if code == _E_BID_RANGE:
        return E.bid_out_of_range(v)
    if code == _E_MALFORMED_BLOCK:
        return E.malformed_block(_bid_of(v) if field >= 4 and rec[0] in _KERNELS else v)
    if code == _E_BLOCK_UNDEFINED:
        return E.block_undefined(_bid_of(v) if field >= 4 and rec[0] in _KERNELS else v)
    if code == _E_ACCESS_SHAPE:
        return E.access_shape(v)
    if code == _E_ACCESS_MALFORMED:
        return E.access_malformed(v)
    if code == _E_STACK:
        return E.bad_stack(v)
    if code == _E_OP:
        return E.bad_op(v)
    if code == _E_VIEWS:  # the core only says "malformed": the Python parser names the reason
        try:
            strided.parse_views(rec)
        except ValueError as e:
            return str(e)
        return "a malformed views record"  # pragma: no cover - the core and the parser agree
    return f"error {code}"  # pragma: no cover - every code is named above


class _GaveUp:
    __slots__ = ("gave_up",)

    def __init__(self, gave_up: int) -> None:
        self.gave_up = gave_up


class _CreatedStacks:
    """``created_stack.get(S)`` as the Python engine's dict answers it, read from the core."""

    def __init__(self, core) -> None:
        self._core = core

    def get(self, S, default=None):
        v = self._core.created_stack(S) if S.__class__ is int else None
        return default if v is None else v


class NativeEngine:
    """The compiled core with :class:`~npusan.analyzer.replay.engine.Engine`'s interface."""

    stream_ref = Engine.stream_ref
    frames = Engine.frames

    def __init__(
        self,
        symbols: SymbolTable,
        *,
        header: Optional[dict] = None,
        check_leaks: bool = False,
        on_finding: Optional[Callable[[Finding], None]] = None,
        trace_index: int = 0,
    ) -> None:
        if _core is None:
            raise RuntimeError(f"the compiled replay core is not available ({IMPORT_ERROR})")
        self.symbols = symbols
        self.header = header or {}
        self.check_leaks = check_leaks
        self.on_finding = on_finding
        self.trace_index = trace_index
        self._core = _core.Core(E.MAX_SEGMENTS, E.MAX_STREAMS, E.MAX_FINDINGS, E.MAX_OCCURRENCES, E.MAX_ADDRESSES,
                                E.MAX_GHOSTS, E.MAX_BLOCK_GHOSTS, E.MAX_ID, _reader.MAX_STR_LEN,
                                _reader.MAX_BIN_LEN, _reader.MAX_ARRAY_LEN, _reader.MAX_MAP_LEN,
                                _reader.MAX_EXT_LEN, E.FREE_OP, E.LEAK_OP, True, strided.MAX_VIEWS,
                                overlap.TOTAL_BUDGET, QUEUE_FROM)
        self._default_streams = E._parse_default_streams(self.header.get("default_streams"))
        self.created_stack = _CreatedStacks(self._core)
        self._built: list = []  # Finding objects, by the core's finding index
        self._pending: list = []  # online records not replayed yet
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._sent_streams: dict = {}  # sidx -> the symbols entry given to the core
        # string ids given to the core again on its asking (_resend): at most once each. Not
        # every STR: the core keeps those itself, and a Python set of a hostile trace's 1.3
        # million ids cost 64 MB more than the core's own table.
        self._resent_strings: set = set()
        self._sent_blocks: dict = {}  # bid -> the symbols entry given to the core
        self._notes = 0  # NOTE records (counted as events, replayed by nobody)
        self._py_events = 0  # graph records and captured records, handled here (graphs.py)
        self._hidden_events = 0  # records given to the core that are no record of the trace
        self._fed = 0  # records of the trace file given to the core from Python (not from the file's bytes)
        self.graphs = G.Graphs()
        self.notes: list = []  # their distinct (level, text), as the spec engine keeps them

    # ------------------------------------------------------------------ counters

    @property
    def seq(self) -> int:
        return self._core.counters()[0]

    kernels = seq

    @property
    def events(self) -> int:
        return self._core.counters()[1] + self._notes + self._py_events - self._hidden_events

    @property
    def dropped(self) -> int:
        return self._core.counters()[3]

    @property
    def capped(self) -> int:
        return self._core.counters()[6]

    @property
    def hulled(self) -> int:
        return self._core.counters()[7]

    @property
    def overlap_budget(self) -> "_GaveUp":
        """As the Python engine's: ``gave_up`` counts the strided-view comparisons that ran
        out of search budget and were answered "overlap" (replay.py warns about them)."""
        return _GaveUp(self._core.counters()[5])

    def _core_records(self) -> int:
        """Records of the trace file the core counted from the file's bytes."""
        return self._core.counters()[2] - self._fed

    def _core_counters(self) -> tuple:
        """The core's counters, its record count as :meth:`_core_records`."""
        c = list(self._core.counters())
        c[2] -= self._fed
        return tuple(c)

    # ------------------------------------------------------------------ definitions

    def _send_stream(self, sidx) -> bool:
        entry = self.symbols.streams.get(sidx) if sidx.__class__ is int else None
        if entry is None or self._sent_streams.get(sidx) is entry:
            return False
        self._core.define_stream(sidx, entry[0])
        self._sent_streams[sidx] = entry
        return True

    def _send_block(self, bid, forget: bool = False) -> bool:
        entry = self.symbols.blocks.get(bid) if bid.__class__ is int else None
        if entry is None or (self._sent_blocks.get(bid) is entry and not forget):
            return False
        self._core.define_block(bid, entry[0], entry[1], forget)
        self._sent_blocks[bid] = entry
        return True

    def _send_string(self, sid) -> bool:
        """Tell the core about a string id it asked for (an op naming one it does not know):
        once, so that an id the core does not take (out of its range) ends in the error."""
        if sid.__class__ is not int or sid not in self.symbols.strings or sid in self._resent_strings:
            return False
        self._core.define_string(sid)
        self._resent_strings.add(sid)
        return True

    def _defined(self, rec: list, forget: bool = False) -> None:
        if rec[0] == R.STR:
            # (a new id: the symbol table refuses one defined twice)
            if rec[1].__class__ is int and rec[1] in self.symbols.strings:
                self._core.define_string(rec[1])
        elif rec[0] == R.STREAM_DEF:
            self._send_stream(rec[1])
        elif rec[0] == R.BLOCK_DEF:
            self._send_block(rec[1], forget)

    def _resend(self, code: int, rec: list, field: int) -> bool:
        """A definition the core has not seen (made straight in the symbol table): send it."""
        if code == _E_STREAM_UNDEFINED:
            return self._send_stream(rec[field])
        if code == _E_OP:
            return self._send_string(rec[field])
        if code == _E_BLOCK_UNDEFINED:
            return self._send_block(_bid_of(rec[field]) if rec[0] in _KERNELS and field >= 4 else rec[field])
        return False

    # ------------------------------------------------------------------ online records

    def feed(self, rec: list) -> None:
        """Online mode: one record (definition or not) from a RecordEncoder."""
        t = rec[0] if rec.__class__ is list and rec else None
        if t in R.DEFINITIONS:
            self.flush()
            self.symbols.define(rec)
            self._defined(rec, forget=True)
        else:
            self.process(rec)

    def process(self, rec) -> None:
        """Replay one record that no reader has checked (batched: see :meth:`flush`)."""
        try:
            t = E.check_shape(rec, self.seq)
        except RecordError:
            self.flush()
            E.check_shape(rec, self.seq)
            raise
        if t in R.GRAPH_RECORDS or self.graphs.capturing is not None:
            self.flush()
            if self._graph_record(rec, t):
                return
        if t in _EVENT_TYPES:
            self._pending.append(rec)
            if len(self._pending) >= BATCH:
                self.flush()
        elif t in R.DEFINITIONS:
            self.flush()
            try:
                self.symbols.define(rec)
            except TraceFormatError as e:
                raise RecordError(E.describe(rec, self.seq, str(e))) from None
            self._defined(rec)
        elif t == R.NOTE:
            self._notes += 1
            E.keep_note(self.notes, rec)

    def run(self, records) -> None:
        for rec in records:
            self.process(rec)
        self.flush()

    def flush(self) -> None:
        """Replay the buffered online records now (findings reach ``on_finding`` here)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        try:
            parts = [self._pack(r) for r in pending]
        except (TypeError, ValueError, OverflowError) as e:
            raise RecordError(E.describe(pending[0], self.seq, f"a record holds a value a trace cannot ({e})")) from None
        self._replay_packed(pending, b"".join(parts), parts)

    # ------------------------------------------------------------------ trace files

    def replay_file(self, reader, progress: Optional[Callable[[int], None]] = None) -> None:
        """Replay the records of ``reader`` (after its header) from the file's bytes.

        Errors, warnings and the reader's state (truncated, END statistics, counts) are
        what ``TraceReader`` produces when the Python engine replays through it.
        ``progress(bytes_done)`` is called after each chunk read.
        """
        if reader.done:
            return
        records0 = reader.records_read - self._core_records()  # records the core did not count
        state = {"py": 0, "start": reader.position, "pos": 0}
        self._replay_chunks(reader, progress, records0, state)
        reader.raw_sync(records0 + state["py"] + self._core_records(), state["start"] + state["pos"], reader.last_record)
        if progress is not None:
            progress(reader.position)

    def _replay_chunks(self, reader, progress, records0: int, state: dict) -> None:
        # ``state`` ("start": file offset of buf[0], "pos": the position in buf, "py": records
        # handled here) is what replay_file reads back: kept in locals, written at every exit.
        core = self._core
        replay, counters = core.replay, self._core_counters
        announce = self._announce if self.on_finding is not None else None
        check, define, defined = reader.check_record, reader.absorb_definition, self._defined
        raw_sync = reader.raw_sync
        unpackb = msgpack.unpackb
        definitions = R.DEFINITIONS
        graph_types = R.GRAPH_RECORDS
        reader.skipped_elsewhere(core.skipped)
        buf = b""
        start = state["start"]  # the file offset of buf[0]
        pos = py = 0
        eof = want_more = False
        try:
            while True:
                if want_more or pos >= len(buf):
                    want_more = False
                    chunk = b"" if eof else reader.read_raw(CHUNK)
                    if chunk:
                        if len(buf) - pos >= _reader.MAX_RECORD_BYTES:
                            raw_sync(records0 + py + counters()[2], start + pos)
                            reader.raw_failed(msgpack.exceptions.BufferFull(), start + pos)
                        buf = buf[pos:] + chunk
                        start += pos
                        pos = 0
                        if progress is not None:
                            progress(start)
                    else:
                        eof = True
                if self.graphs.capturing is None:
                    st = replay(buf, pos, len(buf))
                else:  # a capture is open: every record comes back here (graphs.py)
                    core.set_capturing(True)
                    try:
                        st = replay(buf, pos, len(buf))
                    finally:
                        core.set_capturing(False)
                if announce is not None:
                    announce()
                status, pos = st[0], st[1]
                n = records0 + py + counters()[2]  # records before the one at pos
                if status == _NEED or status == _BAD:
                    e = _msgpack_error(buf[pos:pos + _reader.MAX_RECORD_BYTES]) if status == _BAD else None
                    if e is not None:
                        raw_sync(n, start + pos)
                        reader.raw_failed(e, start + pos)
                    if not eof:
                        want_more = True
                        continue
                    raw_sync(n, start + pos)
                    reader.raw_exhausted(start + pos, buf[pos:])
                    if reader.end_record is not None:  # an END record ending in zeros (the reader read it)
                        py += 1
                        pos = len(buf)
                    return
                length = st[2]
                try:
                    rec = unpackb(buf[pos:pos + length], **_UNPACK)
                except Exception as e:  # noqa: BLE001 - msgpack refuses what the core read
                    raw_sync(n, start + pos)
                    reader.raw_failed(e, start + pos)
                if status == _ERROR:
                    if self._resend(st[3], rec, st[4]):
                        continue
                    raw_sync(n + 1, start + pos + length, rec)
                    raise RecordError(E.describe(rec, self.seq, problem(st[3], rec, st[4])))
                py += 1
                pos += length
                raw_sync(n + 1, start + pos, rec)
                if rec == 0 and rec.__class__ is int and reader.tail.zeros_to_end(start + pos - length, buf[pos:]):
                    py -= 1  # the zero is no record: the count stops before it
                    raw_sync(n, start + pos - length)  # the zeros a killed mapped writer left
                    reader.raw_exhausted(start + pos - length, b"")
                    return
                t = check(rec)
                if (t in graph_types or self.graphs.capturing is not None) and self._graph_record(rec, t):
                    continue
                if t in _EVENT_TYPES:  # replayed now while a capture is open (not device work)
                    self.process(rec)
                    self.flush()
                elif t in definitions:
                    define(rec)
                    defined(rec)
                elif t == R.END:
                    reader.raw_end(rec, buf[pos:pos + 1])  # (the reader looks past END itself, bounded)
                    return
                elif t == R.NOTE:
                    self._notes += 1
                    E.keep_note(self.notes, rec)
                elif t == R.VIEWS:  # pragma: no cover - the core replays every VIEWS record the reader passes
                    raise RecordError(E.describe(rec, self.seq, "a views record the compiled core did not replay"))
                elif t < 0 and rec[0] <= _MAX_SKIP_TYPE:
                    # a record of an unknown type, skipped (the reader warned once): the
                    # core skips the later ones itself, as cheaply as a kernel
                    core.skip_type(rec[0])
        finally:
            state["start"], state["pos"], state["py"] = start, pos, py
            reader.skipped_elsewhere(None)  # (takes the last counts)

    # ------------------------------------------------------------------ graphs (format 1.3, graphs.py)

    def _graph_record(self, rec: list, t) -> bool:
        """A graph record, or a record while a capture is open: what Engine.apply does with
        it (True), or False for a record to replay as usual. The core hands every record
        back while a capture is open (set_capturing)."""
        if t not in R.GRAPH_RECORDS:
            if t not in _EVENT_TYPES:
                return False
            f = E.STACK_FIELD.get(t)
            if f is not None and rec[f].__class__ is not int and rec[f] is not None:
                raise RecordError(E.describe(rec, self.seq, E.bad_stack(rec[f])))
            if not self.graphs.capture(rec):
                return False
            self._py_events += 1
            return True
        self._py_events += 1
        gid = E.graph_id(rec, self.seq)
        if t == R.GRAPH_END:
            problem = self.graphs.end(gid)
            if problem:
                raise RecordError(E.describe(rec, self.seq, problem))
            return True
        E.check_graph_stack(rec, self.seq)
        self._check_stream(rec, 2)
        if t == R.GRAPH_BEGIN:
            problem = self.graphs.begin(gid, rec[2], rec[3])
            if problem:
                raise RecordError(E.describe(rec, self.seq, problem))
            return True
        g = self.graphs.find(gid)
        if g is not None:
            self._launch(g, rec[2], rec[3])
        return True

    def _check_stream(self, rec: list, field: int) -> None:
        """The stream a graph record names, known to the core (made there if new, as
        Engine.stream makes it): a STREAM_CREATED of no stack, which is no record of the
        trace (a known stream's second creation is ignored)."""
        S = rec[field]
        if S.__class__ is not int or S not in self.symbols.streams:
            raise RecordError(E.describe(rec, self.seq, E.stream_undefined(S)))
        self._replay_records([[R.STREAM_CREATED, S, None]])
        self._hidden_events += 1

    def _launch(self, g, stream: int, stack=None) -> None:
        """Replay graph ``g`` launched on ``stream``: its records packed once per expansion."""
        if self.graphs.capturing is not None:  # a launch inside a capture: its work is captured
            _, records = g.launch(stream, self._core.block_live)
            for r in records:
                self.graphs.capture(r)
                self._py_events += 1
            return
        key, records = g.launch(stream, self._core.block_live)
        entry = g.expansions[key]
        if entry[1] is None:
            parts = [self._pack(r) for r in records]
            entry[1] = (b"".join(parts), parts)
        before = self._core.counters()
        self.graphs.launch_begins(g, stream, stack, before[0])
        self.graphs.launch_ends(self._replay_packed(records, *entry[1], before)[0])

    def _replay_records(self, records: list) -> None:
        parts = [self._pack(r) for r in records]
        self._replay_packed(records, b"".join(parts), parts)

    def _replay_packed(self, records: list, buf: bytes, parts: list, before: Optional[tuple] = None) -> tuple:
        """Replay packed records; returns the core's counters after them (``before``: the
        counters before them, when the caller has them)."""
        if before is None:
            before = self._core.counters()
        try:
            self._replay_buffer(records, buf, parts)
        finally:
            after = self._core.counters()
            self._fed += after[2] - before[2]
        return after

    def _replay_buffer(self, records: list, buf: bytes, parts: list) -> None:
        pos, end = 0, len(buf)
        while pos < end:
            st = self._core.replay(buf, pos, end)
            self._announce()
            if st[0] == _NEED:
                break
            rec = records[_index_at(parts, st[1])]
            if st[0] == _ERROR:
                if self._resend(st[3], rec, st[4]):
                    pos = st[1]
                    continue
                raise RecordError(E.describe(rec, self.seq, problem(st[3], rec, st[4])))
            raise RecordError(E.describe(rec, self.seq, "a record holds a value a trace cannot"))

    # ------------------------------------------------------------------ findings

    def _announce(self) -> None:
        """Build Findings for the core's new findings; tell ``on_finding`` about each."""
        if self.on_finding is None or self._core.counters()[4] == len(self._built):
            return
        for item in self._core.findings(len(self._built)):
            f = self._build(item)
            self._built.append(f)
            self.on_finding(f)

    def _build(self, item) -> Finding:
        kind, acc, prev, block, count, first, last, addresses, occurrences, merged = item
        return E.build_finding(self, _KINDS[kind], Access(*acc), Access(*prev), block, count, first, last,
                               addresses, occurrences, merged)

    def finish(self) -> list:
        """As :meth:`Engine.finish`: the pending frees, the leak check (once, if asked), then the findings."""
        self.flush()
        self._core.judge_at_end()
        if self.check_leaks:
            self._core.check_leaks()
        self._announce()  # (findings of the end of the trace, as the Python engine tells them)
        out = []
        for i, item in enumerate(self._core.findings(0)):
            if i < len(self._built):
                f = self._built[i]
                f.count, f.first_seq, f.last_seq = item[4], item[5], item[6]
                f.addresses, f.occurrences, f.merged_ranges = list(item[7]), list(item[8]), item[9]
            else:
                f = self._build(item)
                self._built.append(f)
            out.append(f)
        out.sort(key=lambda f: (f.first_seq, f.kind.value))
        return out


def _index_at(parts: list, pos: int) -> int:
    """Index of the packed record that starts at byte ``pos`` of ``b"".join(parts)``."""
    at = 0
    for i, p in enumerate(parts):
        if at >= pos:
            return i
        at += len(p)
    return len(parts) - 1


def _msgpack_error(data: bytes) -> Optional[BaseException]:
    """What msgpack raises on the object at the start of ``data`` (None: it needs more bytes)."""
    up = msgpack.Unpacker(max_buffer_size=_reader.MAX_RECORD_BYTES, **_UNPACK)
    try:
        up.feed(data)
        up.unpack()
    except msgpack.exceptions.OutOfData:
        return None
    except Exception as e:  # noqa: BLE001 - whatever msgpack raises is the reason given
        return e
    # The core refused what msgpack reads: name it as corrupt rather than guess.
    return ValueError("the record could not be decoded consistently")
