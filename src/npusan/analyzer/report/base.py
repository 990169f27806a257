"""One small interface for every output format, and the report they all render.

A :class:`Report` is an :class:`~npusan.analyzer.findings.model.AnalysisResult` after the
decisions a user asked for: grouping, suppressions, a baseline, ``--min-count``. Every
:class:`Reporter` renders the same Report, so formats never disagree about what was found.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional

from ..findings.baseline import Baseline, KnownFinding
from ..findings.model import AnalysisResult, Finding, Kind, TraceSummary, number_streams
from ..findings.grouping import Group, group_findings, ungrouped
from ..findings.rootcause import RootCause, root_cause_of, root_causes
from .sources import SourceCache, SourceSettings
from ..findings.suppressions import Suppressions


@dataclass
class ReportOptions:
    group: bool = True  # False: --no-group, every occurrence listed
    full_stacks: bool = False  # True: library frames not folded
    color: bool = False  # ANSI colors in the terminal report
    width: int = 100  # terminal width for the text report (plain text never wraps)
    check_leaks: bool = False
    min_count: int = 1
    expand: bool = False  # True: every finding of a root cause in full, not only the first
    #: Folders local source may be quoted from, --map-path pairs, and the folder SARIF and
    #: JUnit name files relative to (--source-root, or the one detected); default: none.
    sources: SourceSettings = field(default_factory=SourceSettings)
    #: What the text report says after a line of folded library frames (how to see them).
    folded_hint: str = " (--full-stacks shows them)"

    @property
    def source_root(self) -> Optional[str]:
        """The project folder reports name files relative to, or None."""
        return self.sources.report_root

    def source_cache(self) -> SourceCache:
        """Where reporters quote source from: recorded text, or files under the roots."""
        return SourceCache(self.sources)


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
    #: What "new", "persisting" and "fixed" were measured against: a baseline or the
    #: previous run of a history; None when nothing was compared.
    compared_with: Optional[Baseline] = None
    #: Findings of ``compared_with`` that are gone now.
    fixed: list = field(default_factory=list)  # list[KnownFinding]
    #: Findings of ``compared_with`` not seen now, but seen there only in traces that are
    #: unreadable now or cut before the finding's kernel: not fixed, just not checked (see
    #: :func:`split_unchecked`).
    unchecked: list = field(default_factory=list)  # list[KnownFinding]
    #: fingerprint -> the traces an unchecked finding was last seen in.
    unchecked_traces: dict = field(default_factory=dict)
    #: fingerprint -> why each of its ``unchecked_traces`` could not check it now
    #: ("unreadable now", "cut at kernel 45,154 now, before this finding's kernel 50,102").
    unchecked_why: dict = field(default_factory=dict)
    #: ``(trace or argument, reason)`` for inputs that could not be analyzed.
    errors: list = field(default_factory=list)
    _causes: Optional[list] = field(default=None, repr=False)
    _cause_of: dict = field(default_factory=dict, repr=False)

    @property
    def causes(self) -> list:
        """The groups as root causes (:mod:`~npusan.analyzer.findings.rootcause`), in report order."""
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

    @property
    def unreadable_traces(self) -> list:
        """Paths of the traces that could not be analyzed."""
        return [str(t.path) for t in self.traces if t.error is not None]

    def comparison(self) -> Optional[dict]:
        """Counts against ``compared_with`` (None when nothing was compared), over distinct
        fingerprints of this run whether shown or not: ``new``, ``persisting``, ``fixed``,
        ``unchecked``, and of the new and persisting ones, those a baseline hid
        (``hidden_by_baseline``) or ``--min-count`` left out (``below_min_count``); and
        ``unreadable_traces``: when not 0, a finding only those traces held cannot be
        checked (with a history: listed as unchecked; with a baseline: it reads as fixed)."""
        compared = self.compared_with
        if compared is None:
            return None
        status: dict = {}
        hidden: dict = {}
        for where, groups in (("shown", self.groups), ("hidden_by_baseline", self.known),
                              ("below_min_count", self.below_min_count)):
            for g in groups:
                if g.fingerprint not in status:
                    status[g.fingerprint] = "persisting" if g.fingerprint in compared else "new"
                    hidden[g.fingerprint] = where
        out = {
            "against": compared.path,
            "new": sum(1 for s in status.values() if s == "new"),
            "persisting": sum(1 for s in status.values() if s == "persisting"),
            "fixed": len(self.fixed),
            "unchecked": len(self.unchecked),
            "unreadable_traces": len(self.unreadable_traces),
        }
        for where in ("hidden_by_baseline", "below_min_count"):
            out[where] = {s: sum(1 for fp, st in status.items() if st == s and hidden[fp] == where)
                          for s in ("new", "persisting")}
        return out


def build_report(
    result: AnalysisResult,
    *,
    group: bool = True,
    suppressions: Optional[Suppressions] = None,
    baseline: Optional[Baseline] = None,
    min_count: int = 1,
    check_leaks: bool = False,
    history: Optional[Baseline] = None,
) -> Report:
    """Apply suppressions (per finding), grouping, the baseline and ``min_count``.

    ``history`` is the previous run of a ``--history`` database: reported groups get the
    status "new" or "persisting" against it and ``fixed`` lists what it had that is gone.
    A baseline sets the same fields (everything reported against a baseline is new).
    """
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
        errors=result.errors,
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
    present = {f.fingerprint() for f in result.findings}
    if baseline is not None:
        report.gone = baseline.gone(present)
    compared = history if history is not None else baseline
    if compared is not None:
        report.compared_with = compared
        report.fixed, report.unchecked, report.unchecked_traces, report.unchecked_why = split_unchecked(
            compared.gone(present), compared.traces, result.traces, compared.first_kernel, compared.ranks,
        )
        for g in report.groups:
            g.status = "persisting" if g.fingerprint in compared else "new"
    result.suppressed = len(report.suppressed)
    return report


def split_unchecked(gone: list, seen_in: dict, traces: list, first_kernel: dict, ranks: Optional[dict] = None) -> tuple:
    """``(fixed, unchecked, {fingerprint: traces}, {fingerprint: whys})`` of the compared
    run's ``gone`` findings.

    A gone finding is *unchecked*, not fixed, when none of the traces it was seen in
    (``seen_in``: fingerprint -> paths, from a history) could have shown it in this run
    (``traces``: this run's :class:`TraceSummary` list): the trace is unreadable now, or it
    was cut (a crashed run) before it got past the kernel where it first showed the finding
    (``first_kernel``: (fingerprint, path) -> kernel seq). A cut trace confirms no fix of a
    finding whose kernel is not known (histories recorded before it was kept). A trace of
    that run is matched to this run's trace with the same path or, when none has it (a
    folder per night), with the longest common tail of path components (at least the file
    name), else with this run's traces of the same rank (``ranks``: path -> rank, from a
    history; a file renamed, ``rank0.npusan`` -> ``rank0.npusan.zst``); when several match
    equally well, the first that cannot check the finding decides, so that a finding is
    never called fixed for a trace that could not show it. A trace of a known rank that
    matches none now (the rank wrote no trace) checked nothing either. A finding without
    known traces (a JSON baseline) is fixed.
    """
    ranks = ranks or {}
    if not gone:
        return [], [], {}, {}
    now = {str(t.path): t for t in traces}
    rank_of = {p: (t.header.get("rank") if isinstance(t.header, dict) else None) for p, t in now.items()}
    parts = {p: _components(p) for p in now}

    def matching(prev: str) -> list:
        if prev in now:
            return [now[prev]]
        mine = _components(prev)
        best, tied = 0, []
        for p, theirs in parts.items():
            n = 0
            while n < min(len(mine), len(theirs)) and mine[-1 - n] == theirs[-1 - n]:
                n += 1
            if n and n > best:
                best, tied = n, [now[p]]
            elif n and n == best:
                tied.append(now[p])
        if not tied and ranks.get(prev) is not None:
            tied = [now[p] for p, r in rank_of.items() if r == ranks[prev]]
        return tied

    def why_unchecked(fp: str, prev: str) -> Optional[str]:
        found = matching(prev)
        if not found and ranks.get(prev) is not None:
            return f"no trace of rank {ranks[prev]} now"
        for t in found:
            if t.error is not None:
                return "unreadable now"
            if t.truncated:
                seen = first_kernel.get((fp, prev))
                if seen is None:
                    return f"cut at kernel {t.kernels:,} now (the history does not know this finding's kernel)"
                if t.kernels <= seen:
                    when = "before" if t.kernels < seen else "at"
                    return f"cut at kernel {t.kernels:,} now, {when} this finding's kernel {seen:,}"
        return None

    fixed, unchecked, where, why = [], [], {}, {}
    for k in gone:
        prev = list(dict.fromkeys(seen_in.get(k.fingerprint, ())))
        whys = [why_unchecked(k.fingerprint, t) for t in prev]
        if prev and all(whys):
            unchecked.append(k)
            where[k.fingerprint], why[k.fingerprint] = prev, whys
        else:
            fixed.append(k)
    return fixed, unchecked, where, why


def _components(path: str) -> list:
    return [c for c in path.replace("\\", "/").split("/") if c not in ("", ".")]


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


def trace_rows(report) -> list[dict]:
    """Per trace: path, rank, kernels, distinct findings by kind, status; as reports list them.

    Status: ``unreadable``, ``findings``, ``left-out`` (findings, each left out by the
    suppressions, the baseline or ``--min-count``: counted in ``left_out``), ``truncated``
    (no findings, cut) or ``clean``.
    """
    by_trace: list = [dict.fromkeys((k.value for k in Kind), 0) for _ in report.traces]
    left_out = [0] * len(report.traces)

    def traces_of(g: Group) -> set:
        return {t for f in g.findings for t in (f.traces or [f.trace]) if 0 <= t < len(by_trace)}

    for g in report.groups:
        for t in traces_of(g):
            by_trace[t][g.kind.value] += 1
    for g in [*report.suppressed, *report.known, *report.below_min_count]:
        for t in traces_of(g):
            left_out[t] += 1
    rows = []
    for i, t in enumerate(report.traces):
        h = t.header if isinstance(t.header, dict) else {}
        rank = h.get("rank")
        found = sum(by_trace[i].values())
        if t.error is not None:
            status = "unreadable"
        elif found:
            status = "findings"
        elif left_out[i]:
            status = "left-out"
        elif t.truncated:
            status = "truncated"
        else:
            status = "clean"
        rows.append(
            {
                "trace": str(t.path),
                "rank": rank if type(rank) is int else None,
                "kernels": t.kernels,
                "findings": by_trace[i],
                "left_out": left_out[i],
                "status": status,
                "error": t.error,
            }
        )
    return rows


class Reporter:
    """Renders a :class:`Report` as one string in one format."""

    name: ClassVar[str] = ""
    #: File name extension for ``-o`` defaults and documentation.
    extension: ClassVar[str] = ".txt"

    def render(self, report: Report, options: ReportOptions) -> str:  # pragma: no cover
        raise NotImplementedError


_REGISTRY: dict[str, Callable[[], Reporter]] = {}


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused (when it ran) for the duration.

    Rendering allocates millions of small objects (strings, dicts, the parsed trees of the
    quoted source files), none of them in reference cycles, and each allocation burst makes
    the collector walk the whole heap again: the analysis's findings and traces, which
    rendering never frees. That walk was half the time of a report of 10,000 findings.
    Memory is still freed as usual (by reference counting); any cycle waits for the next
    collection after this block.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def register(cls):
    """Class decorator: make a reporter available by its ``name`` (its ``render`` runs with
    :func:`collector_paused`)."""
    render = cls.__dict__.get("render")
    if render is not None:
        @functools.wraps(render)
        def paused(self, report, options):
            with collector_paused():
                return render(self, report, options)

        cls.render = paused
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
    "trace_rows",
]
