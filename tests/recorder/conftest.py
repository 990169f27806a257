"""Helpers for the recorder tests: run real PyTorch programs under ``npusan record`` on the
simulated device, then analyze the traces with the real analyzer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional, Sequence

import pytest

from npusan.analyzer.replay.traces import analyze_traces
from npusan.trace_format.reader import TraceReader

NPUSAN = [sys.executable, "-c", "import sys; from npusan.cli import main; sys.argv[0] = 'npusan'; main()"]


def free_port() -> int:
    """A TCP port free on the loopback now: for torchrun's --master_port, so that tests
    running side by side (pytest-xdist) never meet on torchrun's default port."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_script(tmp_path: Path, code: str, name: str = "prog.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(code))
    return p


def run_record(
    tmp_path: Path,
    code: str,
    *,
    args: Sequence[str] = (),
    record_args: Sequence[str] = ("--backend", "sim"),
    trace: Optional[Path] = None,
    env: Optional[dict] = None,
    timeout: float = 120,
) -> tuple:
    """Record ``code`` (a script) with ``npusan record``; return (completed process, trace path)."""
    script = write_script(tmp_path, code)
    trace = trace or tmp_path / "trace.npusan"
    full_env = dict(os.environ)
    full_env.pop("NPUSAN_TRACE", None)
    full_env.pop("NPUSAN_ONLINE", None)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [*NPUSAN, "record", "-o", str(trace), *record_args, "--", str(script), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=str(tmp_path),
    )
    return proc, trace


def analyze(*paths):
    return analyze_traces([str(p) for p in paths]).findings


def kinds(findings) -> list:
    return sorted(f.kind.value for f in findings)


def user_lines(stack, script_name: str = "prog.py") -> list:
    """Line numbers of the frames of the test script, outermost first."""
    return [fr.lineno for fr in stack if os.path.basename(fr.filename) == script_name]


def records(path) -> list:
    """Every non-definition record of a trace, and the reader (for symbols)."""
    r = TraceReader(str(path))
    recs = list(r.records())
    return recs, r


def line_of(code: str, marker: str) -> int:
    """1-based line number of the line of ``code`` (after dedent) containing ``marker``."""
    for i, line in enumerate(textwrap.dedent(code).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"marker {marker!r} not in script")


@pytest.fixture
def sim_recording(tmp_path):
    """Record in this process on the simulated device; yields a function returning the path."""
    import npusan

    path = tmp_path / "inproc.npusan"
    rec = npusan.record(str(path), backend="sim")
    rec.start()
    try:
        yield rec, path
    finally:
        rec.stop()
