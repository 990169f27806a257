"""SARIF 2.1.0: valid against the official schema, stable identities, no pointers."""

import json
from pathlib import Path

import jsonschema
import pytest

from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.sources import SourceSettings
from npusan.analyzer.report.sarif import FINGERPRINT_KEY, artifact_location, artifact_uri
from tests.cli.npusan_scenarios import make_finding, make_result

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "data" / "sarif-schema-2.1.0.json").read_text())


def sarif(findings, **kw) -> dict:
    doc = json.loads(get_reporter("sarif").render(build_report(make_result(findings, **kw)), ReportOptions()))
    jsonschema.validate(doc, SCHEMA)
    return doc


def test_valid_and_shaped_as_promised():
    race = make_finding(count=4)
    missing = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0,
                           later=("train.py", 12, "seed_example"), first_seq=3)
    doc = sarif([race, missing])
    assert doc["version"] == "2.1.0"
    (run,) = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["data-race", "missing-record-stream", "reuse-race"]
    r0, r1 = run["results"]
    assert r0["ruleId"] == "data-race" and rules[r0["ruleIndex"]]["id"] == "data-race"
    assert r1["ruleId"] == "missing-record-stream" and rules[r1["ruleIndex"]]["id"] == "missing-record-stream"
    # The later access is the primary location; the earlier access and the allocation are related.
    loc = r0["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "train.py", "uriBaseId": "SRCROOT"}, "region": {"startLine": 21}}
    related = {x["id"]: x for x in r0["relatedLocations"]}
    assert related[1]["physicalLocation"]["region"]["startLine"] == 19
    assert "earlier access" in related[1]["message"]["text"]
    assert related[2]["physicalLocation"]["region"]["startLine"] == 17
    assert "allocation" in related[2]["message"]["text"]
    assert r0["partialFingerprints"] == {FINGERPRINT_KEY: race.fingerprint()}
    assert r0["properties"]["count"] == 4 and r0["properties"]["rootCause"] == 1
    assert r1["locations"][0]["physicalLocation"]["region"]["startLine"] == 12
    # SARIF stacks are innermost first.
    assert r0["stacks"][0]["frames"][0]["location"]["physicalLocation"]["region"]["startLine"] == 21


def test_fingerprints_ignore_pointers_handles_and_seqs():
    a = sarif([make_finding(address=0x1000, side_handle=0x1, later_seq=3)])
    b = sarif([make_finding(address=0xFFFF0000, side_handle=0x2, side_index=5, later_seq=300)])
    fa = a["runs"][0]["results"][0]["partialFingerprints"]
    fb = b["runs"][0]["results"][0]["partialFingerprints"]
    assert fa == fb
    assert "1000" not in json.dumps(fa) and "ffff0000" not in json.dumps(fb).lower()


def test_clean_run_is_valid_with_no_results():
    doc = sarif([])
    assert doc["runs"][0]["results"] == []


def test_findings_without_stacks_are_still_valid():
    from dataclasses import replace

    f = make_finding()
    f = replace(f, access=replace(f.access, stack=()), previous=replace(f.previous, stack=()),
                block=replace(f.block, stack=(), stream=None))
    doc = sarif([f])
    res = doc["runs"][0]["results"][0]
    assert "physicalLocation" not in res["locations"][0]
    assert res["locations"][0]["logicalLocations"] == [{"name": "aten::sum"}]


def test_truncated_traces_are_reported_as_notifications():
    result = make_result([], paths=("cut.bin",), truncated=("cut.bin",))
    result.traces[0].warnings = ["trace ends without an end record"]
    doc = json.loads(get_reporter("sarif").render(build_report(result), ReportOptions()))
    jsonschema.validate(doc, SCHEMA)
    run = doc["runs"][0]
    assert run["properties"]["truncatedTraces"] == ["cut.bin"]
    assert "end record" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]


@pytest.mark.parametrize(
    "name, uri",
    [
        ("train.py", "train.py"),
        ("pkg/my model.py", "pkg/my%20model.py"),
        ("/home/u/train.py", "file:///home/u/train.py"),
        ("C:\\work\\train.py", "file:///C:/work/train.py"),
    ],
)
def test_artifact_uris(name, uri):
    assert artifact_uri(name) == uri


def test_locations_are_relative_to_the_source_root(tmp_path):
    root = tmp_path / "checkout"
    inside = str(root / "pkg" / "train.py")
    f = make_finding(later=(inside, 21, "f"), earlier=("/elsewhere/lib.py", 19, "g"))
    report = build_report(make_result([f]))
    doc = json.loads(get_reporter("sarif").render(report, ReportOptions(sources=SourceSettings(report_root=str(root)))))
    jsonschema.validate(doc, SCHEMA)
    (run,) = doc["runs"]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": root.as_uri() + "/"}}
    res = run["results"][0]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "pkg/train.py", "uriBaseId": "SRCROOT"}
    earlier = res["relatedLocations"][0]["physicalLocation"]["artifactLocation"]
    assert earlier == {"uri": "file:///elsewhere/lib.py"}  # outside the root: absolute
    assert "file://" + str(root) not in json.dumps(res["locations"])


@pytest.mark.parametrize(
    "name, root, loc",
    [
        ("/src/proj/a/b.py", "/src/proj", {"uri": "a/b.py", "uriBaseId": "SRCROOT"}),
        ("/src/proj/a/b.py", "/src/proj/", {"uri": "a/b.py", "uriBaseId": "SRCROOT"}),
        ("/src/project2/b.py", "/src/proj", {"uri": "file:///src/project2/b.py"}),
        ("rel/b.py", None, {"uri": "rel/b.py", "uriBaseId": "SRCROOT"}),
        ("/abs/b.py", None, {"uri": "file:///abs/b.py"}),
        # A name that climbs out of the root is not under it: never a relative URI that climbs
        # (a consumer resolving it against the checkout would leave it), but the absolute
        # file it stands for, resolved against the root.
        ("../up/b.py", "/src/proj", {"uri": "file:///src/up/b.py"}),
        ("../../../../etc/passwd", "/src/proj", {"uri": "file:///etc/passwd"}),
        ("/src/proj/../../../../etc/passwd", "/src/proj", {"uri": "file:///etc/passwd"}),
        ("a/../../b.py", "/src/proj", {"uri": "file:///src/b.py"}),
        ("a/..", "/src/proj", {"uri": "file:///src/proj"}),
        ("C:/../../Windows/x.py", None, {"uri": "file:///C:/Windows/x.py"}),
        # ... and one that only seems to climb is under the root after all.
        ("pkg/../x.py", "/src/proj", {"uri": "x.py", "uriBaseId": "SRCROOT"}),
    ],
)
def test_artifact_locations(name, root, loc):
    assert artifact_location(name, root) == loc


@pytest.mark.parametrize("root", ["/src/proj", None])
@pytest.mark.parametrize(
    "name", ["../../../../etc/passwd", "a/../../b", "..\\..\\x.py", "/r/../../x", "C:\\..\\x.py", "..", "./../x"]
)
def test_no_uri_has_a_dot_dot_segment_or_is_relative_without_a_base(name, root):
    loc = artifact_location(name, root)
    assert ".." not in loc["uri"].split("/")
    assert loc["uri"].startswith("file:///") or loc.get("uriBaseId") == "SRCROOT"


def test_a_trace_named_by_a_climbing_path_is_an_absolute_target(tmp_path, monkeypatch):
    from npusan.analyzer.report.sarif import target_uri

    monkeypatch.chdir(tmp_path)
    assert target_uri("t.npusan") == "t.npusan"
    assert target_uri("../t.npusan") == "file://" + str(tmp_path.parent / "t.npusan")


def test_brackets_in_message_text_cannot_make_links():
    """SARIF reads ``[text](target)`` in a message's text as a link (3.11.6): a trace's op
    name must not put one in a CI page, so brackets are escaped with a backslash."""
    f = make_finding(later_op="[click](https://evil.example/x)", earlier_op="a\\[b]")
    doc = sarif([f])
    text = json.dumps(doc)
    (res,) = doc["runs"][0]["results"]
    assert "\\[click\\](https://evil.example/x)" in res["message"]["text"]
    assert "a\\\\\\[b\\]" in res["message"]["text"]  # a backslash before one is doubled
    assert "[click]" not in text.replace("\\\\[click\\\\]", "")
