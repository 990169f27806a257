"""Report renderers: one module per format behind :class:`~.base.Reporter`.

A format's module is imported when the format is asked for (:func:`get_reporter`), and every
built-in format (text, short, json, sarif, junit, html) by :func:`format_names`, so that
``npusan analyze`` does not import five renderers to print one report.
"""

from __future__ import annotations

import importlib

from . import base as _base
from .base import Report, Reporter, ReportOptions, build_report

#: Built-in format -> the module that registers its reporter (in registration order).
_MODULES = {"json": "json_report", "sarif": "sarif", "text": "text", "short": "text", "junit": "junit",
            "html": "html"}


def get_reporter(name: str) -> Reporter:
    """A reporter instance by format name; ``KeyError`` for unknown names."""
    module = _MODULES.get(name)
    if module is not None:
        importlib.import_module(f".{module}", __name__)
    return _base.get_reporter(name)


def format_names() -> list[str]:
    """Every registered format, the built-in ones first."""
    for module in ("json_report", "junit", "sarif", "text", "html"):  # the order they always registered in
        importlib.import_module(f".{module}", __name__)
    return _base.format_names()


__all__ = ["Report", "ReportOptions", "Reporter", "build_report", "format_names", "get_reporter"]
