"""What the recorder's online mode needs of the analyzer, and nothing else.

The recorder imports the analyzer through this one module: an engine to feed records to
as they are encoded, the findings it reports numbered as ``npusan analyze`` numbers them,
and a finding as the text of a ``RaceError`` or an online warning. The report layer that
renders that text is imported only when a finding is shown.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ...trace_format.header import is_default_stream
from ...trace_format.symbols import SymbolTable
from . import native


def make_engine(header: dict, on_finding: Callable[[Any], None]):
    """An engine for this process's live records (``feed``, ``flush``, ``finish``), which
    calls ``on_finding`` with each finding as it is found."""
    return native.make_engine(SymbolTable(), header=header, on_finding=on_finding)


def number_streams(engine, findings: list) -> None:
    """Number the findings' streams as ``npusan analyze`` numbers them: from the stream
    table (non-default streams per device, in the order the trace first named them), so
    that "stream #2" is the same stream in every message of this run and in the report
    of its trace. (A report built from one finding alone would count only the streams
    that finding names.)"""
    from ..findings.model import number_streams as number, stream_numbers

    is_default = functools.partial(is_default_stream, engine.header)
    number(findings, stream_numbers(engine.symbols.streams, is_default), is_default, engine.symbols.stream_labels)


def render_finding(finding: Any, header: Optional[dict], folded_hint: Optional[str] = None) -> str:
    """The finding as ``npusan analyze`` would print it, read live (never raises: see
    :func:`~npusan.analyzer.report.live.format_finding`)."""
    from ..report.live import format_finding

    return format_finding(finding, header, folded_hint=folded_hint)
