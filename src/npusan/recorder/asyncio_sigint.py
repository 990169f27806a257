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
recorder. Python 3.9 and 3.10 have no ``Runner`` (their ``asyncio.run`` leaves SIGINT
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
_original_run: Optional[Callable[..., Any]] = None
_runner_class: Optional[type] = None


def install(handler: Callable[..., Any]) -> None:
    """Have ``Runner.run`` swap ``handler`` (npusan's SIGINT handler) for the default one
    while it runs; now if asyncio is imported, else right after it is."""
    global _handler
    _handler = handler
    try:
        patch_after_import((MODULE,), _patch)
    except Exception:  # asyncio stays as it is: Ctrl-C there raises KeyboardInterrupt
        pass


def uninstall() -> None:
    """Stop swapping; put ``Runner.run`` back (a call running now finishes wrapped, and
    does not put npusan's handler back)."""
    global _handler, _original_run, _runner_class
    _handler = None
    try:
        unhook_after_import(_patch)
        cls, orig = _runner_class, _original_run
        if cls is not None and orig is not None and cls.__dict__.get("run") is not orig:
            cls.run = orig  # type: ignore[attr-defined]
    except Exception:
        pass
    _original_run = _runner_class = None


def _patch(module: ModuleType) -> None:
    global _original_run, _runner_class
    cls = getattr(module, "Runner", None)
    orig = getattr(cls, "run", None) if cls is not None else None
    if orig is None or getattr(orig, "_npusan_wrapped", False) or _handler is None:
        return
    _runner_class, _original_run = cls, orig

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

    run._npusan_wrapped = True  # type: ignore[attr-defined]
    cls.run = run  # type: ignore[union-attr]


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
