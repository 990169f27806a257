"""One analysis from trace files to a :class:`~.reporters.base.Report`.

``npusan analyze`` and the Python API (:func:`npusan.analyze`) both run :func:`analyze`:
replay every trace, then apply what the user asked for (grouping, suppressions, a baseline,
a minimum count). What differs between them is only the surface: flags and exit codes on
one side, keyword arguments and exceptions on the other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from .baseline import Baseline, load_baseline
from .reporters.base import Report, build_report
from .suppressions import Suppressions, load_suppressions

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class AnalysisOptions:
    """What one analysis is asked to do (the CLI flags and the API keywords alike)."""

    check_leaks: bool = False  # also check blocks still alive at the end of a trace
    group: bool = True  # False: every occurrence is its own entry
    suppressions: Optional[Suppressions] = None
    baseline: Optional[Baseline] = None
    min_count: int = 1  # report only findings that occurred at least this often

    def __post_init__(self) -> None:
        if not isinstance(self.min_count, int) or self.min_count < 1:
            raise ValueError(f"min_count must be an integer of at least 1 (got {self.min_count!r})")

    @classmethod
    def from_files(
        cls,
        *,
        suppress: Union[PathLike, Suppressions, None] = None,
        baseline: Union[PathLike, Baseline, None] = None,
        **options,
    ) -> "AnalysisOptions":
        """Options with the suppression and baseline files read (paths or loaded objects).

        Raises :class:`~.suppressions.SuppressionError` or :class:`~.baseline.BaselineError`
        (both ``ValueError``) for a file that cannot be used.
        """
        if suppress is not None and not isinstance(suppress, Suppressions):
            suppress = load_suppressions(os.fspath(suppress))
        if baseline is not None and not isinstance(baseline, Baseline):
            baseline = load_baseline(os.fspath(baseline))
        return cls(suppressions=suppress, baseline=baseline, **options)


def analyze(
    paths: Sequence[PathLike],
    options: AnalysisOptions = AnalysisOptions(),
    *,
    progress: Optional[Callable] = None,
) -> Report:
    """Replay each trace of ``paths`` and build the report ``options`` ask for.

    ``progress`` is passed to :func:`~.replay.analyze_traces`. Unusable input raises
    :class:`~npusan.trace_format.errors.TraceFormatError` naming the file.
    """
    from .replay import analyze_traces

    result = analyze_traces(list(paths), check_leaks=options.check_leaks, progress=progress)
    return build_report(
        result,
        group=options.group,
        suppressions=options.suppressions,
        baseline=options.baseline,
        min_count=options.min_count,
        check_leaks=options.check_leaks,
    )
