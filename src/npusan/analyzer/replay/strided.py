"""Strided accesses in the replay engine: what the engine must do, and the helpers it calls.

A strided access (a KERNEL access ``[a, offset, nbytes]`` refined by an entry of the VIEWS
record just before it, trace format 1.1) touches only the bytes of its
:class:`~npusan.trace_format.strided.Shape`, not its whole hull. The engine keeps the
per-block state it has for contiguous accesses (whole-block mode, or byte-range segments)
and, beside it, a short list of strided entries ``(access, shape)`` per block. The rules,
which any engine (the Python one, the compiled one) must follow to give the same answers:

1. **Pending views.** A VIEWS record maps each hull triple ``(a, offset, nbytes)`` to a
   shape (or to None: a hull fallback, nothing to refine) for the *next* kernel, i.e. the
   kernel whose sequence number is the current one plus one (:func:`parse_views`). A range
   access of that kernel equal to a triple with a shape is strided; every other access,
   and every access of any other kernel, is what the KERNEL record says.
2. **A strided access X** (stream S) is checked, with the usual rules (a read against
   writes, a write against the reads since the last write, or that write if there were
   none; other streams only; unordered only), against:
   * each contiguous piece of state its hull meets -- the whole block in whole mode, or
     each segment ``[lo, hi)`` that X really shares a byte with
     (:func:`~npusan.analyzer.replay.overlap.overlaps_range`) -- *without changing it*: X does not
     overwrite the bytes between its elements, so it can neither split nor replace a
     segment;
   * each strided entry of the block (:func:`conflicts`), compared byte-exactly.
   Then entries X makes redundant are dropped (:func:`prune`: a write drops entries whose
   bytes it covers, a read drops earlier reads of its own stream it covers), and X is
   appended to the list. X counts as a use of the block for the missing-record_stream
   check like any access.
3. **A contiguous access** (whole block or range) is handled as before and then checked
   against the strided entries too (:func:`conflicts`, :func:`prune`; a whole-block
   access covers every entry).
4. **Bounded state.** At most :data:`MAX_VIEWS` entries per block. When the list is full,
   the oldest entry is merged into the segments over its hull *conservatively*: in every
   segment of its hull it joins the writes (if a write) and the reads, and the segment's
   writes join its reads too, keeping the latest entry per stream (a stream's older entry
   is ordered before its newer one, so the newer one catches every race the older could).
   The writes must join the reads because a later write checks a segment's reads when it
   has any, and only its writes otherwise: the merged entry, now among the reads, would
   hide the writes from the bytes it never touched (between its elements) and from those
   a write after it overwrote. Later accesses then see it wherever its hull reaches: this
   can add a report, never lose one.
5. The entries vanish with the block (at its free or re-allocation).

Each comparison reported for one access names each earlier kernel once, as the range rules
do. The overlap tests of one trace share one :class:`~npusan.analyzer.replay.overlap.Budget`.

Why keeping overwritten state cannot lose or invent races in a correct program: a later
access ordered after the newer write is, by the transitivity of the sync vectors, ordered
after everything that write was ordered after; the older entries only produce a report
when the trace already races on those bytes.
"""

from __future__ import annotations

from typing import Iterator, Optional

from ...trace_format.strided import Shape, parse_entry
from .overlap import Budget, covers, overlaps

#: Strided entries kept per block before the oldest is merged into the segments.
MAX_VIEWS = 16


def parse_views(rec: list) -> dict:
    """``{(a, offset, nbytes): Shape or None}`` of a VIEWS record; ValueError if malformed.

    A triple given twice is malformed: the record could not say which shape is meant.
    """
    out: dict = {}
    for e in rec[1:]:
        key, shape = parse_entry(e)
        if key in out:
            raise ValueError(f"the views record describes access {list(key)} twice")
        out[key] = shape
    return out


def conflicts(views: list, S: int, vec: dict, shape: Optional[Shape], write: bool, budget: Budget) -> Iterator:
    """Earlier accesses among ``views`` (``(access, shape)`` entries) racing with an access.

    Other streams only, not ordered before stream S (its state ``vec``), sharing a byte
    with ``shape`` (None: the whole block); a read races with writes, a write with all.
    """
    for earlier, their in views:
        if earlier.stream == S or vec.get(earlier.stream, -1) >= earlier.seq:
            continue
        if not write and not earlier.write:
            continue  # read after read
        if shape is None or overlaps(shape, their, budget):
            yield earlier


def prune(views: list, S: int, shape: Optional[Shape], write: bool, budget: Budget) -> None:
    """Drop the entries the access makes redundant (see the module docstring)."""
    keep = [e for e in views
            if not ((write or (e[0].stream == S and not e[0].write)) and covers(shape, e[1], budget))]
    if len(keep) < len(views):
        views[:] = keep
