"""The host as a party of the ordering: pinned host memory that streams copy from or to.

On a GPU a ``non_blocking=True`` copy between device memory and *pinned* host memory runs
on a stream, after the host has moved on: a program that rewrites the pinned buffer on the
host (``buf.copy_(next_batch)``, ``buf[:] = ...``) before the previous step's copy from it
ran, or reads a non-blocking device-to-host copy's result without synchronizing first,
races with the copy. So the recorder records two kinds of access of pinned memory:

* an op that also touches device memory (the copy) accesses the pinned memory on the
  stream that runs it: an access in its KERNEL record, and the storage becomes *watched*;
* an op that touches no device memory but a watched pinned storage is the host's access:
  a HOST_ACCESS record (format 1.2), which the analyzer orders by the host's
  synchronizations (docs/semantics.md, "The host").

Only pinned memory a stream has touched can race with a stream, so host ops on any other
CPU memory -- pageable tensors, pinned buffers never copied asynchronously -- are never
recorded, and cost one dictionary look-up per tensor while some pinned storage is watched
(nothing before). A storage stays watched until it dies.

Host accesses made outside torch ops (through a ``.numpy()`` view or a raw pointer) are
seen only by the page-fault watch (:mod:`.host_faults`, ``NPUSAN_HOST_FAULTS=1``); without
it the trace header's ``host_accesses`` says so (``"torch ops"``).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from .access import view_of

#: Copy ops whose ``non_blocking`` argument says whether the host waits for the copy.
COPY_OPS = {"aten::copy_": 2, "aten::_to_copy": None}


class HostWatch:
    """The watched pinned storages of one recording, and how to tell pinned memory.

    ``is_pinned(t)``: whether a tensor that is not device memory lies in pinned host
    memory (asked only of tensors of an op that also touches device memory).
    """

    def __init__(self, is_pinned: Callable[[Any], bool]) -> None:
        self.is_pinned = is_pinned
        self.watched: Dict[int, weakref.ref] = {}  # storage base -> its storage
        #: ``(base, nbytes)`` of the storages watched since the caller last took them: the
        #: trace defines each as a block of that size (the host allocator reports nothing).
        self.fresh: List[Tuple[int, int]] = []

    def copied(self, tensors: List[Tuple[Any, bool]]) -> List[Tuple[Any, bool]]:
        """The pinned ones among the non-device tensors of a device op; they become watched."""
        out = []
        for t, w in tensors:
            try:
                if not self.is_pinned(t):
                    continue
                st = t.untyped_storage()
                base = st.data_ptr()
            except RuntimeError:
                continue
            if not base:
                continue
            ref = self.watched.get(base)
            if ref is None or ref() is not st:
                self.watched[base] = weakref.ref(st, self._forget(base))
                self.fresh.append((base, st.nbytes()))
            out.append((t, w))
        return out

    def _forget(self, base: int) -> Callable[[weakref.ref], None]:
        watched = self.watched

        def died(ref: weakref.ref) -> None:
            if watched.get(base) is ref:
                del watched[base]

        return died

    def host_side(self, tensors: List[Tuple[Any, bool]]) -> List[Tuple[Any, bool]]:
        """The watched ones among the tensors of an op that touches no device memory."""
        watched = self.watched
        if not watched:
            return []
        out = []
        for t, w in tensors:
            try:
                st = t.untyped_storage()
            except RuntimeError:
                continue
            ref = watched.get(st.data_ptr())
            if ref is not None and ref() is st:
                out.append((t, w))
        return out


def blocking_copy(name: str, args: tuple, kwargs: Optional[dict]) -> bool:
    """Whether op ``name`` is a copy that the host waits for (``non_blocking=False``)."""
    if name not in COPY_OPS:
        return False
    pos = COPY_OPS[name]
    nb = (kwargs or {}).get("non_blocking")
    if nb is None and pos is not None and len(args) > pos:
        nb = args[pos]
    return not nb


def extent(t: Any) -> Optional[Tuple[Any, int, int, int, int]]:
    """``(storage, base, offset, extent, storage bytes)`` of the bytes ``t`` can reach (a
    strided view as its hull), or None for an empty tensor or one without memory."""
    nb = t.nbytes
    if not nb:
        return None
    st = t.untyped_storage()
    base = st.data_ptr()
    if not base:
        return None
    isz = t.element_size()
    off = t.storage_offset() * isz
    ext = nb if t.is_contiguous() else view_of(t.shape, t.stride(), isz)[0]
    return st, base, off, ext, st.nbytes()


def spans(tensors: List[Tuple[Any, bool]]) -> list:
    """The recorder's spans of host accesses (a strided view as its hull: no VIEWS record
    precedes a host access)."""
    out = []
    for t, w in tensors:
        e = extent(t)
        if e is not None:
            _, base, off, ext, size = e
            out.append((base, off, ext, size, w, None))
    return out
