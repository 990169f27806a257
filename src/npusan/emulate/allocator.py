"""A model of CUDA's caching allocator over a virtual address space (pure Python).

Why a model and not ``malloc``: a reuse race shows only when a freed block is handed to
new work while an old use may still run. The model decides exactly as
``c10/cuda/CUDACachingAllocator.cpp`` does which block a request gets, and addresses are
virtual and deterministic, so a program with such a race shows it on every run.

The rules (from the allocator's source):

* sizes round up to 512 B; requests up to 1 MiB come from the small pool (2 MiB
  segments), larger ones from the large pool (20 MiB segments below 10 MiB; at or above,
  a segment of the request rounded up to 2 MiB);
* a request takes the smallest free block of its pool *on the same stream* that fits;
  the block is split when the remainder is at least 512 B (small pool) or over 1 MiB
  (large pool); a freed block merges with free neighbours in its segment and is handed
  to the next request on its stream at once;
* ``record_stream(s)`` adds ``s`` to the block's stream uses; freeing such a block records
  an event on each of those streams, and the block returns to its pool only when all of
  them have completed (checked at the next allocation, as CUDA does);
* ``empty_cache`` releases segments that are wholly free.

When an event counts as complete: the emulator runs every op at once on the CPU, so
"the GPU finished" has no meaning of its own. An event recorded by the allocator counts
as complete only once the *host* is ordered after it -- a device synchronize, a
synchronize of its stream, or a synchronize of a user event recorded on that stream
after it (:meth:`CachingAllocator.host_observed`). That is what a real run guarantees at
the latest; a block is never handed out earlier than a GPU could hand it out, so a
correct program never looks racy (it may hold blocks longer than a GPU would: only the
addresses differ, never the verdict).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

ROUND = 512
SMALL_SIZE = 1 << 20            # requests up to this come from the small pool
SMALL_BUFFER = 2 << 20          # small-pool segment
LARGE_BUFFER = 20 << 20         # large-pool segment for requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
#: First virtual address handed out (segments are 2 MiB aligned from here).
BASE = 0x7F0000000000


def round_size(size: int, pad: int = 0) -> int:
    """The size a request is served with (512-byte multiples; at least 512). ``pad``
    bytes are added first: torch_npu's allocator adds 32 (see :class:`CachingAllocator`)."""
    size += pad
    if size < ROUND:
        return ROUND
    return (size + ROUND - 1) // ROUND * ROUND


def segment_size(rounded: int) -> int:
    """The size of the segment allocated for a request that no free block fits."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


@dataclass(eq=False)
class Block:
    ptr: int
    size: int
    stream: int
    small: bool
    segment: int                     # base address of the segment holding the block
    allocated: bool = False
    requested: int = 0
    prev: Optional["Block"] = None
    next: Optional["Block"] = None
    stream_uses: Set[int] = field(default_factory=set)
    events: List[Tuple[int, int]] = field(default_factory=list)  # (stream, position) pending


#: What torch_npu's ``NPUCachingAllocator`` adds to each request before rounding (its
#: ``round_size`` is ``size + 32`` rounded up to 512 B); its other rules are CUDA's.
NPU_PAD = 32


class CachingAllocator:
    """One device's allocator. Streams are opaque ints (the emulator's raw handles).

    ``pad``: bytes added to each request before rounding -- 0 for CUDA, :data:`NPU_PAD`
    for torch_npu's allocator (same pools, segment sizes, best fit, split and merge rules
    and stream-use events as CUDA's; only the rounding differs)."""

    def __init__(self, base: int = BASE, pad: int = 0) -> None:
        self.pad = pad
        self._next_base = base
        self._blocks: Dict[int, Block] = {}            # ptr -> allocated (or pending) block
        self._free: Dict[Tuple[bool, int], List[Tuple[int, int]]] = {}  # (small, stream) -> sorted (size, ptr)
        self._free_blocks: Dict[int, Block] = {}        # ptr -> free block
        self._segments: Dict[int, Tuple[int, bool, int]] = {}  # base -> (size, small, stream)
        self._pending: List[Block] = []
        self._stream_pos: Dict[int, int] = {}          # events recorded per stream so far
        self._host_pos: Dict[int, int] = {}            # the host is ordered after these
        self.allocated_bytes = 0
        self.peak_allocated = 0
        self.reserved_bytes = 0
        self.peak_reserved = 0
        self.num_allocs = 0
        self.num_frees = 0

    # -- events ---------------------------------------------------------------------
    def position(self, stream: int) -> int:
        """How many allocator events were recorded on ``stream`` so far (a user event
        recorded now covers them all)."""
        return self._stream_pos.get(stream, 0)

    def host_observed(self, stream: int, position: Optional[int] = None) -> None:
        """The host is now ordered after ``stream``'s events up to ``position`` (all by
        default): a stream or device synchronize, or an event synchronize."""
        pos = self._stream_pos.get(stream, 0) if position is None else position
        if pos > self._host_pos.get(stream, 0):
            self._host_pos[stream] = pos

    def host_observed_all(self) -> None:
        for s in list(self._stream_pos):
            self.host_observed(s)

    def _complete(self, ev: Tuple[int, int]) -> bool:
        return self._host_pos.get(ev[0], 0) >= ev[1]

    def _process_events(self) -> None:
        if not self._pending:
            return
        still = []
        for b in self._pending:
            if all(self._complete(e) for e in b.events):
                b.events = []
                self._release(b)
            else:
                still.append(b)
        self._pending = still

    # -- allocation -----------------------------------------------------------------
    def malloc(self, size: int, stream: int) -> int:
        """A block of at least ``size`` bytes for use on ``stream``; returns its address."""
        self._process_events()
        rounded = round_size(size, self.pad)
        small = rounded <= SMALL_SIZE
        b = self._best_fit(small, stream, rounded)
        if b is None:
            b = self._new_segment(small, stream, segment_size(rounded))
        remaining = b.size - rounded
        if (remaining >= ROUND) if small else (remaining > SMALL_SIZE):
            rest = Block(b.ptr + rounded, remaining, stream, small, b.segment, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = rounded
            self._insert_free(rest)
        b.allocated = True
        b.requested = size
        self._blocks[b.ptr] = b
        self.allocated_bytes += b.size
        self.peak_allocated = max(self.peak_allocated, self.allocated_bytes)
        self.num_allocs += 1
        return b.ptr

    def _best_fit(self, small: bool, stream: int, rounded: int) -> Optional[Block]:
        lst = self._free.get((small, stream))
        if not lst:
            return None
        i = bisect.bisect_left(lst, (rounded, -1))
        if i == len(lst):
            return None
        _, ptr = lst.pop(i)
        return self._free_blocks.pop(ptr)

    def _new_segment(self, small: bool, stream: int, size: int) -> Block:
        base = self._next_base
        self._next_base += (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
        self._segments[base] = (size, small, stream)
        self.reserved_bytes += size
        self.peak_reserved = max(self.peak_reserved, self.reserved_bytes)
        return Block(base, size, stream, small, base)

    def _insert_free(self, b: Block) -> None:
        b.allocated = False
        self._free_blocks[b.ptr] = b
        bisect.insort(self._free.setdefault((b.small, b.stream), []), (b.size, b.ptr))

    def _remove_free(self, b: Block) -> None:
        self._free_blocks.pop(b.ptr, None)
        lst = self._free[(b.small, b.stream)]
        lst.pop(bisect.bisect_left(lst, (b.size, b.ptr)))

    # -- free -----------------------------------------------------------------------
    def record_stream(self, ptr: int, stream: int) -> None:
        """``record_stream``: the block at ``ptr`` is in use on ``stream`` too."""
        b = self._blocks.get(ptr)
        if b is None:
            raise KeyError(f"record_stream: no allocated block at {ptr:#x}")
        if stream != b.stream:
            b.stream_uses.add(stream)

    def block_of(self, ptr: int) -> Optional[Block]:
        return self._blocks.get(ptr)

    def free(self, ptr: int) -> None:
        """The block at ``ptr`` is no longer used by the program."""
        b = self._blocks.get(ptr)
        if b is None or b.events:
            raise KeyError(f"free: no allocated block at {ptr:#x}")
        self.allocated_bytes -= b.size
        self.num_frees += 1
        if b.stream_uses:
            for s in sorted(b.stream_uses):
                pos = self._stream_pos.get(s, 0) + 1
                self._stream_pos[s] = pos
                b.events.append((s, pos))
            b.stream_uses = set()
            self._pending.append(b)
        else:
            self._release(b)

    def _release(self, b: Block) -> None:
        del self._blocks[b.ptr]
        for nb in (b.prev, b.next):
            if nb is not None and not nb.allocated and nb.ptr in self._free_blocks:
                self._remove_free(nb)
                if nb is b.prev:
                    nb.size += b.size
                    nb.next = b.next
                    if b.next is not None:
                        b.next.prev = nb
                    b = nb
                else:
                    b.size += nb.size
                    b.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = b
        self._insert_free(b)

    def empty_cache(self) -> int:
        """Release every wholly free segment; returns the bytes released."""
        self._process_events()
        released = 0
        for base, (size, _small, _stream) in list(self._segments.items()):
            b = self._free_blocks.get(base)
            if b is not None and b.prev is None and b.next is None and b.size == size:
                self._remove_free(b)
                del self._segments[base]
                released += size
        self.reserved_bytes -= released
        return released

    def pending(self) -> int:
        """Freed blocks still waiting for their stream-use events."""
        return len(self._pending)
