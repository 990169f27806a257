"""What the recorder hooks into the process: exit, signals and fork.

At exit the active recording is stopped (its END record written; a program ended by an
uncaught ``KeyboardInterrupt`` is noted there as ended by SIGINT). A forked child never
writes into its parent's trace: the child's copy of the recorder drops everything and
the child starts with no recording. It is not recorded into a trace of its own either:
only the forking thread survives a fork, so the child's copy of the recorder may hold
locks of threads that are gone, hooks half-way through an op and a device runtime that
cannot be used after a fork (CUDA's). Instead, the first fork of a recording process says
so, once: a NOTE in its trace and a warning on stderr naming the way to record such
workers (multiprocessing's spawn or forkserver start methods, whose workers record a
trace each). Signals: see :mod:`.signals`.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

from . import signals

_installed = False


def install() -> None:
    """atexit, signal and fork handling, once per process (signals: every start)."""
    global _installed
    signals.install()
    if _installed:
        return
    _installed = True
    atexit.register(_at_exit)
    _hook_os_exit()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def _hook_os_exit() -> None:
    """``os._exit`` finishes the trace first, as a normal exit does (atexit), when it is
    safe: called on the main thread and not from inside the recorder (a signal handler that
    interrupted it). multiprocessing's forkserver ends each worker by ``os._exit``: every
    worker's trace read as one of a process killed or crashed. A forked child (not
    recorded) has no recording to finish; ``os._exit`` from another thread leaves the
    trace as it is (its last complete record), as before."""
    real = os._exit
    if getattr(real, "_npusan_real", None) is not None:
        return

    def _exit(status: int) -> None:
        _finish_before_os_exit()
        real(status)

    _exit.__doc__ = real.__doc__
    _exit._npusan_real = real  # type: ignore[attr-defined]
    os._exit = _exit  # type: ignore[assignment]


def _finish_before_os_exit() -> None:
    try:
        from . import session

        rec = session._current
        if rec is None or threading.current_thread() is not threading.main_thread():
            return
        if signals.inside_recorder(sys._getframe(2)):
            return
        rec.stop()
    except BaseException:  # never in the way of the exit
        pass


def _at_exit() -> None:
    from . import session

    rec = session._current
    if rec is not None:
        stop_at_exit(rec)


def stop_at_exit(rec) -> None:
    """Stop ``rec`` as the process exits, noting a Ctrl-C that ends it (see below), or the
    uncaught exception it ends with (else its trace would read as a run that finished)."""
    if ended_by_keyboard_interrupt():
        rec.stop(signum=signal.SIGINT)
    else:
        rec.stop(raised=uncaught_exception())


def _ending_exception() -> BaseException | None:
    """The uncaught exception the program is ending with, if any: Python prints it, setting
    ``sys.last_exc`` / ``sys.last_value``, before it runs the exit handlers."""
    return getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)


def uncaught_exception() -> str | None:
    """The type name of the uncaught exception the program is ending with, if any;
    ``SystemExit`` is an exit, not a crash."""
    exc = _ending_exception()
    if exc is None or isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return None
    try:
        return type(exc).__qualname__[:100]
    except Exception:  # pragma: no cover - a type whose name cannot be read
        return "exception"


def ended_by_keyboard_interrupt() -> bool:
    """Whether the program is ending by an uncaught ``KeyboardInterrupt`` (Ctrl-C).

    Python prints an uncaught exception (setting ``sys.last_exc`` / ``sys.last_value``)
    before it runs the exit handlers, and after them ends the process by SIGINT when that
    exception was a ``KeyboardInterrupt``: the END record then says SIGINT, as for SIGTERM.
    """
    return isinstance(_ending_exception(), KeyboardInterrupt)


#: Whether this process has already said that a forked child is not recorded.
_fork_noted = False

FORK_NOTE = "this process forked a child process, which is not recorded (forked processes stop recording)"
FORK_HINT = ("to record such workers, start them with multiprocessing's 'spawn' or 'forkserver' method "
             "(e.g. DataLoader(multiprocessing_context='spawn')) under npusan record")


def _after_fork_in_parent() -> None:
    """The first fork of a recording process: a NOTE in its trace and one warning."""
    global _fork_noted
    from . import session

    rec = session._current
    if _fork_noted or rec is None or not rec.active or _forked_to_exec():
        return
    _fork_noted = True
    try:
        sys.stderr.write(f"npusan: warning: process {os.getpid()}: a forked child process is not recorded; "
                         f"{FORK_HINT}\n")
        sys.stderr.flush()
    except Exception:
        pass
    rec.note("warning", f"{FORK_NOTE}; {FORK_HINT}")


def _forked_to_exec() -> bool:
    """Whether this fork is ``subprocess`` starting a program (a ``preexec_fn`` makes it run
    the fork handlers): the child runs a new program, recorded by the start-up hook if
    it is Python under ``npusan record``."""
    frame = sys._getframe(2)  # the caller of os.fork (or of subprocess's _fork_exec)
    return frame is not None and frame.f_code.co_name == "_execute_child" and \
        os.path.basename(frame.f_code.co_filename) == "subprocess.py"


def _after_fork_in_child() -> None:
    from . import session

    rec = session._current
    if rec is not None:
        rec.after_fork_in_child()
    session._current = None
    session._joined.clear()
