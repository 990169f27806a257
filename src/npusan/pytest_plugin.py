"""The pytest plugin: ``pytest --npusan`` checks each test for stream-synchronization bugs.

Registered through the ``pytest11`` entry point, so installing npusan makes the options
available; without ``--npusan`` the plugin only adds its options and marker and costs
nothing (torch is not imported on its behalf).

With ``--npusan`` each test runs under a recorder in online mode, from the set-up of its
fixtures to their teardown (a stream or tensor made by a fixture and misused by the test,
or freed by the fixture's teardown, is checked like one the test made itself): the first
data race, missing ``record_stream`` or reuse race raises :class:`npusan.RaceError` at the
op that causes it, and the test fails (or errors, in set-up or teardown) with npusan's
report of it (pytest's, pluggy's and npusan's own frames folded) instead of a traceback
through torch internals. A finding still fails the test if the test caught the exception. ``--npusan-trace-dir DIR`` also
writes each test's trace to ``DIR`` and keeps it when the test fails. The
``no_npusan`` marker runs one test unchecked.

``--npusan-emulate cuda`` (or ``npu``) runs the session on an emulated device on the CPU
(see docs/emulation.md): CUDA (or torch_npu) tests run in CPU-only CI, and with
``--npusan`` each is checked as on a GPU. The emulator is installed when pytest is
configured, before any test module is collected (so before it imports ``torch_npu``),
and stays for the whole session.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Optional

import pytest

MARKER = "no_npusan"
_STATE = pytest.StashKey["_TestState"]()


class _TestState:
    """One checked test: its recorder, trace path and what the recorder found."""

    def __init__(self, recorder: Any, trace: Optional[str]) -> None:
        self.recorder = recorder
        self.trace = trace
        self.reported = 0  # findings already attached to the report of an earlier phase
        self.failed = False  # a phase (set-up, call, teardown) failed: its trace is kept


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("npusan", "stream-synchronization checking (npusan)")
    group.addoption("--npusan", action="store_true", default=False,
                    help="Check each test for data races, missing record_stream and reuse races; "
                         "a finding fails the test with npusan's report.")
    group.addoption("--npusan-trace-dir", metavar="DIR", default=None,
                    help="With --npusan: record each test's trace into DIR and keep those of failing tests.")
    group.addoption("--npusan-backend", choices=("auto", "cuda", "npu", "sim"), default="auto",
                    help="With --npusan: the device to check (default: auto).")
    group.addoption("--npusan-emulate", choices=("cuda", "npu"), default=None,
                    help="Run the tests on an emulated CUDA device (or Ascend NPU with torch_npu) on the CPU; "
                         "with --npusan they are checked as on that device.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: run this test without npusan's checking (pytest --npusan)")
    trace_dir = config.getoption("npusan_trace_dir")
    if trace_dir and not config.getoption("npusan"):
        raise pytest.UsageError("--npusan-trace-dir needs --npusan")
    emulate = config.getoption("npusan_emulate")
    if emulate is not None:
        backend = config.getoption("npusan_backend")
        if backend not in ("auto", emulate):
            raise pytest.UsageError(f"--npusan-emulate {emulate} checks with --npusan-backend {emulate}, "
                                    f"not --npusan-backend {backend}")
        from .emulate.install import install

        install(emulate)  # below every recorder the tests start: its mode must be entered first
    if config.getoption("npusan") and emulate is not None:
        problem = _device_problem(config)  # (the emulator should have made the device: a bug if not)
        if problem is not None:
            raise pytest.UsageError(problem)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> Optional[int]:
    """Refuse a session on a named device that is not here, before collecting anything:
    every test would pass unchecked. Exit 2 with one line, as ``npusan record --backend``
    does for the same mistake (not pytest's usage-error status 4: the command line is
    well formed, the machine lacks the device). With ``--npusan-emulate`` the device is
    the emulator's, installed at configure time."""
    if not config.getoption("npusan") or config.getoption("npusan_emulate") is not None \
            or config.getoption("help", False):
        return None
    problem = _device_problem(config)
    if problem is None:
        return None
    print(f"npusan: error: {problem}", file=sys.stderr)
    return 2


def _device_problem(config: pytest.Config) -> Optional[str]:
    """Why ``--npusan-backend`` names a device this machine cannot record, or None."""
    from .recorder.backends import device_problem

    backend = config.getoption("npusan_backend")
    problem = device_problem(backend)
    if problem is None:
        return None
    return f"--npusan-backend {backend}: {problem}; check on the simulated device with --npusan-backend sim"


def _trace_name(nodeid: str) -> str:
    """A file name for a test id: path separators and brackets made safe, kept readable."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.replace("::", "__")).strip("_.")
    return (name or "test")[:200] + ".npusan"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    """Start recording before the test's fixtures are set up (recording lasts to their teardown)."""
    config = item.config
    if not config.getoption("npusan") or item.get_closest_marker(MARKER) is not None:
        yield
        return
    from .recorder import session

    if session.current() is not None:  # NPUSAN_ONLINE / NPUSAN_TRACE already record this process
        item.warn(pytest.PytestWarning("npusan is already recording this process; --npusan does not check this test"))
        yield
        return
    trace = None
    trace_dir = config.getoption("npusan_trace_dir")
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
        trace = os.path.join(trace_dir, _trace_name(item.nodeid))
    backend = config.getoption("npusan_emulate") or config.getoption("npusan_backend")
    rec = session.Recorder(trace, backend=backend, online="raise",
                           metadata={"test": item.nodeid})
    item.stash[_STATE] = _TestState(rec, trace)
    rec.start()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    """Stop recording once the fixtures are torn down; what the last frees showed goes into
    the teardown's report, not to stderr."""
    try:
        yield
    finally:
        state = item.stash.get(_STATE, None)
        if state is not None:
            if not state.recorder.active:  # the test called npusan.disable(), or recording gave up
                item.warn(pytest.PytestWarning(
                    "npusan stopped checking before this test ended (npusan.disable(), or the recorder "
                    "gave up): what ran after that was not checked"))
            _release_fixture_values(item)
            state.recorder.settle()
            state.recorder.stop(keep_findings=True)  # (frees judged at the end: in the report too)


def _release_fixture_values(item: pytest.Item) -> None:
    """Drop the test's references to its fixtures' values while recording still runs.

    pytest drops them itself only after the teardown phase (``item.funcargs = None``), when
    recording has stopped: a tensor a fixture yielded would be freed unchecked (its missing
    ``record_stream`` never seen). The fixtures are torn down by now; nothing reads them.
    """
    funcargs = getattr(item, "funcargs", None)
    if isinstance(funcargs, dict):
        funcargs.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    state = item.stash.get(_STATE, None)
    if state is None:
        return
    report = outcome.get_result()
    found = list(state.recorder.found)[state.reported:]
    if found and call.when == "teardown" and state.reported:
        # The first finding raised inside the test, so its program stopped half-way; what the
        # frees after it show is mostly that bug's aftermath: noted, not a second failure.
        report.sections.append(("npusan", f"{len(found)} more finding(s) while tearing down: "
                                          "see the trace (--npusan-trace-dir)"))
    elif found:
        report.outcome = "failed"
        report.longrepr = _failure_text(found, state, call)
    state.reported += len(found)
    state.failed = state.failed or report.failed
    if call.when != "teardown" or state.trace is None or not os.path.exists(state.trace):
        return
    if state.failed:
        report.sections.append(("npusan trace", f"kept: {state.trace}"))
    else:
        os.remove(state.trace)


#: How to see folded frames: pytest has no --full-stacks; the kept trace and the CLI do.
FOLDED_HINT = " (to see them: keep the trace with --npusan-trace-dir DIR, then run `npusan analyze --full-stacks` on it)"
#: The same, when the trace is kept (its path ends the failure text).
FOLDED_HINT_KEPT = " (to see them: run `npusan analyze --full-stacks` on the trace named below)"


def _failure_text(found: list, state: _TestState, call: pytest.CallInfo) -> str:
    from .analyzer.report.live import format_finding
    from .recorder.errors import RaceError
    from .recorder.online_digest import hint_once

    header = state.recorder.engine.header if state.recorder.engine is not None else None
    n = len(found)
    lines = [f"npusan: {n} stream-synchronization bug{'s' if n != 1 else ''} in this test", ""]
    hint = FOLDED_HINT if state.trace is None else FOLDED_HINT_KEPT
    for f in found:
        lines += [format_finding(f, header, folded_hint=hint), ""]
    lines = hint_once("\n".join(lines), hint).split("\n")
    if call.excinfo is not None and not call.excinfo.errisinstance(RaceError):
        lines.append(f"(the test also failed: {call.excinfo.exconly()})")
    if state.trace is not None:
        lines.append(f"trace: {state.trace}")
    return "\n".join(lines).rstrip("\n")
