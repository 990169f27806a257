"""Trace format v1: the records, the writer any runtime can use, and a streaming reader.

The normative specification is ``docs/trace-format.md``.
"""

from .errors import TraceFormatError, UnsupportedVersionError
from .reader import TraceReader
from .strided import Strided
from .writer import FileSink, TraceWriter

__all__ = ["FileSink", "Strided", "TraceFormatError", "TraceReader", "TraceWriter", "UnsupportedVersionError"]
