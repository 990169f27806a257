"""Stream names: default streams by name, the others numbered per device in creation order.

The numbers come from the trace alone (the order it first mentions each stream), so a
stream that existed before recording (no creation record) is numbered where it first
appears, and every output format names a stream the same way.
"""

import json
import xml.etree.ElementTree as ET

from npusan.analyzer.findings.model import stream_numbers
from npusan.analyzer.replay.traces import analyze_traces
from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.export.timeline import export_chrome
from npusan.trace_format.writer import TraceWriter
from tests.cli.npusan_scenarios import FIXED_HEADER, make_finding, make_result

D0, D1 = 0x10, 0x11  # default streams of devices 0 and 1
OLD, SIDE, OTHER = 0xB0, 0xC0, 0xD0  # OLD existed before recording: no creation record


def st(line: int, fn: str = "step"):
    return [("train.py", 100, "main"), ("train.py", line, fn)]


def two_device_trace(path):
    """Stream indexes: D0 0, OLD 1, SIDE 2 (all cuda:0), OTHER 3, D1 4 (cuda:1)."""
    header = {**FIXED_HEADER, "device_count": 2, "default_streams": {0: D0, 1: D1}}
    with TraceWriter(str(path), backend="cuda", header=header) as w:
        w.memory_allocated(0x1000, D0, 512, stack=st(1))
        w.kernel(OLD, "aten::fill_.Scalar", writes=[0x1000], stack=st(2))  # OLD first seen here
        w.kernel(D0, "aten::sum", reads=[0x1000], stack=st(3))  # race 1: OLD vs default
        w.stream_created(SIDE, stack=st(41, "setup"))
        w.memory_allocated(0x2000, D0, 512, stack=st(4))
        w.kernel(SIDE, "aten::mul.out", writes=[0x2000], stack=st(5))
        w.kernel(D0, "aten::sum", reads=[0x2000], stack=st(6))  # race 2: SIDE vs default
        w.stream_created(OTHER, device=1, stack=st(42, "setup"))
        w.memory_allocated(0x3000, D1, 512, device=1, stack=st(7))
        w.kernel(OTHER, "aten::mul.out", writes=[0x3000], device=1, stack=st(8))
        w.kernel(D1, "aten::sum", reads=[0x3000], device=1, stack=st(9))  # race 3: OTHER vs default
    return str(path)


def report(path, fmt):
    rep = build_report(analyze_traces([path]))
    return get_reporter(fmt).render(rep, ReportOptions())


def test_stream_numbers_count_per_device_in_index_order():
    streams = {0: (0, OLD), 1: (0, D0), 2: (0, SIDE), 3: (1, OTHER), 4: (1, D1), 5: (0, 0xE0)}
    numbers = stream_numbers(streams, lambda dev, handle: handle in (D0, D1))
    assert numbers == {0: 1, 2: 2, 3: 1, 5: 3}


def test_json_names_numbers_and_keeps_the_raw_index(tmp_path):
    doc = json.loads(report(two_device_trace(tmp_path / "t.bin"), "json"))
    assert doc["schema_version"] == "1.9"
    seen = {}
    for f in doc["findings"]:
        for s in (f["access"]["stream"], f["previous"]["stream"]):
            seen[s["index"]] = (s["number"], s["default"], s["name"])
    assert seen == {
        0: (None, True, "default stream (cuda:0)"),
        1: (1, False, "stream #1 (cuda:0)"),  # no creation record: no site
        2: (2, False, "stream #2 (cuda:0), created at train.py:41"),
        3: (1, False, "stream #1 (cuda:1), created at train.py:42"),
        4: (None, True, "default stream (cuda:1)"),
    }
    titles = [f["title"] for f in doc["findings"]]
    assert "stream #2 (cuda:0)" in titles[1] and "the default stream (cuda:0)" in titles[1]
    assert titles[2].endswith("not ordered after a write on stream #1 (cuda:1)")


def test_text_sarif_junit_and_timeline_use_the_same_names(tmp_path):
    path = two_device_trace(tmp_path / "t.bin")
    text = report(path, "text")
    assert "write by aten::mul.out on stream #2 (cuda:0), created at train.py:41" in text
    assert "where <s2> is stream #2 (cuda:0), created at train.py:41" in text  # train.py not readable
    assert "wait_stream(<s1_dev1>)" in text and "where <s1_dev1> is stream #1 (cuda:1), created at train.py:42" in text
    assert "stream #0" not in text and "stream #3" not in text

    sarif = json.loads(report(path, "sarif"))
    props = [r["properties"] for r in sarif["runs"][0]["results"]]
    assert [p["earlierStream"] for p in props] == [
        "stream #1 (cuda:0)", "stream #2 (cuda:0), created at train.py:41", "stream #1 (cuda:1), created at train.py:42",
    ]
    assert all(p["laterStream"].startswith("default stream (cuda:") for p in props)

    junit = ET.fromstring(report(path, "junit").split("\n", 1)[1])
    failures = [c.find("failure") for c in junit.iter("testcase")]
    assert "stream #2 (cuda:0)" in failures[1].get("message")
    assert "on stream #2 (cuda:0), created at train.py:41" in failures[1].text

    doc = export_chrome(path)
    tracks = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert sorted(tracks.values()) == sorted([
        "host", "stream #1 (cuda:0)", "default stream (cuda:0)", "stream #2 (cuda:0), created at train.py:41",
        "stream #1 (cuda:1), created at train.py:42", "default stream (cuda:1)",
    ])
    markers = [e for e in doc["traceEvents"] if e.get("cat") == "finding"]
    assert {m["args"]["stream"] for m in markers} <= set(tracks.values())
    for m in markers:  # each marker sits on the track of the stream it names
        assert tracks[m["tid"]] == m["args"]["stream"]


def test_hand_built_findings_without_numbers_are_numbered_from_what_they_name():
    a = make_finding(side_index=3, side_number=None)
    b = make_finding(side_index=5, side_number=None, later=("train.py", 40, "g"), side_handle=0x77)
    out = get_reporter("text").render(build_report(make_result([a, b])), ReportOptions())
    assert "stream #1 (cuda:0)" in out and "stream #2 (cuda:0)" in out
    assert "stream #3" not in out and "stream #4" not in out and "stream #6" not in out


def test_suppressions_match_the_shown_number_and_the_raw_index():
    from npusan.analyzer.findings.suppressions import parse_suppressions

    f = make_finding(side_index=4, side_number=2)

    def matches(pattern):
        s = parse_suppressions(f'[[suppress]]\nstream = "{pattern}"\nreason = "r"\n'.encode(), "s.toml")
        return s.match(f) is not None

    assert matches("stream #2") and matches("#2") and matches("index 4") and matches("default stream")
    assert not matches("stream #4") and not matches("stream #5")


def test_root_cause_titles_say_the_default_stream_on_either_side():
    from dataclasses import replace

    from npusan.analyzer.findings.grouping import group_findings
    from npusan.analyzer.report.describe import root_cause_title
    from npusan.analyzer.findings.rootcause import root_causes
    from tests.cli.npusan_scenarios import make_finding

    f = make_finding()
    for g in (f, replace(f, access=replace(f.access, stream=f.previous.stream),
                         previous=replace(f.previous, stream=f.access.stream))):
        (rc,) = root_causes(group_findings([g]))
        title = root_cause_title(rc, {"backend": "cuda"})
        assert "the default stream (cuda:0)" in title, title


def test_a_label_that_is_not_a_stream_name_is_quoted():
    from npusan.analyzer.findings.model import StreamRef
    from npusan.analyzer.report import describe as D

    header = {"backend": "cuda"}
    own = StreamRef(0, 5, 1, label="comm stream of process group 0", role="comm")
    other = StreamRef(0, 6, 2, label="my private label")
    assert D.stream_short(own, header) == "the comm stream of process group 0 (cuda:0)"
    assert D.stream_short(other, header) == 'stream "my private label" (cuda:0)'
    assert D.stream_name(other, header) == 'stream "my private label" (cuda:0)'
