"""What the recorder hooks into the process: exit, signals and fork.

At exit the active recording is stopped (its END record written; a program ended by an
uncaught ``KeyboardInterrupt`` is noted there as ended by SIGINT). A forked child never
writes into its parent's trace: the child's copy of the recorder drops everything and
the child starts with no recording. Signals: see :mod:`.signals`.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

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
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    from . import session

    rec = session._current
    if rec is not None:
        stop_at_exit(rec)


def stop_at_exit(rec) -> None:
    """Stop ``rec`` as the process exits, noting a Ctrl-C that ends it (see below)."""
    rec.stop(signum=signal.SIGINT if ended_by_keyboard_interrupt() else None)


def ended_by_keyboard_interrupt() -> bool:
    """Whether the program is ending by an uncaught ``KeyboardInterrupt`` (Ctrl-C).

    Python prints an uncaught exception (setting ``sys.last_exc`` / ``sys.last_value``)
    before it runs the exit handlers, and after them ends the process by SIGINT when that
    exception was a ``KeyboardInterrupt``: the END record then says SIGINT, as for SIGTERM.
    """
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(exc, KeyboardInterrupt)


def _after_fork_in_child() -> None:
    from . import session

    rec = session._current
    if rec is not None:
        rec.after_fork_in_child()
    session._current = None
    session._joined.clear()
