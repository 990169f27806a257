"""A history knows the kernel at which each trace first showed each finding, so that a trace
cut (a crashed run) before that kernel does not call the finding fixed."""

from __future__ import annotations

import sqlite3

from npusan.analyzer.findings.model import AnalysisResult, TraceSummary
from npusan.analyzer.runs.history import History
from npusan.analyzer.report import build_report
from tests.cli.npusan_scenarios import FIXED_HEADER, make_finding


def result(findings, **traces) -> AnalysisResult:
    """``traces``: path -> (kernels, truncated)."""
    header = {"backend": "cuda", "device_count": 1, **FIXED_HEADER}
    return AnalysisResult(list(findings), [
        TraceSummary(p, header, events=k, kernels=k, truncated=cut) for p, (k, cut) in traces.items()])


def first_night(tmp_path, *findings, **traces) -> History:
    h = History.open(str(tmp_path / "h.db"))
    h.record(build_report(result(findings, **traces), history=h.previous()), label="n1")
    return h


def test_the_history_keeps_each_traces_first_kernel_of_a_finding(tmp_path):
    f0 = make_finding(later_seq=50, first_seq=50, last_seq=90, trace=0)
    f1 = make_finding(later_seq=70, first_seq=70, trace=1)
    h = first_night(tmp_path, f0, f1, **{"r0.npusan": (100, False), "r1.npusan": (100, False)})
    prev = h.previous()
    fp = f0.fingerprint()
    assert prev.first_kernel == {(fp, "r0.npusan"): 50, (fp, "r1.npusan"): 70}


def test_a_cut_trace_must_get_past_the_finding_kernel(tmp_path):
    h = first_night(tmp_path, make_finding(later_seq=50, first_seq=50), **{"r0.npusan": (100, False)})
    for kernels, expect in [(49, "before this finding's kernel 50"), (50, "at this finding's kernel 50"), (51, None)]:
        report = build_report(result([], **{"r0.npusan": (kernels, True)}), history=h.previous())
        if expect is None:
            assert len(report.fixed) == 1 and report.unchecked == []
        else:
            (k,) = report.unchecked
            assert report.fixed == []
            assert report.unchecked_why[k.fingerprint] == [f"cut at kernel {kernels} now, {expect}"]


def test_a_complete_trace_of_another_rank_still_checks_the_finding(tmp_path):
    f0 = make_finding(later_seq=50, first_seq=50, trace=0)
    f1 = make_finding(later_seq=50, first_seq=50, trace=1)
    h = first_night(tmp_path, f0, f1, **{"r0.npusan": (100, False), "r1.npusan": (100, False)})
    report = build_report(result([], **{"r0.npusan": (10, True), "r1.npusan": (100, False)}), history=h.previous())
    assert len(report.fixed) == 1 and report.unchecked == []


def test_an_older_history_loads_and_its_findings_have_no_kernel(tmp_path):
    h = first_night(tmp_path, make_finding(later_seq=50, first_seq=50), **{"r0.npusan": (100, False)})
    h.close()
    db = sqlite3.connect(tmp_path / "h.db")
    db.execute("DROP TABLE first_kernels")  # the schema before it kept kernels
    db.commit()
    db.close()
    h = History.open(str(tmp_path / "h.db"))
    prev = h.previous()
    assert len(prev.known) == 1 and prev.first_kernel == {}
    report = build_report(result([], **{"r0.npusan": (5000, True)}), history=prev)
    (k,) = report.unchecked
    assert report.unchecked_why[k.fingerprint] == [
        "cut at kernel 5,000 now (the history does not know this finding's kernel)"]
    assert [r.label for r in h.runs()] == ["n1"]
