"""The replay engine: the sync-state matrix of DESIGN.md and the three detectors.

One :class:`Engine` replays one trace (a file through :meth:`Engine.run`, or live records
through :meth:`Engine.feed` in online mode). Streams are the trace's stream indexes (one
per (device, handle)); ``current[S]`` is a dict per stream, events keep snapshots, the
host has its own dict, exactly as DESIGN.md's table says.

An access reference ``k`` is one tuple per kernel, ``(seq, stream, op, stack)``, shared by
all its accesses (frees are shaped the same way, with the op a string). Nothing else is
built per kernel or per access. (Keeping the records themselves would save the tuple but
costs more: a dead record is freed long after it was read, out of cache.)

Per-block state (a list, indexes ``_W`` .. ``_DEF``):

* whole-block mode: ``W`` is the last write (a ``k``) or None, ``R`` maps a stream to its
  latest read since that write (CSAN's rules; the latest read per stream is enough
  because a stream's accesses are ordered);
* range mode (after the first ``[a, offset, nbytes]`` access): ``SEGS`` is a sorted list of
  segments ``[lo, hi, writes, reads]`` covering the block (``[0, size)``, or as far as
  accesses reach when the size is unknown), where ``writes`` is a tuple of
  ``(k, access)`` pairs (normally one) and ``reads`` maps a stream to ``(k, access)``. A
  write of a sub-range replaces the state of those bytes only. At most
  :data:`MAX_SEGMENTS` segments are kept; beyond that the narrowest neighbours are merged
  conservatively: the merged segment keeps every write (latest per stream) both as writes
  and as reads, so a later access is checked against everything either half had (this can
  only add reports, never lose one). A whole-block write returns the block to whole mode;
* fast path: when every piece of a block's state is one stream's own (whole mode, no
  reuse ghosts), that stream "owns" it and the state lives in two arrays indexed by the
  encoded access (``Engine._own``/``Engine._slot``, see ``__init__``): an owner's access is
  then a single store in the replay loop. Any other access takes the block back
  (``_take_over``) and goes through ``_slow_access``. A fresh allocation is owned by its
  allocation stream.

Cross-stream uses for the missing-record_stream check are not written on every access:
an access stays visible in the state until another stream's write drops it, and only then
is it folded into ``USES`` (latest per stream). At free the check merges ``USES`` with what
is still in the state. Unsynchronized, unrecorded uses at a free become "ghosts" (bounded:
:data:`MAX_GHOSTS`) that a later allocation overlapping the address range inherits, for
the reuse-race check.

Findings are deduplicated while replaying by (kind, both streams, ops, stacks and access
types) into counts, first/last seq, up to :data:`MAX_ADDRESSES` addresses and
:data:`MAX_OCCURRENCES` occurrences; :class:`~npusan.analyzer.findings.Finding` objects are
built only for ``on_finding`` and in :meth:`Engine.finish`. Memory is bounded by the live
blocks, streams and events and by the capped findings, never by the trace length.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Optional

from ..trace_format import records as R
from ..trace_format.errors import TraceFormatError
from ..trace_format.symbols import MAX_TABLE, SymbolTable
from .findings import AccessInfo, BlockInfo, Finding, Frame, Kind, StreamRef

#: Distinct byte-range segments kept per block before neighbours are merged (see module doc).
MAX_SEGMENTS = 32
#: Streams per trace (stream indexes must be below this).
MAX_STREAMS = 1 << 16
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

INF = float("inf")

#: Op names of the host-side "accesses" of a missing-record_stream finding.
_FREE_OP = "free"
_LEAK_OP = "end of trace (never freed)"

# Block state layout.
_W, _R, _SEGS, _GHOSTS, _USES, _RECORDED, _PTR, _SIZE, _ASTREAM, _ASTACK, _BID, _DEF = range(12)

#: Stored in ``_own`` where no stream has the fast path (see ``_own``'s comment).
_NOBODY = -(1 << 62)

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


class _CallbackError(Exception):
    """Carries an exception raised by ``on_finding`` through the malformed-input handler."""


class _Occurrences:
    """Everything kept for one distinct finding key while replaying."""

    __slots__ = ("kind", "access", "previous", "block", "count", "first", "last", "addresses",
                 "occurrences", "finding")

    def __init__(self, kind, access, previous, block, seq, pseq, addr):
        self.kind = kind
        self.access = access  # (k, acc): k = (seq, stream, op, stack); acc the encoded access
        self.previous = previous
        self.block = block  # (ptr, size, alloc sidx, alloc stack)
        self.count = 1
        self.first = self.last = seq
        self.addresses = [addr]
        self.occurrences = [(seq, pseq, addr)]
        self.finding: Optional[Finding] = None


class Engine:
    """Replays the records of one trace; see the module docstring and DESIGN.md."""

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
        self.seq = 0
        self.events = 0  # non-definition records processed, kernels included
        self.dropped = 0  # occurrences of distinct findings beyond MAX_FINDINGS
        self._cur: dict[int, dict[int, int]] = {}  # current[S] = {P: seq}
        self._host: dict[int, int] = {}
        self._events: dict[int, dict[int, int]] = {}  # recorded[E]
        self._created_stack: dict[int, Optional[int]] = {}
        self._blocks: list = []  # bid -> state list or None
        # The fast path's two arrays, ``2 * cap`` long, indexed by the encoded access
        # itself: ``a = bid`` (a read) hits the front half, ``a = ~bid`` (a write, a
        # negative index) the back half. ``_own[a] - a == S`` iff stream S owns the block
        # (every piece of its state is S's own, whole-block mode, no ghosts); then
        # ``_slot[bid]`` is S's latest read (stale if older than the write) and
        # ``_slot[~bid]`` the last write, and an access is one store. Keys are offset by
        # the index, so an index that lands in the wrong half (an undefined block id)
        # yields S' - 2*cap or S' + 2*cap, never a stream index as long as every stream
        # index is below 2*cap (``_stream`` grows the arrays to keep it so).
        self._own: list = []
        self._slot: list = []
        self._cap = 0
        self._live_ptr: dict[int, int] = {}  # base pointer -> bid of the live block
        self._stale_defs: dict[int, tuple] = {}  # bid -> BLOCK_DEF value already freed
        self._ghosts: deque = deque()
        self._occ: dict[tuple, _Occurrences] = {}
        self._leaks_checked = False
        self.direct_tail: tuple = (None, 0)  # see run_direct
        self._default_streams = self._parse_default_streams(self.header.get("default_streams"))
        self._handlers = {
            R.STREAM_CREATED: self._on_stream_created,
            R.EVENT_CREATED: self._on_event_created,
            R.EVENT_DELETED: self._on_event_deleted,
            R.EVENT_RECORD: self._on_event_record,
            R.EVENT_WAIT: self._on_event_wait,
            R.EVENT_SYNC: self._on_event_sync,
            R.STREAM_SYNC: self._on_stream_sync,
            R.DEVICE_SYNC: self._on_device_sync,
            R.ALLOC: self._on_alloc,
            R.FREE: self._on_free,
            R.RECORD_STREAM: self._on_record_stream,
            R.ERASE_STREAM: self._on_erase_stream,
        }

    # ------------------------------------------------------------------ public API

    @property
    def kernels(self) -> int:
        return self.seq

    def feed(self, rec: list) -> None:
        """Online mode: route one record (definition or not) from a RecordEncoder."""
        t = rec[0]
        if t in R.DEFINITIONS:
            self.symbols.define(rec)
            if t == R.BLOCK_DEF:
                self._forget_block(rec[1])
        else:
            self.run((rec,))

    def process(self, rec: list) -> None:
        """Handle one non-definition record."""
        self.run((rec,))

    def run(self, records: Iterable[list]) -> None:
        """The fast replay loop over non-definition records (definitions are tolerated)."""
        _run(self, records)

    def run_direct(self, source: Iterable, absorb: Callable) -> bool:
        """The replay loop reading records straight from ``source`` (a msgpack unpacker).

        Kernel records of the fast-path form (a list of 4+ fields whose first equals
        KERNEL) are replayed here; every other record goes through ``absorb(rec, seq)``
        first (``TraceReader.direct_absorb``: validation, definitions, END), which returns
        the record to replay, None to skip it, or False to stop (END). Returns True if it
        stopped at END, False if ``source`` ran out. An exception raised by ``source``
        itself comes out as :class:`SourceError`. Afterwards (also after an error)
        ``direct_tail`` is ``(last record handled, kernel records read)``, what the
        reader needs to name a record in an error message.
        """
        return _run_direct(self, source, absorb)

    def finish(self) -> list:
        """End of trace: the leak check (once, if ``check_leaks``), then the resolved findings.

        Findings come sorted by first occurrence. Calling it again (e.g. online mode at
        exit after an earlier look) returns the findings so far; the leak check is not
        repeated.
        """
        if self.check_leaks and not self._leaks_checked:
            self._leaks_checked = True
            for b in self._blocks:
                if b is not None and b[_ASTREAM] is not None:
                    self._check_free(b, None, ghost=False)
        out = []
        for occ in self._occ.values():
            f = occ.finding or self._build(occ)
            occ.finding = f
            f.count = occ.count
            f.first_seq = occ.first
            f.last_seq = occ.last
            f.addresses = list(occ.addresses)
            f.occurrences = list(occ.occurrences)
            out.append(f)
        out.sort(key=lambda f: (f.first_seq, f.kind.value))
        return out

    # ------------------------------------------------------------------ bookkeeping

    @staticmethod
    def _parse_default_streams(ds) -> set:
        out = set()
        if isinstance(ds, dict):
            for dev, handle in ds.items():
                try:
                    out.add((int(dev), int(handle)))
                except (TypeError, ValueError):
                    continue
        return out

    def _describe_bad(self, rec, e: Exception) -> str:
        t = rec[0] if isinstance(rec, list) and rec else None
        name = R.RECORD_NAMES.get(t, "?") if isinstance(t, int) else "?"
        return f"malformed {name} record after kernel {self.seq}: {_short(rec)} ({type(e).__name__}: {e})"

    # ------------------------------------------------------------------ streams & events

    def _stream(self, S) -> dict:
        """The sync vector of stream S, creating it (backfill) if first seen."""
        vec = self._cur.get(S)
        if vec is None:
            if S not in self.symbols.streams:
                raise RecordError(f"record refers to stream index {S!r}, which is not defined")
            if not 0 <= S < MAX_STREAMS:
                raise RecordError(f"stream index {S} is over this analyzer's limit of {MAX_STREAMS} streams")
            if S >= 2 * self._cap:
                self._grow(S // 2 + 1)
            self._host[S] = 0
            vec = self._cur[S] = dict(self._host)
        return vec

    def _on_stream_created(self, rec):
        S = rec[1]
        if S in self._cur:
            return  # PyTorch creates each (pool) stream once: a second creation is ignored
        self._stream(S)
        self._created_stack[S] = rec[2]

    def _on_event_created(self, rec):
        self._events[_event_id(rec[1])] = {}

    def _on_event_deleted(self, rec):
        self._events.pop(_event_id(rec[1]), None)

    def _on_event_record(self, rec):
        e = rec[1]
        if e.__class__ is not int:
            _event_id(e)
        vec = self._cur.get(rec[2])
        self._events[e] = (vec if vec is not None else self._stream(rec[2])).copy()

    def _on_event_wait(self, rec):
        e = rec[1]
        if e.__class__ is not int:
            _event_id(e)
        vec = self._cur.get(rec[2])
        if vec is None:
            vec = self._stream(rec[2])
        snap = self._events.get(e)
        if snap:
            for P, v in snap.items():
                if vec.get(P, -1) < v:
                    vec[P] = v

    def _on_event_sync(self, rec):
        snap = self._events.get(_event_id(rec[1]))
        if snap:
            for vec in self._cur.values():
                _merge(vec, snap)
            _merge(self._host, snap)

    def _on_stream_sync(self, rec):
        src = dict(self._stream(rec[1]))
        for vec in self._cur.values():
            _merge(vec, src)
        _merge(self._host, src)

    def _on_device_sync(self, rec):
        dev = rec[1]
        if dev is not None and not isinstance(dev, int):
            raise RecordError(f"device synchronize names device {dev!r}, not an integer")
        host = self._host
        streams = self.symbols.streams
        for S, vec in self._cur.items():
            if dev is None or streams[S][0] == dev:
                host[S] = max(host.get(S, -1), vec[S])
        for vec in self._cur.values():
            _merge(vec, host)

    # ------------------------------------------------------------------ blocks

    def _new_block(self, bid, ptr, size, astream, astack, defn=None) -> list:
        if not isinstance(bid, int) or not 0 <= bid < MAX_TABLE:
            raise RecordError(f"block id {bid!r} out of range")
        if not isinstance(ptr, int) or not (size is None or (isinstance(size, int) and size >= 0)):
            raise RecordError(f"block {bid} has a malformed pointer or size")
        if bid >= self._cap:
            self._grow(bid + 1)
        blocks = self._blocks
        old = blocks[bid]
        if old is not None:  # allocation of a live block: its free was not recorded
            self._drop_block(old)
        other = self._live_ptr.get(ptr)
        if other is not None and blocks[other] is not None:
            self._drop_block(blocks[other])
        b = [None, {}, None, None, None, None, ptr, size, astream, astack, bid, defn]
        blocks[bid] = b
        self._live_ptr[ptr] = bid
        return b

    def _grow(self, n: int) -> None:
        """Room for block ids below ``n``, in place (the replay loop holds the lists)."""
        cap = self._cap
        new = max(n, 2 * cap, 64)
        fill = new - cap
        self._own[cap:cap] = [_NOBODY] * (2 * fill)  # the back half moves back with its keys
        self._slot[cap:cap] = [None] * (2 * fill)
        self._blocks.extend([None] * fill)
        self._cap = new

    def _take_over(self, b) -> None:
        """Bring a block out of fast-path ownership: its state goes back into ``W``/``R``."""
        bid = b[_BID]
        own = self._own
        key = own[bid]
        if key == _NOBODY:
            return
        S = key - bid
        own[bid] = own[~bid] = _NOBODY
        slot = self._slot
        w, r = slot[~bid], slot[bid]
        slot[bid] = slot[~bid] = None
        b[_W] = w
        b[_R] = {S: r} if r is not None and (w is None or r[0] > w[0]) else {}

    def _hand_over(self, b, S) -> None:
        """Give stream S the fast path for a block whose state is all S's own."""
        bid = b[_BID]
        rd = b[_R]
        slot = self._slot
        slot[~bid] = b[_W]
        slot[bid] = rd.pop(S) if rd else None
        b[_W] = None
        self._own[bid] = S + bid
        self._own[~bid] = S + ~bid

    def _drop_block(self, b) -> None:
        bid = b[_BID]
        self._take_over(b)
        self._blocks[bid] = None
        if self._live_ptr.get(b[_PTR]) == bid:
            del self._live_ptr[b[_PTR]]
        if b[_DEF] is not None:
            self._stale_defs[bid] = b[_DEF]

    def _forget_block(self, bid) -> None:
        """A BLOCK_DEF arrived through :meth:`feed`: any live state under that id is stale."""
        if bid.__class__ is int and 0 <= bid < self._cap and self._blocks[bid] is not None:
            self._drop_block(self._blocks[bid])
        self._stale_defs.pop(bid, None)

    def _block(self, bid) -> list:
        """Live state of block ``bid``; a block known only from BLOCK_DEF is materialized."""
        if bid.__class__ is int and 0 <= bid < self._cap:
            b = self._blocks[bid]
            if b is not None:
                return b
        defn = self.symbols.blocks.get(bid) if isinstance(bid, int) else None
        if defn is None or self._stale_defs.get(bid) is defn:
            raise RecordError(f"record refers to block id {bid!r}, which is not defined or was freed")
        return self._new_block(bid, defn[0], defn[1], None, None, defn)

    def _on_alloc(self, rec):
        _, bid, ptr, size, S, stack = rec[:6]
        self._stream(S)
        b = self._new_block(bid, ptr, size, S, stack)
        if self._ghosts:
            self._attach_ghosts(b)
        if not b[_GHOSTS]:
            # A fresh block is most likely first used on its allocation stream: give that
            # stream the fast path now (empty state is trivially its own).
            self._hand_over(b, S)

    def _on_free(self, rec):
        b = self._block(rec[1])
        if b[_ASTREAM] is not None:
            self._check_free(b, rec, ghost=True)
        self._drop_block(b)

    def _on_record_stream(self, rec):
        b = self._block(rec[1])
        self._stream(rec[2])
        if b[_RECORDED] is None:
            b[_RECORDED] = set()
        b[_RECORDED].add(rec[2])

    def _on_erase_stream(self, rec):
        b = self._block(rec[1])
        self._stream(rec[2])
        if b[_RECORDED]:
            b[_RECORDED].discard(rec[2])

    # ------------------------------------------------------------------ accesses (slow path)

    def _slow_access(self, S, vec, k, a) -> None:
        """Any access the inline fast path did not take (see the module docstring)."""
        if a.__class__ is int:
            write = a < 0
            bid = ~a if write else a
            if 0 <= bid < self._cap:
                b = self._blocks[bid]
                if b is not None and b[_SEGS] is None and not b[_GHOSTS]:
                    # The common case, inline: a whole-block access in whole mode.
                    if self._own[bid] != _NOBODY:
                        self._take_over(b)
                    self._whole(b, S, vec, k, a, write)
                    w = b[_W]
                    rd = b[_R]
                    if (w is None or w[1] == S) and (not rd or (len(rd) == 1 and S in rd)):
                        self._hand_over(b, S)
                    return
            lo = hi = None
        else:
            if not isinstance(a, list) or len(a) != 3:
                raise RecordError(f"kernel access {a!r} is neither an int nor [block, offset, nbytes]")
            x, off, n = a
            if not (isinstance(x, int) and isinstance(off, int) and isinstance(n, int)) or off < 0 or n < 0:
                raise RecordError(f"kernel access {a!r} has a malformed block, offset or size")
            write = x < 0
            bid = ~x if write else x
            lo, hi = off, off + n
        b = self._block(bid)
        self._take_over(b)
        if lo is not None and lo == hi:
            return  # an empty range touches nothing
        if b[_GHOSTS]:
            self._check_ghosts(b, S, vec, k, a)
        if lo is None and b[_SEGS] is None:
            self._whole(b, S, vec, k, a, write)
        else:
            self._ranged(b, S, vec, k, a, write, 0 if lo is None else lo, INF if hi is None else hi)
        # Fast-path eligibility: everything in the block is S's own.
        if b[_SEGS] is None and not b[_GHOSTS]:
            w = b[_W]
            rd = b[_R]
            if (w is None or w[1] == S) and (not rd or (len(rd) == 1 and S in rd)):
                self._hand_over(b, S)

    def _whole(self, b, S, vec, k, a, write) -> None:
        w = b[_W]
        rd = b[_R]
        bid = b[_BID]
        if not write:
            if w is not None and w[1] != S and vec.get(w[1], -1) < w[0]:
                self._report(_DATA_RACE, k, a, w, ~bid, b)
            rd[S] = k
            return
        if rd:
            for P, pk in rd.items():
                if P != S:
                    if vec.get(P, -1) < pk[0]:
                        self._report(_DATA_RACE, k, a, pk, bid, b)
                    self._fold_use(b, pk, bid)
        elif w is not None and w[1] != S and vec.get(w[1], -1) < w[0]:
            self._report(_DATA_RACE, k, a, w, ~bid, b)
        if w is not None and w[1] != S:
            self._fold_use(b, w, ~bid)
        b[_W] = k
        b[_R] = {}

    def _fold_use(self, b, pk, pacc) -> None:
        """An access of another stream is dropped from the state: keep it as a use."""
        P = pk[1]
        if b[_ASTREAM] is None or P == b[_ASTREAM]:
            return
        uses = b[_USES]
        if uses is None:
            b[_USES] = {P: (pk, pacc)}
            return
        u = uses.get(P)
        if u is None or u[0][0] < pk[0]:
            uses[P] = (pk, pacc)

    def _to_segments(self, b) -> list:
        bid = b[_BID]
        w = b[_W]
        end = b[_SIZE] or INF  # a block of unknown size extends as far as accesses reach
        segs = [[0, end, ((w, ~bid),) if w is not None else (), {P: (pk, bid) for P, pk in b[_R].items()}]]
        b[_SEGS] = segs
        b[_W] = None
        b[_R] = {}
        return segs

    def _ranged(self, b, S, vec, k, a, write, lo, hi) -> None:
        segs = b[_SEGS] or self._to_segments(b)
        end = segs[-1][1]
        if hi == INF:  # a whole-block access covers exactly what is tracked
            hi = end
        elif hi > end:  # bytes past the known size: nothing has touched them yet
            segs.append([end, hi, (), {}])
        # Split so that segment boundaries fall on lo and hi.
        i = 0
        while segs[i][1] <= lo:
            i += 1
        s = segs[i]
        if s[0] < lo:
            segs.insert(i + 1, [lo, s[1], s[2], dict(s[3])])
            s[1] = lo
            i += 1
        j = i
        while segs[j][1] < hi:
            j += 1
        s = segs[j]
        if s[1] > hi:
            segs.insert(j + 1, [hi, s[1], s[2], dict(s[3])])
            s[1] = hi
        j += 1
        reported = set()
        if not write:
            entry = (k, a)
            for s in segs[i:j]:
                for wk, wacc in s[2]:
                    if wk[1] != S and vec.get(wk[1], -1) < wk[0] and id(wk) not in reported:
                        reported.add(id(wk))
                        self._report(_DATA_RACE, k, a, wk, wacc, b)
                s[3][S] = entry
        else:
            wt = ((k, a),)
            for s in segs[i:j]:
                rd = s[3]
                if rd:
                    for P, (pk, pacc) in rd.items():
                        if P != S:
                            if vec.get(P, -1) < pk[0] and id(pk) not in reported:
                                reported.add(id(pk))
                                self._report(_DATA_RACE, k, a, pk, pacc, b)
                            self._fold_use(b, pk, pacc)
                else:
                    for wk, wacc in s[2]:
                        if wk[1] != S and vec.get(wk[1], -1) < wk[0] and id(wk) not in reported:
                            reported.add(id(wk))
                            self._report(_DATA_RACE, k, a, wk, wacc, b)
                for wk, wacc in s[2]:
                    if wk[1] != S:
                        self._fold_use(b, wk, wacc)
                s[2] = wt
                s[3] = {}
            if i == 0 and j == len(segs):  # the whole block was written: back to whole mode
                b[_SEGS] = None
                b[_W] = k
                b[_R] = {}
                return
        self._coalesce(segs, max(i - 1, 0), min(j + 1, len(segs)))

    @staticmethod
    def _same_state(s, t) -> bool:
        if len(s[2]) != len(t[2]) or any(x[0] is not y[0] or x[1] is not y[1] for x, y in zip(s[2], t[2])):
            return False
        r1, r2 = s[3], t[3]
        if len(r1) != len(r2):
            return False
        for P, e in r1.items():
            f = r2.get(P)
            if f is None or f[0] is not e[0] or f[1] is not e[1]:
                return False
        return True

    def _coalesce(self, segs, i, j) -> None:
        n = i
        while n < j - 1 and n < len(segs) - 1:
            if self._same_state(segs[n], segs[n + 1]):
                segs[n][1] = segs[n + 1][1]
                del segs[n + 1]
                j -= 1
            else:
                n += 1
        while len(segs) > MAX_SEGMENTS:
            # Merge the narrowest adjacent pair (conservatively, see the module docstring).
            best = min(range(len(segs) - 1), key=lambda m: segs[m + 1][1] - segs[m][0])
            s, t = segs[best], segs[best + 1]
            writes: dict = {}
            reads: dict = {}
            for wk, wacc in s[2] + t[2]:
                cur = writes.get(wk[1])
                if cur is None or cur[0][0] < wk[0]:
                    writes[wk[1]] = (wk, wacc)
            for src in (s[3], t[3], writes):
                for P, e in src.items():
                    cur = reads.get(P)
                    if cur is None or cur[0][0] < e[0][0]:
                        reads[P] = e
            s[1] = t[1]
            s[2] = tuple(writes.values())
            s[3] = reads
            del segs[best + 1]

    # ------------------------------------------------------------------ record_stream & reuse

    def _uses(self, b) -> dict:
        """Latest use per stream other than the allocation stream: ``{P: (k, acc)}``."""
        A = b[_ASTREAM]
        bid = b[_BID]
        self._take_over(b)
        out = dict(b[_USES] or ())

        def put(pk, pacc):
            P = pk[1]
            if P != A:
                u = out.get(P)
                if u is None or u[0][0] < pk[0]:
                    out[P] = (pk, pacc)

        if b[_SEGS] is None:
            if b[_W] is not None:
                put(b[_W], ~bid)
            for pk in b[_R].values():
                put(pk, bid)
        else:
            for s in b[_SEGS]:
                for wk, wacc in s[2]:
                    put(wk, wacc)
                for pk, pacc in s[3].values():
                    put(pk, pacc)
        return out

    def _check_free(self, b, rec, ghost: bool) -> None:
        A = b[_ASTREAM]
        avec = self._cur.get(A, {})
        recorded = b[_RECORDED] or ()
        # The free as an access reference shaped like a kernel's (seq, stream, op, stack).
        free_k = (self.seq, A, _FREE_OP, rec[2]) if rec is not None else (self.seq, A, _LEAK_OP, None)
        for P, (pk, pacc) in self._uses(b).items():
            if P in recorded or avec.get(P, -1) >= pk[0]:
                continue
            self._report(_MISSING, free_k, ~b[_BID], pk, pacc, b)
            if ghost:
                self._add_ghost(b, pk, pacc)

    def _add_ghost(self, b, pk, pacc) -> None:
        ghosts = self._ghosts
        if len(ghosts) >= MAX_GHOSTS:
            self._prune_ghosts()
            if len(ghosts) >= MAX_GHOSTS:
                ghosts.popleft()
        ghosts.append((b[_PTR], b[_SIZE], pk, pacc))

    def _ordered_everywhere(self, pk) -> bool:
        P, p = pk[1], pk[0]
        return all(vec.get(P, -1) >= p for vec in self._cur.values())

    def _prune_ghosts(self) -> None:
        keep = [g for g in self._ghosts if not self._ordered_everywhere(g[2])]
        self._ghosts.clear()
        self._ghosts.extend(keep)

    def _attach_ghosts(self, b) -> None:
        ptr, size = b[_PTR], b[_SIZE]
        found = []
        stale = False
        for g in self._ghosts:
            gptr, gsize = g[0], g[1]
            if gsize is None and size is None:
                hit = gptr == ptr
            elif gsize is None:
                hit = ptr <= gptr < ptr + size
            elif size is None:
                hit = gptr <= ptr < gptr + gsize
            else:
                hit = gptr < ptr + size and ptr < gptr + gsize
            if hit:
                if self._ordered_everywhere(g[2]):
                    stale = True
                    continue
                found.append(g)
        if stale:
            self._prune_ghosts()
        if found:
            b[_GHOSTS] = found[-MAX_BLOCK_GHOSTS:]

    def _check_ghosts(self, b, S, vec, k, a) -> None:
        keep = []
        for g in b[_GHOSTS]:
            pk = g[2]
            if pk[1] != S and vec.get(pk[1], -1) < pk[0]:
                self._report(_REUSE, k, a, pk, g[3], b)
                continue  # reported once per re-allocated block
            if not self._ordered_everywhere(pk):
                keep.append(g)
        b[_GHOSTS] = keep or None

    # ------------------------------------------------------------------ findings

    def _report(self, kind, k, acc, pk, pacc, b) -> None:
        key = (kind, k[1], k[2], k[3], acc < 0 if acc.__class__ is int else acc[0] < 0,
               pk[1], pk[2], pk[3], pacc < 0 if pacc.__class__ is int else pacc[0] < 0)
        addr = b[_PTR]
        occ = self._occ.get(key)
        if occ is not None:
            occ.count += 1
            occ.last = k[0]
            if len(occ.addresses) < MAX_ADDRESSES and addr not in occ.addresses:
                occ.addresses.append(addr)
            if len(occ.occurrences) < MAX_OCCURRENCES:
                occ.occurrences.append((k[0], pk[0], addr))
            return
        if len(self._occ) >= MAX_FINDINGS:
            self.dropped += 1
            return
        occ = self._occ[key] = _Occurrences(
            kind, (k, acc), (pk, pacc), (addr, b[_SIZE], b[_ASTREAM], b[_ASTACK]), k[0], pk[0], addr
        )
        if self.on_finding is not None:
            occ.finding = self._build(occ)
            try:
                self.on_finding(occ.finding)
            except Exception as e:
                raise _CallbackError() from e

    def _stream_ref(self, S) -> StreamRef:
        dev, handle = self.symbols.streams.get(S, (-1, -1))
        return StreamRef(
            device=dev,
            handle=handle,
            index=S,
            is_default=(dev, handle) in self._default_streams,
            created_stack=self._frames(self._created_stack.get(S)),
            trace=self.trace_index,
        )

    def _frames(self, kid) -> tuple:
        try:
            return tuple(Frame(f, line, fn) for f, line, fn in self.symbols.frames_of(kid))
        except (KeyError, TypeError, ValueError):
            return ()

    def _access_info(self, k, acc) -> AccessInfo:
        seq, S, op, stack = k[0], k[1], k[2], k[3]
        if op.__class__ is str:  # a free or the end-of-trace leak check: host side, seq 0
            seq = 0
        else:
            op = self.symbols.string(op)
        if acc.__class__ is int:
            typ = "write" if acc < 0 else "read"
            off = n = None
        else:
            typ = "write" if acc[0] < 0 else "read"
            off, n = acc[1], acc[2]
        return AccessInfo(self._stream_ref(S), op, typ, seq, self._frames(stack), off, n)

    def _build(self, occ: _Occurrences) -> Finding:
        ptr, size, A, astack = occ.block
        block = BlockInfo(ptr, size, self._stream_ref(A) if A is not None else None, self._frames(astack))
        return Finding(
            kind=occ.kind,
            access=self._access_info(*occ.access),
            previous=self._access_info(*occ.previous),
            block=block,
            count=occ.count,
            addresses=list(occ.addresses),
            first_seq=occ.first,
            last_seq=occ.last,
            trace=self.trace_index,
            traces=[self.trace_index],
            occurrences=list(occ.occurrences),
        )


# ---------------------------------------------------------------------- helpers


def _merge(dst: dict, src: dict) -> None:
    for P, v in src.items():
        if dst.get(P, -1) < v:
            dst[P] = v


def _event_id(e):
    if e.__class__ is not int:
        raise RecordError(f"event id {e!r} is not an integer")
    return e


def _short(rec, limit: int = 80) -> str:
    text = repr(rec)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- the replay loop
#
# ``_run`` is generated once at import: the kernel path is written out for the common
# kernel shapes (1-4 accesses), because in CPython slicing and iterating ``rec[4:]`` costs
# more than the fast path itself. For each shape, every access's ownership key is looked up
# first (one ``try`` for all: an exception there, i.e. a range access or an id outside the
# arrays, sends all of them to the slow path, which handles anything), then each access is
# either one store (fast path) or a call of ``Engine._slow_access``. A slow path never
# changes the ownership of another block of the same kernel, so keys looked up first stay
# valid.

_SWITCH = """\
if S != lastS:
    if vec is not None:
        vec[lastS] = seq
    vec = cur.get(S)
    if vec is None:
        vec = eng._stream(S)
    lastS = S
seq += 1
"""

_SLOW = """\
vec[S] = seq
eng.seq = seq
slow(S, vec, k, {a})
"""

_RUN = """\
def _run(eng, records):
    K = KERNEL
    cur = eng._cur
    own = eng._own
    slot = eng._slot
    handlers = eng._handlers
    slow = eng._slow_access
    seq = seq0 = eng.seq
    other = 0
    rec = None
    # ``vec`` is current[lastS]; its own entry current[lastS][lastS] is brought up to date
    # lazily (on a stream switch, before any slow path or handler, at the end): nothing
    # reads it in between.
    lastS = None
    vec = None
    _len = len
    try:
        for rec in records:
            # Kernels of the common shapes first, by length (a non-kernel record of the
            # same length falls through to the general dispatch below).
            n = _len(rec)
{shapes}
            if rec[0] == K:
                S = rec[1]
{general}
            else:
                if vec is not None:
                    vec[lastS] = seq
                    vec = lastS = None
                other += 1
                h = handlers.get(rec[0])
                if h is not None:
                    eng.seq = seq
                    h(rec)
                elif rec[0] in DEFINITIONS:
                    other -= 1
                    eng.symbols.define(rec)
                    if rec[0] == BLOCK_DEF:
                        eng._forget_block(rec[1])
                elif rec[0].__class__ is not int or rec.__class__ is not list:
                    raise TypeError("a record is an array whose first element is an integer type")
                # else: a record type of a newer minor version (or NOTE/END): skipped
    except _CallbackError as e:
        raise e.__cause__ from None
    except TraceFormatError:
        raise
    except (TypeError, KeyError, IndexError, ValueError, AttributeError, OverflowError) as e:
        raise RecordError(eng._describe_bad(rec, e)) from None
    finally:
        if vec is not None:
            vec[lastS] = seq
        eng.seq = seq
        eng.events += other + (seq - seq0)
"""


# The direct loop: the same kernel paths, fed by the msgpack unpacker itself. A record
# that is not a list, or not a kernel, goes to ``absorb`` (the reader's checks) before the
# general dispatch. An exception raised on the ``for`` line comes from the source (corrupt
# msgpack, a failing file) and is passed on as SourceError; ``pending`` counts a kernel
# that failed in the stream switch, before ``seq`` was advanced for it.
_RUN_DIRECT = """\
def _run_direct(eng, source, absorb):
    K = KERNEL
    cur = eng._cur
    own = eng._own
    slot = eng._slot
    handlers = eng._handlers
    slow = eng._slow_access
    seq = seq0 = eng.seq
    other = 0
    pending = 0
    ended = False
    rec = S = None
    lastS = None
    vec = None
    _len = len
    list_ = list
    try:
        for rec in source:
            if rec.__class__ is list_:
                n = _len(rec)
{shapes}
                if n >= 4 and rec[0] == K:
                    S = rec[1]
{general}
                    continue
            if vec is not None:
                vec[lastS] = seq
                vec = lastS = None
            eng.seq = seq
            rec = absorb(rec, seq)
            if rec is None:
                continue
            if rec is False:
                ended = True
                break
            other += 1
            h = handlers.get(rec[0])
            if h is not None:
                h(rec)
            # else: a known record type the engine has nothing to do for (NOTE)
    except Exception as e:
        if e.__traceback__.tb_lineno == FOR_LINE:
            raise SourceError() from e
        if rec.__class__ is list_ and _len(rec) >= 4 and rec[0] == K and S != lastS:
            pending = 1  # a kernel whose stream switch failed
        if isinstance(e, _CallbackError):
            raise e.__cause__ from None
        if isinstance(e, TraceFormatError):
            raise
        if isinstance(e, (TypeError, KeyError, IndexError, ValueError, AttributeError, OverflowError)):
            raise RecordError(eng._describe_bad(rec, e)) from None
        raise
    finally:
        if vec is not None:
            vec[lastS] = seq
        eng.seq = seq
        eng.events += other + (seq - seq0)
        eng.direct_tail = (rec, seq + pending)
    return ended
"""


def _indent(text: str, n: int) -> str:
    return "".join((" " * n + line if line else line) + "\n" for line in text.splitlines())


def _shape(count: int) -> str:
    """The kernel path for records with ``count`` accesses."""
    names = [f"a{i}" for i in range(count)]
    keys = [f"x{i}" for i in range(count)]
    out = "t, S, o, st, " + ", ".join(names) + " = rec\n"
    out += "if t == K:\n"
    body = _SWITCH + "k = (seq, S, o, st)\n"
    body += "try:\n" + "".join(f"    {x} = own[{a}] - {a}\n" for a, x in zip(names, keys))
    body += "except (TypeError, IndexError):\n    " + " = ".join(keys) + " = -1\n"
    for a, x in zip(names, keys):
        body += f"if {x} == S:\n    slot[{a}] = k\nelse:\n" + _indent(_SLOW.format(a=a), 4)
    body += "continue\n"
    return out + _indent(body, 4)


# Any kernel (any number of accesses, ranges included): the stream switch, then each access.
_GENERAL = _SWITCH + """\
k = (seq, S, rec[2], rec[3])
for a in rec[4:]:
    try:
        x = own[a] - a
    except (TypeError, IndexError):
        x = -1
    if x == S:
        slot[a] = k
    else:
""" + _indent(_SLOW.format(a="a"), 8)

def _generate(template: str, func: str, depth: int, **env):
    """Compile one replay loop from its template; ``depth`` indents its kernel branches."""
    branches = []
    for i, count in enumerate((3, 2, 4, 1)):  # most frequent kernel shapes first
        branches.append(f"{'if' if i == 0 else 'elif'} n == {4 + count}:\n" + _indent(_shape(count), 4))
    src = template.format(
        shapes=_indent("".join(branches), depth).rstrip("\n"),
        general=_indent(_GENERAL, depth + 4).rstrip("\n"),
    )
    env.update(KERNEL=R.KERNEL, _CallbackError=_CallbackError, TraceFormatError=TraceFormatError,
               RecordError=RecordError)
    exec(compile(src, f"<npusan {func}>", "exec"), env)  # noqa: S102 - our own template
    return env[func], src


_run, _RUN_SOURCE = _generate(_RUN, "_run", 12, BLOCK_DEF=R.BLOCK_DEF, DEFINITIONS=R.DEFINITIONS)
_run_direct, _RUN_DIRECT_SOURCE = _generate(_RUN_DIRECT, "_run_direct", 16, SourceError=SourceError)
# The direct loop tells an error of its source (raised on the ``for`` line) from its own.
_run_direct.__globals__["FOR_LINE"] = _RUN_DIRECT_SOURCE.splitlines().index("        for rec in source:") + 1
