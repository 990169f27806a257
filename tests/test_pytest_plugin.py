"""The pytest plugin (``pytest --npusan``), run on small test files with pytester.

Each run is a separate pytest process on the simulated device (what a user's CPU-only CI
gets): the plugin comes from the installed ``pytest11`` entry point, as for a user.
"""

from __future__ import annotations

import textwrap

import pytest

TESTS = '''import pytest
import torch

import npusan
from npusan import sim


def _race():
    x = torch.ones(1024)
    s = sim.Stream()
    with sim.stream(s):
        y = x * 2              # reads x on the side stream, not ordered after ones()
    x.add_(1)
    return y


def test_race():
    _race()


def test_clean():
    x = torch.ones(1024)
    s = sim.Stream()
    s.wait_stream(sim.current_stream())
    with sim.stream(s):
        y = x * 2
        assert (y.sum() == 2048).item()  # on the side stream too: every use is ordered
    sim.current_stream().wait_stream(s)
    x.add_(1)


@pytest.mark.no_npusan
def test_opted_out():
    _race()


def test_caught():
    try:
        _race()
    except npusan.RaceError:
        pass
'''


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(textwrap.dedent(TESTS).splitlines(), 1) if marker in text)


def _run(pytester, *args):
    pytester.makepyfile(test_sync=textwrap.dedent(TESTS))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_races_fail_their_tests_with_the_report_and_clean_tests_pass(pytester):
    traces = pytester.path / "traces"
    result = _run(pytester, "--npusan", f"--npusan-trace-dir={traces}", "-rA")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    for name in ("test_race", "test_caught"):
        result.stdout.fnmatch_lines([f"FAILED test_sync.py::{name}*"])
    result.stdout.fnmatch_lines([
        "*npusan: 1 stream-synchronization bug in this test*",
        "*data race*",
        f"*--> test_sync.py:{_line('# reads x on the side stream')}",  # the racing read
    ])
    # the report folds pytest's and pluggy's frames instead of listing them
    failures = out.split("= FAILURES =")[1].split("short test summary")[0]
    assert "pytest frames" in failures
    assert "_pytest/" not in failures and "pluggy/" not in failures
    assert "Traceback" not in failures
    # pytest has no --full-stacks: the hint says how to see the folded frames, in the trace
    # that --npusan-trace-dir kept (not by giving the option that was given)
    assert "--full-stacks shows them" not in failures
    assert "run `npusan analyze --full-stacks` on the trace named below" in failures
    assert failures.count("on the trace named below") == 2  # once in each of the two failures
    assert "keep the trace with --npusan-trace-dir" not in failures
    assert "npusan: warning" not in out  # the report is the failure, not warnings besides it
    kept = sorted(p.name for p in traces.iterdir())
    assert kept == ["test_sync.py__test_caught.npusan", "test_sync.py__test_race.npusan"]
    report = npusan_analyze(traces / "test_sync.py__test_race.npusan")
    assert {f.kind.value for f in report.findings} == {"data-race"}


@pytest.mark.timeout(900)
def test_without_a_trace_dir_the_hint_says_how_to_keep_the_trace(pytester):
    result = _run(pytester, "--npusan", "-k", "test_race")
    result.assert_outcomes(failed=1, deselected=3)
    failures = result.stdout.str().split("= FAILURES =")[1]
    assert "keep the trace with --npusan-trace-dir DIR, then run `npusan analyze --full-stacks` on it" in failures


def test_without_the_option_nothing_is_checked(pytester):
    result = _run(pytester)
    result.assert_outcomes(passed=4)


def test_trace_dir_needs_the_option(pytester):
    result = _run(pytester, "--npusan-trace-dir=x")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--npusan-trace-dir needs --npusan*"])


def test_options_and_marker_are_registered(pytester):
    pytester.makepyfile(test_empty="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--npusan *", "*--npusan-trace-dir=DIR*"])
    markers = pytester.runpytest_subprocess("--markers")
    markers.stdout.fnmatch_lines(["*no_npusan*"])


def npusan_analyze(path):
    import npusan

    return npusan.analyze(path)


@pytest.mark.parametrize("name", ["/home/u/proj/.venv/bin/pytest", "/usr/local/bin/py.test", "C:/v/Scripts/pytest.exe"])
def test_the_pytest_console_script_frame_folds_with_pytest(name):
    from npusan.analyzer.report.sources import Folded, fold, internal_category
    from npusan.analyzer.findings.model import Frame

    script = Frame(name, 6, "<module>")
    assert internal_category(script) == "pytest"
    inner = Frame("/x/site-packages/_pytest/python.py", 159, "pytest_pyfunc_call")
    user = Frame("/home/u/proj/test_x.py", 3, "test_x")
    folded = fold([script, inner, user])
    assert isinstance(folded[0], Folded) and folded[0].count == 2 and folded[1] == user
    assert internal_category(Frame("/home/u/proj/bin/pytest_helpers.py", 1, "f")) is None


FIXTURES = '''import pytest
import torch

from npusan import sim


@pytest.fixture
def side_buffer():
    s = sim.Stream()
    with sim.stream(s):
        buf = torch.ones(1024)     # written on the side stream by the fixture
    yield buf                      # handed to the test without a wait


@pytest.fixture
def freed_late():
    s = sim.Stream()
    x = torch.ones(1024)
    s.wait_stream(sim.current_stream())
    with sim.stream(s):
        y = x * 2                  # used on the side stream
    yield y
    del x                          # freed by the teardown without record_stream


def test_uses_fixture(side_buffer):
    side_buffer.add_(1)            # races with the fixture's write


def test_teardown_frees(freed_late):
    pass
'''


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fixture_setup_and_teardown_are_checked(pytester):
    pytester.makepyfile(test_fix=FIXTURES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--npusan", "-rA", timeout=600)
    result.assert_outcomes(failed=1, passed=1, errors=1)  # the teardown's finding is an error of that test
    result.stdout.fnmatch_lines(["ERROR test_fix.py::test_teardown_frees*", "FAILED test_fix.py::test_uses_fixture*"])
    out = result.stdout.str()
    assert "data race" in out and "missing record_stream" in out
    # live, the program's own files are read: the teardown's fix names the fixture's stream and
    # tensor; the stream side_buffer() made is no name of the test (it yields the buffer), so
    # that fix says <s1>, visibly a placeholder, with what it stands for
    assert "was not read" not in out and "x.record_stream(s)" in out
    assert "where <s1> is stream #1 (sim:0), created at test_fix.py:9" in out


def test_disabling_inside_a_checked_test_is_said(pytester):
    pytester.makepyfile(test_off='''
import torch
import npusan
from npusan import sim


def test_turns_it_off():
    npusan.disable()
    x = torch.ones(1024)
    s = sim.Stream()
    with sim.stream(s):
        x.add_(2)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--npusan", "-W", "default", timeout=600)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*npusan stopped checking before this test ended*"])


def test_a_recorded_pytest_run_has_no_assert_rewrite_warning(pytester, monkeypatch):
    # The recording hook imports npusan before pytest loads its plugin entry point.
    monkeypatch.setenv("NPUSAN_TRACE", str(pytester.path / "t.npusan"))
    monkeypatch.setenv("NPUSAN_BACKEND", "sim")
    pytester.makepyfile(test_plain="def test_nothing():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=1)
    assert "PytestAssertRewriteWarning" not in result.stdout.str()


YIELDED = '''import pytest
import torch

from npusan import sim


@pytest.fixture
def buf():
    s = sim.Stream()
    with sim.stream(s):
        buf = torch.ones(1024)     # allocated on the side stream
    sim.current_stream().wait_stream(s)
    yield buf                      # freed when pytest drops the test's fixture values


def test_uses_side_buffer(buf):
    buf.add_(1)                    # used on the default stream, without record_stream
'''


@pytest.mark.timeout(900)
def test_a_yielded_value_freed_after_teardown_is_still_checked(pytester):
    pytester.makepyfile(test_yield=YIELDED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--npusan", timeout=600)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*missing record_stream*", "ERROR test_yield.py::test_uses_side_buffer*"])
    # pytest frees the value (no frame of the test's own code): the report points at the use,
    # offers no wait "before the free" inside pluggy, and no import to add to pytest's files
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*--> test_yield.py:17"])
    assert "before the free at" not in out and "does not import" not in out
    assert "pluggy" not in out.split("fix:")[1].split("=====")[0]


def test_a_named_device_that_is_not_here_exits_2_with_one_line(pytester, monkeypatch):
    """As ``npusan record --backend cuda`` on the same machine: status 2, one line, no test run."""
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--npusan", "--npusan-backend", "cuda",
                                           timeout=600)
    if result.ret == pytest.ExitCode.OK:  # (torch is not imported here: asked in the run itself)
        pytest.skip("this machine has a usable CUDA device")
    assert result.ret == 2
    assert [line for line in result.errlines if line.strip()] == [
        "npusan: error: --npusan-backend cuda: no usable CUDA device here (torch.cuda.is_available() is False, "
        "or this torch has no GPU trace hooks); check on the simulated device with --npusan-backend sim"]
    assert "test_nothing" not in result.stdout.str() and "passed" not in result.stdout.str()


def test_the_folded_frames_hint_is_said_once_per_failure():
    from npusan.pytest_plugin import FOLDED_HINT
    from npusan.recorder.online_digest import hint_once

    text = "\n".join(f"… {n} pytest frames{FOLDED_HINT}" for n in (31, 30, 29))
    assert hint_once(text, FOLDED_HINT).splitlines() == [f"… 31 pytest frames{FOLDED_HINT}", "… 30 pytest frames",
                                                         "… 29 pytest frames"]


DEVICE_TESTS = '''import torch
{imports}

def test_prefetch_without_wait():
    side = {mod}.Stream()
    w = torch.randn(64, 64, device="{dev}")
    with {mod}.stream(side):
        x = torch.randn(16, 64).pin_memory().to("{dev}", non_blocking=True)
    y = x @ w                  # the copy on the side stream is not waited for


def test_prefetch_clean():
    side = {mod}.Stream()
    w = torch.randn(64, 64, device="{dev}")
    with {mod}.stream(side):
        x = torch.randn(16, 64).pin_memory().to("{dev}", non_blocking=True)
    {mod}.current_stream().wait_stream(side)
    x.record_stream({mod}.current_stream())
    y = x @ w
    assert y.device.type == "{dev}"
'''


@pytest.mark.parametrize("dev,mod,imports", [
    ("cuda", "torch.cuda", ""),
    ("npu", "torch_npu.npu", "import torch_npu"),
])
def test_emulated_device_tests_are_checked_on_the_cpu(pytester, dev, mod, imports):
    """``pytest --npusan --npusan-emulate cuda`` (or npu): CUDA (torch_npu) tests run on the
    CPU and a race fails its test as on a GPU (NPU)."""
    pytester.makepyfile(test_dev=DEVICE_TESTS.format(dev=dev, mod=mod, imports=imports))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--npusan", f"--npusan-emulate={dev}",
                                           timeout=600)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*data race*", "FAILED test_dev.py::test_prefetch_without_wait*"])


def test_emulate_conflicting_backend_is_a_usage_error(pytester):
    pytester.makepyfile(test_empty="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--npusan", "--npusan-emulate=npu", "--npusan-backend=cuda")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--npusan-emulate npu checks with --npusan-backend npu, not --npusan-backend cuda*"])
