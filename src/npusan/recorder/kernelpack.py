"""The kill-safe recorder's KERNEL records, packed by compiled code when it is built.

:data:`pack` is ``_kernelpack.pack`` (see ``_kernelpack.c``): the msgpack bytes of the
record :meth:`Recorder._kernel_record <npusan.recorder.session.Recorder._kernel_record>`
would build for a kernel that needs no new definition, else None. Where the extension is
not built (no compiler when the package was installed) it is None and every kernel goes
through the Python encoder: the same trace, a little slower to record. ``NPUSAN_RECORDER=python``
turns it off (to compare the two).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from ..trace_format.records import KERNEL

pack: Optional[Callable[..., Optional[bytes]]] = None
#: ``_kernelpack.put`` (copies packed records into the trace's mapping) and
#: ``_kernelpack.drain`` (encodes the recorder's queue), set with ``pack``.
put: Optional[Callable[..., int]] = None
drain: Optional[Callable[..., bytes]] = None

if os.environ.get("NPUSAN_RECORDER") != "python":
    try:
        from . import _kernelpack
    except ImportError:  # not built: the Python encoder does it all
        pass
    else:
        if _kernelpack.KERNEL == KERNEL:
            pack = _kernelpack.pack
            put = _kernelpack.put
            drain = _kernelpack.drain
