"""Report renderers: one module per format behind :class:`~.base.Reporter`.

A format's module is imported when the format is asked for (:func:`get_reporter`), and every
built-in format by :func:`format_names`, so that ``npusan analyze`` does not import five
renderers to print one report. Importing this package imports none of them, nor the report
model (:mod:`.base`): the command line reads :data:`FORMATS` for its help and completion.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .base import Report, Reporter, ReportOptions, build_report


class Format(NamedTuple):
    """A built-in report format: its name, the module that registers its reporter, and what
    ``npusan analyze --help`` adds after the name (empty: nothing)."""

    name: str
    module: str
    note: str = ""


#: The built-in report formats, in the order the command line lists them: the one list the
#: CLI's ``--format`` check, help and completion, and :func:`get_reporter` read.
FORMATS = (
    Format("text", "text"),
    Format("json", "json_report"),
    Format("sarif", "sarif"),
    Format("junit", "junit"),
    Format("short", "text", "one line per finding"),
    Format("html", "html", "one self-contained page"),
)

#: Built-in format -> the module that registers its reporter.
_MODULES = {f.name: f.module for f in FORMATS}

#: The order :func:`format_names` imports the modules in, which is the order their formats
#: register (and are listed) in; kept so that the list reads as it always has.
_REGISTRATION_ORDER = ("json_report", "junit", "sarif", "text", "html")

#: What this package re-exports from :mod:`.base`, imported on first use.
_FROM_BASE = ("Report", "ReportOptions", "Reporter", "build_report")


def format_help(formats: tuple[Format, ...] = FORMATS) -> str:
    """``text, json, ..., short (one line per finding) or html (...)``: the formats as a phrase."""
    words = [f"{f.name} ({f.note})" if f.note else f.name for f in formats]
    return ", ".join(words[:-1]) + " or " + words[-1]


def get_reporter(name: str) -> Reporter:
    """A reporter instance by format name; ``KeyError`` for unknown names."""
    module = _MODULES.get(name)
    if module is not None:
        importlib.import_module(f".{module}", __name__)
    from . import base

    return base.get_reporter(name)


def format_names() -> list[str]:
    """Every registered format, the built-in ones first."""
    for module in _REGISTRATION_ORDER:
        importlib.import_module(f".{module}", __name__)
    from . import base

    return base.format_names()


def __getattr__(name: str) -> Any:
    if name in _FROM_BASE:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FORMATS", "Format", "Report", "ReportOptions", "Reporter", "build_report", "format_help",
           "format_names", "get_reporter"]
