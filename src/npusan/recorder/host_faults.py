"""The host's accesses of pinned memory that no torch op makes, seen through page faults.

:mod:`.host_memory` records the host's accesses of *watched* pinned memory that torch ops
make. A program that writes the buffer through a numpy view made once at start-up
(``buf_np[:n] = ids``), ``ctypes.memmove`` or a ``memoryview`` makes no torch op. So, while
an asynchronous copy from or to a pinned buffer may be in flight, this module protects the
buffer's pages (``mprotect(PROT_NONE)``, in the compiled ``_hostfault``): the host's first
read and first write of each page fault; the handler notes the address, opens the page
(readable after a read, so a later write faults once more) and the program goes on. The
notes are drained at the recorder's next event -- the next torch op, the next
synchronization -- into HOST_ACCESS records, which therefore sit in the trace exactly
where the access happened relative to every stream operation and synchronization. Their
stack is the stack where they were drained (the handler cannot walk Python frames) with
the faulting frame put in where it is one of that stack's frames: on CPython 3.11 the
handler reads the faulting thread's innermost frame's code address and instruction
offset, and the drain matches that address against the live frames' code objects (never
dereferencing it). So a write followed, in the same function or a caller, by the copy
is reported at the write's line; elsewhere (another Python version, a frame that has
returned) at the next torch op or synchronization after it.

Protection is lifted when the host is ordered after the copy (a synchronization of its
stream, of the device, or of an event recorded on the stream after it, or a query that
answered True), before a torch op that touches the buffer runs (the op's own access is
recorded as before; the emulated device runs its copies on the CPU), when the buffer dies,
and when recording stops. Only pinned storages that start on a page boundary are
protected (a CUDA pinned allocation does, and so does the emulated device's while this
watch is on), from their first page to the end of the storage's last page, which belongs
to the same allocation.

Off unless ``NPUSAN_HOST_FAULTS=1``: a system call that reads or writes a protected page
(``file.readinto`` into the buffer, ``socket.send`` from it) fails with EFAULT instead of
faulting, which would change what the program does (docs/semantics.md, "The host").
"""

from __future__ import annotations

import errno
import os
import weakref
from typing import Any, Callable, Dict, List, Optional

from .host_memory import extent

#: The environment variable that turns the page-fault watch on.
ENV = "NPUSAN_HOST_FAULTS"
_ON = ("1", "on", "yes", "true")

#: Op names of the HOST_ACCESS records made from faults.
FAULT_WRITE = "host write (outside torch ops)"
FAULT_READ = "host read (outside torch ops)"


def requested() -> bool:
    """Whether the environment asks for the page-fault watch."""
    return os.environ.get(ENV, "").strip().lower() in _ON


def unavailable() -> Optional[str]:
    """Why the page-fault watch cannot run in this process (None: it can)."""
    if not requested():
        return f"off, set {ENV}=1 to turn it on"
    try:
        from . import _hostfault  # noqa: F401
    except ImportError as e:
        if "Linux" in str(e):
            return "not on this platform (Linux x86-64 and aarch64 only)"
        return "the compiled module is not built"
    return None


def at_fault(key: tuple, where: tuple) -> tuple:
    """The drain-site stack ``key`` (``(id(code), lasti, ...)``, innermost first) as the
    fault's: from the frame running the faulting code on, with the fault's instruction.
    Unchanged where that code is none of the key's (only compared: ids of live code)."""
    code, lasti = where
    for k in range(0, len(key), 2):
        if key[k] == code:
            return (code, lasti) + key[k + 2:]
    return key


class _Range:
    __slots__ = ("slot", "start", "end", "nbytes", "stream", "seq", "ref")

    def __init__(self, slot: int, start: int, end: int, nbytes: int, stream: tuple, seq: int, ref: Any) -> None:
        self.slot, self.start, self.end, self.nbytes = slot, start, end, nbytes
        self.stream, self.seq, self.ref = stream, seq, ref


class PageWatch:
    """The protected pinned storages of one recording.

    ``post(name, spans, where)``: queues one HOST_ACCESS record with the current stack
    (the recorder's); ``where``: the faulting Python frame's ``(id(code), lasti)`` where the
    handler could read it (CPython 3.11), else None. ``armed`` is true while some storage is protected: the dispatch mode then
    calls :meth:`before_op` before each op.
    """

    def __init__(self, post: Callable[[str, list, Optional[tuple]], None]) -> None:
        from . import _hostfault

        self._hf = _hostfault
        self._post = post
        self.page = _hostfault.page_size()
        self._mask = self.page - 1
        self.armed = False
        self.ranges: Dict[int, _Range] = {}  # storage base -> its protected range
        self.events: Dict[int, tuple] = {}  # event -> (stream, seq) at its last record
        self.seq = 0
        self.unaligned = 0  # pinned storages not on a page boundary (watched through torch ops only)
        self.dropped = 0
        self.faults = 0
        self.closed = False
        self.stopped: Optional[str] = None  # why the watch stopped before recording did
        self.refused: Optional[str] = None  # why a first buffer was left to torch ops only

    # -------------------------------------------------------------- protecting

    def protect(self, pinned: List[tuple], stream: tuple) -> None:
        """After an asynchronous copy from or to ``pinned`` ((tensor, write) pairs) was
        enqueued on ``stream`` ((device, handle)): protect the pages it copies."""
        if self.closed:
            return
        mask = self._mask
        for t, _w in pinned:
            e = extent(t)
            if e is None or not e[4]:
                continue
            st, base, off, ext, size = e
            if base & mask:
                self.unaligned += 1
                if self.refused is None:
                    self.refused = "a pinned buffer that does not start on a page boundary"
                continue
            start = base + (off & ~mask)
            end = base + ((min(off + ext, size) + mask) & ~mask)
            old = self.ranges.get(base)
            if old is not None:
                self._lift(base, old, drain=False)
                if old.ref() is st:
                    start, end = min(start, old.start), max(end, old.end)
            self.seq += 1
            slot = self._hf.protect(start, end)
            if slot == -errno.EBUSY:
                # Another SIGSEGV handler went in over ours (a late faulthandler.enable()):
                # a fault on a protected page would reach it first and end the program.
                self.stopped = "another SIGSEGV handler was installed after the watch started"
                self.close(drain=True)
                return
            if slot < 0:  # the pages cannot be protected: watched through torch ops only
                if self.refused is None:
                    self.refused = f"mprotect refused a pinned buffer ({os.strerror(-slot)})"
                continue
            self.ranges[base] = _Range(slot, start, end, size, stream, self.seq,
                                       weakref.ref(st, self._died(base)))
            self.armed = True

    def _died(self, base: int) -> Callable[[weakref.ref], None]:
        def died(ref: weakref.ref) -> None:
            try:
                r = self.ranges.get(base)
                if r is not None and r.ref is ref:
                    self._lift(base, r)
            except Exception:  # (a weakref callback: nowhere to report to)
                self.close(drain=False)

        return died

    def _lift(self, base: int, r: _Range, drain: bool = True) -> None:
        if drain:
            self.drain()
        if self.ranges.get(base) is r:  # (another thread may have lifted it just now)
            del self.ranges[base]
            self._hf.lift(r.slot)
        if not self.ranges:
            self.armed = False

    # -------------------------------------------------------------- draining

    def drain(self) -> None:
        """The faults noted since last time, as HOST_ACCESS records, in order."""
        hf = self._hf
        if not hf.pending():
            return
        faults, dropped = hf.take()
        self.dropped += dropped
        ranges = list(self.ranges.items())
        for addr, write, code, lasti in faults:
            self.faults += 1
            for base, r in ranges:
                if r.start <= addr < r.end:
                    off = addr - base
                    if off < r.nbytes:  # (past it: the rest of the last page, no data of the buffer)
                        self._post(FAULT_WRITE if write else FAULT_READ, [(base, off, 1, r.nbytes, write, None)],
                                   (code, lasti) if code else None)
                    break

    def before_op(self, args: tuple, kwargs: Optional[dict]) -> None:
        """Before a torch op runs: the faults so far go first, then the op's protected
        storages are lifted (its own access is recorded as an op's, and an emulated
        device's copy reads or writes the host buffer on the CPU)."""
        self.drain()
        ranges = self.ranges
        for a in (args, tuple(kwargs.values()) if kwargs else ()):
            for x in a:
                if isinstance(x, (list, tuple)):
                    for y in x:
                        self._lift_tensor(y, ranges)
                else:
                    self._lift_tensor(x, ranges)

    def _lift_tensor(self, x: Any, ranges: Dict[int, _Range]) -> None:
        try:
            base = x.untyped_storage().data_ptr()
        except Exception:  # not a tensor, or one without storage
            return
        r = ranges.get(base)
        if r is not None:
            self._lift(base, r, drain=False)

    # -------------------------------------------------------------- the host's ordering

    def event_recorded(self, ev: int, handle: int, device: int) -> None:
        self.events[ev] = ((device, handle), self.seq)

    def event_synced(self, ev: int) -> None:
        """The host waited for (or saw complete) event ``ev``: copies on its stream
        enqueued before its record are done."""
        at = self.events.get(ev)
        if at is not None and self.ranges:
            stream, seq = at
            self._lift_where(lambda r: r.stream == stream and r.seq <= seq)

    def stream_synced(self, handle: int, device: int) -> None:
        if self.ranges:
            key = (device, handle)
            self._lift_where(lambda r: r.stream == key)

    def device_synced(self, device: Optional[int]) -> None:
        if self.ranges:
            self._lift_where(lambda r: device is None or r.stream[0] == device)

    def _lift_where(self, pred: Callable[[_Range], bool]) -> None:
        self.drain()
        for base, r in [(b, r) for b, r in self.ranges.items() if pred(r)]:
            self._lift(base, r, drain=False)

    def close(self, drain: bool = True) -> None:
        """Lift every protection and restore the previous SIGSEGV handler (never raises)."""
        if self.closed:
            return
        self.closed = True
        try:
            if drain:
                self.drain()
            for base, r in list(self.ranges.items()):
                self._lift(base, r, drain=False)
            self._hf.uninstall()
        except Exception:
            pass
