"""npusan: a stream-synchronization sanitizer for PyTorch on Ascend NPUs and CUDA GPUs.

The package is layered recorder -> trace_format -> analyzer -> cli. Importing ``npusan``
stays cheap and never imports torch; the recording entry points import it lazily.

Recording from code::

    with npusan.record("trace.npusan"):        # backend="auto"|"cuda"|"npu"|"sim"
        train()

    npusan.enable(mode="raise")                 # online: raise npusan.RaceError at the race
    ...
    npusan.disable()

Declaring a kernel the dispatcher does not see (an extension's own launch)::

    npusan.kernel("my_op", reads=[x], writes=[out])   # or @npusan.kernel("my_op", reads=["x"], ...)

Analyzing from code (``docs/api.md``)::

    report = npusan.analyze("trace.npusan")     # what `npusan analyze` reports, as objects
    for f in report.findings:
        print(f.kind.value, f.count, f.title)

PYTEST_DONT_REWRITE: npusan is often imported before pytest starts (the recording hook), and
its plugin's assertions need no rewriting; this marker keeps pytest from warning about it.
"""

from __future__ import annotations

from typing import Any, Optional

from ._version import __version__
from .recorder.errors import RaceError

__all__ = ["__version__", "record", "enable", "disable", "RaceError", "analyze", "load", "Report", "Finding",
           "Kind", "kernel"]


def record(
    path: Any = "trace.npusan",
    *,
    backend: Any = "auto",
    online: Optional[str] = None,
    stack_depth: int = 32,
    keep_internal_frames: bool = False,
    metadata: Optional[dict] = None,
    emulate: Optional[str] = None,
):
    """A recorder writing ``path`` (a path or a binary file object); use it as a context
    manager, or call ``.start()`` / ``.stop()``. ``online="raise"|"warn"`` also runs the
    analyzer in process. Ops from every thread started after it begins are recorded.

    Started while this process is already recording (under ``npusan record``, say), it
    joins that recording: ``path`` is not written (a note on stderr says so) and stopping
    it leaves the running recording alone.

    ``emulate="cuda"`` runs the program's CUDA work on an emulated device on the CPU
    (see docs/emulation.md) and records it with the CUDA backend; ``emulate="npu"`` does
    the same for a torch_npu program (an emulated ``torch_npu``, the NPU backend)."""
    from .recorder.session import Recorder

    if emulate is not None:
        from .emulate.install import install

        install(emulate)
        backend = emulate
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
    """Stop whatever recorder is active in this process (trace closed cleanly).

    After an :func:`enable` (or :func:`record`) that joined a recording already running
    in this process (under ``npusan record``, say), it only undoes that join: the running
    recording goes on."""
    import sys

    session = sys.modules.get("npusan.recorder.session")
    if session is None:
        return
    if session._joined:
        session._joined[-1].stop()
        return
    rec = session.current()
    if rec is not None:
        rec.stop()


def analyze(*paths: Any, **options: Any):
    """Analyze trace files as ``npusan analyze`` does; returns a :class:`npusan.api.Report`.

    Keywords: ``check_leaks``, ``group``, ``suppress`` (a suppression file), ``baseline`` (a
    JSON report of an earlier run), ``min_count``, ``source_root``, ``map_path``, ``jobs``.
    See :func:`npusan.api.analyze`.
    """
    from .api import analyze as _analyze

    return _analyze(*paths, **options)


def load(path: Any):
    """Open a trace for reading (header, then records on iteration); see :func:`npusan.api.load`."""
    from .api import load as _load

    return _load(path)


def __getattr__(name: str) -> Any:
    # The API's classes, imported on first use so that ``import npusan`` stays cheap.
    if name in ("Report", "Finding", "Kind"):
        from . import api

        return getattr(api, name)
    if name == "kernel":  # declaring work that bypasses the dispatcher (npusan.annotate)
        from .annotate import kernel

        return kernel
    raise AttributeError(f"module 'npusan' has no attribute {name!r}")
