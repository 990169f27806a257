"""The recorder core: backend callbacks and dispatched kernels -> one RecordEncoder.

One :class:`Recorder` per process records at a time (:func:`current`). Everything that
reaches it -- backend hooks (:class:`~.backends.base.RecorderCallbacks`) and kernels from
the dispatch mode (:meth:`Recorder.record_kernel`) -- is appended, as a small tuple of
ints, strings and the stack key, to one queue (``collections.deque``: ``append`` and
``popleft`` are atomic under the GIL, so the threads that produce events never take a
lock). The queue defines the order of the trace. It is drained into the encoder, in
order, under one re-entrant lock. A hook that fires while the draining thread is inside
the encoder (a tensor freed by the garbage collector mid-record) just lands at the end
of the queue, so the encoder is never re-entered and never deadlocks. Queued events
hold no tensor or storage (only pointers), so queuing never delays a free.

When it is drained: a trace file on a regular file is written through a shared mapping
(:class:`~npusan.trace_format.writer.MappedFileSink`), and the dispatch mode hands every
kernel to :meth:`Recorder.kernel_now`, which drains what is queued and encodes the kernel;
the encoder's sink is then a list append (``MappedFileSink.defer``) and the op's records are
packed in one call and copied into the mapping once (``MappedFileSink.put``), so when an op
returns to the program its record and everything before it are in the kernel's page
cache: a SIGKILL right after a racing op leaves the race in the trace. Hooks (allocations, frees, events) queue up to
:data:`QUEUE_RECORDS` and go out with the next kernel, at the flusher thread's next tick
(``flush_interval``) or at stop. With a buffered output (a file object, a pipe, a
compressed trace) kernels are batched like hooks; in online mode everything is drained at
once, so that a race is reported at the op that causes it.

Never harm the host program: every entry point catches everything; the first unexpected
error (including ``OSError`` from a full disk or an unwritable path) prints one warning to
stderr and stops recording: the dispatch mode is taken out and the runtime hooks are
unhooked, so the program runs on at full speed and computes what it would have without
npusan. The only exception that reaches user code on purpose is :class:`RaceError`, in
online mode with ``mode="raise"``. Signals: see :mod:`.signals`.
"""

from __future__ import annotations

import atexit
import collections
import heapq
import os
import signal
import sys
import threading
from typing import Any, Optional, Union

from ..trace_format.encoder import RecordEncoder
from ..trace_format.records import KERNEL as _KERNEL
from . import kernelpack, signals, status
from .backends import Backend, select_backend
from .errors import RaceError, format_finding
from .online_digest import OnlineDigest
from .stacks import DEFAULT_DEPTH, StackCapture

#: Online warn mode's messages in this process (see online_digest).
_DIGEST = OnlineDigest()
#: Live, there is no --full-stacks to pass: the folded frames are in a recorded trace.
ONLINE_FOLDED_HINT = " (to see them: record a trace and run `npusan analyze --full-stacks` on it)"
#: The compiled per-op path of the kill-safe recorder, or None (kernelpack.py).
_kop = kernelpack.op

FLUSH_BYTES = 256 * 1024
FLUSH_INTERVAL = 0.5
#: Queued events that make the producing thread drain the queue (file mode).
QUEUE_RECORDS = 512
#: How long stopping waits for another thread that is writing records (then it gives up
#: on the END record rather than hang the process).
STOP_WAIT = 5.0

_current: Optional["Recorder"] = None
_current_lock = threading.Lock()


def current() -> Optional["Recorder"]:
    """The recorder active in this process, if any."""
    return _current


class _Tee:
    def __init__(self, *sinks) -> None:
        self.sinks = sinks

    def __call__(self, rec: list) -> None:
        for s in self.sinks:
            s(rec)


class Recorder:
    """Records one process's device activity into a trace file and/or a live engine.

    ``path``: a trace path or binary file object (None: no file, online only).
    ``online``: None, ``"raise"`` or ``"warn"``: run the analyzer engine in process.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]", Any, None] = None,
        *,
        backend: Union[str, Backend] = "auto",
        online: Optional[str] = None,
        stack_depth: int = DEFAULT_DEPTH,
        keep_internal_frames: bool = False,
        metadata: Optional[dict] = None,
        flush_interval: float = FLUSH_INTERVAL,
        flush_bytes: int = FLUSH_BYTES,
    ) -> None:
        if path is None and online is None:
            raise ValueError("nothing to record to: give a trace path or an online mode")
        if online not in (None, "raise", "warn"):
            raise ValueError(f"online mode must be 'raise' or 'warn', not {online!r}")
        self.path = path
        self.online = online
        self.backend: Backend = select_backend(backend) if isinstance(backend, str) else backend
        self.stacks = StackCapture(stack_depth, keep_internal_frames)
        self.metadata = metadata
        self.flush_interval = flush_interval
        self.flush_bytes = flush_bytes
        self.active = False
        self.failed = False
        self.writer = None
        self.engine = None
        self.enc: Optional[RecordEncoder] = None
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._busy = False
        # (fn, args) of every event not yet encoded, in trace order (see module docstring).
        self._deferred: collections.deque = collections.deque()
        self._qmax = 1 if online is not None else QUEUE_RECORDS
        # Queued events that make a kernel drain the queue: 1 when the output is durable
        # (or online), set at start.
        self._kmax = self._qmax
        self._commit = _nothing  # the sink's commit: records reach the file at each drain
        #: Durable file mode: the sink's ``put`` (pack one record straight into the mapping);
        #: the dispatch mode then encodes a kernel at once when nothing is queued
        #: (:meth:`kernel_now`), None otherwise (kernels are queued).
        self._put = None
        #: What ``_kernelpack.op`` needs to encode and commit an op (durable file mode with
        #: the extension built), else None.
        self._drain_spec: Optional[tuple] = None
        self._kernel_fn = self._kernel
        # Stack key of the op the dispatch mode is handling in this thread, for the
        # allocations its outputs report (same user stack: no second walk).
        self._pinned = threading.local()
        self._stack_ids: dict = {}
        self._op_sids: dict = {}
        self._sidx: dict = {}  # (device, handle) -> stream index in the encoder
        self._findings: list = []
        self._reported: set = set()
        #: Online mode: every distinct finding reported so far, in order (the pytest plugin
        #: fails a test on them even when the test caught the RaceError).
        self.found: list = []
        self._flusher: Optional[threading.Thread] = None
        self._stop_flusher = threading.Event()
        self.dispatch = None  # the per-thread mode manager (dispatch.ModeInstaller)
        self.collectives = None  # c10d collectives as the process group runs them
        self._recent_works: list = []  # Works kept alive until the next op (collectives.py)
        self._held_by: Optional[int] = None  # thread holding the queue for a collective (hold)
        self._stopping = False
        #: The recording this one joined (started while another was active): see start().
        self.joined: Optional["Recorder"] = None
        self.stop_reason: Optional[str] = None  # why recording stopped early, if it did

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "Recorder":
        """Start recording; never raises for runtime or file trouble (warns, runs unrecorded).

        Started while this process is already recording (``npusan record``, ``NPUSAN_TRACE``
        or the program's own ``npusan.record()``), it *joins* that recording instead: it
        writes no file of its own, says once where the trace goes, and its :meth:`stop`
        leaves the running recording alone.
        """
        global _current
        with _current_lock:
            outer = _current
            if outer is not None and outer.active:
                return self._join(outer)
            be = self.backend
            header = {"device_count": be.device_count(), "default_streams": dict(be.default_streams())}
            sinks = []
            if self.path is not None:
                from ..trace_format.writer import TraceWriter

                try:
                    self.writer = TraceWriter(
                        self.path,
                        backend=be.name,
                        metadata=self.metadata,
                        header=header,
                        flush_bytes=self.flush_bytes,
                        flush_interval=self.flush_interval,
                    )
                except OSError as e:  # unwritable path, full disk: warn once, run unrecorded
                    self._fail(e, where=f" ({self.path})")
                    status.report(failed=_describe(e), trace=_name(self.path))
                    return self
                self.enc = self.writer.encoder
                sink = self.writer.sink
                sinks.append(sink)
                if sink.durable and self.online is None:
                    sink.autocommit = False  # committed per drain (see the module docstring)
                    self._commit = sink.commit
                    self._kmax = 1
                    # Records are handed to the sink as they are encoded (a list append)
                    # and packed in one call at each commit (once per op).
                    self.enc.sink = sink.defer
                    self._put = sink.put  # the dispatch mode's kernels: kernel_now
                    self._drain_spec = self._compiled_drain_spec(sink)
            if self.online is not None:
                from ..analyzer.replay.native import make_engine
                from ..trace_format.header import build_header
                from ..trace_format.symbols import SymbolTable

                hdr = self.writer.header if self.writer else build_header(be.name, self.metadata, header)
                self.engine = make_engine(SymbolTable(), header=hdr, on_finding=self._on_finding)
                sinks.append(self.engine.feed)
            if self.enc is None:
                self.enc = RecordEncoder(sinks[0])
            elif len(sinks) > 1:
                self.enc.sink = _Tee(*sinks)
            self._pid = os.getpid()
            self.active = True
            _current = self
        try:
            be.install(self)
            from . import collectives

            self.collectives = collectives.Collectives(self)
            collectives.install()
            from .dispatch import ModeInstaller

            self.dispatch = ModeInstaller(self)
            self.dispatch.start()
            _install_process_hooks()
        except Exception as e:  # a broken runtime hook must not stop the program
            self._fail(e)
            return self
        if self.writer is not None:
            status.report(trace=self.writer.sink.name)
            self._flusher = threading.Thread(target=self._flush_loop, name="npusan-flush", daemon=True)
            self._flusher.start()
        return self

    def _join(self, outer: "Recorder") -> "Recorder":
        self.joined = outer
        _joined.append(self)
        where = f"to {outer.path}" if isinstance(outer.path, (str, os.PathLike)) else "already"
        asked = []
        if self.path is not None and self.path != outer.path:
            asked.append(f"{_name(self.path)} is not written")
        if self.online is not None and outer.online is None:
            asked.append("online checking is not added (analyze the trace afterwards)")
        if asked:
            _warn_once(
                "join",
                f"npusan: note: this process is recording {where}; npusan.record()/enable() joins that "
                f"recording ({'; '.join(asked)})\n",
            )
        return self

    def stop(self, *, signum: Optional[int] = None) -> None:
        """Stop recording: write the END record and close the trace.

        Idempotent and re-entrant: a second call -- from a signal handler, from a callback
        fired while stopping, from another thread -- returns at once. It waits at most
        :data:`STOP_WAIT` for another thread that is writing; past that, the trace is
        left with everything committed so far and no END record. ``signum``: the signal
        that is ending the process (noted in the END record). A joined recorder (see
        :meth:`start`) only leaves the recording it joined.
        """
        global _current
        if self.joined is not None:
            if self in _joined:
                _joined.remove(self)
            return
        if os.getpid() != self._pid:
            self.active = False
            return
        if self._stopping:
            return
        self._stopping = True
        was_active = self.active
        self.active = False
        self._stop_flusher.set()
        self._unhook()
        if self._lock.acquire(timeout=STOP_WAIT):
            try:
                if was_active and not self.failed:
                    self._drain()  # everything queued so far belongs in the trace
                if self.engine is not None and not self.failed:
                    self.engine.finish()
                if self.writer is not None and not self.failed:
                    end = {"signal": signal.Signals(signum).name} if signum else None
                    self.writer.close(end=end)
            except Exception as e:
                self._fail(e)
            finally:
                self._lock.release()
        # else another thread is stuck inside the writer: leave the file as it is (every
        # committed record is in it; it reads as cut)
        with _current_lock:
            if _current is self:
                _current = None
        signals.uninstall()
        if self.online is not None and self._findings:
            self._report_findings(allow_raise=False)
        if self.online == "warn" and _DIGEST.summary() is not None:
            try:
                sys.stderr.write(_DIGEST.summary() + "\n")
            except Exception:
                pass

    def _unhook(self) -> None:
        """Take the dispatch mode out and detach the runtime hooks (never raises)."""
        try:
            if self.dispatch is not None:
                self.dispatch.stop()
        except Exception:
            pass
        try:
            self.backend.uninstall()
        except Exception:
            pass

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def flush(self) -> None:
        """Write buffered records to the file now."""
        self._run(self._flush)

    def _flush(self) -> None:
        if self.writer is not None:
            self.writer.sink.flush()

    def _flush_loop(self) -> None:
        while not self._stop_flusher.wait(self.flush_interval):
            if not self.active or os.getpid() != self._pid:
                return
            if self._deferred or (self.writer is not None and self.writer.sink.pending()):
                self._run(self._flush)

    def after_fork_in_child(self) -> None:
        """A forked child never writes into the parent's trace: drop everything."""
        self.active = False
        self._stopping = True
        self.writer = None
        self.engine = None
        self._lock = threading.RLock()
        self._busy = False
        self._deferred.clear()

    # ------------------------------------------------------------------ plumbing

    def _fail(self, e: BaseException, where: Optional[str] = None) -> None:
        """Stop recording after an unexpected error; warn once; never raise.

        The trace keeps everything committed before the error; where the output has room
        kept for it (a full disk on a mapped trace), it also gets a note and an END record
        saying why it stops early, so it does not read as a crash.
        """
        if self.failed:
            return
        self.failed = True
        self.active = False
        self._deferred.clear()
        self._stop_flusher.set()
        self.stop_reason = _describe(e)
        try:
            if where is None:
                where = f" ({self.writer.sink.name})" if self.writer is not None and self.writer.sink.name else ""
            sys.stderr.write(f"npusan: warning: recording stopped{where}: {self.stop_reason}\n")
            sys.stderr.flush()
        except Exception:
            pass
        if self.writer is not None:
            status.report(stopped=self.stop_reason, trace=self.writer.sink.name)
            try:
                self.writer.close_after_error(self.stop_reason)
            except Exception:
                pass
        if self._pid == os.getpid():
            self._unhook()
            signals.uninstall()

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

    # ------------------------------------------------------------------ kernels

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

    def record_stream_op(self, t, stream_obj, key) -> None:
        """``aten.record_stream`` seen by the dispatch mode."""
        try:
            device, handle = self.backend.stream_key(stream_obj)
            ptr = t.untyped_storage().data_ptr()
        except Exception as e:
            self._fail(e)
            return
        if ptr and self.active:
            self._post(self._emit, ("record_stream", (ptr, handle, device), key))

    # ------------------------------------------------------------------ callbacks

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

    def _cb(self, meth: str, *args) -> None:
        if not self.active:
            return
        try:
            key = self.stacks.key(2)
        except Exception:
            key = None
        self._post(self._emit, (meth, args, key))

    # Event bookkeeping carries no stack: no report shows where an event was created,
    # recorded or waited, and these are the most frequent hooks (wait_stream fires three),
    # so they queue directly (:meth:`_post` inlined).

    def on_stream_created(self, handle: int, device: int) -> None:
        self._cb("stream_created", handle, device)

    def on_event_created(self, ev: int) -> None:
        if self.active:
            q = self._deferred
            q.append((self.enc.event_created, (ev,)))
            if len(q) >= self._qmax:
                self._drain_now()

    def on_event_deleted(self, ev: int) -> None:
        if self.active:
            q = self._deferred
            q.append((self.enc.event_deleted, (ev,)))
            if len(q) >= self._qmax:
                self._drain_now()

    def on_event_record(self, ev: int, handle: int, device: int) -> None:
        if self.active:
            q = self._deferred
            q.append((self.enc.event_recorded, (ev, handle, device)))
            if len(q) >= self._qmax:
                self._drain_now()

    def on_event_wait(self, ev: int, handle: int, device: int) -> None:
        if self.active:
            q = self._deferred
            q.append((self.enc.event_waited, (ev, handle, device)))
            if len(q) >= self._qmax:
                self._drain_now()

    def on_event_sync(self, ev: int) -> None:
        self._cb("event_synchronized", ev)

    def on_stream_sync(self, handle: int, device: int) -> None:
        self._cb("stream_synchronized", handle, device)

    def on_device_sync(self, device: Optional[int]) -> None:
        self._cb("device_synchronized", device)

    # Allocations and frees are as frequent as kernels: _cb and _post are inlined.

    def on_alloc(self, ptr: int, handle: int, device: int, size: Optional[int]) -> None:
        if not self.active:
            return
        key = getattr(self._pinned, "key", None)  # an output of the op being recorded
        if key is None:
            try:
                key = self.stacks.key(1)
            except Exception:
                key = None
        q = self._deferred
        q.append((self._alloc, (ptr, handle, device, size, key)))
        if len(q) >= self._qmax:
            self._drain_now()

    def on_free(self, ptr: int) -> None:
        if not self.active:
            return
        try:
            key = self.stacks.key(1)
        except Exception:
            key = None
        q = self._deferred
        q.append((self._free, (ptr, key)))
        if len(q) >= self._qmax:
            self._drain_now()

    def on_record_stream(self, ptr: int, handle: int, device: int) -> None:
        self._cb("record_stream", ptr, handle, device)

    def on_erase_stream(self, ptr: int, handle: int, device: int) -> None:
        self._cb("erase_stream", ptr, handle, device)

    # ------------------------------------------------------------------ online mode

    def _on_finding(self, finding) -> None:
        self._findings.append(finding)

    def pending_findings(self) -> bool:
        return bool(self._findings)

    def _take_new_findings(self) -> list:
        """The engine's findings since last time that were not reported yet (also kept in
        ``found``)."""
        pending, self._findings = self._findings, []
        new = []
        for f in pending:
            fp = f.fingerprint()
            if fp not in self._reported:
                self._reported.add(fp)
                new.append(f)
        self._number_streams(new)
        self.found.extend(new)
        return new

    def _number_streams(self, findings: list) -> None:
        """Number the findings' streams as ``npusan analyze`` numbers them: from the stream
        table (non-default streams per device, in the order the trace first named them), so
        that "stream #2" is the same stream in every message of this run and in the report
        of its trace. (A report built from one finding alone would count only the streams
        that finding names.)"""
        engine = self.engine
        if engine is None or not findings:
            return
        import functools

        from ..analyzer.findings.model import number_streams, stream_numbers
        from ..trace_format.header import is_default_stream

        is_default = functools.partial(is_default_stream, engine.header)
        number_streams(findings, stream_numbers(engine.symbols.streams, is_default), is_default,
                       engine.symbols.stream_labels)

    def settle(self) -> list:
        """Online mode: process every queued event and return the findings not reported
        yet, without raising or warning about them (a caller that reports them itself,
        like the pytest plugin, calls this before :meth:`stop`)."""
        self._drain_now()
        return self._take_new_findings()

    def _report_findings(self, allow_raise: bool = True) -> None:
        """Raise (mode "raise") or warn about findings the engine reported since last time."""
        for f in self._take_new_findings():
            msg = format_finding(f, self.engine.header if self.engine is not None else None,
                                 folded_hint=ONLINE_FOLDED_HINT)
            if self.online == "raise" and allow_raise:
                raise RaceError(msg, f)
            try:
                sys.stderr.write(f"npusan: warning: {_DIGEST.message(msg, ONLINE_FOLDED_HINT)}\n")
            except Exception:
                pass


# ---------------------------------------------------------------------- process hooks

_hooks_installed = False
#: Recorders that joined a running recording (npusan.record()/enable() inside it), newest last.
_joined: list = []
_warned: set = set()


def _nothing() -> None:
    pass


def _warn_once(key: str, text: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    try:
        sys.stderr.write(text)
    except Exception:
        pass


def _name(path: Any) -> str:
    return os.fspath(path) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)


def _describe(e: BaseException) -> str:
    """Why recording stopped, in words a user acts on (a full disk is named as such)."""
    import errno

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"disk full ({e.strerror or e})"
    if isinstance(e, IsADirectoryError):
        return f"the trace path is a directory ({e.filename or e})"
    return f"{type(e).__name__}: {e}"


def _install_process_hooks() -> None:
    """atexit, signal and fork handling, once per process (signals: every start)."""
    global _hooks_installed
    signals.install()
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    rec = _current
    if rec is not None:
        rec.stop()


def _after_fork_in_child() -> None:
    global _current
    rec = _current
    if rec is not None:
        rec.after_fork_in_child()
    _current = None
    _joined.clear()


def _resume_start_from_env() -> None:
    """Run the start from the environment that this module's own import put off.

    Importing this module imports torch (stack capture needs it), which is when recording
    from the environment starts; when the program itself imports the recorder (to call
    ``npusan.record()``), that start waits until this module exists, and then the
    program's own recorder joins it (see :meth:`Recorder.start`).
    """
    act = sys.modules.get(__package__ + ".activate")
    if act is not None and getattr(act, "_start_after_session_import", False):
        act._start_after_session_import = False
        act.start_from_env()


_resume_start_from_env()
