"""Root causes: findings one synchronization would fix are one entry with one fix."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import jsonschema
import pytest

from npusan.analyzer.findings.grouping import group_findings
from npusan.analyzer.report import ReportOptions, build_report, get_reporter
from npusan.analyzer.report.schema import REPORT_SCHEMA
from npusan.analyzer.findings.rootcause import root_causes, wait_point
from npusan.analyzer.report.sources import SourceSettings
from tests.cli.npusan_scenarios import make_finding, make_result
from tests.recorder.conftest import run_record


def race(line: int, later_seq: int, earlier_seq: int, **kw):
    """A read on stream #1 at train.py:``line`` after a write on the default stream."""
    return make_finding(later=("train.py", line, "consume"), earlier=("train.py", 5, "produce"),
                        later_seq=later_seq, earlier_seq=earlier_seq, **kw)


def causes(findings):
    return root_causes(group_findings(findings))


def test_races_whose_producers_all_ran_before_the_first_consumer_share_one_cause():
    # writes at kernels 1, 2, 3; reads at 4, 5, 6: one wait before kernel 4 orders all
    (c,) = causes([race(20, 4, 1), race(21, 5, 2), race(22, 6, 3)])
    assert len(c.groups) == 3 and c.point == 3
    assert c.anchor.access.stack[-1].lineno == 20  # the fix goes before the first read


def test_a_producer_after_the_first_consumer_is_a_second_cause():
    # the second write (kernel 5) runs after the first read (kernel 4): a wait before kernel 4
    # cannot order it
    a, b = causes([race(20, 4, 1), race(21, 6, 5)])
    assert [len(a.groups), len(b.groups)] == [1, 1]
    assert (a.number, b.number) == (1, 2)


def test_different_stream_pairs_or_traces_never_share_a_cause():
    other_stream = race(21, 5, 2, side_handle=0x77, side_index=2, side_number=2)
    other_trace = race(22, 6, 3, trace=1)
    assert len(causes([race(20, 4, 1), other_stream, other_trace])) == 3


def test_missing_record_stream_joins_a_wait_on_the_same_streams():
    # a tensor allocated on stream #1... the waiter is the stream the free happens on
    free = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0,
                        first_seq=7, later=("train.py", 30, "consume"), earlier=("train.py", 6, "produce"),
                        earlier_op="aten::mul.Tensor", earlier_type="read", earlier_seq=3)
    read = make_finding(later=("train.py", 20, "consume"), later_seq=4, earlier_seq=1)
    # make the race's streams those of the free: default waits for stream #1
    read = replace(read, access=replace(read.access, stream=free.access.stream),
                   previous=replace(read.previous, stream=free.previous.stream))
    assert wait_point(free) == 7 and wait_point(read) == 3
    (c,) = causes([free, read])
    assert c.anchor is read  # the earliest point
    reuse = make_finding("reuse-race", later_op="aten::fill_", later_type="write", later_seq=9,
                         earlier_seq=2, later=("train.py", 40, "consume"))
    assert len(causes([free, read, reuse])) == 2  # a reuse race of another use stands alone


def test_every_reported_finding_is_in_exactly_one_root_cause_in_json():
    findings = [race(20, 4, 1), race(21, 5, 2), race(22, 9, 8)]
    report = build_report(make_result(findings))
    doc = json.loads(get_reporter("json").render(report, ReportOptions()))
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert doc["schema_version"] == "1.9"
    explained = [fp for c in doc["root_causes"] for fp in c["findings"]]
    assert sorted(explained) == sorted(f["fingerprint"] for f in doc["findings"])
    first, second = doc["root_causes"]
    assert len(first["findings"]) == 2 and first["kinds"] == {"data-race": 2} and first["occurrences"] == 2
    assert first["waiter"]["number"] == 1 and first["waited"]["default"] is True
    assert first["at"] == {"file": "train.py", "line": 20, "function": "consume"}
    assert "wait_stream(" in first["fix"][1]
    assert [f["root_cause"] for f in doc["findings"]] == [1, 1, 2]


PREFETCH = """
import torch
from npusan import sim


def prefetch(params, copy):
    with sim.stream(copy):
        return [p * 1.0 for p in params]


def layer(x, w1, w2, b):
    h = torch.tanh(x @ w1)
    h = h @ w2
    return h + b


def step(x, staged):
    w1, w2, b = staged
    return layer(x, w1, w2, b).sum()


def main():
    copy = sim.Stream()
    params = [torch.randn(16, 16), torch.randn(16, 16), torch.randn(16)]
    x = torch.randn(4, 16)
    copy.wait_stream(sim.current_stream())
    for it in range(3):
        staged = prefetch(params, copy)
        # BUG: missing sim.current_stream().wait_stream(copy)
        loss = step(x, staged)
        for t in staged:
            t.record_stream(sim.current_stream())
        del staged
        copy.wait_stream(sim.current_stream())
        print(float(loss))
    sim.current_stream().wait_stream(copy)  # params were read on copy: wait before freeing them


main()
"""


def test_prefetch_loop_with_one_missing_wait_is_one_root_cause_with_one_fix(tmp_path, monkeypatch):
    proc, trace = run_record(tmp_path, PREFETCH)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.chdir(tmp_path)
    from npusan.analyzer.replay.traces import analyze_traces

    result = analyze_traces([str(trace)])
    report = build_report(result)
    assert len(report.groups) == 3  # three tensors read at three lines
    (cause,) = report.causes
    roots = ReportOptions(sources=SourceSettings((str(tmp_path),)))  # the program may be read from there
    text = get_reporter("text").render(report, roots)
    lines = text.splitlines()
    assert lines[0].startswith("root cause #1: the default stream (sim:0) does not wait for stream #1 (sim:0)")
    assert "3 findings (3 data races; 9 occurrences)" in lines[0]
    # the one fix first: in main(), where ``copy`` is a variable, before the call that reads
    src = (tmp_path / "prog.py").read_text().splitlines()
    call = next(i for i, l in enumerate(src, 1) if "loss = step(x, staged)" in l)
    assert f"right before line {call} of prog.py (the call that leads to the first access" in lines[2]
    assert lines[3].strip() == "sim.current_stream().wait_stream(copy)"
    assert len([l for l in lines if re.match(r"^error\[", l)]) == 1  # only the first in full
    expanded = get_reporter("text").render(report, ReportOptions(expand=True, sources=SourceSettings((str(tmp_path),))))
    assert len([l for l in expanded.splitlines() if re.match(r"^error\[", l)]) == 3
    assert len(lines) < len(expanded.splitlines()) // 2

    short = get_reporter("short").render(report, roots).splitlines()
    assert len(short) == 3
    for line in short:
        assert re.match(r"^prog\.py:\d+: data-race: data race on a .* \[root cause #1\]$", line), line

    # pasting the one fix where it says makes the whole trace clean
    src.insert(call - 1, "        sim.current_stream().wait_stream(copy)")
    proc, fixed = run_record(tmp_path, "\n".join(src) + "\n", trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze_traces([str(fixed)]).findings == []


REUSE = """
import torch
from npusan import sim


def main():
    side = sim.Stream()
    for n in [16 << (k % 9) for k in range(60)]:  # the simulated device's memory is malloc's
        x = torch.ones(n)
        old = x.data_ptr()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            y = x * 2
        del x
        z = torch.empty(n)
        z.fill_(1.0)
        if z.data_ptr() == old:
            print("reused")
            break
    sim.synchronize()


main()
"""


def test_a_reuse_race_is_folded_under_the_missing_record_stream_behind_it(tmp_path, monkeypatch):
    """Recorded: ``x`` used on ``side``, freed unrecorded, its memory handed to ``z`` and
    written. The reuse race has no fix of its own (``x.record_stream(side)`` fixes both), so
    it is one root cause with the missing record_stream, in every format."""
    proc, trace = run_record(tmp_path, REUSE)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.chdir(tmp_path)
    from npusan.analyzer.replay.traces import analyze_traces

    if "reused" not in proc.stdout:
        pytest.skip("malloc did not hand the freed block out again: no reuse to report")
    report = build_report(analyze_traces([str(trace)]))
    assert {g.kind.value for g in report.groups} == {"missing-record-stream", "reuse-race"}
    (cause,) = report.causes
    assert cause.anchor.kind.value == "missing-record-stream"
    roots = ReportOptions(sources=SourceSettings((str(tmp_path),)))
    text = get_reporter("text").render(report, roots)
    assert text.count("root cause #") == 1 and "does not wait for" in text.splitlines()[0]
    assert re.search(r"\d findings \(1 missing record_stream, \d allocator reuse races?; ", text.splitlines()[0])
    assert text.splitlines()[3].strip().startswith("x.record_stream(side)    # x:")  # the record_stream, once
    assert "error[reuse-race]" not in text  # in full only with --expand
    doc = json.loads(get_reporter("json").render(report, roots))
    jsonschema.validate(doc, REPORT_SCHEMA)
    [c] = doc["root_causes"]
    assert sorted(c["findings"]) == sorted(f["fingerprint"] for f in doc["findings"])
    assert c["fix"][1].strip().startswith("x.record_stream(side)")
    assert {f["root_cause"] for f in doc["findings"]} == {1}
    sarif = json.loads(get_reporter("sarif").render(report, roots))
    assert {r["properties"]["rootCause"] for r in sarif["runs"][0]["results"]} == {1}
    html = get_reporter("html").render(report, roots)
    assert html.count('<section class="cause"') == 1
    # the root cause's one fix, pasted, fixes both
    src = REUSE.replace("        del x\n", "        x.record_stream(side)\n        del x\n")
    proc, fixed = run_record(tmp_path, src, trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze_traces([str(fixed)]).findings == []
