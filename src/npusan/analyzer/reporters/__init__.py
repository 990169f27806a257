"""Report renderers: one module per format behind :class:`~.base.Reporter`.

Importing this package registers every built-in format (text, short, json, sarif, junit, html).
"""

from __future__ import annotations

from . import json_report, junit, sarif, text, html  # noqa: F401,I001  (registration order)
from .base import (
    Report,
    Reporter,
    ReportOptions,
    build_report,
    format_names,
    get_reporter,
)

__all__ = ["Report", "ReportOptions", "Reporter", "build_report", "format_names", "get_reporter"]
