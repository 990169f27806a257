"""The trace header: building it (writer side) and validating it (reader side).

The header is the one msgpack map that follows the magic bytes; ``docs/trace-format.md``
lists its keys. Only ``format`` is mandatory for readers: third-party writers may omit the
rest, and every consumer must tolerate missing or oddly typed informational keys.
"""

from __future__ import annotations

import base64
import os
import socket
import sys
import time
from typing import Any, Mapping, Optional

from . import records as R
from .errors import TraceFormatError, UnsupportedVersionError
from .safe_text import clean

#: How much of a header's informational values a reader keeps (the rest is summarized):
#: a header is untrusted, and its metadata map is shown by ``npusan info`` and copied into
#: every JSON report, so it must stay small however large the file's map was.
MAX_HEADER_KEYS = 64
MAX_VALUE_ITEMS = 64  # entries kept per list or map
MAX_VALUE_DEPTH = 4  # nesting kept below a header key
MAX_VALUE_CHARS = 1024  # characters kept per string
MAX_VALUE_NODES = 2048  # values kept in the whole header
MAX_DEVICES = 1024  # default_streams entries
#: Header keys npusan's own code interprets, and the type each must have to be used.
_TYPED = {"backend": str, "writer": str, "torch": str, "host": str, "pid": int, "rank": int,
          "device_count": int, "start_time": (int, float)}


def build_header(backend: str, metadata: Optional[Mapping] = None, overrides: Optional[Mapping] = None) -> dict:
    """The header npusan writes: facts about this process, then the caller's overrides.

    torch's version is recorded only if torch is already imported: writing a trace must
    never pay for (or require) importing torch.
    """
    from .._version import __version__

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


#: The highest minor version a trace may declare (docs/trace-format.md, sections 4 and 8).
#: Minor versions only add, and record types 23-127 are what they can add, so a real 1.x
#: stays far below it; a larger one is a corrupt or hostile header (``[1, 2**64 - 1]``),
#: refused rather than shown and carried as a version (it would also send the replay to
#: the slower Python engine, which replays versions newer than the compiled core knows).
MAX_MINOR = 255


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
    if minor > MAX_MINOR:
        raise TraceFormatError(
            f"the trace header has no valid format version (minor version {minor} is above {MAX_MINOR}, "
            "the highest this format allows: docs/trace-format.md, section 4)"
        )
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


def clean_header(raw: Mapping) -> dict:
    """The header a reader keeps: strings sanitized, informational values summarized.

    ``format`` and ``default_streams`` (which change what the analyzer computes) are kept
    exactly, as far as they are well typed; every other value is bounded in length,
    entries and depth (a list or map cut short ends with a ``"… N more"`` entry), so that
    a hostile header cannot flood a report or a terminal. Keys that are not strings are
    dropped.
    """
    budget = [MAX_VALUE_NODES]
    out: dict[str, Any] = {}
    items = [(k, v) for k, v in raw.items() if isinstance(k, str)]
    for k, v in items[:MAX_HEADER_KEYS]:
        if k == "format":
            out[k] = list(v[:2])
        elif k == "default_streams":
            out[k] = dict(list(default_stream_handles(raw).items())[:MAX_DEVICES])
        elif k in _TYPED:  # a known key of the wrong type is unknown (None), not a crash later
            ok = isinstance(v, _TYPED[k]) and not isinstance(v, bool)
            out[k] = (clean(v, MAX_VALUE_CHARS) if isinstance(v, str) else v) if ok else None
        elif k == "argv":
            argv = summarize_value(v, budget) if isinstance(v, list) else None
            out[k] = [a if isinstance(a, str) else clean(repr(a), MAX_VALUE_CHARS) for a in argv] if argv else argv
        else:
            out[clean(k, MAX_VALUE_CHARS)] = summarize_value(v, budget)
    if len(items) > MAX_HEADER_KEYS:
        out["…"] = f"{len(items) - MAX_HEADER_KEYS} more header keys not kept"
    return out


def summarize_value(v: Any, budget: list, depth: int = 0) -> Any:
    """``v`` with strings cleaned and lists/maps cut to the limits above (``budget``: nodes left)."""
    budget[0] -= 1
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return clean(v, MAX_VALUE_CHARS)
    if isinstance(v, bytes):  # shown as base64, as ``npusan info --json`` documents
        text = base64.b64encode(v[: MAX_VALUE_CHARS // 4 * 3]).decode("ascii")
        return text if len(v) <= MAX_VALUE_CHARS // 4 * 3 else f"{text}… ({len(v)} bytes)"
    if isinstance(v, (list, tuple, dict)):
        if depth >= MAX_VALUE_DEPTH or budget[0] <= 0:
            return f"<{'map' if isinstance(v, dict) else 'list'} of {len(v)} entries, not kept>"
        n = min(len(v), MAX_VALUE_ITEMS)
        if isinstance(v, dict):
            out = {}
            for k, x in list(v.items())[:n]:
                if budget[0] <= 0:
                    break
                key = clean(k, MAX_VALUE_CHARS) if isinstance(k, (str, bytes)) else clean(repr(k), 64)
                out[key] = summarize_value(x, budget, depth + 1)
            if len(out) < len(v):
                out["…"] = f"{len(v) - len(out)} more entries not kept"
            return out
        kept = []
        for x in v[:n]:
            if budget[0] <= 0:
                break
            kept.append(summarize_value(x, budget, depth + 1))
        if len(kept) < len(v):
            kept.append(f"… {len(v) - len(kept)} more items not kept")
        return kept
    return clean(repr(v), MAX_VALUE_CHARS)  # an ext type or anything else msgpack produced
