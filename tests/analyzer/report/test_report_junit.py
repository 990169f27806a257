"""JUnit XML: one test case per finding group, a passing case when clean; parsed back."""



import xml.etree.ElementTree as ET

from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.sources import SourceSettings
from tests.cli.npusan_scenarios import make_finding, make_result


def junit(findings, **kw):
    text = get_reporter("junit").render(build_report(make_result(findings), **kw), ReportOptions(color=True))
    return text, ET.fromstring(text)


def test_one_failing_case_per_group():
    a = make_finding(count=3)
    b = make_finding(trace=0, address=0x5000)  # same bug: same group
    c = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0,
                     later=("train.py", 12, "seed_example"), first_seq=3)
    text, root = junit([a, b, c])
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    assert "\x1b[" not in text  # never colored, whatever the options
    suite = root.find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "2"
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["npusan.data-race", "npusan.missing-record-stream"]
    assert cases[0].get("name").startswith("data-race at train.py:21 [")
    assert cases[0].get("file") == "train.py" and cases[0].get("line") == "21"
    failure = cases[0].find("failure")
    assert failure.get("type") == "data-race"
    assert "data race" in failure.get("message")
    assert "4 times" in failure.text and "fix:" in failure.text and "train.py:19" in failure.text
    assert cases[1].find("failure").get("type") == "missing-record-stream"


def test_single_passing_case_when_clean():
    _, root = junit([])
    suite = root.find("testsuite")
    (case,) = suite.findall("testcase")
    assert case.find("failure") is None
    assert suite.get("tests") == "1" and suite.get("failures") == "0"


def test_case_names_are_stable_across_runs():
    _, r1 = junit([make_finding(address=0x1, side_handle=0x1)])
    _, r2 = junit([make_finding(address=0x2, side_handle=0x2, side_index=6)])
    assert r1.find("testsuite/testcase").get("name") == r2.find("testsuite/testcase").get("name")


def test_control_characters_cannot_break_the_xml():
    f = make_finding(later_op="aten::weird\x01op\x1b[31m")
    text, root = junit([f])
    assert "\x01" not in text
    assert root.find("testsuite/testcase/failure") is not None


def test_files_are_relative_to_the_source_root(tmp_path):
    root = tmp_path / "checkout"
    f = make_finding(later=(str(root / "pkg" / "train.py"), 21, "f"))
    options = ReportOptions(sources=SourceSettings(report_root=str(root)))
    tree = ET.fromstring(get_reporter("junit").render(build_report(make_result([f])), options))
    (case,) = tree.iter("testcase")
    assert case.get("file") == "pkg/train.py" and case.get("name").startswith("data-race at pkg/train.py:21 [")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert props["source_root"] == str(root)


def test_without_a_source_root_files_are_absolute_as_in_sarif(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    inside_cwd = str(tmp_path / "pkg" / "train.py")
    f = make_finding(later=(inside_cwd, 21, "f"), earlier=("/elsewhere/lib.py", 19, "g"))
    report = build_report(make_result([f]))
    tree = ET.fromstring(get_reporter("junit").render(report, ReportOptions()))
    (case,) = tree.iter("testcase")
    # not "pkg/train.py" (relative to wherever the analysis ran): the path SARIF's URI names
    assert case.get("file") == inside_cwd and f"data-race at {inside_cwd}:21 [" in case.get("name")
    failure = case.find("failure")
    assert f"{inside_cwd}:21" in failure.text and "/elsewhere/lib.py:19" in failure.text
    assert " pkg/train.py" not in failure.text
    (res,) = json.loads(get_reporter("sarif").render(report, ReportOptions()))["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "file://" + inside_cwd}
    # the message names files as the locations do
    assert f"{inside_cwd}:21" in res["message"]["text"] and " pkg/train.py" not in res["message"]["text"]


def _truncated_result(findings=()):
    result = make_result(list(findings), paths=("crashed.npusan", "whole.npusan"), truncated=("crashed.npusan",))
    result.traces[0].warnings.append("trace is truncated: analyzed up to the last complete record (offset 4,096)")
    return result


def test_a_truncated_trace_is_not_a_silent_pass():
    report = build_report(_truncated_result())
    tree = ET.fromstring(get_reporter("junit").render(report, ReportOptions()))
    suite = tree.find("testsuite")
    # the suite's standard error (Jenkins shows it with each of its cases) says what the text report says
    err = suite.find("system-err").text
    assert "crashed.npusan" in err and "TRUNCATED" in err and "offset 4,096" in err
    assert "whole.npusan" not in err
    # the passing case carries it too (a dashboard's page for that case)
    (case,) = suite.findall("testcase")
    assert case.find("failure") is None and "offset 4,096" in case.find("system-err").text
    warnings = [p.get("value") for p in suite.iter("property") if p.get("name") == "warning"]
    assert any("crashed.npusan" in w and "offset 4,096" in w for w in warnings)
    # the schema's order: properties, test cases, then system-out/system-err
    assert [c.tag for c in suite][-1] == "system-err" and [c.tag for c in suite][0] == "properties"


def test_run_notes_reach_the_junit_report():
    result = _truncated_result([make_finding()])
    from npusan.trace_format.records import COARSE_NOTE_PREFIX

    result.traces[1].notes.append(("info", COARSE_NOTE_PREFIX + "compiled regions as one access each"))
    report = build_report(result)
    suite = ET.fromstring(get_reporter("junit").render(report, ReportOptions())).find("testsuite")
    err = suite.find("system-err").text
    assert "recorded coarsely" in err and "compiled regions as one access each" in err
    assert suite.find("testcase/failure") is not None


def test_a_clean_whole_run_has_no_warnings():
    suite = ET.fromstring(get_reporter("junit").render(build_report(make_result([])), ReportOptions())).find("testsuite")
    assert suite.find("system-err") is None and suite.find("testcase/system-err") is None
    assert not [p for p in suite.iter("property") if p.get("name") == "warning"]


HOSTILE = ["x\x00y\x08z\x0c.py", "bad\ud800surrogate\ufffe\uffff.py", "a]]>b<c>&\"'.py", "p" * 100_000 + ".py",
           "tab\tnew\nline\r.py", "\u202eyp.txt"]


def test_any_trace_string_keeps_the_xml_well_formed():
    # (the reader cleans the strings of a real trace; the report must not depend on it)
    findings = [make_finding(later=(name, 21, "f\x01n"), later_op=name.encode("utf-8", "replace").decode(),
                             address=0x1000 * (i + 1),
                             side_handle=i + 10)
                for i, name in enumerate(HOSTILE)]
    result = make_result(findings, paths=tuple(HOSTILE), truncated=(HOSTILE[0],))
    result.traces[0].warnings.append("warn\x1b]52;c;x\x07\ud800\n" + "w" * 100_000)
    text = get_reporter("junit").render(build_report(result), ReportOptions())
    root = ET.fromstring(text.encode("utf-8"))  # expat rejects any character XML 1.0 cannot carry
    for el in root.iter():
        for key, value in el.attrib.items():
            assert len(value) <= 8192, (el.tag, key)
            assert "\n" not in value or key == "message", (el.tag, key)


def test_a_climbing_file_name_is_never_a_file_attribute(tmp_path):
    root = tmp_path / "checkout"
    root.mkdir()
    climbing = [("../../etc/passwd", None), ("pkg/../../../x.py", None), (str(root) + "/../secret.py", None),
                ("pkg/../train.py", "train.py"), (str(root / "pkg" / ".." / "t.py"), "t.py")]
    findings = [make_finding(later=(name, 21, "f"), address=0x1000 * (i + 1), side_handle=i + 10)
                for i, (name, _) in enumerate(climbing)]
    options = ReportOptions(sources=SourceSettings(report_root=str(root)))
    tree = ET.fromstring(get_reporter("junit").render(build_report(make_result(findings)), options))
    files = {c.get("file") for c in tree.iter("testcase")}
    for f in files:
        assert f is None or ".." not in f.replace("\\", "/").split("/"), f
    assert "train.py" in files and "t.py" in files
    # the climbing names outside the root are absolute, resolved: not a path under the checkout
    assert str(tmp_path.parent / "etc" / "passwd") in files
    assert str(tmp_path / "secret.py") in files
    for c in tree.iter("testcase"):
        assert ".." not in c.get("name").split(" ")[2].split("/")
