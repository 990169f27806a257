"""One small interface for every output format, and the report they all render.

A :class:`Report` is an :class:`~npusan.analyzer.findings.AnalysisResult` after the
decisions a user asked for: grouping, suppressions, a baseline, ``--min-count``. Every
:class:`Reporter` renders the same Report, so formats never disagree about what was found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional

from ..baseline import Baseline, KnownFinding
from ..findings import AnalysisResult, Finding, Kind, TraceSummary, number_streams
from ..grouping import Group, group_findings, ungrouped
from ..rootcause import RootCause, root_cause_of, root_causes
from ..suppressions import Suppressions


@dataclass
class ReportOptions:
    group: bool = True  # False: --no-group, every occurrence listed
    full_stacks: bool = False  # True: library frames not folded
    color: bool = False  # ANSI colors in the terminal report
    width: int = 100  # terminal width for the text report (plain text never wraps)
    check_leaks: bool = False
    min_count: int = 1
    source_roots: tuple = ()  # extra directories to look for relative source files in
    expand: bool = False  # True: every finding of a root cause in full, not only the first
    #: SARIF and JUnit name files relative to this folder (--source-root, or the detected one).
    source_root: Optional[str] = None
    #: What the text report says after a line of folded library frames (how to see them).
    folded_hint: str = " (--full-stacks shows them)"


@dataclass
class Report:
    """What gets reported, and everything that was deliberately left out."""

    groups: list  # list[Group]: new, unsuppressed, frequent enough — these are the findings
    traces: list  # list[TraceSummary]
    suppressed: list = field(default_factory=list)  # list[Group] silenced by --suppress
    below_min_count: list = field(default_factory=list)  # list[Group]
    known: list = field(default_factory=list)  # list[Group] already in the baseline
    gone: list = field(default_factory=list)  # list[KnownFinding] in the baseline, absent now
    baseline: Optional[Baseline] = None
    suppressions: Optional[Suppressions] = None
    grouped: bool = True
    check_leaks: bool = False
    _causes: Optional[list] = field(default=None, repr=False)
    _cause_of: dict = field(default_factory=dict, repr=False)

    @property
    def causes(self) -> list:
        """The groups as root causes (:mod:`~npusan.analyzer.rootcause`), in report order."""
        if self._causes is None:
            self._causes = root_causes(self.groups)
            self._cause_of = root_cause_of(self._causes)
        return self._causes

    def cause_of(self, g: Group) -> Optional[RootCause]:
        self.causes  # noqa: B018 (computes the mapping)
        return self._cause_of.get(id(g))

    def header(self, trace: int) -> dict:
        if 0 <= trace < len(self.traces):
            h = self.traces[trace].header
            return h if isinstance(h, dict) else {}
        return {}

    def trace_path(self, trace: int) -> str:
        if 0 <= trace < len(self.traces):
            return str(self.traces[trace].path)
        return f"trace {trace}"

    @property
    def occurrences(self) -> int:
        return sum(g.count for g in self.groups)

    def counts_by_kind(self) -> dict:
        """``{kind value: [groups, occurrences]}`` over the reported groups, in Kind order."""
        out = {k.value: [0, 0] for k in Kind}
        for g in self.groups:
            out[g.kind.value][0] += 1
            out[g.kind.value][1] += g.count
        return out

    @property
    def truncated(self) -> bool:
        return any(t.truncated for t in self.traces)


def build_report(
    result: AnalysisResult,
    *,
    group: bool = True,
    suppressions: Optional[Suppressions] = None,
    baseline: Optional[Baseline] = None,
    min_count: int = 1,
    check_leaks: bool = False,
) -> Report:
    """Apply suppressions (per finding), grouping, the baseline and ``min_count``."""
    number_unnumbered_streams(result.findings)
    kept: list[Finding] = []
    silenced: list[Finding] = []
    for f in result.findings:
        if suppressions is not None and suppressions.match(f) is not None:
            silenced.append(f)
        else:
            kept.append(f)
    report = Report(
        groups=[],
        traces=list(result.traces),
        suppressed=group_findings(silenced),
        baseline=baseline,
        suppressions=suppressions,
        grouped=group,
        check_leaks=check_leaks,
    )
    reported: list[Group] = []
    for g in group_findings(kept):
        if baseline is not None and g.fingerprint in baseline:
            report.known.append(g)
        elif g.count < min_count:
            report.below_min_count.append(g)
        else:
            reported.append(g)
    if group:
        report.groups = reported
    else:
        report.groups = ungrouped(f for g in reported for f in g.findings)
    if baseline is not None:
        present = {f.fingerprint() for f in result.findings}
        report.gone = baseline.gone(present)
    result.suppressed = len(report.suppressed)
    return report


def number_unnumbered_streams(findings: list) -> None:
    """Give streams that replay did not number (hand-built or online findings) a number.

    Replay numbers every non-default stream from the trace's stream table. Without it, the
    streams the findings name are counted per trace and device in index order, which is the
    same order, only with gaps closed for streams no finding names.
    """
    missing: dict[tuple, set] = {}
    for f in findings:
        for s in (f.access.stream, f.previous.stream, f.block.stream):
            if s is not None and not s.is_default and s.ordinal is None:
                missing.setdefault((s.trace, s.device), set()).add(s.index)
    if not missing:
        return
    by_trace: dict[int, dict[int, int]] = {}
    for (trace, device), indexes in missing.items():
        numbers = by_trace.setdefault(trace, {})
        for n, sidx in enumerate(sorted(indexes), 1):
            numbers[sidx] = n
    for trace, numbers in by_trace.items():
        number_streams([f for f in findings if f.trace == trace], numbers, lambda d, h: False)


class Reporter:
    """Renders a :class:`Report` as one string in one format."""

    name: ClassVar[str] = ""
    #: File name extension for ``-o`` defaults and documentation.
    extension: ClassVar[str] = ".txt"

    def render(self, report: Report, options: ReportOptions) -> str:  # pragma: no cover
        raise NotImplementedError


_REGISTRY: dict[str, Callable[[], Reporter]] = {}


def register(cls):
    """Class decorator: make a reporter available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def get_reporter(name: str) -> Reporter:
    """A reporter instance by format name; ``KeyError`` for unknown names."""
    return _REGISTRY[name]()


def format_names() -> list[str]:
    return list(_REGISTRY)


__all__ = [
    "Report",
    "ReportOptions",
    "Reporter",
    "build_report",
    "format_names",
    "get_reporter",
    "register",
    "Group",
    "KnownFinding",
    "TraceSummary",
]
