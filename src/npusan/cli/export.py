"""`npusan export TRACE --format chrome -o timeline.json`: a picture instead of seq numbers.

The timeline is written one event at a time (memory stays flat however long the trace is),
with a progress bar on a terminal. By default it keeps what a viewer can open: a window
around the findings, at most a few hundred thousand kernels, and says on stderr what it
left out; ``--all`` exports everything.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from typing import Optional

import click

from ..trace_format.errors import TraceFormatError
from ..trace_format.input_files import open_input
from .analyze import source_options, warn
from .completion import timeline_formats
from .errors import UsageProblem, one_line_errors
from ..typo_hints import typo_hint
from .output import atomic_output, check_writable, dash_is_stdout, refuse_overwriting_input
from .progress import LazyProgress

FORMATS = ("chrome",)
#: --source-root for a timeline (analyze's names its SARIF/JUnit files).
SOURCE_ROOT_HELP = ("Project folder: source is read only from under it, so that the markers' fixes "
                    "and fingerprints are those of npusan analyze (default: the nearest folder above "
                    "the working directory with .git or pyproject.toml).")


class _Progress(LazyProgress):
    """The export's two passes as two bars."""

    def __call__(self, phase: str, done: int, total: Optional[int]) -> None:
        label = "[bold]finding bugs[/]" if phase == "finding" else "[bold]writing timeline[/]"
        self.update(phase, label, done, total)


def single_trace(argument: str) -> "str | os.PathLike[str]":
    """The one trace a file, directory, glob or ``-`` argument names (``-``: a
    :class:`~npusan.trace_format.input_files.StandardInput`); a usage problem otherwise."""
    from ..trace_format.inputs import find_traces

    found = find_traces([argument])
    if found.problems:
        raise UsageProblem("{}: {}".format(*found.problems[0]))
    if len(found.paths) != 1:
        raise UsageProblem(f"{argument} names {len(found.paths)} traces; export one at a time")
    return found.paths[0]


@click.command()
@click.argument("trace", metavar="TRACE")
@click.option("--format", "fmt", default="chrome", metavar="FORMAT", show_default=True, shell_complete=timeline_formats,
              help="Timeline format: chrome (Chrome Trace Event JSON for Perfetto / chrome://tracing).")
@click.option("-o", "--output", default=None, metavar="FILE", callback=dash_is_stdout,
              help="Write to FILE instead of stdout ('-': stdout).")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option("--around-findings", default=None, type=int, metavar="N",
              help="Keep only the N kernels before and after each finding's accesses "
                   "(default: 1000 when the trace has findings); narrowed when the windows hold "
                   "more than --max-kernels, so that every finding's kernels are drawn.")
@click.option("--max-kernels", default=None, type=int, metavar="N",
              help="Draw at most N kernels: the first N, or those of the window around the findings "
                   "(default: 500000, what a viewer can open).")
@click.option("--all", "everything", is_flag=True, help="Export every kernel: no window, no limit.")
@click.option("--check-leaks", is_flag=True, help="Also mark blocks never freed (as npusan analyze --check-leaks).")
@source_options(root_help=SOURCE_ROOT_HELP)
@one_line_errors
def export(trace: str, fmt: str, output: Optional[str], force: bool, around_findings: Optional[int],
           max_kernels: Optional[int], everything: bool, check_leaks: bool, source_root: Optional[str],
           map_path: tuple) -> None:
    """Export TRACE as a timeline: one track per stream, sync arrows, findings marked.

    TRACE may also be a directory or glob pattern that names exactly one trace. It is read
    twice (the findings, then the timeline), so it must be a file, not a pipe.
    """
    from ..analyzer.report.sources import SourceSettings
    from ..analyzer.export.timeline import ExportLimits

    if fmt not in FORMATS:
        raise UsageProblem(f"unknown timeline format '{fmt}'{typo_hint(fmt, FORMATS)} (expected one of {', '.join(FORMATS)})")
    if around_findings is not None and around_findings < 0:
        raise UsageProblem(f"--around-findings must be 0 or more (got {around_findings})")
    if max_kernels is not None and max_kernels < 1:
        raise UsageProblem(f"--max-kernels must be at least 1 (got {max_kernels})")
    if everything and (around_findings is not None or max_kernels is not None):
        raise UsageProblem("--all exports everything: it does not go with --around-findings or --max-kernels")
    if output is not None:
        check_writable(output, "the timeline")
        refuse_overwriting_input(output, [trace], "the timeline")
        if os.path.exists(output) and stat.S_ISREG(os.stat(output).st_mode) and not force:
            raise UsageProblem(f"{output} exists; add --force to overwrite it")
    try:  # as npusan analyze reads source: the same fingerprints and fixes as its report
        sources = SourceSettings.from_options(source_root, map_path)
    except ValueError as e:
        raise UsageProblem(str(e)) from None
    if everything:
        limits = ExportLimits()
    else:
        limits = ExportLimits.default()
        if around_findings is not None:
            limits.around, limits.auto_window = around_findings, False
        if max_kernels is not None:
            limits.max_kernels = max_kernels

    trace = single_trace(trace)
    try:
        open_input(trace).close()  # unreadable, a device, a FIFO without a writer: fail now
    except OSError as e:
        raise TraceFormatError(f"{trace}: cannot read the trace: {e.strerror or e}") from None
    if not stat.S_ISREG(os.stat(trace).st_mode):
        raise UsageProblem(f"{trace}: export reads its trace twice (the findings, then the timeline): "
                           "give a file, not a pipe or standard input")
    progress = _Progress(enabled=sys.stderr.isatty())
    try:
        stats = _write(trace, output, limits, check_leaks, progress, sources)
    except BrokenPipeError:  # the reader of the timeline left: see errors.reader_gone
        raise
    except OSError as e:
        raise UsageProblem(f"cannot write the timeline to {output or 'stdout'}: {e.strerror or e}") from None
    except TraceFormatError as e:
        raise type(e)(f"{trace}: {e}") from None
    finally:
        progress.close()
    for w in stats.warnings:  # as `npusan analyze` warns: a cut trace, data after its end...
        warn(f"{trace}: {w}")
    if stats.truncated and not stats.warnings:
        warn(f"{trace}: the trace ends without an end record; exported up to its last complete record")
    if stats.left_out or output is not None:
        warn_or_note = warn if stats.left_out else _note
        warn_or_note(f"{trace}: {stats.describe()}")


def _note(message: str) -> None:
    click.echo(f"npusan: {message}", err=True)


def _write(trace: str, output: Optional[str], limits, check_leaks: bool, progress, sources):
    """Stream the timeline to stdout, or to a temporary file renamed over ``output`` when done
    (an interrupted export never leaves half a file under the name asked for)."""
    from ..analyzer.export.timeline import write_chrome

    if output is None:
        out = sys.stdout
        return write_chrome(trace, out, limits, check_leaks=check_leaks, progress=progress, sources=sources)
    with atomic_output(output, "the timeline") as raw:
        out = io.TextIOWrapper(raw, encoding="utf-8", write_through=False)
        stats = write_chrome(trace, out, limits, check_leaks=check_leaks, progress=progress, sources=sources)
        out.flush()
        out.detach()
    return stats

