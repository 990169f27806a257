"""The terminal report: compiler-error layout, folding, quoting, colors, safety."""



from dataclasses import replace

from npusan.analyzer.reporters import ReportOptions, build_report, get_reporter
from npusan.analyzer.suppressions import parse_suppressions
from tests.cli.npusan_scenarios import SOURCE, TORCH_TENSOR, make_finding, make_result

INTERNAL = [(TORCH_TENSOR, 1512, "__torch_function__"), (TORCH_TENSOR, 41, "wrapped")]


def text(findings, options=None, **kw):
    return get_reporter("text").render(build_report(make_result(findings), **kw), options or ReportOptions())


def test_layout_of_one_data_race():
    out = text([make_finding(count=2, later_seq=2, last_seq=12, extra_frames=INTERNAL)])
    lines = out.splitlines()
    assert lines[0].startswith("error[data-race] (1/1): data race: read on stream #1 (cuda:0) vs write on the "
                               "default stream (cuda:0) of a 4.0 KiB tensor allocated at train.py:17")
    assert "  --> train.py:21" in lines
    assert any(l.strip().startswith("later:") and "read by aten::sum on stream #1 (cuda:0), created at train.py:18"
               in l for l in lines)
    assert any(l.strip().startswith("earlier:") and "write by aten::fill_.Scalar on default stream (cuda:0)" in l
               for l in lines)
    assert "… 2 torch frames (--full-stacks shows them)" in out
    assert TORCH_TENSOR not in out
    assert "torch.cuda.current_stream().wait_stream(torch.cuda.default_stream(0))" in out
    assert "right before line 21" in out
    assert "2 times in a.bin, kernels 2 … 12" in out
    assert "npusan: 1 finding (1 data race; 2 occurrences) in 1 trace" in out
    assert "\x1b[" not in out


def test_full_stacks_shows_internal_frames():
    out = text([make_finding(extra_frames=INTERNAL)], ReportOptions(full_stacks=True))
    assert f"{TORCH_TENSOR}:1512 in __torch_function__" in out
    assert "torch frames" not in out


def test_source_lines_are_quoted_when_the_file_exists(tmp_path, monkeypatch):
    f = make_finding(later=(str(SOURCE), 21, "data_race"))
    out = text([f])
    assert "21 | y = x.sum()" in out
    monkeypatch.chdir(tmp_path)  # train.py (relative) does not exist here: simply not quoted
    out = text([make_finding()])
    assert " | " not in out


def test_missing_record_stream_fix_names_both_places():
    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=2,
                     later=("train.py", 12, "seed_example"), earlier=("train.py", 11, "seed_example"),
                     earlier_op="aten::mul.Tensor", earlier_type="read")
    out = text([f])
    assert "returned to the allocator (allocation stream: default stream (cuda:0))" in out
    assert "right after line 11 add" in out
    assert "x.record_stream(torch.cuda.current_stream())" in out
    assert "before the free at train.py:12" in out and "torch.cuda.default_stream(0).wait_stream(s1)" in out
    assert "(s1: stream #1 (cuda:0), created at train.py:18)" in out
    assert "once in a.bin, after kernel 2" in out


def test_npu_backend_names_npu_streams():
    result = make_result([make_finding()])
    result.traces[0].header = {**result.traces[0].header, "backend": "npu"}
    out = get_reporter("text").render(build_report(result), ReportOptions())
    assert "default stream (npu:0)" in out and "torch.npu.current_stream()" in out
    result.traces[0].header = {**result.traces[0].header, "backend": "sim"}
    out = get_reporter("text").render(build_report(result), ReportOptions())
    assert "default stream (sim:0)" in out and "npusan.sim.current_stream()" in out


def test_colors_only_when_asked():
    out = text([make_finding()], ReportOptions(color=True))
    assert "\x1b[" in out
    plain = text([make_finding()], ReportOptions(color=False))
    import re

    assert re.sub(r"\x1b\[[0-9;]*m", "", out) == plain


def test_control_characters_from_the_trace_are_neutralized():
    out = text([make_finding(later_op="aten::evil\x1b[2J\x07")])
    assert "\x1b" not in out and "\x07" not in out
    assert "aten::evil\ufffd[2J\ufffd" in out


def test_summary_of_a_clean_truncated_run_with_suppressions():
    s = parse_suppressions(b'[[suppress]]\nkind = "data-race"\nreason = "known"\n', "s.toml")
    result = make_result([make_finding(count=3)], paths=("cut.bin",), truncated=("cut.bin",))
    out = get_reporter("text").render(build_report(result, suppressions=s), ReportOptions())
    assert out.startswith("npusan: no stream-synchronization problems found in 1 trace")
    assert "suppressed: 1 finding (3 occurrences) by s.toml" in out
    assert "trace cut.bin: cuda, 1 device, torch 2.13.0, 10 events, 3 kernels, TRUNCATED" in out
    assert "recorded by npusan-tests, pid 4242, on testhost, at 2026-01-01 00:00:00 UTC, argv: train.py" in out


def test_unknown_allocation_and_missing_stacks():
    f = make_finding()
    f = replace(f, access=replace(f.access, stack=()), block=replace(f.block, stack=(), stream=None, size=None))
    out = text([f])
    assert "unknown-size tensor allocated before recording began" in out
    assert "(no stack recorded)" in out
    assert "an unknown location" in out  # the fix cannot name a line it does not know
