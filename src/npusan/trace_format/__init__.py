"""Trace format v1: the records, the writer any runtime can use, and a streaming reader.

The normative specification is ``docs/trace-format.md``.
"""

from typing import Any

from .errors import TraceFormatError, UnsupportedVersionError

# The reader and the writer are imported on first use: a command that only reads a trace
# (``npusan analyze``) does not pay for the writer, and one that only writes does not pay
# for the reader (``from npusan.trace_format import TraceWriter`` works as before).
_LAZY = {"TraceReader": ".reader", "Strided": ".strided", "FileSink": ".writer", "TraceWriter": ".writer"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value

__all__ = ["FileSink", "Strided", "TraceFormatError", "TraceReader", "TraceWriter", "UnsupportedVersionError"]
