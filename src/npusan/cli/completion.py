"""Shell completion of option values that are not a :class:`click.Choice` (their check,
and its one-line error, stays in the command): report formats, finding kinds, file names.

Each function is a click ``shell_complete`` callback; what they list is imported only when
the shell asks (completion runs the command line once per key press).
"""

from __future__ import annotations

import click

#: The type of path arguments and options: the shell completes file names; nothing is
#: checked here (the command checks its paths itself, with its own one-line errors).
PATH = click.Path(readable=False)


def _items(values) -> list:
    from click.shell_completion import CompletionItem  # only when the shell asks

    return [CompletionItem(v) for v in values]


def _starting_with(values, incomplete: str) -> list:
    return _items(v for v in values if v.startswith(incomplete))


def report_formats(ctx, param, incomplete: str) -> list:
    """``analyze --format``: the report formats."""
    from .analyze import FORMATS

    return _starting_with(FORMATS, incomplete)


def timeline_formats(ctx, param, incomplete: str) -> list:
    """``export --format``: the timeline formats."""
    from .export import FORMATS

    return _starting_with(FORMATS, incomplete)


def history_formats(ctx, param, incomplete: str) -> list:
    """``history --format``: what the history can be shown as."""
    from ..analyzer.report.history import RENDERERS

    return _starting_with(RENDERERS, incomplete)


def finding_kinds(ctx, param, incomplete: str) -> list:
    """``--fail-on KIND,...``: the kinds, after any already typed (``data-race,re`` offers
    ``data-race,reuse-race``)."""
    from ..analyzer.findings.model import Kind

    done, _, last = incomplete.rpartition(",")
    typed = set(done.split(",")) if done else set()
    prefix = f"{done}," if done else ""
    return _items(prefix + k.value for k in Kind if k.value.startswith(last) and k.value not in typed)
