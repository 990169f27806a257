"""The JSON report: its contract (docs/report-schema.md), validated against the shipped JSON Schema."""

import json
from pathlib import Path

import jsonschema
import pytest

from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.schema import REPORT_SCHEMA, schema_text
from npusan.analyzer.findings.suppressions import parse_suppressions
from tests.cli.npusan_scenarios import make_finding, make_result

ROOT = Path(__file__).resolve().parents[3]


def render(result, **kw) -> dict:
    opts = {k: kw.pop(k) for k in ("min_count",) if k in kw}
    report = build_report(result, **kw, **opts)
    doc = json.loads(get_reporter("json").render(report, ReportOptions(**opts)))
    jsonschema.validate(doc, REPORT_SCHEMA)
    return doc


def test_docs_schema_file_is_the_shipped_schema():
    assert (ROOT / "docs" / "report-schema.json").read_text() == schema_text()
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)


def test_contract_fields():
    f = make_finding(count=3, later_seq=5, last_seq=25)
    doc = render(make_result([f]))
    assert doc["schema_version"].startswith("1.")
    (item,) = doc["findings"]
    assert item["kind"] == "data-race"
    assert item["count"] == 3
    assert item["addresses"] == [0x7F0000100000]
    assert item["fingerprint"] == f.fingerprint()
    assert item["access"]["type"] == "read" and item["previous"]["type"] == "write"
    assert item["access"]["op"] == "aten::sum"
    assert item["access"]["stream"]["name"] == "stream #1 (cuda:0), created at train.py:18"
    assert item["previous"]["stream"]["name"] == "default stream (cuda:0)"
    assert item["access"]["stack"][-1] == {"file": "train.py", "line": 21, "function": "data_race"}
    assert item["block"]["size"] == 4096
    assert item["first"] == {"trace": 0, "seq": 5} and item["last"] == {"trace": 0, "seq": 25}
    assert item["traces"] == [0]
    assert doc["summary"]["findings"] == 1 and doc["summary"]["occurrences"] == 3
    assert doc["summary"]["by_kind"]["data-race"] == {"findings": 1, "occurrences": 3}
    assert doc["traces"][0]["path"] == "a.bin" and doc["traces"][0]["header"]["backend"] == "cuda"
    assert doc["baseline"] is None


def test_grouped_across_traces_with_trace_indices():
    a = make_finding(trace=0, address=0x1000)
    b = make_finding(trace=1, address=0x2000, side_handle=0x77)
    doc = render(make_result([a, b], paths=("rank0.bin", "rank1.bin")))
    (item,) = doc["findings"]
    assert item["traces"] == [0, 1] and item["count"] == 2
    assert [t["path"] for t in doc["traces"]] == ["rank0.bin", "rank1.bin"]


def test_no_group_lists_occurrences():
    f = make_finding(count=2, occurrences=[(2, 1, 0x10), (8, 7, 0x20)])
    doc = render(make_result([f]), group=False)
    assert doc["grouped"] is False
    assert [x["access"]["seq"] for x in doc["findings"]] == [2, 8]
    assert [x["count"] for x in doc["findings"]] == [1, 1]


def test_summary_counts_suppressed_and_below_min_count():
    rare = make_finding(later=("train.py", 30, "x"), count=1)
    common = make_finding(count=5)
    silenced = make_finding("reuse-race", later_op="aten::fill_", later_type="write", count=2)
    s = parse_suppressions(b'[[suppress]]\nkind = "reuse-race"\nreason = "r"\n')
    doc = render(make_result([rare, common, silenced]), suppressions=s, min_count=2)
    assert [x["count"] for x in doc["findings"]] == [5]
    assert doc["summary"]["suppressed"] == 1 and doc["summary"]["suppressed_occurrences"] == 2
    assert doc["summary"]["below_min_count"] == 1


def test_header_values_become_json():
    result = make_result([])
    result.traces[0].header = {"backend": "npu", "default_streams": {0: 123}, "raw": b"\xffab", "t": (1, 2)}
    doc = render(result)
    assert doc["traces"][0]["header"] == {"backend": "npu", "default_streams": {"0": 123}, "raw": "\ufffdab", "t": [1, 2]}
    assert doc["findings"] == [] and doc["summary"]["findings"] == 0


@pytest.mark.parametrize("kind", ["data-race", "missing-record-stream", "reuse-race"])
def test_every_kind_validates(kind):
    f = make_finding(kind, later_op="free" if kind == "missing-record-stream" else "aten::x",
                     later_type="write", later_seq=0 if kind == "missing-record-stream" else 4)
    doc = render(make_result([f]))
    assert doc["findings"][0]["kind"] == kind
    assert doc["findings"][0]["fix"]


def test_large_reports_are_compact_but_equal():
    from npusan.analyzer.report.json_report import PRETTY_MAX_FINDINGS

    many = [make_finding(later=("train.py", i, "f")) for i in range(PRETTY_MAX_FINDINGS + 1)]
    report = build_report(make_result(many))
    text = get_reporter("json").render(report, ReportOptions())
    assert text.count("\n") == 1  # one line
    doc = json.loads(text)
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert len(doc["findings"]) == PRETTY_MAX_FINDINGS + 1


def test_a_bug_seen_on_two_streams_lists_the_other_stream():
    """One entry (one fingerprint) for a bug two side streams made by one line both have:
    ``other_streams`` names the stream its first finding does not, once; [] for one stream."""
    one = make_finding("missing-record-stream", later_seq=0, earlier_seq=2)
    two = make_finding("missing-record-stream", later_seq=0, earlier_seq=3, side_handle=0x52, side_index=2,
                       side_number=2, address=0x7F0000200000)
    three = make_finding("missing-record-stream", later_seq=0, earlier_seq=4, side_handle=0x52, side_index=2,
                         side_number=2, address=0x7F0000300000)
    (item,) = render(make_result([one, two, three]))["findings"]
    assert [(s["handle"], s["number"]) for s in item["other_streams"]] == [(0x52, 2)]
    (item,) = render(make_result([one]))["findings"]
    assert item["other_streams"] == []
