"""The trace header: building it (writer side) and validating it (reader side).

The header is the one msgpack map that follows the magic bytes; ``docs/trace-format.md``
lists its keys. Only ``format`` is mandatory for readers: third-party writers may omit the
rest, and every consumer must tolerate missing or oddly typed informational keys.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Mapping, Optional

from . import records as R
from .errors import TraceFormatError, UnsupportedVersionError


def build_header(backend: str, metadata: Optional[Mapping] = None, overrides: Optional[Mapping] = None) -> dict:
    """The header npusan writes: facts about this process, then the caller's overrides.

    torch's version is recorded only if torch is already imported: writing a trace must
    never pay for (or require) importing torch.
    """
    from .. import __version__

    torch = sys.modules.get("torch")
    torch_version = getattr(torch, "__version__", None) if torch is not None else None
    header: dict[str, Any] = {
        "format": [R.FORMAT_MAJOR, R.FORMAT_MINOR],
        "writer": f"npusan {__version__}",
        "backend": str(backend),
        "torch": str(torch_version) if torch_version is not None else None,
        "device_count": None,
        "default_streams": {},
        "pid": os.getpid(),
        "rank": _rank(),
        "host": _hostname(),
        "argv": [str(a) for a in sys.argv],
        "start_time": time.time(),
        "metadata": dict(metadata or {}),
    }
    if overrides:
        header.update(overrides)
        header["format"] = [R.FORMAT_MAJOR, R.FORMAT_MINOR]  # never overridable: it is what we write
    return header


def _rank() -> Optional[int]:
    value = os.environ.get("RANK")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _hostname() -> Optional[str]:
    try:
        return socket.gethostname()
    except OSError:
        return None


def format_version(header: Mapping) -> tuple[int, int]:
    """Validate the header's ``format`` entry; return ``(major, minor)``.

    A newer major version is refused (:class:`UnsupportedVersionError`); a newer minor
    version is accepted, since minors only add record types and trailing fields that this
    reader skips.
    """
    fmt = header.get("format")
    if (
        not isinstance(fmt, (list, tuple))
        or len(fmt) < 2
        or not all(type(v) is int and v >= 0 for v in fmt[:2])
    ):
        raise TraceFormatError(f"the trace header has no valid format version (got {fmt!r})")
    major, minor = fmt[0], fmt[1]
    if major > R.FORMAT_MAJOR:
        raise UnsupportedVersionError(
            f"the trace uses format {major}.{minor}, newer than the format this npusan reads "
            f"({R.FORMAT_MAJOR}.{R.FORMAT_MINOR}): upgrade npusan to analyze it"
        )
    if major < 1:
        raise TraceFormatError(f"the trace declares format {major}.{minor}, which does not exist")
    return major, minor


def default_stream_handles(header: Mapping) -> dict[int, int]:
    """``{device: handle}`` of each device's default stream, as far as the header says."""
    ds = header.get("default_streams")
    if not isinstance(ds, Mapping):
        return {}
    return {d: h for d, h in ds.items() if type(d) is int and type(h) is int}


def is_default_stream(header: Mapping, device: int, handle: int) -> bool:
    """Whether ``(device, handle)`` is that device's default stream.

    ``default_streams`` in the header wins; for a device it does not mention, a CUDA
    trace's handle 0 is the default stream (CUDA's legacy default stream is 0 on every
    device), and other backends have no way to tell.
    """
    ds = default_stream_handles(header)
    if device in ds:
        return ds[device] == handle
    return header.get("backend") == "cuda" and handle == 0
