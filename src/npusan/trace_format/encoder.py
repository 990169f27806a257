"""Interning and record construction shared by every producer of trace records.

:class:`RecordEncoder` turns calls such as "kernel on stream (device 0, handle 0x7f..)
reading pointer P" into the compact records of :mod:`npusan.trace_format.records`,
emitting each definition (string, frame, stack, stream, block) just before its first use.
It writes nothing itself: it hands every record to ``sink`` (a callable taking one list),
which is a file packer for :class:`~npusan.trace_format.writer.TraceWriter` and the
analyzer's engine for online mode. It is not thread-safe; callers serialize.
"""

from __future__ import annotations

import bisect
import heapq
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence, Tuple, Union

from . import records as R
from .strided import MAX_DIMS, Strided, entry, normalize

if TYPE_CHECKING:
    from .sourcelines import SourceLines

_bisect_left = bisect.bisect_left
_insort = bisect.insort
_heappop = heapq.heappop
_EVENT_CREATED = R.EVENT_CREATED
_EVENT_DELETED = R.EVENT_DELETED
_EVENT_RECORD = R.EVENT_RECORD
_EVENT_WAIT = R.EVENT_WAIT
_ALLOC = R.ALLOC
_FREE = R.FREE

Frame = Tuple[str, int, str]
Sink = Callable[[list], None]
#: An access as TraceWriter accepts it: a pointer (whole block), ``(ptr, nbytes)`` or a
#: :class:`~npusan.trace_format.strided.Strided` view.
PointerAccess = Union[int, Tuple[int, int], Strided]


class RecordEncoder:
    """Assigns small ids to strings, frames, stacks, streams and blocks; emits records."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._strings: dict[str, int] = {}
        self._frames: dict[Frame, int] = {}
        self._stacks: dict[tuple, int] = {}
        self._streams: dict[tuple[int, int], int] = {}
        # Live blocks: base pointer -> [bid, size or None]; bases kept sorted for lookups
        # of interior pointers.
        self._blocks: dict[int, list] = {}
        self._bases: list[int] = []
        self._free_bids: list[int] = []
        self._next_bid = 0
        self.counts: dict[int, int] = {}
        #: Set (to a :class:`~npusan.trace_format.sourcelines.SourceLines`) to store each
        #: frame's source line text and source root in its FRAME record.
        self.source_lines: Optional[SourceLines] = None

    # -- interning -------------------------------------------------------------------

    def string(self, text: str) -> int:
        sid = self._strings.get(text)
        if sid is None:
            sid = self._strings[text] = len(self._strings)
            self.sink([R.STR, sid, text])
        return sid

    def frame(self, filename: str, lineno: int, function: str) -> int:
        key = (filename, lineno, function)
        fid = self._frames.get(key)
        if fid is None:
            f, fn = self.string(filename), self.string(function)
            fid = self._frames[key] = len(self._frames)
            text = root = None
            if self.source_lines is not None:  # format 1.1: the line's text, the file's root
                text, root = self.source_lines.lookup(filename, int(lineno))
            if text is None and root is None:
                self.sink([R.FRAME, fid, f, int(lineno), fn])
            else:
                self.sink([R.FRAME, fid, f, int(lineno), fn, text, None if root is None else self.string(root)])
        return fid

    def stack(self, frames: Optional[Iterable[Sequence]]) -> Optional[int]:
        """Intern a stack given as ``(filename, lineno, function)`` items, outermost first."""
        if frames is None:
            return None
        fids = tuple(self.frame(f[0], f[1], f[2]) for f in frames)
        kid = self._stacks.get(fids)
        if kid is None:
            kid = self._stacks[fids] = len(self._stacks)
            self.sink([R.STACK, kid, list(fids)])
        return kid

    def stream(self, handle: int, device: int = 0) -> int:
        key = (device, handle)
        sidx = self._streams.get(key)
        if sidx is None:
            sidx = self._streams[key] = len(self._streams)
            self.sink([R.STREAM_DEF, sidx, device, handle])
            if device == R.HOST_DEVICE:  # (1.2) the host's own accesses: reports call it "the host"
                self.sink([R.STREAM_LABEL, sidx, R.ROLE_HOST, "host"])
        return sidx

    def stream_label(self, handle: int, role: str, label: str, device: int = 0, stack: Optional[int] = None) -> None:
        """Say what a stream is for (format 1.1): ``role`` ``"comm"`` and ``label``
        ``"comm stream of process group 0"`` for a process group's communication stream."""
        self.sink([R.STREAM_LABEL, self.stream(handle, device), str(role), str(label)])

    def thread(self, tid: int, name: str) -> None:
        self.sink([R.THREAD, tid, name])

    def _new_bid(self) -> int:
        if self._free_bids:
            return heapq.heappop(self._free_bids)
        bid = self._next_bid
        self._next_bid += 1
        return bid

    def _insert_block(self, ptr: int, size: Optional[int]) -> int:
        bid = self._new_bid()
        # [bid, size, extent]: for a block of unknown size, ``extent`` is how far past the
        # base accesses have reached, so later interior pointers map to the same block.
        self._blocks[ptr] = [bid, size, 1]
        bisect.insort(self._bases, ptr)
        return bid

    def block(self, ptr: int) -> tuple[int, int]:
        """``(bid, base)`` of the live block containing ``ptr``; defines one if none does.

        A pointer inside no known block (memory allocated before recording began) becomes
        a block of unknown size based at ``ptr`` (a BLOCK_DEF record); it grows to cover
        the byte ranges later accessed through it.
        """
        entry = self._blocks.get(ptr)
        if entry is not None:
            return entry[0], ptr
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0:
            base = self._bases[i]
            bid, size, extent = self._blocks[base]
            if ptr < base + (extent if size is None else size):
                return bid, base
        bid = self._insert_block(ptr, None)
        self.sink([R.BLOCK_DEF, bid, ptr, None])
        return bid, ptr

    def host_block(self, ptr: int, size: int, stack: Optional[int] = None) -> None:
        """Pinned host memory a stream is about to access: a BLOCK_DEF of its known size
        (the host allocator reports no allocation). Memory already in a block stays there."""
        if self._blocks.get(ptr) is not None:
            return
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i >= 0:
            base = self._bases[i]
            _, bsize, extent = self._blocks[base]
            if ptr < base + (extent if bsize is None else bsize):
                return
        size = int(size) if size and size > 0 else None
        bid = self._insert_block(ptr, size)
        self.sink([R.BLOCK_DEF, bid, ptr, size])

    def _forget_unknown_blocks(self, start: int, end: int) -> None:
        """Stop mapping pointers in ``[start, end)`` to blocks of unknown size.

        A new allocation there means that memory now belongs to it. The old ids are not
        recycled: the analyzer may still hold state for them.
        """
        lo = bisect.bisect_left(self._bases, start)
        hi = bisect.bisect_left(self._bases, end)
        for base in [b for b in self._bases[lo:hi] if self._blocks[b][1] is None]:
            del self._blocks[base]
            self._bases.remove(base)

    # -- records ---------------------------------------------------------------------

    def _emit(self, rec: list) -> None:
        t = rec[0]
        self.counts[t] = self.counts.get(t, 0) + 1
        self.sink(rec)

    def stream_created(self, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        self._emit([R.STREAM_CREATED, self.stream(handle, device), stack])

    # The event, allocation and free records are as frequent as kernels: _emit, stream()
    # and the block table's helpers are inlined (the same records as calling them).

    def event_created(self, event: int, stack: Optional[int] = None) -> None:
        counts = self.counts
        counts[_EVENT_CREATED] = counts.get(_EVENT_CREATED, 0) + 1
        self.sink([_EVENT_CREATED, event, stack])

    def event_deleted(self, event: int, stack: Optional[int] = None) -> None:
        counts = self.counts
        counts[_EVENT_DELETED] = counts.get(_EVENT_DELETED, 0) + 1
        self.sink([_EVENT_DELETED, event, stack])

    def event_recorded(self, event: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        sidx = self._streams.get((device, handle))
        if sidx is None:
            sidx = self.stream(handle, device)
        counts = self.counts
        counts[_EVENT_RECORD] = counts.get(_EVENT_RECORD, 0) + 1
        self.sink([_EVENT_RECORD, event, sidx, stack])

    def event_waited(self, event: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        sidx = self._streams.get((device, handle))
        if sidx is None:
            sidx = self.stream(handle, device)
        counts = self.counts
        counts[_EVENT_WAIT] = counts.get(_EVENT_WAIT, 0) + 1
        self.sink([_EVENT_WAIT, event, sidx, stack])

    def graph_begin(self, graph: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        """(1.3) Capture of graph ``graph`` begins on stream ``(device, handle)``."""
        self._emit([R.GRAPH_BEGIN, graph, self.stream(handle, device), stack])

    def graph_end(self, graph: int, stack: Optional[int] = None) -> None:
        """(1.3) The capture of graph ``graph`` ends (the record has no stack)."""
        self._emit([R.GRAPH_END, graph])

    def graph_launch(self, graph: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        """(1.3) Graph ``graph`` is replayed on stream ``(device, handle)``: one record, however
        many kernels it holds."""
        self._emit([R.GRAPH_LAUNCH, graph, self.stream(handle, device), stack])

    def event_synchronized(self, event: int, stack: Optional[int] = None) -> None:
        self._emit([R.EVENT_SYNC, event, stack])

    def stream_synchronized(self, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        self._emit([R.STREAM_SYNC, self.stream(handle, device), stack])

    def device_synchronized(self, device: Optional[int] = None, stack: Optional[int] = None) -> None:
        self._emit([R.DEVICE_SYNC, device, stack])

    def memory_allocated(
        self, ptr: int, handle: int, device: int = 0, size: Optional[int] = None, stack: Optional[int] = None
    ) -> None:
        blocks = self._blocks
        if ptr in blocks:  # allocation at a live base: the free was not seen
            self._drop_block(ptr)
        bases = self._bases
        if size:
            i = _bisect_left(bases, ptr)
            if i < len(bases) and bases[i] < ptr + size:  # known bases inside: forget unknown ones
                self._forget_unknown_blocks(ptr, ptr + size)
        sidx = self._streams.get((device, handle))
        if sidx is None:
            sidx = self.stream(handle, device)
        # _insert_block, inlined
        free = self._free_bids
        if free:
            bid = _heappop(free)
        else:
            bid = self._next_bid
            self._next_bid = bid + 1
        blocks[ptr] = [bid, size, 1]
        _insort(bases, ptr)
        counts = self.counts
        counts[_ALLOC] = counts.get(_ALLOC, 0) + 1
        self.sink([_ALLOC, bid, ptr, size, sidx, stack])

    def _drop_block(self, ptr: int) -> int:
        bid = self._blocks.pop(ptr)[0]
        i = bisect.bisect_left(self._bases, ptr)
        del self._bases[i]
        heapq.heappush(self._free_bids, bid)
        return bid

    def memory_freed(self, ptr: int, stack: Optional[int] = None) -> None:
        entry = self._blocks.pop(ptr, None)
        if entry is None:
            return  # allocated before recording began: nothing is known about it
        # _drop_block, inlined
        bid = entry[0]
        bases = self._bases
        del bases[_bisect_left(bases, ptr)]
        heapq.heappush(self._free_bids, bid)
        counts = self.counts
        counts[_FREE] = counts.get(_FREE, 0) + 1
        self.sink([_FREE, bid, stack])

    def set_block_size(self, ptr: int, size: int) -> None:
        """Remember the size of a live block whose allocation did not say (no record)."""
        entry = self._blocks.get(ptr)
        if entry is not None and entry[1] is None:
            entry[1] = size

    def record_stream(self, ptr: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        bid, _ = self.block(ptr)
        self._emit([R.RECORD_STREAM, bid, self.stream(handle, device), stack])

    def erase_stream(self, ptr: int, handle: int, device: int = 0, stack: Optional[int] = None) -> None:
        bid, _ = self.block(ptr)
        self._emit([R.ERASE_STREAM, bid, self.stream(handle, device), stack])

    def _access(self, p: PointerAccess, write: bool, views: list):
        if isinstance(p, int):
            bid, _ = self.block(p)
            return ~bid if write else bid
        if isinstance(p, Strided):
            return self._strided(p, write, views)
        ptr, nbytes = p
        bid, base = self.block(ptr)
        return self._in_block(bid, base, ptr, nbytes, write)

    def _in_block(self, bid: int, base: int, ptr: int, nbytes: int, write: bool):
        """The access to ``[ptr, ptr + nbytes)`` of block ``bid`` (based at ``base``)."""
        a = ~bid if write else bid
        entry = self._blocks[base]
        size = entry[1]
        if size is None:
            entry[2] = max(entry[2], ptr - base + nbytes)
        elif ptr == base and nbytes >= size:
            return a
        return [a, ptr - base, int(nbytes)]

    def _ranges(self, ptr: int, nbytes: int, write: bool, rec: list) -> None:
        """The accesses of the bytes ``[ptr, ptr + nbytes)``, one per block they fall in.

        A range that runs past the end of a block of known size goes on into the memory
        after it (the next block, or memory from before recording, which becomes a block of
        unknown size): a writer that hands over raw pointer ranges must not lose the bytes
        past the first block, where another stream's access would then go unseen.
        """
        while True:
            bid, base = self.block(ptr)
            size = self._blocks[base][1]
            inside = nbytes if size is None else min(nbytes, base + size - ptr)
            if inside <= 0 or inside == nbytes:
                rec.append(self._in_block(bid, base, ptr, nbytes, write))
                return
            rec.append(self._in_block(bid, base, ptr, inside, write))
            ptr, nbytes = ptr + inside, nbytes - inside

    def _strided(self, p: Strided, write: bool, views: list):
        """A view's access: its exact range, or its hull plus a views entry (see strided.py)."""
        shape = normalize(0, p.sizes, p.strides, p.itemsize)
        if shape is None:
            return None  # no elements: no access
        start = p.ptr + shape.lo
        nbytes = shape.hi - shape.lo
        if not shape.dims:
            return self._access((start, nbytes), write, views)
        return self.storage_access(start, 0, nbytes, -1, write, (shape.run, shape.dims), views)

    def storage_access(
        self,
        base: int,
        offset: int,
        nbytes: int,
        storage_nbytes: int,
        write: bool,
        view: Optional[tuple] = None,
        views: Optional[list] = None,
    ):
        """Encode an access to ``[offset, offset + nbytes)`` of the storage based at ``base``.

        What a recorder knows of a tensor view: its storage's base pointer and size and the
        byte range the view can touch. Covering the whole storage encodes as the whole block.
        ``view``: None for a contiguous range; for a strided view, ``(run, dims)`` of its
        shape (:func:`~npusan.trace_format.strided.normalize`; the range is then its hull),
        whose VIEWS entry is appended to ``views`` (a hull fallback entry when it has more
        than MAX_DIMS dims).
        """
        bid, b0 = self.block(base)
        a = ~bid if write else bid
        offset += base - b0
        entry = self._blocks[b0]
        if entry[1] is None and offset + nbytes > entry[2]:
            entry[2] = offset + nbytes
        if view is None:
            if offset == 0 and nbytes >= storage_nbytes:
                return a
        else:
            views.append(view_entry(a, offset, nbytes, view))
        return [a, offset, nbytes]

    def views(self, entries: list, rec: list) -> None:
        """Emit the VIEWS record of kernel record ``rec`` (just before emitting ``rec``).

        ``entries`` as :func:`view_entry` makes them, one per strided access of ``rec``. An
        entry refines every access equal to its triple, so a triple shared by accesses
        whose bytes differ (two different views, or a view and a plain range with the same
        hull) falls back to its hull.
        """
        seen: dict = {}
        n: dict = {}
        for e in entries:
            key = (e[0], e[1], e[2])
            n[key] = n.get(key, 0) + 1
            old = seen.get(key)
            seen[key] = e if old is None or old == e else e[:3]
        if len(rec) > 5 or len(entries) > 1:
            for acc in rec[4:]:
                if acc.__class__ is list:
                    key = (acc[0], acc[1], acc[2])
                    if key in n:
                        n[key] -= 1
            for key, left in n.items():
                if left < 0:  # a plain range with the same triple
                    seen[key] = list(key)
        self._emit([R.VIEWS, *seen.values()])

    def kernel(
        self,
        handle: int,
        op: str,
        reads: Iterable[PointerAccess] = (),
        writes: Iterable[PointerAccess] = (),
        device: int = 0,
        stack: Optional[int] = None,
    ) -> None:
        """A kernel on a stream; reads/writes are pointers, ``(ptr, nbytes)`` pairs or Strided views."""
        rec = [R.KERNEL, self.stream(handle, device), self.string(op), stack]
        views: list = []
        for group, write in ((reads, False), (writes, True)):
            for p in group:
                if not isinstance(p, (int, Strided)):  # (ptr, nbytes): maybe over several blocks
                    ptr, nbytes = p
                    if nbytes:  # (an empty range touches nothing: no access, as for an empty view)
                        self._ranges(ptr, nbytes, write, rec)
                    continue
                acc = self._access(p, write, views)
                if acc is not None:
                    rec.append(acc)
        if views:
            self.views(views, rec)
        self._emit(rec)

    def host_access(
        self,
        op: str,
        reads: Iterable[PointerAccess] = (),
        writes: Iterable[PointerAccess] = (),
        stack: Optional[int] = None,
    ) -> None:
        """The host's access of pinned memory (format 1.2), on the host stream: a HOST_ACCESS
        record with a kernel's layout. A strided view is written as its hull (no VIEWS
        record precedes a host access: a 1.1 reader, which skips the host access, would
        apply it to the next kernel)."""
        rec = [R.HOST_ACCESS, self.stream(0, R.HOST_DEVICE), self.string(op), stack]
        for group, write in ((reads, False), (writes, True)):
            for p in group:
                if not isinstance(p, (int, Strided)):
                    ptr, nbytes = p
                    if nbytes:
                        self._ranges(ptr, nbytes, write, rec)
                    continue
                acc = self._access(p, write, [])
                if acc is not None:
                    rec.append(acc)
        self._emit(rec)

    def kernel_blocks(self, sidx: int, op_sid: int, accesses: list, stack: Optional[int] = None) -> None:
        """Fast path for producers that already hold stream indexes and encoded accesses."""
        rec = [R.KERNEL, sidx, op_sid, stack]
        rec.extend(accesses)
        self._emit(rec)

    def note(self, level: str, text: str) -> None:
        self._emit([R.NOTE, level, text])

    def end(self, stats: Optional[dict] = None) -> None:
        self.sink([R.END, dict(stats or {})])


def view_entry(a: int, offset: int, nbytes: int, view: tuple) -> list:
    """The VIEWS entry of access ``[a, offset, nbytes]``: ``view`` is ``(run, dims)``.

    A view with more than MAX_DIMS dims gets the hull fallback entry ``[a, offset, nbytes]``.
    """
    run, dims = view
    if len(dims) > MAX_DIMS:
        return [a, offset, nbytes]
    return entry(a, offset, run, dims)
