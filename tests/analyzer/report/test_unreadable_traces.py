"""A run where some traces could not be read: every format says so, none calls it clean."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from npusan.analyzer.findings.baseline import Baseline, KnownFinding
from npusan.analyzer.findings.model import TraceSummary
from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.base import trace_rows
from tests.cli.npusan_scenarios import make_finding, make_result


def broken_run():
    result = make_result([make_finding()], paths=("good.bin",))
    result.traces.append(TraceSummary("bad.bin", {}, error="the trace header is not a map (got integer)"))
    return result


def render(fmt: str, report) -> str:
    return get_reporter(fmt).render(report, ReportOptions())


def test_html_names_the_unreadable_trace_and_keeps_fix_lines_apart():
    page = render("html", build_report(broken_run()))
    assert "<h3>bad.bin</h3><p class=\"bad\">unreadable: the trace header is not a map (got integer)</p>" in page
    assert "bad.bin</h3><p>0 events" not in page  # never "ended cleanly"
    assert "\ufffd" not in page  # the fix's lines are separate lines, not replaced newlines
    fix = page.split('<pre class="fix">')[1].split("</pre>")[0]
    assert len(fix.splitlines()) >= 2


def test_sarif_marks_the_run_incomplete():
    doc = json.loads(render("sarif", build_report(broken_run())))
    inv = doc["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False
    assert {"level": "error", "message": {"text": "bad.bin: could not be analyzed: the trace header is not a map "
                                                  "(got integer)"}} in inv["toolExecutionNotifications"]
    clean = json.loads(render("sarif", build_report(make_result([make_finding()]))))
    assert clean["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_junit_has_an_error_case_per_unreadable_trace():
    root = ET.fromstring(render("junit", build_report(broken_run())))
    suite = root.find("testsuite")
    assert suite.get("errors") == "1" and suite.get("failures") == "1" and suite.get("tests") == "2"
    (case,) = [c for c in suite.iter("testcase") if c.find("error") is not None]
    assert case.get("name") == "analyze bad.bin"
    assert "not a map" in case.find("error").get("message")


def test_a_trace_whose_findings_were_all_left_out_is_not_called_clean():
    result = make_result([make_finding()], paths=("a.bin", "b.bin"))
    known = build_report(result)
    base = Baseline("base.json", {g.fingerprint: KnownFinding(g.fingerprint, g.kind.value, "t")
                                  for g in known.groups})
    report = build_report(result, baseline=base)
    rows = trace_rows(report)
    assert [(r["status"], r["left_out"]) for r in rows] == [("left-out", 1), ("clean", 0)]
    doc = json.loads(render("json", report))
    assert doc["traces"][0]["status"] == "left-out" and doc["traces"][0]["left_out"] == 1
    assert "left out (1)" in render("text", report)


def test_the_html_page_shows_history_status():
    report = build_report(make_result([make_finding()]))
    report.groups[0].status = "new"
    assert '<span class="status">[new]</span>' in render("html", report)


def test_html_shows_what_the_text_report_says_about_the_run():
    result = broken_run()
    first = build_report(make_result([make_finding()], paths=("good.bin",)))
    base = Baseline("base.json", {"f" * 32: KnownFinding("f" * 32, "data-race", "an old race"),
                                  **{g.fingerprint: KnownFinding(g.fingerprint, g.kind.value, "t") for g in first.groups}})
    report = build_report(result, baseline=base)
    page = render("html", report)
    text = render("text", report)
    assert "baseline base.json: 1 known finding still present (not shown), 1 gone since the baseline:" in text
    assert "baseline base.json: 1 known finding still present (not shown), 1 gone since the baseline:" in page
    assert "an old race" in page and "the gone list may include findings that only those traces held" in page
    assert '<strong class="bad">unreadable:</strong> bad.bin: the trace header is not a map' in page
