"""`npusan analyze TRACE...`: replay traces, report what was found, exit 0/1/2.

Everything that can make the run unusable (a bad suppression or baseline file, an unknown
format, an output path that cannot be written) is checked before the traces are read, so
a CI job fails in a second, with one line, instead of after an hour of replay.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional, Sequence

import click

from ..analyzer.report import FORMATS as REPORT_FORMATS, format_help
from ..trace_format.input_files import distinct_inputs
from ..trace_format.safe_text import clean
from ..typo_hints import typo_hint
from .completion import PATH, finding_kinds, report_formats
from .errors import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNUSABLE, UsageProblem, fail, one_line_errors
from .output import check_writable, dash_is_stdout, refuse_overwriting_input, write_output
from .progress import LazyProgress

FORMATS = tuple(f.name for f in REPORT_FORMATS)


def warn(message: str) -> None:
    click.echo(f"npusan: warning: {clean(message)}", err=True)


def parse_kinds(value: Optional[str]) -> Optional[frozenset]:
    """``--fail-on data-race,reuse-race`` as a set of kind values (None: every kind)."""
    from ..analyzer.findings.model import Kind

    if value is None:
        return None
    known = {k.value for k in Kind}
    kinds = [v.strip() for v in value.split(",") if v.strip()]
    if not kinds:
        raise UsageProblem("--fail-on needs at least one finding kind")
    for k in kinds:
        if k not in known:
            raise UsageProblem(
                f"--fail-on: unknown finding kind '{k}'{typo_hint(k, known)} (expected {', '.join(sorted(known))})"
            )
    return frozenset(kinds)


class _Progress(LazyProgress):
    """The analysis progress bar: one task, named after the trace being read."""

    def __init__(self, paths: Sequence[str], enabled: bool) -> None:
        super().__init__(enabled)
        self.paths = list(paths)

    def __call__(self, trace: int, done: int, total: Optional[int]) -> None:
        name = os.path.basename(self.paths[trace]) if 0 <= trace < len(self.paths) else ""
        self.update("analyze", f"[bold]analyzing[/] {name}", done, total)


def check_run_options(jobs: Optional[int], scheduler: Optional[str], send_traces: bool) -> None:
    """Refuse ``--jobs``/``--scheduler``/``--send-traces`` values that cannot work (a :class:`UsageProblem`)."""
    if jobs is not None and jobs < 1:
        raise UsageProblem(f"--jobs must be at least 1 (got {jobs})")
    if send_traces and not scheduler:
        raise UsageProblem("--send-traces only applies with --scheduler")
    if scheduler is not None and "://" not in scheduler:
        raise UsageProblem(f"--scheduler expects an address such as tcp://host:8786, got '{scheduler}'")


#: What ``--source-root`` does for a report (the timeline's own text is in export.py).
SOURCE_ROOT_HELP = ("Project folder: source is read only from under it (quoted lines, names checked in fixes), and "
                    "SARIF/JUnit name files relative to it (default: the nearest folder above the working directory "
                    "with .git or pyproject.toml).")


def source_options(command=None, *, root_help: str = SOURCE_ROOT_HELP):
    """``--source-root`` and ``--map-path``: where local source may be read (analyze, export).

    Used bare (``@source_options``) or with the verb's own ``--source-root`` text
    (``@source_options(root_help=...)``).
    """
    if command is None:
        return lambda c: source_options(c, root_help=root_help)
    command = click.option("--map-path", multiple=True, metavar="OLD=NEW",
                           help="Read files recorded under OLD from NEW on this machine (repeatable).")(command)
    return click.option("--source-root", default=None, metavar="DIR", type=PATH, help=root_help)(command)


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...", type=PATH)
@click.option("--format", "fmt", default="text", metavar="FORMAT", show_default=True, shell_complete=report_formats,
              help=f"Report format: {format_help()}.")
@click.option("-o", "--output", default=None, metavar="FILE", type=PATH, callback=dash_is_stdout,
              help="Write the report to FILE instead of stdout ('-': stdout).")
@click.option("--check-leaks", is_flag=True,
              help="Also check blocks still alive when a trace ends for missing record_stream.")
@click.option("--no-group", is_flag=True, help="List every occurrence instead of one entry per bug.")
@click.option("--full-stacks", is_flag=True, help="Show torch/npusan/Python frames instead of folding them (only those the recorder kept: `record --keep-internal-frames`).")
@click.option("--expand", is_flag=True,
              help="Text report: show every finding of a shared root cause in full, not only the first.")
@click.option("--no-color", is_flag=True, help="Plain text even on a terminal.")
@click.option("--suppress", "suppress_file", default=None, metavar="FILE", type=PATH,
              help="TOML file of findings to silence (see docs/suppressions.md).")
@click.option("--baseline", "baseline_file", default=None, metavar="FILE", type=PATH,
              help="JSON report of an earlier run: report only findings that are not in it.")
@click.option("--fail-on", default=None, metavar="KIND,...", shell_complete=finding_kinds,
              help="Exit 1 only for these kinds (data-race, missing-record-stream, reuse-race).")
@click.option("--min-count", default=1, type=int, metavar="N", show_default=True,
              help="Report (and fail on) only findings that occurred at least N times.")
@click.option("-j", "--jobs", default=None, type=int, metavar="N",
              help="Analyze traces in N local processes (default: the number of cores).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Analyze on a Dask cluster (tcp://host:port of its scheduler; needs npusan[cluster]).")
@click.option("--send-traces", is_flag=True,
              help="With --scheduler: send the trace bytes to the workers instead of letting them open the paths.")
@source_options
@click.option("--history", "history_db", default=None, metavar="DB", type=PATH,
              help="Record this run in an SQLite history (created if missing); findings are marked new or persisting.")
@click.option("--run-label", default=None, metavar="LABEL",
              help="Name of this run in --history (default: the date and time); a label already in the history is refused.")
@one_line_errors
def analyze(
    traces: tuple,
    fmt: str,
    output: Optional[str],
    check_leaks: bool,
    no_group: bool,
    full_stacks: bool,
    expand: bool,
    no_color: bool,
    suppress_file: Optional[str],
    baseline_file: Optional[str],
    fail_on: Optional[str],
    min_count: int,
    jobs: Optional[int],
    scheduler: Optional[str],
    send_traces: bool,
    source_root: Optional[str],
    map_path: tuple,
    history_db: Optional[str],
    run_label: Optional[str],
) -> None:
    """Analyze traces and report stream-synchronization bugs.

    TRACE may be a file, a directory (searched recursively for traces, plain or .zst/.gz),
    a glob pattern, or - (standard input). Exit status: 0 no findings, 1 findings, 2 unusable input or usage
    error (also when any trace could not be read; the others are still reported).
    """
    from ..analyzer.runs import pipeline
    from ..analyzer.runs.batch import SchedulerError
    from ..analyzer.runs.history import HistoryError
    from ..analyzer.report import get_reporter

    if fmt not in FORMATS:
        raise UsageProblem(f"unknown report format '{fmt}'{typo_hint(fmt, FORMATS)} (expected one of {', '.join(FORMATS)})")
    if min_count < 1:
        raise UsageProblem(f"--min-count must be at least 1 (got {min_count})")
    fail_kinds = parse_kinds(fail_on)
    if output is not None:
        check_writable(output)
        refuse_overwriting_input(output, list(traces))
    check_run_options(jobs, scheduler, send_traces)
    try:  # the suppression and baseline files, --source-root and --map-path
        options = pipeline.AnalysisOptions.from_files(
            suppress=suppress_file, baseline=baseline_file, source_root=source_root, map_path=map_path,
            check_leaks=check_leaks, group=not no_group, min_count=min_count,
        )
    except ValueError as e:
        raise UsageProblem(str(e)) from None

    if run_label is not None and history_db is None:
        raise UsageProblem("--run-label only applies with --history")
    traces, repeated = distinct_inputs(list(traces))
    for again, first in repeated:
        warn(f"{again} is the same file as {first}: analyzed once")
    try:
        history = pipeline.open_history(history_db, run_label) if history_db is not None else None
    except HistoryError as e:
        raise UsageProblem(str(e).replace("the run label", "--run-label")) from None

    progress = _Progress(traces, enabled=sys.stderr.isatty())
    try:
        result = pipeline.replay_inputs(traces, options, jobs=jobs if jobs is not None else (os.cpu_count() or 1),
                                        scheduler=scheduler, send_bytes=send_traces, progress=progress)
    except SchedulerError as e:
        raise UsageProblem(str(e)) from None
    finally:
        progress.close()

    for t in result.traces:
        for w in t.warnings:
            warn(f"{t.path}: {w}")
    errors = result.errors
    if errors and all(t.error is not None for t in result.traces):
        # Nothing could be analyzed: no report, one line per problem.
        for where, why in errors:
            click.echo(f"npusan: error: {clean(str(where))}: {clean(str(why))}", err=True)
        sys.exit(EXIT_UNUSABLE)
    for where, why in errors:
        click.echo(f"npusan: error: {clean(str(where))}: {clean(str(why))} (the other traces are reported)", err=True)

    try:
        previous = history.previous() if history is not None else None
    except HistoryError as e:
        raise UsageProblem(str(e)) from None
    report = pipeline.make_report(result, options, history=previous)
    if options.suppressions is not None:
        for entry in options.suppressions.unused():
            warn(f"suppression file {options.suppressions.path}: {entry.describe()} matched no finding")

    color = (
        fmt == "text"
        and output is None
        and not no_color
        and "NO_COLOR" not in os.environ
        and sys.stdout.isatty()
    )
    render_options = pipeline.render_options(
        options, full_stacks=full_stacks, expand=expand, color=color,
        width=shutil.get_terminal_size((100, 24)).columns if color else 100,
    )
    write_output(output, get_reporter(fmt).render(report, render_options))
    # Recorded only once the report is out: an interrupted run leaves no row, and a run that
    # cannot be recorded (a full disk; the label taken by a run that finished meanwhile)
    # still has its report, the error coming after it with exit 2.
    if history is not None:
        try:
            history.record(report, label=run_label)
        except HistoryError as e:
            fail(str(e))

    failing = [g for g in report.groups if fail_kinds is None or g.kind.value in fail_kinds]
    if errors:
        sys.exit(EXIT_UNUSABLE)
    sys.exit(EXIT_FINDINGS if failing else EXIT_CLEAN)
