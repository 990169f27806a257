"""`npusan history DB`: the runs an ``analyze --history DB`` recorded, and each finding across them."""

from __future__ import annotations

import os
from typing import Optional

import click

from .completion import PATH, history_formats
from .output import check_writable, dash_is_stdout, write_output
from .errors import UsageProblem, one_line_errors
from ..typo_hints import typo_hint


@click.command()
@click.argument("database", metavar="DB", type=PATH)
@click.option("--format", "fmt", default="text", metavar="FORMAT", show_default=True, shell_complete=history_formats,
              help="text, json or html (a self-contained page with a chart of findings per kind).")
@click.option("-o", "--output", default=None, metavar="FILE", type=PATH, callback=dash_is_stdout,
              help="Write to FILE instead of stdout ('-': stdout).")
@one_line_errors
def history(database: str, fmt: str, output: Optional[str]) -> None:
    """Show the runs recorded in a history database and, per finding, when it was seen."""
    from ..analyzer.runs.history import History, HistoryError
    from ..analyzer.report.history import RENDERERS

    if fmt not in RENDERERS:
        raise UsageProblem(
            f"unknown history format '{fmt}'{typo_hint(fmt, RENDERERS)} (expected one of {', '.join(RENDERERS)})"
        )
    if not os.path.exists(database):
        raise UsageProblem(f"history {database}: no such file")
    if output is not None:
        check_writable(output)
    import sqlite3

    try:  # read-only: showing a file never writes to it (nor makes any SQLite file a history)
        db = History.open(database, create=False, read_only=True)
    except HistoryError as e:
        raise UsageProblem(str(e)) from None
    try:
        text = RENDERERS[fmt](db)
    except sqlite3.Error as e:  # tables of another shape: a database that only looks like one
        raise UsageProblem(f"history {database}: not an npusan history database ({e})") from None
    finally:
        db.close()
    write_output(output, text)
