"""The replay engine in plain Python: the executable specification of npusan's rules.

One :class:`Engine` replays one trace: records come from a file (:meth:`Engine.run_direct`,
fed by the trace reader), from any iterable of records (:meth:`Engine.run`), or one by one
from a live recorder (:meth:`Engine.feed`, online mode). Each record type has one method
below, named after the rule it implements (``stream_created``, ``event_recorded``,
``kernel`` ...), written to be read next to the rules in ``docs/semantics.md``.

The compiled core (:mod:`npusan.analyzer.replay.native`) implements exactly these rules and is
tested against this module: same findings, same counts and occurrences, same error
messages. This module is what runs when the compiled core is not built.

State (streams are the trace's stream indexes, one per (device, handle)):

* ``current[S]``: ``{P: seq}``, stream S has observed every kernel of stream P with a
  sequence number up to seq; ``host``: what the host has observed; ``recorded[E]``: the
  snapshot taken when event E was last recorded.
* per live block (:class:`Block`): its allocation (stream, stack), the accesses that later
  accesses must be ordered after, the latest use per other stream (for the missing
  ``record_stream`` check at free), the streams ``record_stream`` named, and reuse ghosts.
* ``pending_frees[S]``: frees of blocks allocated on S whose unrecorded use by another
  stream was not yet ordered before S (:class:`PendingFree`). The caching allocator hands
  a freed block only to a later allocation on its own stream, so such a free is judged
  when S next allocates (or at the end of the trace), not at the free.

Memory state of a block, for the data-race rules: in *whole* mode, the last write and the
latest read per stream since that write (a stream's own accesses are in program order, so
its latest read is enough). After the first byte-range access the block is in *range* mode:
a sorted list of segments covering the block, each with its own writes and reads. A write
of a sub-range replaces the state of those bytes only. At most :data:`MAX_SEGMENTS`
segments are kept; beyond that a pair of neighbours (:func:`merge_pair`) is merged
conservatively (the merged segment keeps the latest write per stream both as a write and
as a read, so a later access is checked against everything either half had: merging can
add reports, never lose one). A write that covers the whole block returns it to whole mode.

Strided accesses (format 1.1: a range refined by a VIEWS record to only some of its bytes)
do not change that state: they are checked byte-exactly against it and kept beside it, in
a short list per block; the rules are in :mod:`npusan.analyzer.replay.strided`.

Reuse ghosts: an unsynchronized, unrecorded use found at a free is remembered (at most
:data:`MAX_GHOSTS`, oldest evicted first); a later allocation overlapping the freed range
inherits it, and the first access to the new block that shares a byte with the old use
(:func:`ghost_meets`) and is not ordered after it is a reuse race. A ghost every stream has
observed can never race again and is pruned; the pruning scan runs at most once per
``MAX_GHOSTS // 2`` new ghosts, so a program whose streams never synchronize back keeps a
constant cost per free.

Findings are deduplicated while replaying by (kind, both streams, ops, stacks and access
types) into counts, first/last sequence number, up to :data:`MAX_ADDRESSES` addresses and
:data:`MAX_OCCURRENCES` occurrences; :class:`~npusan.analyzer.findings.model.Finding` objects are
built for ``on_finding`` (at the first occurrence) and in :meth:`Engine.finish`.

Every table is keyed by id in a dict, so memory follows what the trace uses, never the
size of its ids; it is bounded by the live blocks, streams and events and the capped
findings, never by the trace length.
"""

from __future__ import annotations

import reprlib
from collections import deque
from typing import Callable, Iterable, NamedTuple, Optional

from ...trace_format import records as R
from ...trace_format.errors import TraceFormatError
from ...trace_format.safe_text import clean
from ...trace_format.strided import Shape
from ...trace_format.symbols import MAX_TABLE, SymbolTable, _a
from . import graphs as G
from . import strided
from ..findings.model import AccessInfo, BlockInfo, Finding, Frame, Kind, ReplayInfo, StreamRef
from .overlap import Budget, overlaps_range

#: Distinct byte-range segments kept per block before neighbours are merged. Merging is
#: conservative (it can add a report, never drop one), so this is how many separately
#: touched slices of one buffer are told apart exactly: a flat buffer whose slices are
#: written by different streams (gradient buckets, flattened parameters, a chunked copy
#: pipeline) needs one segment per slice. The cap bounds what a block in range mode holds
#: (about 80 bytes per segment in the compiled core) and, on a trace that keeps splitting a
#: block already at the cap, the time per access, which grows with it (docs/security.md).
MAX_SEGMENTS = 256
#: Distinct streams one trace may use.
MAX_STREAMS = 4096
#: Distinct findings kept per trace; later distinct ones are only counted (``dropped``).
MAX_FINDINGS = 10_000
#: Occurrences ``(seq, previous_seq, address)`` kept per finding.
MAX_OCCURRENCES = 1000
#: Distinct block addresses kept per finding.
MAX_ADDRESSES = 16
#: Freed-block uses remembered for reuse-race detection (oldest evicted first).
MAX_GHOSTS = 256
#: Ghost uses attached to one re-allocated block.
MAX_BLOCK_GHOSTS = 32
#: Ids (blocks, strings, stacks) are below this (docs/trace-format.md, section 6).
MAX_ID = MAX_TABLE
#: Largest pointer, size, offset or event handle (msgpack's unsigned 64-bit range).
MAX_U64 = (1 << 64) - 1

INF = float("inf")

#: Op names of the host-side "accesses" of a missing-record_stream finding.
FREE_OP = "free"
LEAK_OP = "end of trace (never freed)"

_DATA_RACE = Kind.DATA_RACE
_MISSING = Kind.MISSING_RECORD_STREAM
_REUSE = Kind.REUSE_RACE


class RecordError(TraceFormatError):
    """A record that the reader passed is malformed in a way only the engine notices.

    Callers that know where the record came from (``TraceReader.where``) prefix that.
    """


class SourceError(Exception):
    """The record source given to :meth:`Engine.run_direct` raised; ``__cause__`` is its error.

    Kept apart from the engine's own errors so the reader can name the corrupt data itself.
    """


class Access(NamedTuple):
    """One access of a kernel (or a free: ``op`` is then :data:`FREE_OP` or :data:`LEAK_OP`).

    ``offset``/``nbytes`` are None for the whole block. Identity matters: two segments hold
    "the same state" only if they hold the very same Access objects.
    """

    seq: int
    stream: int
    op: object  # a string id (int) for kernels, None if the record's op is not an id
    stack: Optional[int]
    write: bool
    offset: Optional[int] = None
    nbytes: Optional[int] = None


class Segment:
    """Bytes ``[lo, hi)`` of a block in range mode: their writes and latest read per stream."""

    __slots__ = ("lo", "hi", "writes", "reads")

    def __init__(self, lo, hi, writes: tuple, reads: dict) -> None:
        self.lo, self.hi, self.writes, self.reads = lo, hi, writes, reads

    def streams(self) -> set:
        """The streams of its accesses."""
        return {w.stream for w in self.writes} | set(self.reads)

    def same_state(self, other: "Segment") -> bool:
        if len(self.writes) != len(other.writes) or any(x is not y for x, y in zip(self.writes, other.writes)):
            return False
        if len(self.reads) != len(other.reads):
            return False
        return all(other.reads.get(P) is a for P, a in self.reads.items())


class Ghost(NamedTuple):
    """An unsynchronized use of a freed block: ``[ptr, ptr + size)`` may still be in use."""

    ptr: int
    size: Optional[int]
    use: Access


class PendingFree(NamedTuple):
    """A free whose use by another stream was not yet ordered before the allocation stream:
    reported as a missing ``record_stream`` only if that stream still has not waited for
    the use when it next allocates. ``block`` keeps what a finding names of the freed block
    (a :class:`Block` with no state); ``order`` numbers pending frees in the order found."""

    block: "Block"
    free: Access
    use: Access
    order: int


class Block:
    """The replay state of one live block (see the module docstring)."""

    __slots__ = ("bid", "ptr", "size", "stream", "stack", "defn", "write", "reads", "segments", "uses",
                 "recorded", "ghosts", "views", "capped", "hulled")

    def __init__(self, bid, ptr, size, stream, stack, defn) -> None:
        self.bid = bid
        self.ptr = ptr
        self.size = size
        self.stream = stream  # allocation stream; None for memory allocated before recording
        self.stack = stack
        self.defn = defn  # the BLOCK_DEF entry it was made from, or None
        self.write: Optional[Access] = None  # whole mode: the last write
        self.reads: dict = {}  # whole mode: stream -> its latest read since the last write
        self.segments: Optional[list] = None  # range mode
        self.uses: dict = {}  # stream (not the allocation stream) -> its latest access
        self.recorded: set = set()  # streams named by record_stream
        self.ghosts: list = []
        self.views: list = []  # strided accesses kept beside the state: (Access, Shape)
        self.capped = False  # its segments were merged past MAX_SEGMENTS (counted once)
        self.hulled = False  # a strided access was merged into its segments over its hull (counted once)

    def end(self):
        """One past the last byte tracked (the size; unknown: as far as accesses reached)."""
        if self.segments is not None:
            return self.segments[-1].hi
        return self.size or INF


class _Occurrences:
    """Everything kept for one distinct finding while replaying."""

    __slots__ = ("kind", "access", "previous", "block", "count", "first", "last", "addresses", "occurrences",
                 "merged", "finding")

    def __init__(self, kind, access: Access, previous: Access, block: tuple) -> None:
        self.kind = kind
        self.access = access
        self.previous = previous
        self.block = block  # (ptr, size, allocation stream, allocation stack)
        self.count = 0
        self.first = self.last = access.seq
        self.addresses: list = []
        self.occurrences: list = []
        self.merged = False  # an occurrence on a block merged past the cap (Finding.merged_ranges)
        self.finding: Optional[Finding] = None

    def add(self, acc: Access, earlier: Access, b: Block) -> None:
        addr = b.ptr
        self.count += 1
        # (a pending free is reported when judged: after later findings, with its own seq)
        self.first = min(self.first, acc.seq)
        self.last = max(self.last, acc.seq)
        self.merged = self.merged or (self.kind is Kind.DATA_RACE and (b.capped or b.hulled))
        if len(self.addresses) < MAX_ADDRESSES and addr not in self.addresses:
            self.addresses.append(addr)
        if len(self.occurrences) < MAX_OCCURRENCES:
            self.occurrences.append((acc.seq, earlier.seq, addr, acc.offset, acc.nbytes, earlier.offset, earlier.nbytes))


#: Distinct NOTE texts an engine keeps (a trace may hold any number of notes).
MAX_NOTES = 16


def keep_note(notes: list, rec: list) -> None:
    """Add a NOTE record's ``(level, text)`` to ``notes`` (cleaned; distinct ones, at most
    :data:`MAX_NOTES`). Notes change no replay; the report says what some of them mean."""
    if len(notes) < MAX_NOTES:
        note = (clean(rec[1], 64), clean(rec[2]))
        if note not in notes:
            notes.append(note)


class Engine:
    """Replays the records of one trace; see the module docstring and docs/semantics.md."""

    def __init__(
        self,
        symbols: SymbolTable,
        *,
        header: Optional[dict] = None,
        check_leaks: bool = False,
        on_finding: Optional[Callable[[Finding], None]] = None,
        trace_index: int = 0,
    ) -> None:
        self.symbols = symbols
        self.header = header or {}
        self.check_leaks = check_leaks
        self.on_finding = on_finding
        self.trace_index = trace_index
        self.seq = 0  # kernels and host accesses replayed; the last one's sequence number
        self.host_accesses = 0  # HOST_ACCESS records replayed (seq counts them too)
        self.events = 0  # non-definition records processed, kernels included
        #: ``(level, text)`` of the trace's distinct NOTE records (at most MAX_NOTES): what the
        #: writer said about the recording, for the report (keep_note).
        self.notes: list = []
        self.dropped = 0  # occurrences of distinct findings beyond MAX_FINDINGS
        self.capped = 0  # blocks whose byte-range segments were merged past MAX_SEGMENTS
        self.hulled = 0  # blocks with a strided access merged over its hull (past strided.MAX_VIEWS)
        self.current: dict[int, dict[int, int]] = {}
        self.host: dict[int, int] = {}
        self.recorded: dict[int, dict[int, int]] = {}
        self.created_stack: dict[int, Optional[int]] = {}
        self.blocks: dict[int, Block] = {}  # bid -> live block
        self.live_ptr: dict[int, int] = {}  # base pointer -> bid of the live block there
        self.stale_defs: dict[int, object] = {}  # bid -> BLOCK_DEF entry whose block was freed
        self.ghosts: deque = deque()
        self.ghosts_since_prune = 0
        self.pending_frees: dict[int, list] = {}  # allocation stream -> [PendingFree], in order
        self.pending_count = 0  # pending frees found so far (their order)
        self.found: dict[tuple, _Occurrences] = {}
        self.leaks_checked = False
        self.direct_tail: tuple = (None, 0)  # see run_direct
        self.pending_views: Optional[tuple] = None  # (seq of the next kernel, its VIEWS table)
        self.overlap_budget = Budget()  # search steps of this trace's overlap tests
        self.graphs = G.Graphs()  # captured graphs (format 1.3)
        #: kernel records captured minus kernels replayed by launches: with ``seq`` and
        #: ``host_accesses``, how many kernel records were read (run_direct)
        self.unreplayed_kernels = 0
        self._default_streams = _parse_default_streams(self.header.get("default_streams"))
        self._rules = {
            R.STREAM_CREATED: self.stream_created,
            R.EVENT_CREATED: self.event_created,
            R.EVENT_DELETED: self.event_deleted,
            R.EVENT_RECORD: self.event_recorded,
            R.EVENT_WAIT: self.event_waited,
            R.EVENT_SYNC: self.event_synchronized,
            R.STREAM_SYNC: self.stream_synchronized,
            R.DEVICE_SYNC: self.device_synchronized,
            R.ALLOC: self.allocated,
            R.FREE: self.freed,
            R.RECORD_STREAM: self.record_stream,
            R.ERASE_STREAM: self.erase_stream,
            R.KERNEL: self.kernel,
            R.VIEWS: self.views_declared,
            R.HOST_ACCESS: self.host_access,
            R.GRAPH_BEGIN: self.graph_begin,
            R.GRAPH_END: self.graph_end,
            R.GRAPH_LAUNCH: self.graph_launch,
        }

    # ------------------------------------------------------------------ feeding records

    @property
    def kernels(self) -> int:
        return self.seq

    def feed(self, rec: list) -> None:
        """Online mode: one record (definition or not) from a RecordEncoder."""
        t = rec[0] if rec.__class__ is list and rec else None
        if t in R.DEFINITIONS:
            self.symbols.define(rec)
            if t == R.BLOCK_DEF:
                self.forget_block(rec[1])
        else:
            self.process(rec)

    def flush(self) -> None:
        """Nothing is buffered here (the compiled core buffers online records)."""

    def process(self, rec) -> None:
        """Replay one record that no reader has checked (definitions are absorbed)."""
        t = check_shape(rec, self.seq)
        if t in R.DEFINITIONS:
            try:
                self.symbols.define(rec)
            except TraceFormatError as e:
                raise RecordError(describe(rec, self.seq, str(e))) from None
        elif t in self._rules:
            self.apply(rec)
        elif t == R.NOTE:
            self.events += 1
            keep_note(self.notes, rec)
        # END and record types of a newer minor version: nothing to replay

    def run(self, records: Iterable) -> None:
        """Replay records in order (what ``TraceReader.records()`` yields, or any records)."""
        for rec in records:
            self.process(rec)

    def apply(self, rec: list) -> None:
        """Replay one event record of a known type and at least its minimum length."""
        self.events += 1
        f = STACK_FIELD.get(rec[0])
        if f is not None:
            v = rec[f]
            if v.__class__ is not int and v is not None:
                raise RecordError(describe(rec, self.seq, bad_stack(v)))
        if self.graphs.capturing is not None and self.graphs.capture(rec):
            if rec[0] == R.KERNEL:  # a kernel record read, not replayed (yet)
                self.unreplayed_kernels += 1
            return  # device work of a graph being captured: run at its launches
        self._rules[rec[0]](rec)

    def run_direct(self, source: Iterable, absorb: Callable) -> bool:
        """Replay records read straight from ``source`` (a msgpack unpacker).

        Kernel records (a list of 4+ fields whose first is the int KERNEL) are replayed at
        once; every other record goes through ``absorb(rec, kernels)`` first
        (``TraceReader.direct_absorb``: checks, definitions, END), which returns the record
        to replay, None to skip it, or False at the END record. Returns True if it stopped
        at END, False if ``source`` ran out. An exception raised by ``source`` itself comes
        out as :class:`SourceError`. Afterwards (also after an error) ``direct_tail`` is
        ``(last record handled, kernel records read)``, what the reader needs to name a
        record in an error message.
        """
        it = iter(source)
        rec = None
        kernels = self.seq - self.host_accesses + self.unreplayed_kernels  # KERNEL records read
        try:
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    return False
                except Exception as e:
                    raise SourceError() from e
                if rec.__class__ is list and len(rec) >= 4 and rec[0].__class__ is int and rec[0] == R.KERNEL:
                    kernels += 1  # counted as read even if it turns out malformed
                    self.apply(rec)
                    continue
                rec = absorb(rec, kernels)
                if rec is False:
                    return True
                if rec is not None and rec[0] in self._rules:
                    self.apply(rec)
                elif rec is not None:
                    self.events += 1  # a NOTE
                    keep_note(self.notes, rec)
        finally:
            self.direct_tail = (rec, kernels)

    def finish(self) -> list:
        """End of trace: the pending frees are judged (:meth:`judge_at_end`), the leak check
        (once, if ``check_leaks``), then the resolved findings.

        Findings come sorted by first occurrence. Calling it again (e.g. online mode at
        exit after an earlier look) returns the findings so far; neither check is repeated.
        """
        self.judge_at_end()
        if self.check_leaks and not self.leaks_checked:
            self.leaks_checked = True
            for bid in sorted(self.blocks):
                b = self.blocks[bid]
                if b.stream is not None:
                    self.check_free(b, Access(self.seq, b.stream, LEAK_OP, None, True), pending=False)
        out = []
        for occ in self.found.values():
            f = occ.finding or self._build(occ)
            occ.finding = f
            f.count = occ.count
            f.first_seq = occ.first
            f.last_seq = occ.last
            f.addresses = list(occ.addresses)
            f.occurrences = list(occ.occurrences)
            f.merged_ranges = occ.merged
            out.append(f)
        out.sort(key=lambda f: (f.first_seq, f.kind.value))
        return out

    # ------------------------------------------------------------------ streams and events

    def stream(self, rec: list, field: int) -> dict:
        """``current[S]`` for the stream named by ``rec[field]``, created (backfill) if new.

        A stream first seen without a creation record starts from the host's state, as a
        created one does.
        """
        S = rec[field]
        vec = self.current.get(S) if S.__class__ is int else None
        if vec is not None:
            return vec
        if S.__class__ is not int or S not in self.symbols.streams:
            raise RecordError(describe(rec, self.seq, stream_undefined(S)))
        if len(self.current) >= MAX_STREAMS:
            raise RecordError(describe(rec, self.seq, too_many_streams()))
        self.host[S] = 0
        vec = self.current[S] = dict(self.host)
        return vec

    def stream_created(self, rec: list) -> None:
        """``host[S] = 0; current[S] = copy(host)``; a second creation is ignored."""
        if rec[1].__class__ is int and rec[1] in self.current:
            return  # PyTorch creates each (pool) stream once
        self.stream(rec, 1)
        self.created_stack[rec[1]] = stack_id(rec[2])

    def event_created(self, rec: list) -> None:
        """``recorded[E] = {}`` (wipes a snapshot left by an event with the same handle)."""
        self.recorded[event_id(rec, self.seq)] = {}

    def event_deleted(self, rec: list) -> None:
        self.recorded.pop(event_id(rec, self.seq), None)

    def event_recorded(self, rec: list) -> None:
        """``recorded[E] = copy(current[S])``: a re-record overwrites, no merge."""
        e = event_id(rec, self.seq)
        self.recorded[e] = dict(self.stream(rec, 2))

    def event_waited(self, rec: list) -> None:
        """Stream S merges ``recorded[E]`` (an event never recorded: nothing to learn)."""
        e = event_id(rec, self.seq)
        vec = self.stream(rec, 2)
        merge(vec, self.recorded.get(e, {}))

    def event_synchronized(self, rec: list) -> None:
        """The host and every stream merge ``recorded[E]``."""
        snap = self.recorded.get(event_id(rec, self.seq), {})
        for vec in self.current.values():
            merge(vec, snap)
        merge(self.host, snap)

    def stream_synchronized(self, rec: list) -> None:
        """The host and every stream merge ``current[S]``."""
        src = dict(self.stream(rec, 1))
        for vec in self.current.values():
            merge(vec, src)
        merge(self.host, src)

    def device_synchronized(self, rec: list) -> None:
        """``host[S] = current[S][S]`` for the device's streams; then every stream merges host."""
        dev = rec[1]
        if dev is not None and dev.__class__ is not int:
            raise RecordError(describe(rec, self.seq, bad_device(dev)))
        for S, vec in self.current.items():
            if dev is None or self.symbols.streams[S][0] == dev:
                self.host[S] = max(self.host.get(S, -1), vec[S])
        for vec in self.current.values():
            merge(vec, self.host)

    # ------------------------------------------------------------------ graphs (format 1.3, graphs.py)

    def graph_begin(self, rec: list) -> None:
        """A capture begins on stream S0: device work up to GRAPH_END is stored, not run."""
        gid = graph_id(rec, self.seq)
        check_graph_stack(rec, self.seq)
        self.stream(rec, 2)
        problem = self.graphs.begin(gid, rec[2], rec[3])
        if problem:
            raise RecordError(describe(rec, self.seq, problem))

    def graph_end(self, rec: list) -> None:
        problem = self.graphs.end(graph_id(rec, self.seq))
        if problem:
            raise RecordError(describe(rec, self.seq, problem))

    def graph_launch(self, rec: list) -> None:
        """Replay the graph's program with its origin stream replaced by S (graphs.py)."""
        gid = graph_id(rec, self.seq)
        check_graph_stack(rec, self.seq)
        self.stream(rec, 2)
        g = self.graphs.find(gid)
        if g is None:
            return
        _, records = g.launch(rec[2], self.block_live)
        seq, unreplayed = self.seq, self.unreplayed_kernels
        self.graphs.launch_begins(g, rec[2], rec[3], seq)
        try:
            for r in records:
                self.apply(r)
        finally:
            self.graphs.launch_ends(self.seq)
        # the kernels replayed here are no kernel records read (run_direct's count)
        self.unreplayed_kernels = unreplayed - (self.seq - seq)

    def block_live(self, bid) -> bool:
        """Would an access of ``bid`` find a block (live, or from a BLOCK_DEF not freed since)?"""
        if bid in self.blocks:
            return True
        defn = self.symbols.blocks.get(bid)
        return defn is not None and self.stale_defs.get(bid) is not defn

    def ordered(self, vec: dict, earlier: Access) -> bool:
        """Happens-before: the stream whose state is ``vec`` has observed ``earlier``."""
        return vec.get(earlier.stream, -1) >= earlier.seq

    def ordered_everywhere(self, earlier: Access) -> bool:
        return all(vec.get(earlier.stream, -1) >= earlier.seq for vec in self.current.values())

    # ------------------------------------------------------------------ blocks

    def allocated(self, rec: list) -> None:
        """A new block on stream S; it inherits reuse ghosts over its address range."""
        bid, ptr, size, stack = rec[1], rec[2], rec[3], stack_id(rec[5])
        check_block(rec, self.seq, bid, ptr, size)
        S = rec[4]
        vec = self.stream(rec, 4)
        pending = self.pending_frees.pop(S, None) if self.pending_frees else None
        if pending:
            self.judge(pending, vec)
        b = self.new_block(bid, ptr, size, S, stack, None)
        if self.ghosts:
            self.attach_ghosts(b)

    def freed(self, rec: list) -> None:
        """The missing-record_stream check, left pending until the block could be handed
        out again (skipped for memory allocated before recording)."""
        b = self.block(rec, rec[1])
        if b.stream is not None:
            free = Access(self.seq, b.stream, FREE_OP, stack_id(rec[2]), True)
            self.check_free(b, free, pending=True)
        self.drop_block(b)

    def record_stream(self, rec: list) -> None:
        b = self.block(rec, rec[1])
        self.stream(rec, 2)
        b.recorded.add(rec[2])

    def erase_stream(self, rec: list) -> None:
        b = self.block(rec, rec[1])
        self.stream(rec, 2)
        b.recorded.discard(rec[2])

    def new_block(self, bid, ptr, size, stream, stack, defn) -> Block:
        old = self.blocks.get(bid)
        if old is not None:  # allocation of a live id: its free was not recorded
            self.drop_block(old)
        other = self.live_ptr.get(ptr)
        if other is not None:  # a live block at the same base: its free was not recorded
            self.drop_block(self.blocks[other])
        b = self.blocks[bid] = Block(bid, ptr, size, stream, stack, defn)
        self.live_ptr[ptr] = bid
        return b

    def drop_block(self, b: Block) -> None:
        del self.blocks[b.bid]
        if self.live_ptr.get(b.ptr) == b.bid:
            del self.live_ptr[b.ptr]
        if b.defn is not None:
            self.stale_defs[b.bid] = b.defn

    def forget_block(self, bid) -> None:
        """Online, a BLOCK_DEF names a new block: live state under that id is stale."""
        b = self.blocks.get(bid) if bid.__class__ is int else None
        if b is not None:
            self.drop_block(b)
        self.stale_defs.pop(bid, None)

    def block(self, rec, bid) -> Block:
        """The live block ``bid``; memory known only from a BLOCK_DEF becomes a block here."""
        b = self.blocks.get(bid) if bid.__class__ is int else None
        if b is not None:
            return b
        defn = self.symbols.blocks.get(bid) if bid.__class__ is int else None
        if defn is None or self.stale_defs.get(bid) is defn:
            raise RecordError(describe(rec, self.seq, block_undefined(bid)))
        ptr, size = defn
        check_block(rec, self.seq, bid, ptr, size)
        return self.new_block(bid, ptr, size, None, None, defn)

    # ------------------------------------------------------------------ kernels

    def kernel(self, rec: list) -> None:
        """``seq += 1; current[S][S] = seq``, then each access in record order.

        The record is checked whole before anything happens, so a malformed kernel is not
        half replayed.
        """
        vec = self.stream(rec, 1)
        targets = [self.access_target(rec, a) for a in rec[4:]]
        op = rec[2]
        if op is not None and (op.__class__ is not int or op not in self.symbols.strings):
            raise RecordError(describe(rec, self.seq, bad_op(op)))
        self.seq += 1
        S = rec[1]
        vec[S] = self.seq
        op, stack = string_id(rec[2]), stack_id(rec[3])
        pending = self.pending_views
        shapes = pending[1] if pending is not None and pending[0] == self.seq else None
        for a, (b, write, lo, hi) in zip(rec[4:], targets):
            if lo is not None and lo == hi:
                continue  # an empty range touches nothing
            acc = Access(self.seq, S, op, stack, write, lo, None if lo is None else hi - lo)
            shape = shapes.get((a[0], a[1], a[2])) if shapes and lo is not None else None
            if shape is None:
                self.access(b, S, vec, acc)
            else:
                self.strided_access(b, S, vec, acc, shape)

    def host_access(self, rec: list) -> None:
        """The host's access of pinned memory (format 1.2): a kernel on the host stream H,
        whose state is the host's (H merges whatever the host merges), checked like any
        kernel; then every stream and the host learn H's new sequence number, since every
        later device operation is issued by the host after it (the trace is in host program
        order). A later access is thus never reported against an earlier host access."""
        self.kernel(rec)
        self.host_accesses += 1
        H, seq = rec[1], self.seq
        for vec in self.current.values():
            vec[H] = seq
        self.host[H] = seq

    def access_target(self, rec: list, a) -> tuple:
        """``(block, is_write, lo, hi)`` of one encoded access (lo is None: whole block)."""
        if a.__class__ is int:
            write = a < 0
            return self.block(rec, ~a if write else a), write, None, None
        if a.__class__ is not list or len(a) != 3:
            raise RecordError(describe(rec, self.seq, access_shape(a)))
        x, off, n = a
        if x.__class__ is not int or off.__class__ is not int or n.__class__ is not int or off < 0 or n < 0:
            raise RecordError(describe(rec, self.seq, access_malformed(a)))
        write = x < 0
        return self.block(rec, ~x if write else x), write, off, off + n

    def access(self, b: Block, S: int, vec: dict, acc: Access) -> None:
        """One access: the reuse check, the data-race rules, the use for record_stream."""
        if b.ghosts:
            self.check_ghosts(b, S, vec, acc)
        if acc.offset is None and b.segments is None:
            self.whole_access(b, S, vec, acc)
        else:
            self.range_access(b, S, vec, acc)
        if b.views:
            shape = None if acc.offset is None else Shape(acc.offset, acc.nbytes, ())
            self.views_met(b, S, vec, acc, shape, set())
        if b.stream is not None and S != b.stream:
            b.uses[S] = acc  # the latest use per stream; dict order: first use

    def whole_access(self, b: Block, S: int, vec: dict, acc: Access) -> None:
        """CSAN's rules: a read against the last write; a write against every read since
        the last write, or against the last write if there were none."""
        w = b.write
        if not acc.write:
            if w is not None and w.stream != S and not self.ordered(vec, w):
                self.report(_DATA_RACE, acc, w, b)
            b.reads[S] = acc
            return
        if b.reads:
            for P, r in b.reads.items():
                if P != S and not self.ordered(vec, r):
                    self.report(_DATA_RACE, acc, r, b)
        elif w is not None and w.stream != S and not self.ordered(vec, w):
            self.report(_DATA_RACE, acc, w, b)
        b.write = acc
        b.reads = {}

    def range_access(self, b: Block, S: int, vec: dict, acc: Access) -> None:
        """The same rules per segment; each earlier kernel is reported once per access."""
        segs = to_segments(b)
        if acc.offset is None:
            lo, hi = 0, segs[-1].hi  # a whole-block access covers exactly what is tracked
        else:
            lo, hi = acc.offset, acc.offset + acc.nbytes
            reach(segs, hi)
        i, j = split(segs, lo, hi)
        reported: set = set()
        if not acc.write:
            for s in segs[i:j]:
                for w in s.writes:
                    self.check_race(S, vec, acc, w, b, reported)
                s.reads[S] = acc
        else:
            for s in segs[i:j]:
                for earlier in (s.reads.values() if s.reads else s.writes):
                    self.check_race(S, vec, acc, earlier, b, reported)
                s.writes = (acc,)
                s.reads = {}
            if i == 0 and j == len(segs):  # the whole block was written: back to whole mode
                b.segments = None
                b.write = acc
                b.reads = {}
                return
        if coalesce(segs, max(i - 1, 0), min(j + 1, len(segs))):
            self.capped_block(b)

    # ------------------------------------------------------------------ strided views (see strided.py)

    def views_declared(self, rec: list) -> None:
        """A VIEWS record: the exact bytes of some range accesses of the next kernel."""
        try:
            table = strided.parse_views(rec)
        except ValueError as e:
            raise RecordError(describe(rec, self.seq, str(e))) from None
        self.pending_views = (self.seq + 1, table)

    def strided_access(self, b: Block, S: int, vec: dict, acc: Access, shape: Shape) -> None:
        """Checked against the state its bytes meet, then kept beside it (never replacing it)."""
        if b.ghosts:
            self.check_ghosts(b, S, vec, acc)
        reported: set = set()
        if b.segments is None:
            pieces = [((b.write,) if b.write is not None else (), b.reads)]
        else:
            pieces = [(s.writes, s.reads) for s in b.segments
                      if s.hi > shape.lo and s.lo < shape.hi and overlaps_range(shape, s.lo, s.hi, self.overlap_budget)]
        for writes, reads in pieces:
            for earlier in (reads.values() if acc.write and reads else writes):
                self.check_race(S, vec, acc, earlier, b, reported)
        if b.views:
            self.views_met(b, S, vec, acc, shape, reported)
        b.views.append((acc, shape))
        if len(b.views) > strided.MAX_VIEWS:
            self.demote(b, *b.views.pop(0))
        if b.stream is not None and S != b.stream:
            b.uses[S] = acc

    def views_met(self, b: Block, S: int, vec: dict, acc: Access, shape: Optional[Shape], reported: set) -> None:
        """Any access against the block's strided entries: report, then drop the redundant."""
        for earlier in strided.conflicts(b.views, S, vec, shape, acc.write, self.overlap_budget):
            self.check_race(S, vec, acc, earlier, b, reported)
        strided.prune(b.views, S, shape, acc.write, self.overlap_budget)

    def capped_block(self, b: Block) -> None:
        """Count a block whose segments were merged past the cap (reported as a warning:
        a merged segment can make a race of accesses to bytes that do not overlap)."""
        if not b.capped:
            b.capped = True
            self.capped += 1

    def check_race(self, S: int, vec: dict, acc: Access, earlier: Access, b: Block, reported: set) -> None:
        """A data race unless ``earlier`` is the same stream's or ordered; each kernel once."""
        if earlier.stream != S and not self.ordered(vec, earlier) and earlier.seq not in reported:
            reported.add(earlier.seq)
            self.report(_DATA_RACE, acc, earlier, b)

    def demote(self, b: Block, acc: Access, shape: Shape) -> None:
        """Merge a strided entry into the segments over its hull: a write among the writes,
        and either among the reads (latest per stream), so every later access sees it.
        The segment's writes join its reads too (as when two segments merge): a later write
        checks a segment's reads when it has any, and the entry, read there, must not hide
        the writes from it -- the bytes of the hull between the entry's elements, and the
        bytes a newer write overwrote, still have those writes as their last."""
        if not b.hulled:  # a race reported on this block from now on may be false
            b.hulled = True
            self.hulled += 1
        segs = to_segments(b)
        reach(segs, shape.hi)
        i, j = split(segs, shape.lo, shape.hi)
        P = acc.stream
        for s in segs[i:j]:
            if acc.write and all(w.stream != P or w.seq < acc.seq for w in s.writes):
                s.writes = tuple(w for w in s.writes if w.stream != P) + (acc,)
            latest(s.reads, P, acc)
            for w in s.writes:
                latest(s.reads, w.stream, w)
        if coalesce(segs, max(i - 1, 0), min(j + 1, len(segs))):
            self.capped_block(b)

    # ------------------------------------------------------------------ record_stream and reuse

    def check_free(self, b: Block, free: Access, pending: bool) -> None:
        """Each use of another stream must be recorded or ordered before the allocation
        stream's current state, compared with the use's own seq (0 means "knew the stream
        existed", not "synchronized"). At a free (``pending``) a use that is not is left
        pending for :meth:`judge` and remembered as a reuse ghost; at the end of the trace
        (the leak check) it is reported at once."""
        avec = self.current[b.stream]
        kept = None
        for P, use in b.uses.items():
            if P in b.recorded or self.ordered(avec, use):
                continue
            if not pending:
                self.report(_MISSING, free, use, b)
                continue
            if kept is None:
                kept = Block(b.bid, b.ptr, b.size, b.stream, b.stack, None)
            self.pending_frees.setdefault(b.stream, []).append(PendingFree(kept, free, use, self.pending_count))
            self.pending_count += 1
            self.add_ghost(Ghost(b.ptr, b.size, use))

    def judge(self, pending: list, vec: dict) -> None:
        """Pending frees of blocks allocated on a stream, when that stream (state ``vec``)
        allocates again or the trace ends: the allocator could hand the block out now, so
        a use the stream has still not waited for is a missing ``record_stream``, reported
        with the free's stack as if found at the free."""
        for p in pending:
            if not self.ordered(vec, p.use):
                self.report(_MISSING, p.free, p.use, p.block)

    def judge_at_end(self) -> None:
        """The end of the trace, for every stream, counts as the next allocation: the trace
        shows nothing after it, and a recording is often a window of a longer program (one
        step of a loop), so a block freed unsynchronized could be handed out next. Judged
        in the order the frees were found."""
        if not self.pending_frees:
            return
        pending = sorted((p for ps in self.pending_frees.values() for p in ps), key=lambda p: p.order)
        self.pending_frees = {}
        for p in pending:
            self.judge([p], self.current[p.block.stream])

    def add_ghost(self, g: Ghost) -> None:
        if len(self.ghosts) >= MAX_GHOSTS:
            if self.ghosts_since_prune >= MAX_GHOSTS // 2:
                self.prune_ghosts()
            if len(self.ghosts) >= MAX_GHOSTS:
                self.ghosts.popleft()
        self.ghosts.append(g)
        self.ghosts_since_prune += 1

    def prune_ghosts(self) -> None:
        """Drop ghosts every stream has observed (they can never race again)."""
        keep = [g for g in self.ghosts if not self.ordered_everywhere(g.use)]
        self.ghosts = deque(keep)
        self.ghosts_since_prune = 0

    def attach_ghosts(self, b: Block) -> None:
        found = [g for g in self.ghosts if overlaps(g.ptr, g.size, b.ptr, b.size)
                 and not self.ordered_everywhere(g.use)]
        b.ghosts = found[-MAX_BLOCK_GHOSTS:]

    def check_ghosts(self, b: Block, S: int, vec: dict, acc: Access) -> None:
        """A reuse race is reported once per re-allocated block and ghost, for the first
        access that shares a byte with the old use and is not ordered after it; an access
        elsewhere in the new block leaves the ghost for a later one."""
        keep = []
        for g in b.ghosts:
            if g.use.stream != S and not self.ordered(vec, g.use) and ghost_meets(g, b, acc):
                self.report(_REUSE, acc, g.use, b)
            elif not self.ordered_everywhere(g.use):
                keep.append(g)
        b.ghosts = keep

    # ------------------------------------------------------------------ findings

    def report(self, kind: Kind, acc: Access, earlier: Access, b: Block) -> None:
        # The allocation stack too: tensors from different lines freed or used by the same
        # code are different findings, each with its own block (grouping merges them back).
        key = (kind, acc.stream, acc.op, acc.stack, acc.write, earlier.stream, earlier.op, earlier.stack,
               earlier.write, b.stack)
        occ = self.found.get(key)
        if occ is None:
            if len(self.found) >= MAX_FINDINGS:
                self.dropped += 1
                return
            occ = self.found[key] = _Occurrences(kind, acc, earlier, (b.ptr, b.size, b.stream, b.stack))
            occ.add(acc, earlier, b)
            if self.on_finding is not None:
                occ.finding = self._build(occ)
                self.on_finding(occ.finding)
            return
        occ.add(acc, earlier, b)

    def _build(self, occ: _Occurrences) -> Finding:
        return build_finding(self, occ.kind, occ.access, occ.previous, occ.block, occ.count, occ.first,
                             occ.last, occ.addresses, occ.occurrences, occ.merged)

    def stream_ref(self, S) -> StreamRef:
        dev, handle = self.symbols.streams.get(S, (-1, -1))
        return StreamRef(
            device=dev,
            handle=handle,
            index=S,
            is_default=(dev, handle) in self._default_streams,
            created_stack=self.frames(self.created_stack.get(S)),
            trace=self.trace_index,
        )

    def frames(self, kid) -> tuple:
        """The frames of stack ``kid``: one tuple per stack id, shared by every finding
        that names it (stack ids are never redefined). A 40 KB trace can name one stack of
        2^15 frames in thousands of findings: built per finding, it took 900 MB."""
        cache = self.__dict__.setdefault("_frames_cache", {})
        key = kid if kid.__class__ is int else None
        got = cache.get(key)
        if got is None:
            try:
                got = tuple(Frame(f, line, fn) for f, line, fn in self.symbols.frames_of(key))
            except (KeyError, TypeError, ValueError):
                return ()  # (not kept: a stack not defined yet may be defined later)
            if got:
                cache[key] = got
        return got


# ---------------------------------------------------------------------- shared helpers
#
# Used by the compiled core's wrapper too: findings and error messages are built by the
# same code whichever engine replayed the trace.


def build_finding(eng, kind, access, previous, block, count, first, last, addresses, occurrences,
                  merged: bool = False) -> Finding:
    """A resolved Finding; ``eng`` provides ``symbols``, ``stream_ref`` and ``frames``."""
    ptr, size, A, astack = block
    return Finding(
        kind=kind,
        access=access_info(eng, access),
        previous=access_info(eng, previous),
        block=BlockInfo(ptr, size, eng.stream_ref(A) if A is not None else None, eng.frames(astack)),
        count=count,
        addresses=list(addresses),
        first_seq=first,
        last_seq=last,
        trace=eng.trace_index,
        traces=[eng.trace_index],
        occurrences=list(occurrences),
        merged_ranges=bool(merged),
    )


def access_info(eng, acc: Access) -> AccessInfo:
    if isinstance(acc.op, str):  # a free or the end-of-trace leak check: host side, seq 0
        seq, op = 0, acc.op
    else:
        seq, op = acc.seq, eng.symbols.string(acc.op)
    return AccessInfo(eng.stream_ref(acc.stream), op, "write" if acc.write else "read", seq,
                      eng.frames(acc.stack), acc.offset, acc.nbytes, replay_info(eng, seq))


def replay_info(eng, seq: int) -> Optional[ReplayInfo]:
    """The graph launch kernel ``seq`` ran in (format 1.3), resolved; None for a kernel the
    program ran itself (or a host-side access, seq 0)."""
    site = eng.graphs.site(seq) if seq else None
    if site is None:
        return None
    return ReplayInfo(eng.stream_ref(site.stream), eng.frames(site.stack), eng.frames(site.captured))


def _parse_default_streams(ds) -> set:
    out = set()
    if isinstance(ds, dict):
        for dev, handle in ds.items():
            try:
                out.add((int(dev), int(handle)))
            except (TypeError, ValueError):
                continue
    return out


def merge(dst: dict, src: dict) -> None:
    """``dst[k] = max(dst.get(k, -1), v)`` for each entry of ``src``."""
    for P, v in src.items():
        if dst.get(P, -1) < v:
            dst[P] = v


def to_segments(b: Block) -> list:
    """The block's segments, switching it from whole mode to one segment with that state."""
    if b.segments is None:
        writes = (b.write,) if b.write is not None else ()
        b.segments = [Segment(0, b.size or INF, writes, dict(b.reads))]
        b.write, b.reads = None, {}
    return b.segments


def reach(segs: list, hi) -> None:
    """Track bytes up to ``hi`` (past the known extent nothing has touched them yet)."""
    end = segs[-1].hi
    if hi > end:
        segs.append(Segment(end, hi, (), {}))


def split(segs: list, lo, hi) -> tuple:
    """Split segments so that boundaries fall on lo and hi; return the index range [i, j)."""
    i = 0
    while segs[i].hi <= lo:
        i += 1
    s = segs[i]
    if s.lo < lo:
        segs.insert(i + 1, Segment(lo, s.hi, s.writes, dict(s.reads)))
        s.hi = lo
        i += 1
    j = i
    while segs[j].hi < hi:
        j += 1
    s = segs[j]
    if s.hi > hi:
        segs.insert(j + 1, Segment(hi, s.hi, s.writes, dict(s.reads)))
        s.hi = hi
    return i, j + 1


def coalesce(segs: list, i: int, j: int) -> bool:
    """Join equal neighbours in ``segs[i:j]``; then merge pairs down to the cap (merge_pair).
    Whether it merged any (a report on this block may then be false: Engine.capped)."""
    n = i
    while n < j - 1 and n < len(segs) - 1:
        if segs[n].same_state(segs[n + 1]):
            segs[n].hi = segs[n + 1].hi
            del segs[n + 1]
            j -= 1
        else:
            n += 1
    capped = len(segs) > MAX_SEGMENTS
    while len(segs) > MAX_SEGMENTS:
        best = merge_pair(segs)
        s, t = segs[best], segs[best + 1]
        writes: dict = {}
        for w in s.writes + t.writes:
            latest(writes, w.stream, w)
        reads: dict = {}
        for src in (s.reads, t.reads, writes):
            for P, a in src.items():
                latest(reads, P, a)
        s.hi = t.hi
        s.writes = tuple(writes.values())
        s.reads = reads
        del segs[best + 1]
    return capped


def merge_pair(segs: list) -> int:
    """The neighbours (m, m + 1) to merge when a block is over its cap of segments: the
    narrowest pair (the first of the narrowest) among those whose accesses are of the same
    streams, else among all. A merged segment holds the accesses of both: a stream that had
    accessed only one of them then meets, on the other's bytes, accesses it never overlapped,
    and may be told of a race that is not there (two streams filling their own halves of one
    buffer, each side in hundreds of pieces). Merging pieces of the same streams avoids that
    in the common case, though not always (a stream waited for may have written one of the
    pieces after the wait)."""
    pairs = range(len(segs) - 1)
    streams = [s.streams() for s in segs]
    same = [m for m in pairs if streams[m] == streams[m + 1]]
    return min(same or pairs, key=lambda m: segs[m + 1].hi - segs[m].lo)


def latest(table: dict, key, acc: Access) -> None:
    cur = table.get(key)
    if cur is None or cur.seq < acc.seq:
        table[key] = acc


def ghost_meets(g: Ghost, b: Block, acc: Access) -> bool:
    """Do the old use's bytes (its range of the freed block, or all of it) and the access's
    (its range of the new block, or all of it) share one? A whole-block access to a block
    of unknown size may touch any byte from its base up (unbounded: None)."""
    lo1, hi1 = _touched(g.ptr, g.size, g.use)
    lo2, hi2 = _touched(b.ptr, b.size, acc)
    return (hi2 is None or lo1 < hi2) and (hi1 is None or lo2 < hi1)


def _touched(ptr: int, size: Optional[int], acc: Access) -> tuple:
    """The bytes ``[lo, hi)`` an access touched of the block at ``ptr`` (hi None: unbounded)."""
    if acc.offset is not None:
        return ptr + acc.offset, ptr + acc.offset + acc.nbytes
    return ptr, None if size is None else ptr + size


def overlaps(p1, n1, p2, n2) -> bool:
    """Do ``[p1, p1 + n1)`` and ``[p2, p2 + n2)`` overlap (an unknown size: the base only)?"""
    if n1 is None and n2 is None:
        return p1 == p2
    if n1 is None:
        return p2 <= p1 < p2 + n2
    if n2 is None:
        return p1 <= p2 < p1 + n1
    return p1 < p2 + n2 and p2 < p1 + n1


#: The stack field of each event record (docs/trace-format.md section 5.2): a stack id or
#: nil. Another type (a map, a string, a float, a boolean ...) makes the record malformed,
#: checked before anything else in the record (the compiled core's STACK_FIELD, E_STACK);
#: an integer that names no stack is no stack.
STACK_FIELD = R.STACK_FIELD


def stack_id(v) -> Optional[int]:
    """A stack field: an id, or None for nil or anything that is not an id (no stack)."""
    return v if v.__class__ is int and 0 <= v < MAX_ID else None


string_id = stack_id  # an op field: a string id, or None (reported as "?")


def event_id(rec: list, seq: int) -> int:
    e = rec[1]
    if e.__class__ is not int or not 0 <= e <= MAX_U64:
        raise RecordError(describe(rec, seq, bad_event(e)))
    return e


def graph_id(rec: list, seq: int) -> int:
    problem = G.graph_id_problem(rec[1])
    if problem:
        raise RecordError(describe(rec, seq, problem))
    return rec[1]


def check_graph_stack(rec: list, seq: int) -> None:
    """A graph record's stack field (GRAPH_BEGIN, GRAPH_LAUNCH): a stack id or nil."""
    v = rec[3]
    if v.__class__ is not int and v is not None:
        raise RecordError(describe(rec, seq, bad_stack(v)))


def check_block(rec, seq: int, bid, ptr, size) -> None:
    if bid.__class__ is not int or not 0 <= bid < MAX_ID:
        raise RecordError(describe(rec, seq, bid_out_of_range(bid)))
    if ptr.__class__ is not int or not 0 <= ptr <= MAX_U64 or not (
            size is None or (size.__class__ is int and 0 <= size <= MAX_U64)):
        raise RecordError(describe(rec, seq, malformed_block(bid)))


def check_shape(rec, seq: int) -> int:
    """The checks a reader makes (a list, an int type, the minimum length); return the type."""
    if rec.__class__ is not list or not rec or rec[0].__class__ is not int:
        raise RecordError(describe(rec, seq, "not an array starting with an integer record type"))
    t = rec[0]
    if len(rec) < R.MIN_LENGTH.get(t, 0):
        raise RecordError(describe(rec, seq, f"{len(rec)} fields, fewer than the {R.MIN_LENGTH[t]} it needs"))
    return t


# What is wrong with a record, in words (both engines' messages come from here).


def stream_undefined(S) -> str:
    return f"record refers to stream index {_short(S, 60)}, which is not defined"


def too_many_streams() -> str:
    return f"more than {MAX_STREAMS} streams in one trace"


def bad_event(e) -> str:
    return f"event id {_short(e, 60)} is not an integer handle"


def bad_device(dev) -> str:
    return f"device synchronize names device {_short(dev, 60)}, not an integer"


def bad_stack(v) -> str:
    return f"a field has the wrong type: the stack id is {_a(v)}, not an integer or nil"


def bad_op(op) -> str:
    """A kernel's op field that names no defined string (docs/trace-format.md, section 7)."""
    if op.__class__ is int:
        return f"the op is string id {_short(op, 60)}, which is not defined"
    return f"a field has the wrong type: the op is {_a(op)}, not a string id or nil"


def bid_out_of_range(bid) -> str:
    return f"block id {_short(bid, 60)} out of range"


def malformed_block(bid) -> str:
    return f"block {bid} has a malformed pointer or size"


def block_undefined(bid) -> str:
    return f"record refers to block id {_short(bid, 60)}, which is not defined or was freed"


def access_shape(a) -> str:
    return f"kernel access {_short(a, 60)} is neither an int nor [block, offset, nbytes]"


def access_malformed(a) -> str:
    return f"kernel access {_short(a, 60)} has a malformed block, offset or size"


def describe(rec, seq: int, problem: str) -> str:
    """The one-line message for a malformed record (both engines use it)."""
    t = rec[0] if rec.__class__ is list and rec else None
    name = R.RECORD_NAMES.get(t) if t.__class__ is int else None
    what = f"{name} record" if name else "record"
    when = f"after kernel {seq}" if seq else "before the first kernel"
    return f"malformed {what} {when}: {_short(rec)} ({problem})"


#: repr of values of any size at a bounded cost (a record can hold a million elements)
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 12, 6, 60, 60, 60


def _short(rec, limit: int = 80) -> str:
    """A value in a message: its repr, at most ``limit`` characters."""
    text = _REPR.repr(rec)
    return text if len(text) <= limit else text[: limit - 3] + "..."
