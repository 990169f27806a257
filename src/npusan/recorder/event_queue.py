"""The recorder's event queue and how it drains into the encoder.

Everything that reaches the recorder -- backend hooks and kernels from the dispatch mode --
is appended, as a small tuple of ints, strings and the stack key, to one queue
(``collections.deque``: ``append`` and ``popleft`` are atomic under the GIL, so the threads
that produce events never take a lock). The queue defines the order of the trace. It is
drained into the encoder, in order, under one re-entrant lock. A hook that fires while the
draining thread is inside the encoder (a tensor freed by the garbage collector mid-record)
just lands at the end of the queue, so the encoder is never re-entered and never
deadlocks. Queued events hold no tensor or storage (only pointers), so queuing never
delays a free.

:class:`EventQueue` is the part of :class:`~.session.Recorder` that holds the queue and
encodes its entries; the compiled drain (``_kernelpack``, :mod:`.kernelpack`) recognizes
the entries by the bound methods of this object (``_alloc``, ``_free``, ``_kernel``), so
they stay methods of the recorder itself. What it needs of the recorder: ``active``,
``enc``, ``engine``, ``stacks`` and ``_fail``.
"""

from __future__ import annotations

import collections
import heapq
import threading
from typing import Optional

from ..trace_format.records import KERNEL as _KERNEL
from . import kernelpack

#: The compiled per-op path of the kill-safe recorder, or None (kernelpack.py).
_kop = kernelpack.op

#: Queued events that make the producing thread drain the queue (file mode).
QUEUE_RECORDS = 512


def _nothing() -> None:
    pass


class EventQueue:
    """The queue of events not yet encoded, the lock that drains it, and the encoding of
    each kind of entry (see the module docstring)."""

    def _init_queue(self, qmax: int) -> None:
        self._lock = threading.RLock()
        self._busy = False
        # (fn, args) of every event not yet encoded, in trace order (see module docstring).
        self._deferred: collections.deque = collections.deque()
        self._qmax = qmax
        # Queued events that make a kernel drain the queue: 1 when the output is durable
        # (or online), set at start.
        self._kmax = qmax
        self._commit = _nothing  # the sink's commit: records reach the file at each drain
        #: Durable file mode: the sink's ``put`` (pack one record straight into the mapping);
        #: the dispatch mode then encodes a kernel at once when nothing is queued
        #: (:meth:`kernel_now`), None otherwise (kernels are queued).
        self._put = None
        #: What ``_kernelpack.op`` needs to encode and commit an op (durable file mode with
        #: the extension built), else None.
        self._drain_spec: Optional[tuple] = None
        self._kernel_fn = self._kernel
        self._stack_ids: dict = {}
        self._op_sids: dict = {}
        self._sidx: dict = {}  # (device, handle) -> stream index in the encoder
        self._held_by: Optional[int] = None  # thread holding the queue for a collective (hold)

    def _commit_per_drain(self, sink) -> None:
        """Durable file mode: records are handed to ``sink`` as they are encoded (a list
        append), packed in one call at each commit (once per op), and the dispatch mode's
        kernels are encoded at once (:meth:`kernel_now`)."""
        sink.autocommit = False
        self._commit = sink.commit
        self._kmax = 1
        self.enc.sink = sink.defer
        self._put = sink.put
        self._drain_spec = self._compiled_drain_spec(sink)

    def _run(self, fn, *args) -> None:
        """Run ``fn(*args)`` now, after everything queued, under the lock.

        Queued instead when this thread is already inside the recorder.
        """
        if not self.active:
            return
        try:
            with self._lock:
                if self._busy:
                    self._deferred.append((fn, args))
                    return
                self._busy = True
                try:
                    self._drain()
                    if self.active:
                        fn(*args)
                    self._drain()
                    self._commit()
                finally:
                    self._busy = False
        except Exception as e:
            self._fail(e)

    def hold(self) -> int:
        """Keep the queue from being drained (by any thread) until :meth:`release`; returns
        its length. A collective's events fire inside the op and are reordered before any of
        them is encoded (:mod:`.collectives`)."""
        self._lock.acquire()
        self._held_busy = self._busy
        self._busy = True
        self._held_by = threading.get_ident()
        return len(self._deferred)

    def release(self) -> None:
        self._held_by = None
        self._busy = self._held_busy
        self._lock.release()
        if len(self._deferred) >= self._qmax:
            self._drain_now()

    def _post(self, fn, args: tuple) -> None:
        """Queue ``fn(*args)``; drain when the queue is long enough (never raises)."""
        q = self._deferred
        q.append((fn, args))
        if len(q) >= self._qmax:
            self._drain_now()

    def _drain_now(self) -> None:
        if not self.active:
            return
        held = self._held_by
        if held is not None and held != threading.get_ident():
            # A collective holds the queue (hold()) and drains it when it releases. Waiting
            # for it here could deadlock: the op may wait for this very thread (a process
            # group's watchdog firing a hook while it holds the group's lock).
            return
        try:
            with self._lock:
                if self._busy:  # this thread is inside the encoder: the outer loop gets it
                    return
                self._busy = True
                try:
                    self._drain()
                    self._commit()
                finally:
                    self._busy = False
        except Exception as e:
            self._fail(e)

    def _drain(self) -> None:
        """Encode every queued event, in order (caller holds the lock).

        Kernels (most of the queue) go through :meth:`_kernel_record`, which reads the
        stream index cache of this recorder and the encoder's block table directly.
        """
        q = self._deferred
        if not q:
            return
        pop = q.popleft
        kfn = self._kernel_fn
        krec = self._kernel_record
        sink = self.enc.sink
        nk = 0
        try:
            while q:
                fn, args = pop()
                if fn is not kfn:
                    fn(*args)
                    continue
                rec = krec(*args)
                nk += 1
                sink(rec)
        finally:
            if nk:
                counts = self.enc.counts
                counts[_KERNEL] = counts.get(_KERNEL, 0) + nk
            if self.engine is not None:
                self.engine.flush()  # online: the drained records are replayed as one batch

    def _kernel_record(self, name: str, device: int, handle: int, spans: list, key) -> list:
        """The KERNEL record of a queued or direct kernel; definitions it needs (op name,
        stream, stack, blocks first seen, VIEWS) go to the sink first (caller holds the lock)."""
        enc = self.enc
        op = self._op_sids.get(name)
        if op is None:
            op = self._op_sids[name] = enc.string(name)
        sidx = self._sidx.get((device, handle))
        if sidx is None:
            sidx = self._sidx[(device, handle)] = enc.stream(handle, device)
        if key is None:
            stack = None
        else:
            stack = self._stack_ids.get(key)
            if stack is None:
                stack = self._stack(key)
        rec = [_KERNEL, sidx, op, stack]
        views = None
        blocks = enc._blocks
        for base, off, ext, total, w, view in spans:
            if view is not None:  # a strided view: its hull, refined in a VIEWS record
                if views is None:
                    views = []
                rec.append(enc.storage_access(base, off, ext, total, w, view, views))
                continue
            entry = blocks.get(base)
            if entry is not None:
                a = ~entry[0] if w else entry[0]
                if entry[1] is None and off + ext > entry[2]:
                    entry[2] = off + ext  # unknown size: grows as the encoder's do
                if off == 0 and ext >= total:
                    rec.append(a)
                else:
                    rec.append([a, off, ext])
            else:
                rec.append(enc.storage_access(base, off, ext, total, w))
        if views:
            enc.views(views, rec)
        return rec

    def kernel_now(self, name: str, device: int, handle: int, spans: list, key) -> None:
        """A kernel from the dispatch mode when the output is durable: what is queued is
        encoded, then the kernel, and all of it is put into the mapping at once (never raises).

        The same records, in the same order, as queuing the kernel and draining; it skips
        the queue for the kernel and commits with the kernel's own copy into the mapping
        (nothing buffered: the packed record goes straight in), which is what the kill-safe
        recorder pays per op. Queued instead when another thread holds the queue or this
        thread is already inside the recorder.
        """
        q = self._deferred
        held = self._held_by
        if (held is not None and held != threading.get_ident()) or not self.active:
            if self.active:
                q.append((self._kernel_fn, (name, device, handle, spans, key)))
            return
        try:
            with self._lock:
                if self._busy:  # this thread is inside the encoder: the outer loop gets it
                    q.append((self._kernel_fn, (name, device, handle, spans, key)))
                    return
                self._busy = True
                try:
                    spec = self._drain_spec
                    if spec is None or not _kop(spec, q, name, device, handle, spans, key):
                        # the Python encoder: the extension is not built, or this kernel needs
                        # a definition first (a new name, stream, stack or block, a strided view)
                        if q:  # queued events (the op's allocations, frees, event hooks) come first
                            self._drain()
                        self._put(self._kernel_record(name, device, handle, spans, key))
                        counts = self.enc.counts
                        counts[_KERNEL] = counts.get(_KERNEL, 0) + 1
                    if q:  # a hook fired while encoding (a free from the garbage collector)
                        self._drain()
                        self._commit()
                finally:
                    self._busy = False
        except Exception as e:
            self._fail(e)

    def _compiled_drain_spec(self, sink) -> Optional[tuple]:
        """The state ``_kernelpack.op`` reads and updates, as the Python encoder and the
        sink do (the order is the C side's ``S_*`` fields), or None without the extension."""
        if _kop is None:
            return None
        enc = self.enc
        E = type(enc)
        return (enc, E.event_created, E.event_deleted, E.event_recorded, E.event_waited,
                self, type(self)._alloc, type(self)._free, enc._streams, self._stack_ids, enc._blocks,
                enc._bases, enc._free_bids, enc.counts, heapq.heappush, heapq.heappop,
                sink._recs, sink._pack, sink._buf, type(self)._kernel, self._kernel_record,
                self._op_sids, self._sidx, sink)

    def _stack(self, key) -> Optional[int]:
        if key is None:
            return None
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = self._stack_ids[key] = self.enc.stack(self.stacks.resolve(key))
        return sid

    def record_kernel(self, name: str, device: int, handle: int, spans: list, key) -> None:
        """A kernel from the dispatch mode (never raises).

        ``spans``: ``(storage base, byte offset, byte extent, storage nbytes, is_write, view)``
        (``view``: None, or ``(run, dims)`` of a strided view, see ``access.view_of``).
        This is the hot path: one append to the queue (:meth:`_post` inlined).
        """
        if not self.active:
            return
        q = self._deferred
        q.append((self._kernel_fn, (name, device, handle, spans, key)))
        if len(q) >= self._kmax:
            self._drain_now()

    def _kernel(self, name: str, device: int, handle: int, spans: list, key) -> None:
        """Encode one queued kernel (the same record as :meth:`_drain`'s inlined path)."""
        enc = self.enc
        rec = [_KERNEL, enc.stream(handle, device), enc.string(name), self._stack(key)]
        views: list = []
        rec.extend(enc.storage_access(base, off, ext, total, w, view, views) for base, off, ext, total, w, view in spans)
        if views:
            enc.views(views, rec)
        enc._emit(rec)

    def _emit(self, meth: str, args: tuple, key) -> None:
        getattr(self.enc, meth)(*args, stack=self._stack(key))

    def _alloc(self, ptr: int, handle: int, device: int, size: Optional[int], key) -> None:
        """Encode a queued allocation (``_emit("memory_allocated", ...)`` without the look-ups)."""
        if key is None:
            stack = None
        else:
            stack = self._stack_ids.get(key)
            if stack is None:
                stack = self._stack(key)
        self.enc.memory_allocated(ptr, handle, device, size, stack)

    def _free(self, ptr: int, key) -> None:
        """Encode a queued free."""
        if key is None:
            stack = None
        else:
            stack = self._stack_ids.get(key)
            if stack is None:
                stack = self._stack(key)
        self.enc.memory_freed(ptr, stack)
