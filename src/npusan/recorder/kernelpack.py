"""The kill-safe recorder's records, encoded by compiled code when it is built.

With a durable trace (a regular file) every op is encoded and committed before it
returns. ``_kernelpack.c`` does that for the common op: :data:`op` encodes the op's queued
allocations, frees and event hooks and its KERNEL record exactly as
:meth:`Recorder._drain <npusan.recorder.event_queue.EventQueue._drain>` and
:meth:`Recorder._kernel_record <npusan.recorder.event_queue.EventQueue._kernel_record>` would,
and copies the bytes into the trace's mapping; whatever needs a definition first (a new
op name, stream, stack or block, a strided view) is handed to the Python encoder in its
place. :data:`pack` and :data:`drain` are its two halves, for the tests.

Where the extension is not built (no compiler when the package was installed) these are
None and the Python encoder does everything: the same trace, a little slower to record.
``NPUSAN_RECORDER=python`` turns it off on purpose (to compare the two).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from ..trace_format.records import KERNEL

op: Optional[Callable[..., bool]] = None
pack: Optional[Callable[..., Optional[bytes]]] = None
drain: Optional[Callable[..., bytes]] = None

if os.environ.get("NPUSAN_RECORDER") != "python":
    try:
        from . import _kernelpack
    except ImportError:  # not built: the Python encoder does it all
        pass
    else:
        if _kernelpack.KERNEL == KERNEL:
            op, pack, drain = _kernelpack.op, _kernelpack.pack, _kernelpack.drain
