"""``asyncio.run`` under npusan's SIGINT handler: Ctrl-C cancels the main task, as without npusan.

``asyncio.Runner.run`` (Python 3.11+) installs its own SIGINT handler -- the first Ctrl-C
cancels the main task, so the program's ``except asyncio.CancelledError`` cleanup runs --
only when SIGINT is at ``signal.default_int_handler``. While recording it is at npusan's
handler (:mod:`.signals`), so asyncio would leave it alone and a Ctrl-C would raise a bare
``KeyboardInterrupt`` wherever the event loop happens to be, skipping that cleanup.

So while npusan's handler stands in for ``default_int_handler``, ``Runner.run`` is wrapped
to put ``default_int_handler`` back for its duration (in the main thread only, as asyncio
itself does); asyncio then installs its handler and restores ``default_int_handler`` when
it returns, and the wrapper puts npusan's back if recording is still on and nobody else
has changed SIGINT meanwhile. asyncio's handler only cancels a task and wakes the loop on a
first Ctrl-C, so it needs none of npusan's putting off of a signal that arrives inside the
recorder; but it is made to ignore the copy ``npusan record`` passes on of a SIGINT sent to
the whole process group, which it would take for a second Ctrl-C (raising
``KeyboardInterrupt`` in the middle of the cleanup). Python 3.9 and 3.10 have no ``Runner`` (their ``asyncio.run`` leaves SIGINT
alone): nothing is patched there. asyncio is not imported here: the patch is applied when
the program imports it.
"""

from __future__ import annotations

import functools
import signal
import threading
from types import ModuleType
from typing import Any, Callable, Optional

from .after_import import patch_after_import, unhook_after_import

MODULE = "asyncio.runners"

#: Whether npusan's handler should be given back after ``Runner.run``: set by the caller
#: (:mod:`.signals`) while its SIGINT handler replaces ``default_int_handler``.
_handler: Optional[Callable[..., Any]] = None
#: Whether a SIGINT is the copy ``npusan record`` passed on of one this process got too
#: (see :func:`.signals._echo`): asyncio's handler must not take it for a second Ctrl-C.
_is_echo: Optional[Callable[[], bool]] = None
_originals: dict = {}  # attribute name -> the Runner method it replaced
_runner_class: Optional[type] = None


def install(handler: Callable[..., Any], is_echo: Callable[[], bool]) -> None:
    """Have ``Runner.run`` swap ``handler`` (npusan's SIGINT handler) for the default one
    while it runs, and asyncio's handler ignore a SIGINT for which ``is_echo()`` is true;
    now if asyncio is imported, else right after it is."""
    global _handler, _is_echo
    _handler, _is_echo = handler, is_echo
    try:
        patch_after_import((MODULE,), _patch)
    except Exception:  # asyncio stays as it is: Ctrl-C there raises KeyboardInterrupt
        pass


def uninstall() -> None:
    """Stop swapping; put ``Runner.run`` back (a call running now finishes wrapped, and
    does not put npusan's handler back)."""
    global _handler, _is_echo, _runner_class
    _handler = _is_echo = None
    try:
        unhook_after_import(_patch)
        cls = _runner_class
        for name, orig in _originals.items():
            if cls is not None and cls.__dict__.get(name) is not orig:
                setattr(cls, name, orig)
    except Exception:
        pass
    _originals.clear()
    _runner_class = None


def _patch(module: ModuleType) -> None:
    global _runner_class
    cls = getattr(module, "Runner", None)
    orig = getattr(cls, "run", None) if cls is not None else None
    orig_sigint = getattr(cls, "_on_sigint", None) if cls is not None else None
    if orig is None or orig_sigint is None or getattr(orig, "_npusan_wrapped", False) or _handler is None:
        return
    _runner_class = cls
    _originals.update(run=orig, _on_sigint=orig_sigint)

    @functools.wraps(orig)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        handler = _handler
        swapped = False
        try:
            if (handler is not None and threading.current_thread() is threading.main_thread()
                    and signal.getsignal(signal.SIGINT) is handler):
                signal.signal(signal.SIGINT, signal.default_int_handler)
                swapped = True
        except Exception:
            swapped = False
        try:
            return orig(self, *args, **kwargs)
        except BaseException as e:
            _drop_frame(e, run.__code__)
            raise
        finally:
            if swapped:
                try:
                    if _handler is handler and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                        signal.signal(signal.SIGINT, handler)
                except Exception:
                    pass

    @functools.wraps(orig_sigint)
    def _on_sigint(self: Any, signum: int, frame: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            is_echo = _is_echo
            if is_echo is not None and signum == signal.SIGINT and is_echo():
                return None
        except Exception:
            pass
        try:
            return orig_sigint(self, signum, frame, *args, **kwargs)
        except BaseException as e:  # a second Ctrl-C: KeyboardInterrupt, as asyncio raises it
            _drop_frame(e, _on_sigint.__code__)
            raise

    run._npusan_wrapped = True  # type: ignore[attr-defined]
    cls.run = run  # type: ignore[union-attr]
    cls._on_sigint = _on_sigint  # type: ignore[union-attr]


def _drop_frame(exc: BaseException, code: Any) -> None:
    """Take this wrapper's entry out of ``exc``'s traceback: the program's traceback reads as
    without npusan (a bare ``raise`` adds no entry for the frame again, Python 3.11+)."""
    try:
        tb = exc.__traceback__
        if tb is not None and tb.tb_frame.f_code is code:
            exc.__traceback__ = tb.tb_next
            return
        while tb is not None and tb.tb_next is not None:
            if tb.tb_next.tb_frame.f_code is code:
                tb.tb_next = tb.tb_next.tb_next
                return
            tb = tb.tb_next
    except Exception:
        pass
