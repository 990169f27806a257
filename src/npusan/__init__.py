"""npusan: a stream-synchronization sanitizer for PyTorch on Ascend NPUs and CUDA GPUs.

The package is layered recorder -> trace_format -> analyzer -> cli. Importing ``npusan``
stays cheap and never imports torch; the recording entry points import it lazily.

Recording from code::

    with npusan.record("trace.npusan"):        # backend="auto"|"cuda"|"npu"|"sim"
        train()

    npusan.enable(mode="raise")                 # online: raise npusan.RaceError at the race
    ...
    npusan.disable()
"""

from __future__ import annotations

from typing import Any, Optional

from .recorder.errors import RaceError

__version__ = "0.1.0"

__all__ = ["__version__", "record", "enable", "disable", "RaceError"]


def record(
    path: Any = "trace.npusan",
    *,
    backend: Any = "auto",
    online: Optional[str] = None,
    stack_depth: int = 32,
    keep_internal_frames: bool = False,
    metadata: Optional[dict] = None,
):
    """A recorder writing ``path`` (a path or a binary file object); use it as a context
    manager, or call ``.start()`` / ``.stop()``. ``online="raise"|"warn"`` also runs the
    analyzer in process. Ops from every thread started after it begins are recorded."""
    from .recorder.session import Recorder

    return Recorder(
        path,
        backend=backend,
        online=online,
        stack_depth=stack_depth,
        keep_internal_frames=keep_internal_frames,
        metadata=metadata,
    )


def enable(mode: str = "raise", *, backend: Any = "auto", trace: Any = None, stack_depth: int = 32,
           keep_internal_frames: bool = False):
    """Online mode, like PyTorch's CUDA sanitizer: the analyzer runs in this process and a
    synchronization bug is reported at the op that causes it -- raising
    :class:`RaceError` (``mode="raise"``) or printing a warning and going on
    (``mode="warn"``). Messages show both stacks. ``trace=PATH`` also writes a trace.
    Returns the started recorder; :func:`disable` stops it."""
    from .recorder.session import Recorder

    return Recorder(
        trace,
        backend=backend,
        online=mode,
        stack_depth=stack_depth,
        keep_internal_frames=keep_internal_frames,
    ).start()


def disable() -> None:
    """Stop whatever recorder is active in this process (trace closed cleanly)."""
    import sys

    session = sys.modules.get("npusan.recorder.session")
    if session is None:
        return
    rec = session.current()
    if rec is not None:
        rec.stop()
