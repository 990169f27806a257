"""The Python API: analyze traces from code and look at what was found.

::

    import npusan

    report = npusan.analyze("trace.npusan")            # or several paths
    for f in report.findings:
        print(f.kind.value, f.count, f.fingerprint, f.title)
        print(f.location, f.previous_location)  # your lines: the later and the earlier access
    open("report.json", "w").write(report.to_json())

Everything here is imported on first use, never by ``import npusan`` (which stays free of
torch, rich and the analyzer). The analysis itself is :mod:`npusan.analyzer.runs.pipeline`, the
same steps with the same options that ``npusan analyze`` runs.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Optional, Sequence, Union

from .analyzer.runs import pipeline
from .analyzer.findings.model import AccessInfo, BlockInfo, Frame, Kind, TraceSummary
from .analyzer.findings.grouping import Group
from .analyzer.report import Report as _Report
from .analyzer.report import format_names, get_reporter
from .analyzer.report.describe import title as _title
from .analyzer.report.json_report import group_json, root_cause_json
from .analyzer.findings.rootcause import RootCause as _RootCause
from .analyzer.report.sources import user_site
from .trace_format.errors import TraceFormatError
from .trace_format.reader import TraceReader
from .typo_hints import typo_hint

__all__ = ["Finding", "Kind", "Report", "RootCause", "analyze", "load"]

PathLike = Union[str, "os.PathLike[str]"]


class Finding:
    """One reported bug: every occurrence of one kind at one pair of code locations.

    ``access`` is the later access (for a missing record_stream: the free), ``previous``
    the earlier one; each has ``stream``, ``op``, ``type`` (``"read"``/``"write"``) and
    ``stack`` (frames with ``filename``, ``lineno``, ``function``, outermost first).
    """

    __slots__ = ("_group", "_report", "_options")

    def __init__(self, group: Group, report: _Report, options: pipeline.AnalysisOptions) -> None:
        self._group = group
        self._report = report
        self._options = options

    @property
    def kind(self) -> Kind:
        """``Kind.DATA_RACE``, ``Kind.MISSING_RECORD_STREAM`` or ``Kind.REUSE_RACE``;
        ``.value`` is the JSON report's ``"data-race"``, ``"missing-record-stream"``,
        ``"reuse-race"``."""
        return self._group.kind

    @property
    def fingerprint(self) -> str:
        """Identity from code locations only: the same bug in another run has the same one."""
        return self._group.fingerprint

    @property
    def count(self) -> int:
        """Occurrences merged into this finding."""
        return self._group.count

    @property
    def title(self) -> str:
        return _title(self._group.finding, self._report.header(self._group.finding.trace))

    @property
    def access(self) -> AccessInfo:
        return self._group.finding.access

    @property
    def previous(self) -> AccessInfo:
        return self._group.finding.previous

    @property
    def location(self) -> Optional[Frame]:
        """The innermost frame of the later access that is the program's own code (not
        torch's, npusan's, pytest's or Python's): where a report points."""
        return user_site(self.access.stack)

    @property
    def previous_location(self) -> Optional[Frame]:
        return user_site(self.previous.stack)

    @property
    def block(self) -> BlockInfo:
        """The memory block both accesses touch (address, size, allocation stream and stack)."""
        return self._group.finding.block

    @property
    def addresses(self) -> list:
        return self._group.addresses

    @property
    def traces(self) -> list:
        """Paths of the traces it occurred in."""
        return [self._report.trace_path(i) for i in self._group.traces]

    def to_dict(self) -> dict:
        """This finding as the JSON report writes it (``docs/report-schema.md``)."""
        return group_json(self._report, self._group, pipeline.render_options(self._options).source_cache())

    def __repr__(self) -> str:
        return f"<npusan.Finding {self.kind.value} x{self.count} {self.fingerprint[:12]}: {self.title}>"


class RootCause:
    """Findings that one synchronization would fix: the same stream must wait for the same
    other stream, and one wait placed before the first of them orders them all."""

    __slots__ = ("_cause", "_report", "_options", "findings")

    def __init__(self, cause: _RootCause, report: _Report, options: pipeline.AnalysisOptions, findings: list) -> None:
        self._cause = cause
        self._report = report
        self._options = options
        self.findings: list[Finding] = findings  # the first is where the fix goes

    @property
    def fix(self) -> list:
        """The fix, as lines of text (code to paste, and where)."""
        return self.to_dict()["fix"]

    def to_dict(self) -> dict:
        """This root cause as the JSON report's ``root_causes`` entry."""
        return root_cause_json(self._report, self._cause, pipeline.render_options(self._options).source_cache())

    def __repr__(self) -> str:
        return f"<npusan.RootCause of {len(self.findings)} finding(s)>"


class Report:
    """What an analysis found, and what it deliberately left out.

    ``findings`` are the reported bugs (after suppressions, the baseline and ``min_count``);
    ``suppressed``, ``known`` (in the baseline) and ``below_min_count`` hold the ones left
    out; ``traces`` summarizes each analyzed trace (path, header, events, kernels,
    truncated, warnings). Render it in any format ``npusan analyze --format`` knows.
    """

    def __init__(self, report: _Report, options: pipeline.AnalysisOptions = pipeline.AnalysisOptions()) -> None:
        self._report = report
        self._options = options
        self.findings: list[Finding] = [Finding(g, report, options) for g in report.groups]
        self.suppressed: list[Finding] = [Finding(g, report, options) for g in report.suppressed]
        self.known: list[Finding] = [Finding(g, report, options) for g in report.known]
        self.below_min_count: list[Finding] = [Finding(g, report, options) for g in report.below_min_count]
        self.traces: list[TraceSummary] = list(report.traces)
        by_group = {id(g): f for g, f in zip(report.groups, self.findings)}
        #: The findings grouped by what one synchronization would fix.
        self.root_causes: list[RootCause] = [
            RootCause(c, report, options, [by_group[id(g)] for g in c.groups if id(g) in by_group])
            for c in report.causes
        ]

    @property
    def warnings(self) -> list:
        """``(trace path, message)`` for each thing a trace made us warn about."""
        return [(t.path, w) for t in self.traces for w in t.warnings]

    @property
    def errors(self) -> list:
        """``(trace or argument, reason)`` for each trace that could not be analyzed and each
        argument that named no trace (the JSON report's ``errors``); the report covers the rest."""
        return list(self._report.errors)

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def render(self, format: str = "text", *, full_stacks: bool = False, expand: bool = False,
               color: bool = False, width: int = 100) -> str:
        """The report as ``npusan analyze --format FORMAT`` prints it; the keywords are its
        ``--full-stacks`` and ``--expand`` and terminal settings (source is quoted and files
        are named as the ``source_root`` and ``map_path`` given to :func:`analyze` say)."""
        if format not in format_names():
            raise ValueError(
                f"unknown report format {format!r}{typo_hint(format, format_names())} "
                f"(expected one of {', '.join(format_names())})"
            )
        options = pipeline.render_options(self._options, full_stacks=full_stacks, expand=expand, color=color,
                                          width=width)
        return get_reporter(format).render(self._report, options)

    def to_text(self, **kwargs: Any) -> str:
        return self.render("text", **kwargs)

    def to_json(self) -> str:
        return self.render("json")

    def to_dict(self) -> dict:
        """The JSON report as Python objects."""
        return json.loads(self.to_json())

    def to_sarif(self) -> str:
        return self.render("sarif")

    def to_junit(self) -> str:
        return self.render("junit")

    def __repr__(self) -> str:
        return f"<npusan.Report: {len(self.findings)} findings in {len(self.traces)} trace(s)>"


def analyze(
    *paths: PathLike,
    check_leaks: bool = False,
    group: bool = True,
    suppress: Optional[PathLike] = None,
    baseline: Optional[PathLike] = None,
    min_count: int = 1,
    source_root: Optional[PathLike] = None,
    map_path: Sequence[str] = (),
    jobs: int = 1,
    scheduler: Optional[object] = None,
    send_traces: bool = False,
    history: Optional[PathLike] = None,
    run_label: Optional[str] = None,
) -> Report:
    """Analyze traces as ``npusan analyze`` does and return the :class:`Report`.

    ``paths``: trace files, directories (searched for traces) or glob patterns.
    ``suppress``: a suppression file (``docs/suppressions.md``); ``baseline``: a JSON report
    of an earlier run, whose findings are left out; ``check_leaks``, ``group``,
    ``min_count``, ``source_root``, ``map_path`` (``["OLD=NEW", ...]``) and ``jobs`` as the
    CLI's ``--check-leaks``, ``--no-group``, ``--min-count``, ``--source-root``,
    ``--map-path`` and ``--jobs`` (default here: one process). ``history`` (an SQLite file,
    created when missing) and ``run_label`` as ``--history`` and ``--run-label``: the run is
    recorded there and findings get their status (new, persisting) against its previous run.
    ``scheduler`` runs the analysis on a Dask cluster, as ``--scheduler``: the address of its
    scheduler (``"tcp://host:8786"``), or a connected ``distributed.Client``, which is used
    as it is and left open (a long-running job connects once and pays Dask's import and
    connection once, not per analysis); ``send_traces`` as ``--send-traces``. A cluster
    that cannot be used raises :class:`npusan.analyzer.runs.batch.SchedulerError`.
    A trace that cannot be analyzed among readable ones is listed in ``Report.errors`` (as
    the command reports the others and exits 2); when nothing at all can be analyzed,
    :class:`npusan.trace_format.TraceFormatError` is raised, naming the trace or path.
    ``ValueError`` is raised for an unusable option or file.
    """
    if not paths:
        raise ValueError("npusan.analyze needs at least one trace path")
    if isinstance(map_path, str):
        map_path = [map_path]
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer of at least 1 (got {jobs!r})")
    if run_label is not None and history is None:
        raise ValueError("run_label only applies with history")
    if send_traces and scheduler is None:
        raise ValueError("send_traces only applies with a scheduler")
    usable = "://" in scheduler if isinstance(scheduler, str) else callable(getattr(scheduler, "submit", None))
    if scheduler is not None and not usable:
        raise ValueError(f"scheduler expects an address such as tcp://host:8786 or a distributed.Client, got {scheduler!r}")
    options = pipeline.AnalysisOptions.from_files(
        suppress=suppress, baseline=baseline, source_root=source_root, map_path=map_path,
        check_leaks=check_leaks, group=group, min_count=min_count,
    )
    db = pipeline.open_history(history, run_label) if history is not None else None
    try:
        result = pipeline.replay_inputs(paths, options, jobs=jobs, scheduler=scheduler, send_bytes=send_traces)
        errors = result.errors
        if errors and all(t.error is not None for t in result.traces):
            more = f" (and {len(errors) - 1} more unusable)" if len(errors) > 1 else ""
            raise TraceFormatError(f"{errors[0][0]}: {errors[0][1]}{more}")
        report = pipeline.make_report(result, options, history=db.previous() if db is not None else None)
        if db is not None:
            db.record(report, label=run_label)
    finally:
        if db is not None:
            db.close()
    return Report(report, options)


def load(path: PathLike) -> TraceReader:
    """Open a trace for reading: ``header`` (backend, torch version, metadata...) at once,
    records on iteration, the trace's interned names in ``symbols`` as they are read.
    Use it as a context manager (it closes the file)."""
    return TraceReader(path)
