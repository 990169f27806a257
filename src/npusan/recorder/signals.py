"""SIGTERM and Ctrl-C while recording: the program sees exactly what it would without npusan.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread
is -- possibly inside the recorder (half-way through encoding a record, or in the weak
reference callback by which the simulated device reports a free, or in the CUDA/NPU trace
hook called from C++). A ``KeyboardInterrupt`` raised there would either be swallowed
(Python prints "Exception ignored" for an exception in a weakref callback, and the
runtimes' hook registries log it) or leave the trace half-written.

So while recording, SIGINT and SIGTERM go through :func:`_on_signal` first. When the
interrupted frame, or one of its callers, is npusan's recording code (or a runtime's
``fire_callbacks`` calling it, or a ``weakref.finalize`` callback, where an exception is
only printed), the signal is sent again to the main thread (``signal.pthread_kill``, from
a short timer thread) and handled again at the next bytecode that runs -- within
microseconds, once the recorder has returned to the program. A real signal, not
``_thread.interrupt_main``: that only sets Python's flag, and a main thread that has gone
on to block in a system call (a pool worker waiting for its next task, when the pool
sends SIGTERM) would never see it, nor end. Elsewhere:

* SIGINT calls the handler that was installed before (by default raising
  ``KeyboardInterrupt`` in the program, with a traceback that does not show this module),
  except for the copy ``npusan record`` passed on of a SIGINT that reached this process
  directly too (a signal to the whole process group: see :func:`_echo`);
* SIGTERM (only when the program had left it at the default) restores the default
  disposition first -- a second SIGTERM now ends the process at once, as it would without
  npusan -- then finishes the trace (marking that the process ended by SIGTERM) and ends
  the process by SIGTERM, so its exit status is unchanged. Everything committed before is
  already in the file (see :mod:`npusan.trace_format.writer`), so even a kill during that
  finish loses nothing but the END record.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Callable, Optional

from . import asyncio_sigint, status

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)
#: Source files of the code that records: a signal arriving there waits until it returns.
#: The analyzer's engine in online mode runs below the recorder's frames, so it is covered
#: without being listed (``npusan.analyze()`` called by the program stays interruptible);
#: ``activate.py`` and the start-up hook run the program's own imports, ``asyncio_sigint.py``
#: the program's ``asyncio.run``: not included.
_GUARDED_FILES = tuple(os.path.join(_PKG, "trace_format", f) for f in ("writer.py", "encoder.py"))
_GUARDED_EXCLUDED = (os.path.join(_HERE, "activate.py"), os.path.join(_HERE, "asyncio_sigint.py"),
                     os.path.join(_HERE, "_boot") + os.sep, __file__)
_MAX_DEPTH = 400
#: The simulated device's hook registry (``npusan.sim.Trace.fire``, as CUDA's
#: ``fire_callbacks``), found by file and name: importing npusan.sim here would import torch.
_SIM_FILE = os.path.join(_PKG, "sim.py")
#: A finalizer's call (the simulated device reports an event's deletion through one): an
#: exception raised in it is printed as "Exception ignored" and lost, a Ctrl-C with it.
_FINALIZER_CALL = weakref.finalize.__call__.__code__

#: Seconds within which a SIGINT passed on by ``npusan record`` is taken for the copy of one
#: this process has just handled (a signal to the process group reaches both).
ECHO_WINDOW = 1.0

_previous: dict = {}  # signum -> the handler we replaced
_sigint_at: Optional[float] = None  # when this process last handled a SIGINT
_echoes = 0  # the count of the last forwarded SIGINT taken for a copy
_reraising: set = set()  # signals this module is raising again (not new ones)
_pending: set = set()  # signals put off because they arrived inside the recorder
_installed = False


def _guarded_file(filename: str, _cache: dict = {}) -> bool:  # noqa: B006 - a deliberate memo
    v = _cache.get(filename)
    if v is None:
        v = (filename.startswith(_HERE + os.sep) and not filename.startswith(_GUARDED_EXCLUDED)) or (
            filename in _GUARDED_FILES
        )
        _cache[filename] = v
    return v


def inside_recorder(frame: Any) -> bool:
    """Whether ``frame`` or one of its callers is recording code (see the module docstring)."""
    depth = 0
    while frame is not None and depth < _MAX_DEPTH:
        code = frame.f_code
        if (_guarded_file(code.co_filename) or code.co_name == "fire_callbacks"  # + the runtimes' hook registries
                or code is _FINALIZER_CALL or (code.co_name == "fire" and code.co_filename == _SIM_FILE)):
            return True
        frame = frame.f_back
        depth += 1
    return False


#: Seconds before a signal that arrived inside the recorder is raised again.
RETRY_DELAY = 0.001


def _on_signal(signum: int, frame: Any) -> None:
    if signal.getsignal(signum) is not _on_signal:
        # Called by the program's own handler, which found this one installed and chains
        # to it as "the previous handler" (as PyTorch Lightning's does). Act as the handler
        # it replaced would have: the program's default_int_handler raises
        # KeyboardInterrupt; a default SIGTERM has no Python handler to chain to (the
        # program would have seen SIG_DFL and called nothing), so nothing happens and the
        # program's graceful shutdown goes on.
        prev = _previous.get(signum)
        if callable(prev):
            prev(signum, frame)
        return
    again = signum in _reraising  # ours, put off from inside the recorder (below)
    _reraising.discard(signum)
    if signum == signal.SIGINT and not again and _echo():
        return
    if inside_recorder(frame):
        # Raised again from another thread a moment later, when the recorder has
        # returned to the program (or deferred again). Not from here: Python would run
        # the handler again right after the call that re-raises it, still in here.
        _pending.add(signum)
        try:
            t = threading.Timer(RETRY_DELAY, _raise_again, (signum,))
            t.daemon = True
            t.start()
            return
        except Exception:  # no thread at interpreter shutdown: handle it now
            pass
    _pending.discard(signum)
    if signum == signal.SIGTERM:
        _terminate(signum)
        return
    prev = _previous.get(signum)
    if callable(prev):
        try:
            prev(signum, frame)
        except BaseException as e:
            # The program's traceback, not npusan's: drop this frame (the first entry) and
            # re-raise with a bare ``raise``, which adds no entry for this frame (Python
            # 3.11+; 3.9 and 3.10 re-raise the traceback saved when it was caught, so this
            # frame still shows there). The signal is not delivered again instead: that
            # takes a timer thread (see above), so the exception would come later, at
            # another point of the program, with the program's handler left in place of ours.
            tb = e.__traceback__
            if tb is not None and tb.tb_frame.f_code is _on_signal.__code__:
                e.__traceback__ = tb.tb_next
            raise


def _raise_again(signum: int) -> None:
    _reraising.add(signum)
    if hasattr(signal, "pthread_kill"):
        try:
            signal.pthread_kill(threading.main_thread().ident, signum)
            return
        except Exception:  # the main thread has ended: Python's flag is all that is left
            pass
    _thread.interrupt_main(signum)


def _echo() -> bool:
    """Whether this SIGINT is ``npusan record`` passing on one that this process has just
    handled: it received that one too (from the process group) and noted it at about the
    same time. Each forwarded SIGINT is taken for at most one copy; a SIGINT sent to
    ``npusan record`` alone, or to this process alone, is never one."""
    global _sigint_at, _echoes
    now = time.monotonic()
    last, _sigint_at = _sigint_at, now
    fwd = status.forwarded_sigint()
    if fwd is None or last is None:
        return False
    count, when = fwd
    # A copy arrives just after npusan record sent it, and that was just after this process
    # got (or will get) the original. A forward that has not been matched by a copy (the
    # kernel merges a copy that arrives while the original is still pending) is stale once
    # older than the window, so it never swallows a later SIGINT.
    if count > _echoes and 0 <= now - when < ECHO_WINDOW and last >= when - ECHO_WINDOW:
        _echoes = count
        _sigint_at = last  # the interrupt it copies
        return True
    return False


def _terminate(signum: int) -> None:
    """Finish the trace, then die of ``signum`` as the program would have."""
    try:
        signal.signal(signum, signal.SIG_DFL)
    except Exception:
        pass
    from . import session

    rec = session.current()
    if rec is not None:
        try:
            rec.stop(signum=signum)
        except Exception:
            pass
    try:
        sys.stderr.flush()
        sys.stdout.flush()
    except Exception:
        pass
    os.kill(os.getpid(), signum)


def install() -> None:
    """Route SIGTERM (if at its default) and SIGINT (if Python handles it) through
    :func:`_on_signal`. A signal the program ignores (``SIG_IGN``, e.g. inherited from
    ``nohup`` or ``trap '' INT``) is left ignored. Main thread only; once per process."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    _installed = True
    for signum, wrap_if in ((signal.SIGTERM, _is_default), (signal.SIGINT, callable)):
        try:
            cur = signal.getsignal(signum)
            if cur is _on_signal or not wrap_if(cur):
                continue
            _previous[signum] = cur
            signal.signal(signum, _on_signal)
        except Exception:
            pass
    if _previous.get(signal.SIGINT) is signal.default_int_handler and signal.getsignal(signal.SIGINT) is _on_signal:
        asyncio_sigint.install(_on_signal, _echo)  # asyncio.run's Ctrl-C handling stays the program's


def uninstall() -> None:
    """Put back the handlers :func:`install` replaced, where ours is still in place."""
    global _installed
    if not _installed or threading.current_thread() is not threading.main_thread():
        return
    _installed = False
    asyncio_sigint.uninstall()
    for signum, prev in list(_previous.items()):
        try:
            if signal.getsignal(signum) is _on_signal:
                signal.signal(signum, prev)
        except Exception:
            pass
    _previous.clear()
    if signal.SIGTERM in _pending and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        # A SIGTERM that arrived while the recorder was stopping: the trace is finished
        # now; end the process by it, as it would have ended without npusan.
        _pending.clear()
        os.kill(os.getpid(), signal.SIGTERM)
    _pending.discard(signal.SIGINT)  # its timer raises it with the program's own handler


def _is_default(h: Optional[Callable]) -> bool:
    return h in (signal.SIG_DFL, None)
