"""One analysis from trace inputs to a :class:`~npusan.analyzer.report.base.Report`.

``npusan analyze`` and the Python API (:func:`npusan.analyze`) both run these steps:
:func:`replay_inputs` replays every trace (serially, in local processes or on a cluster)
and :func:`make_report` applies what the user asked for (grouping, suppressions, a
baseline, a minimum count); :func:`render_options` says how the reporters quote and name
source. One :class:`AnalysisOptions` carries all of it, so the command and the API cannot
drift apart: what differs between them is only the surface (flags and exit codes on one
side, keyword arguments and exceptions on the other).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from ..findings.baseline import Baseline, load_baseline
from ..findings.model import AnalysisResult
from ..report.base import Report, ReportOptions, build_report
from ..report.sources import SourceSettings
from ..findings.suppressions import Suppressions, load_suppressions

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class AnalysisOptions:
    """What one analysis is asked to do (the CLI flags and the API keywords alike)."""

    check_leaks: bool = False  # also check blocks still alive at the end of a trace
    group: bool = True  # False: every occurrence is its own entry
    suppressions: Optional[Suppressions] = None
    baseline: Optional[Baseline] = None
    min_count: int = 1  # report only findings that occurred at least this often
    #: Where local source may be read from (quotes, fixes, fingerprints) and the folder
    #: reports name files relative to: --source-root and --map-path.
    sources: SourceSettings = field(default_factory=SourceSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.min_count, int) or self.min_count < 1:
            raise ValueError(f"min_count must be an integer of at least 1 (got {self.min_count!r})")

    @classmethod
    def from_files(
        cls,
        *,
        suppress: Union[PathLike, Suppressions, None] = None,
        baseline: Union[PathLike, Baseline, None] = None,
        source_root: Optional[PathLike] = None,
        map_path: Sequence[str] = (),
        **options,
    ) -> "AnalysisOptions":
        """Options with the suppression and baseline files read (paths or loaded objects)
        and the source settings made from ``source_root`` and ``map_path`` (``OLD=NEW``), as
        the command's ``--source-root`` and ``--map-path`` (without a root: the project
        folder above the working directory).

        Raises :class:`~.suppressions.SuppressionError` or :class:`~.baseline.BaselineError`
        (both ``ValueError``) for a file that cannot be used, ``ValueError`` for a bad
        source setting.
        """
        if suppress is not None and not isinstance(suppress, Suppressions):
            suppress = load_suppressions(os.fspath(suppress))
        if baseline is not None and not isinstance(baseline, Baseline):
            baseline = load_baseline(os.fspath(baseline))
        root = None if source_root is None else os.fspath(source_root)
        sources = SourceSettings.from_options(root, list(map_path))
        return cls(suppressions=suppress, baseline=baseline, sources=sources, **options)


def replay_inputs(
    inputs: Sequence[PathLike],
    options: AnalysisOptions = AnalysisOptions(),
    *,
    jobs: int = 1,
    scheduler: Optional[object] = None,
    send_bytes: bool = False,
    progress: Optional[Callable] = None,
) -> AnalysisResult:
    """Replay the traces that ``inputs`` name (files, directories, glob patterns).

    ``jobs``, ``scheduler`` and ``send_bytes`` say where (see
    :class:`~.batch.BatchOptions`); ``progress`` is called as in
    :func:`~npusan.analyzer.replay.traces.analyze_traces` (serial runs only). Nothing is raised for unusable
    input: it is listed in the result's ``errors``. Raises
    :class:`~.batch.SchedulerError` for a cluster that cannot be used.
    """
    from .batch import BatchOptions, analyze_inputs  # workers and Dask only when analyzing

    batch = BatchOptions(check_leaks=options.check_leaks, jobs=jobs, scheduler=scheduler, send_bytes=send_bytes,
                         sources=options.sources)
    return analyze_inputs([os.fspath(p) for p in inputs], batch, progress=progress)


def make_report(result: AnalysisResult, options: AnalysisOptions, *, history: Optional[Baseline] = None) -> Report:
    """The report of ``result`` as ``options`` ask (``history``: see :func:`~npusan.analyzer.report.base.build_report`)."""
    return build_report(
        result,
        group=options.group,
        suppressions=options.suppressions,
        baseline=options.baseline,
        min_count=options.min_count,
        check_leaks=options.check_leaks,
        history=history,
    )


def open_history(path: PathLike, label: Optional[str] = None):
    """The history database at ``path`` (created when missing) that this run is recorded in.

    ``label`` names the run (default: the date and time); an empty label, or one a run in
    the history already has, is refused here, before any trace is read (labels name runs).
    Raises :class:`~.history.HistoryError` (one line for the user).
    """
    from .history import History, HistoryError

    if label is not None and not label.strip():
        raise HistoryError("the run label must not be empty")
    history = History.open(os.fspath(path))
    if label is not None and history.has_label(label):
        history.close()
        raise HistoryError(f"history {os.fspath(path)}: a run labelled '{label}' is already recorded "
                           "(labels name runs; choose another)")
    return history


def render_options(
    options: AnalysisOptions, *, full_stacks: bool = False, expand: bool = False, color: bool = False,
    width: int = 100,
) -> ReportOptions:
    """How reporters render a report of this analysis (the display flags as given)."""
    return ReportOptions(group=options.group, full_stacks=full_stacks, expand=expand, color=color, width=width,
                         check_leaks=options.check_leaks, min_count=options.min_count, sources=options.sources)
