"""What the recorder hooks into the process: exit, signals and fork.

At exit the active recording is stopped (its END record written). A forked child never
writes into its parent's trace: the child's copy of the recorder drops everything and
the child starts with no recording. Signals: see :mod:`.signals`.
"""

from __future__ import annotations

import atexit
import os

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
        rec.stop()


def _after_fork_in_child() -> None:
    from . import session

    rec = session._current
    if rec is not None:
        rec.after_fork_in_child()
    session._current = None
    session._joined.clear()
