"""The recorder core: one :class:`Recorder` per process records at a time (:func:`current`).

Its parts, one module each: the event queue every hook and kernel goes through and its
encoding (:mod:`.event_queue`), the runtime hooks a backend calls (:mod:`.callbacks`), where
the records go (:mod:`.sinks`: a durable trace, a buffered one, the online engine), online
checking (:mod:`.online_check`), c10d collectives (:mod:`.collectives`), exit, signal and
fork handling (:mod:`.process_hooks`). This module starts and stops them.

When the queue is drained: with a durable trace (a regular file), the dispatch mode hands
every kernel to :meth:`~.event_queue.EventQueue.kernel_now`, which drains what is queued and
encodes the kernel; the op's records are packed in one call and copied into the mapping
once, so when an op returns to the program its record and everything before it are in the
kernel's page cache. Hooks (allocations, frees, events) queue up to
:data:`~.event_queue.QUEUE_RECORDS` and go out with the next kernel, at the flusher thread's
next tick (``flush_interval``) or at stop. With a buffered output kernels are batched like
hooks; in online mode everything is drained at once, so that a race is reported at the op
that causes it.

Never harm the host program: every entry point catches everything; the first unexpected
error (including ``OSError`` from a full disk or an unwritable path) prints one warning to
stderr and stops recording: the dispatch mode is taken out and the runtime hooks are
unhooked, so the program runs on at full speed and computes what it would have without
npusan. The only exception that reaches user code on purpose is :class:`RaceError`, in
online mode with ``mode="raise"``. Signals: see :mod:`.signals`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Optional, Union

from ..trace_format.encoder import RecordEncoder
from ..trace_format.records import (HOST_FAULTS_OFF_NOTE, HOST_FAULTS_PART_NOTE, HOST_WATCH_FAULTS, HOST_WATCH_NOTE,
                                    HOST_WATCH_TORCH)
from . import host_faults, host_memory, process_hooks, signals, sinks, status
from .backends import Backend, select_backend
from .callbacks import RuntimeCallbacks
from .errors import RaceError  # noqa: F401 (npusan.recorder.session.RaceError, as before)
from .event_queue import QUEUE_RECORDS, EventQueue
from .online_check import ONLINE_FOLDED_HINT, OnlineCheck  # noqa: F401
from .stacks import DEFAULT_DEPTH, StackCapture

FLUSH_BYTES = 256 * 1024
FLUSH_INTERVAL = 0.5
#: How long stopping waits for another thread that is writing records (then it gives up
#: on the END record rather than hang the process).
STOP_WAIT = 5.0

#: Why a recording left by a ``KeyboardInterrupt`` stopped (the END record's ``stopped``).
INTERRUPTED = "interrupted (KeyboardInterrupt)"

_current: Optional["Recorder"] = None
_current_lock = threading.Lock()


def current() -> Optional["Recorder"]:
    """The recorder active in this process, if any."""
    return _current


class Recorder(EventQueue, RuntimeCallbacks):
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
        self._init_queue(1 if online is not None else QUEUE_RECORDS)
        # Stack key of the op the dispatch mode is handling in this thread, for the
        # allocations its outputs report (same user stack: no second walk).
        self._pinned = threading.local()
        self.checker = OnlineCheck(online)
        self._findings = self.checker.pending  # the dispatch mode reports them after each op
        #: Online mode: every distinct finding reported so far, in order (the pytest plugin
        #: fails a test on them even when the test caught the RaceError).
        self.found: list = self.checker.found
        self._flusher: Optional[threading.Thread] = None
        self._stop_flusher = threading.Event()
        self.dispatch = None  # the per-thread mode manager (dispatch.ModeInstaller)
        self.collectives = None  # c10d collectives as the process group runs them
        self._recent_works: list = []  # Works kept alive until the next op (collectives.py)
        self._host_noted = False  # the trace says pinned memory is watched (HOST_WATCH_NOTE)
        #: The page-fault watch of pinned memory (:mod:`.host_faults`), or why there is none.
        self.pages: Optional[host_faults.PageWatch] = None
        self._pages_off: Optional[str] = None
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
            self._pages_off = host_faults.unavailable()
            header = {"device_count": be.device_count(), "default_streams": dict(be.default_streams()),
                      "host_accesses": HOST_WATCH_TORCH if self._pages_off else HOST_WATCH_FAULTS}
            if self.path is not None:
                try:
                    self.writer = sinks.open_trace(self.path, be.name, self.metadata, header,
                                                   flush_bytes=self.flush_bytes, flush_interval=self.flush_interval)
                except OSError as e:  # unwritable path, full disk: warn once, run unrecorded
                    self._fail(e, where=f" ({self.path})")
                    status.report(failed=_describe(e), trace=_name(self.path))
                    return self
            if self.online is not None:
                from ..trace_format.header import build_header

                hdr = self.writer.header if self.writer else build_header(be.name, self.metadata, header)
                self.engine = self.checker.start(hdr)
            self.enc = sinks.connect(self.writer, self.engine)
            if self.writer is not None and self.writer.sink.durable and self.online is None:
                self._commit_per_drain(self.writer.sink)  # committed per drain (see the module docstring)
            self._pid = os.getpid()
            if self._pages_off is None:
                try:
                    self.pages = host_faults.PageWatch(self._fault_access)
                except Exception as e:  # cannot happen where unavailable() said it can: say why
                    self._pages_off = f"cannot start ({_describe(e)})"
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
            from . import compiled

            compiled.install()
            from . import triton_kernels

            triton_kernels.install()
            process_hooks.install()
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

    def stop(self, *, signum: Optional[int] = None, reason: Optional[str] = None,
             raised: Optional[str] = None, keep_findings: bool = False) -> None:
        """Stop recording: write the END record and close the trace.

        Idempotent and re-entrant: a second call -- from a signal handler, from a callback
        fired while stopping, from another thread -- returns at once. It waits at most
        :data:`STOP_WAIT` for another thread that is writing; past that, the trace is
        left with everything committed so far and no END record. ``signum``: the signal
        that is ending the process (noted in the END record); ``reason``: why recording
        stops before the program does (a NOTE and the END record's ``stopped``); ``raised``: the
        uncaught exception the program ends with (the END record's ``raised``);
        ``keep_findings``: online mode, the findings of the end of the recording (frees
        judged then) go to ``found`` for a caller that reports them itself, like the pytest
        plugin, instead of being warned about. A joined recorder (see :meth:`start`) only
        leaves the recording it joined.
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
                    end = {"signal": signal.Signals(signum).name} if signum else {}
                    if reason:
                        self.writer.note("warning", f"recording stopped: {reason}")
                        end["stopped"] = reason
                    if raised:
                        end["raised"] = raised
                    self.writer.close(end=end or None)
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
            if keep_findings:
                self._take_new_findings()
            else:
                self._report_findings(allow_raise=False)
        self.checker.summarize()

    def _unhook(self) -> None:
        """Take the dispatch mode out and detach the runtime hooks (never raises)."""
        try:
            if self.dispatch is not None:
                self.dispatch.stop()
        except Exception:
            pass
        if self.pages is not None:  # no page stays protected once nothing records its faults
            self.pages.close(drain=not self.failed)
        try:
            self.backend.uninstall()
        except Exception:
            pass
        from . import triton_kernels

        triton_kernels.uninstall()

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # Ctrl-C leaving the ``with`` block: the program may still catch it, so the trace
        # says recording was interrupted rather than that the process ended by SIGINT.
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.stop(reason=INTERRUPTED if interrupted else None)

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

    def note(self, level: str, text: str) -> None:
        """A NOTE record in the trace, in order with the events around it (no trace: nothing)."""
        if self.writer is not None and self.enc is not None and self.active:
            self._post(self.enc.note, (level, text))
            self._drain_now()

    def after_fork_in_child(self) -> None:
        """A forked child never writes into the parent's trace: drop everything."""
        self.active = False
        self._stopping = True
        self.writer = None
        self.engine = self.checker.engine = None
        if self.pages is not None:
            self.pages.close(drain=False)
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

    def host_op(self, name: str, others: list, acc, args: tuple = (), kwargs: Optional[dict] = None) -> bool:
        """Pinned memory among an op's non-device tensors (``others``, see :mod:`.host_memory`).

        A device op (``acc`` holds its device tensors): its pinned tensors join ``acc``,
        accessed on the stream; returns whether it is a copy between host and device that
        the host waits for (the caller then reports the stream's synchronization after the
        copy's record: a runtime reports it from inside the copy, before the recorder
        records the copy, and the host is ordered after the copy itself). Otherwise the
        watched ones are the host's access, queued as a HOST_ACCESS record; returns False.
        """
        hw = self.backend.host_watch
        if acc:
            pinned = hw.copied(others)
            blocking = host_memory.blocking_copy(name, args, kwargs)
            if hw.fresh and self.active:  # pinned memory first seen: its size in the trace
                for base, nbytes in hw.fresh:
                    self._post(self._emit, ("host_block", (base, nbytes), None))
                hw.fresh.clear()
            if pinned:
                if not blocking and self.pages is not None:  # the copy may run after the op returns
                    be = self.backend
                    device = 0 if be.single_device else be.tensor_device(acc[0][0])
                    pw = self.pages
                    pw.protect(pinned, (device, be.current_stream(device)))
                    if pw.stopped or pw.refused:  # the trace says what the watch did not see, once
                        from .explicit import note_once

                        if pw.refused:
                            note_once(self, "host-faults-refused", HOST_FAULTS_PART_NOTE + pw.refused)
                        if pw.stopped:  # from here on: torch ops only
                            note_once(self, "host-faults", HOST_FAULTS_OFF_NOTE + pw.stopped)
                            self.pages = None
                acc[:0] = pinned  # (arguments before the op's fresh outputs, as the recorder lists them)
                if not self._host_noted:
                    self._host_noted = True
                    from .explicit import note_once

                    note_once(self, "host", HOST_WATCH_NOTE)
                    if self._pages_off:
                        note_once(self, "host-faults", HOST_FAULTS_OFF_NOTE + self._pages_off)
            return blocking
        mine = hw.host_side(others)
        if mine and self.active:
            sp = host_memory.spans(mine)
            if sp:
                key = self.stacks.key(1) if self.stacks.depth else None
                self._post(self._host_access, (name, sp, key))
                if self._kmax == 1:  # durable or online: in the trace before the op returns
                    self._drain_now()
        return False

    def _fault_access(self, name: str, spans: list, where: Optional[tuple] = None) -> None:
        """A host access of pinned memory seen through a page fault (:mod:`.host_faults`),
        queued as a HOST_ACCESS record with the stack of where it was drained, the faulting
        frame put in where it is one of that stack's (also while stopping: :meth:`stop`
        drains the queue after it lifted the watch)."""
        if self.failed:
            return
        key = self.stacks.key(1) if self.stacks.depth else None
        if key and where is not None:
            key = host_faults.at_fault(key, where)
        self._post(self._host_access, (name, spans, key))
        if self._kmax == 1:
            self._drain_now()

    # ------------------------------------------------------------------ online mode

    def _take_new_findings(self) -> list:
        """The engine's findings since last time that were not reported yet (also kept in
        ``found``)."""
        return self.checker.take_new()

    def settle(self) -> list:
        """Online mode: process every queued event and return the findings not reported
        yet, without raising or warning about them (a caller that reports them itself,
        like the pytest plugin, calls this before :meth:`stop`)."""
        self._drain_now()
        return self._take_new_findings()

    def _report_findings(self, allow_raise: bool = True) -> None:
        """Raise (mode "raise") or warn about findings the engine reported since last time."""
        self.checker.report(allow_raise)


# ---------------------------------------------------------------------- joining, warnings

#: Recorders that joined a running recording (npusan.record()/enable() inside it), newest last.
_joined: list = []
_warned: set = set()


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
