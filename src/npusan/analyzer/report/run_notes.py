"""What a report says about the run as a whole, for every human-readable format.

Besides its findings, a report says what it deliberately left out (suppressions,
``--min-count``, a baseline), how this run compares with the previous one of a
``--history`` database (new, persisting, fixed, unchecked) and which inputs could not be
read. The text and HTML reports render the same :class:`RunNote` list, so they never
disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...trace_format.records import (COARSE_NOTE_PREFIX, HOST_ACCESSES_KEY, HOST_FAULTS_OFF_NOTE,
                                     HOST_FAULTS_PART_NOTE, HOST_WATCH_FAULTS, HOST_WATCH_NOTE, HOST_WATCH_TORCH)
from .base import Report, ReportOptions
from .describe import count


@dataclass
class RunItem:
    """A finding of another run listed under a note: gone/fixed (``-``) or unchecked (``?``)."""

    marker: str
    kind: str
    title: str
    fingerprint: str
    remark: str = ""


@dataclass
class RunNote:
    text: str
    label: str = ""  # "unreadable" for input that could not be analyzed
    items: list = field(default_factory=list)  # list[RunItem]
    caveat: Optional[str] = None  # a warning about the completeness of ``items``


def _item(marker: str, k, remark: str = "") -> RunItem:
    return RunItem(marker, k.kind, k.title or "(no title)", k.fingerprint, remark)


def run_notes(report: Report, options: ReportOptions) -> list[RunNote]:
    """The notes about ``report``'s run, in the order reports show them."""
    notes: list[RunNote] = []
    if report.suppressions is not None:
        occ = sum(g.count for g in report.suppressed)
        notes.append(RunNote(f"suppressed: {count(len(report.suppressed), 'finding')} "
                             f"({count(occ, 'occurrence')}) by {report.suppressions.path}"))
    if report.below_min_count:
        notes.append(RunNote(f"not shown: {count(len(report.below_min_count), 'finding')} seen fewer than "
                             f"--min-count {options.min_count} times"))
    if report.baseline is not None:
        caveat = None
        if report.gone and report.unreadable_traces and report.compared_with is report.baseline:
            caveat = (f"{count(len(report.unreadable_traces), 'trace')} unreadable: the gone list may include "
                      "findings that only those traces held")
        notes.append(RunNote(
            f"baseline {report.baseline.path}: {count(len(report.known), 'known finding')} "
            f"still present (not shown), {len(report.gone)} gone since the baseline" + (":" if report.gone else ""),
            items=[_item("-", k) for k in report.gone], caveat=caveat))
    if report.compared_with is not None and report.compared_with is not report.baseline:
        notes.append(_comparison(report))
    coarse = _coarse_note(report)
    if coarse is not None:
        notes.append(coarse)
    host = _host_note(report)
    if host is not None:
        notes.append(host)
    for where, why in report.errors:
        notes.append(RunNote(f"{where}: {why}", label="unreadable"))
    return notes


def _coarse_note(report: Report) -> Optional[RunNote]:
    """Once per report: the traces whose recorder saw part of the program only coarsely
    (their NOTE records say so), so that no finding -- or none -- reads as more than it is."""
    texts: list = []
    traces = 0
    for t in report.traces:
        mine = [text[len(COARSE_NOTE_PREFIX):] for _, text in getattr(t, "notes", ())
                if text.startswith(COARSE_NOTE_PREFIX)]
        if mine:
            traces += 1
            texts.extend(x for x in mine if x not in texts)
    if not texts:
        return None
    where = "" if len(report.traces) == 1 else f" (in {count(traces, 'trace')})"
    return RunNote(f"recorded coarsely{where}: " + "; ".join(texts))


def _host_note(report: Report) -> Optional[RunNote]:
    """Once per report: host accesses of pinned memory were judged, but only those made
    through torch ops (the header's ``host_accesses``), so a clean verdict does not cover a
    write through a numpy view or a raw pointer. Says why the page-fault watch that sees
    those was off, or, where it was on, what it left to torch ops (the trace's notes)."""
    def notes(t):
        return [text for _, text in getattr(t, "notes", ())]

    def why(text):
        for prefix in (HOST_FAULTS_OFF_NOTE, HOST_FAULTS_PART_NOTE):
            if text.startswith(prefix):
                return text[len(prefix):]
        return None

    off = [t for t in report.traces
           if (t.header or {}).get(HOST_ACCESSES_KEY) == HOST_WATCH_TORCH and HOST_WATCH_NOTE in notes(t)]
    part = [t for t in report.traces
            if (t.header or {}).get(HOST_ACCESSES_KEY) == HOST_WATCH_FAULTS and any(why(x) for x in notes(t))]
    if not off and not part:
        return None
    reasons: list = []
    for t in off + part:
        for text in notes(t):
            w = why(text)
            if w and w not in reasons:
                reasons.append(w)
    n = len(off) + len(part)
    where = "" if len(report.traces) == 1 else f" (in {count(n, 'trace')})"
    return RunNote(f"pinned host memory watched{where}: "
                   + ("" if off else "some ")
                   + "host accesses outside torch ops (numpy views, raw pointers) are not seen"
                   + (f" (page-fault watch: {'; '.join(reasons)})" if reasons else ""))


def _comparison(report: Report) -> RunNote:
    """Against a history's previous run: new, persisting (shown or not), fixed, unchecked."""
    c = report.comparison()
    hidden = [f"{n} {status} {why}"
              for key, why in (("hidden_by_baseline", "in the baseline"), ("below_min_count", "below --min-count"))
              for status, n in c[key].items() if n]
    text = (f"compared with {c['against']}: {c['new']} new, {c['persisting']} persisting"
            + (f" (not shown: {', '.join(hidden)})" if hidden else "")
            + f", {len(report.fixed)} fixed"
            + (f", {len(report.unchecked)} unchecked" if report.unchecked else "")
            + (":" if report.fixed or report.unchecked else ""))
    items = [_item("-", k) for k in report.fixed]
    for k in report.unchecked:
        where = "; ".join(f"{t}, {why}" for t, why in zip(report.unchecked_traces.get(k.fingerprint, ()),
                                                           report.unchecked_why.get(k.fingerprint, ())))
        items.append(_item("?", k, f"unchecked: last seen only in {where}"))
    caveat = None
    if c["unreadable_traces"]:
        caveat = (f"{count(c['unreadable_traces'], 'trace')} unreadable: the fixed list may be incomplete "
                  "(findings last seen only in unreadable traces are listed as unchecked, not fixed)")
    return RunNote(text, items=items, caveat=caveat)
