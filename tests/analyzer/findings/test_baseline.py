"""Baselines: JSON reports of earlier runs, matched by fingerprint."""

import json

import pytest

from npusan.analyzer.findings.baseline import BaselineError, load_baseline, parse_baseline  # noqa: E402
from npusan.analyzer.report import ReportOptions, build_report, get_reporter  # noqa: E402
from tests.cli.npusan_scenarios import make_finding, make_result  # noqa: E402


def json_report(findings) -> dict:
    report = build_report(make_result(findings))
    return json.loads(get_reporter("json").render(report, ReportOptions()))


def test_new_known_and_gone_findings():
    fixed = make_finding(later=("train.py", 30, "view_race"))
    kept = make_finding()
    baseline = parse_baseline(json_report([fixed, kept]), "known.json")
    # The next night: the same race with other pointers and handles, plus a new bug.
    again = make_finding(address=0xDEAD000, side_handle=0x999, side_index=3)
    new = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=4)
    report = build_report(make_result([again, new]), baseline=baseline)
    assert [g.finding for g in report.groups] == [new]
    assert [g.finding for g in report.known] == [again]
    assert [k.fingerprint for k in report.gone] == [fixed.fingerprint()]
    assert report.gone[0].kind == "data-race" and "data race" in report.gone[0].title
    doc = json.loads(get_reporter("json").render(report, ReportOptions()))
    assert doc["baseline"]["known"] == [kept.fingerprint()]
    assert [g["fingerprint"] for g in doc["baseline"]["gone"]] == [fixed.fingerprint()]


def test_suppressed_findings_are_not_gone():
    from npusan.analyzer.findings.suppressions import parse_suppressions

    f = make_finding()
    baseline = parse_baseline(json_report([f]), "known.json")
    s = parse_suppressions(b'[[suppress]]\nkind = "data-race"\nreason = "r"\n')
    report = build_report(make_result([f]), baseline=baseline, suppressions=s)
    assert report.gone == [] and report.groups == []


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "is not an npusan JSON report"),
        ({"findings": []}, "no valid 'schema_version'"),
        ({"schema_version": "2.0", "findings": []}, "schema 2.0"),
        ({"schema_version": "1.0", "findings": {}}, "'findings' is not a list"),
        ({"schema_version": "1.0", "findings": [{"kind": "data-race"}]}, "finding 1 has no 'fingerprint'"),
        ({"schema_version": "1.0", "findings": [3]}, "finding 1 has no 'fingerprint'"),
    ],
)
def test_malformed_baselines(doc, message):
    with pytest.raises(BaselineError, match=message):
        parse_baseline(doc)


def test_load_errors_are_one_line(tmp_path):
    for content, message in [(b"{not json", "not valid JSON"), (b"\xff\xfe", "not valid JSON"),
                             (b"[" * 100000, "not valid JSON")]:
        p = tmp_path / "b.json"
        p.write_bytes(content)
        with pytest.raises(BaselineError) as e:
            load_baseline(str(p))
        assert message in str(e.value) and "b.json" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BaselineError, match="cannot read baseline"):
        load_baseline(str(tmp_path / "nope.json"))


@pytest.mark.parametrize(
    "content, message",
    [
        # json.loads(bytes) would read these as UTF-16 and quote a codec's error.
        (b"\xff\xfe{", "not UTF-8 text: byte 0 is 0xff"),
        (b"[" * 100000, "nests arrays or objects too deeply"),
        (b'{"findings": [1,]}', "at line 1 column"),
    ],
)
def test_load_errors_are_in_plain_words(tmp_path, content, message):
    p = tmp_path / "b.json"
    p.write_bytes(content)
    with pytest.raises(BaselineError) as e:
        load_baseline(str(p))
    text = str(e.value)
    assert message in text
    assert "codec" not in text and "recursion" not in text and "unicode string" not in text


def test_utf8_bom_is_accepted(tmp_path):
    p = tmp_path / "b.json"
    p.write_bytes(b'\xef\xbb\xbf{"schema_version": "1.0", "findings": []}')
    assert load_baseline(str(p)).known == {}


def test_empty_baseline_means_everything_is_new(tmp_path):
    p = tmp_path / "b.json"
    p.write_text(json.dumps(json_report([])))
    baseline = load_baseline(str(p))
    report = build_report(make_result([make_finding()]), baseline=baseline)
    assert len(report.groups) == 1 and report.gone == []
