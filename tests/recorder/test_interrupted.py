"""A recording ended by Ctrl-C reads as interrupted, not as "ended cleanly".

A ``KeyboardInterrupt`` that ends the program (Ctrl-C, SIGINT) ends the process by SIGINT
after the exit handlers; the END record says so, as for SIGTERM. One that leaves a
``with npusan.record()`` block says the recording was interrupted. Either way the analysis
covers everything recorded.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import torch

import npusan
from npusan.recorder.session import INTERRUPTED
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .conftest import NPUSAN, write_script
from .test_faults import LOOP, _env, _finish, _start

RACE_THEN_LOOP = """
import time, torch
from npusan import sim
side = sim.Stream()
x = torch.zeros(4096)
side.wait_stream(sim.current_stream())
with sim.stream(side):
    x.add_(1)
x.sum()                      # races with the add_ on the side stream
print("ready", flush=True)
while True:
    x = x * 1.0
"""


def _read(trace):
    reader = TraceReader(str(trace))
    kernels = sum(1 for r in reader.records() if r[0] == R.KERNEL)
    return reader, kernels


def _says_interrupted(trace, *words):
    info = subprocess.run([*NPUSAN, "info", str(trace)], capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert "ended cleanly" not in info.stdout and "ended early" in info.stdout, info.stdout
    for w in words:
        assert w in info.stdout
    an = subprocess.run([*NPUSAN, "analyze", str(trace)], capture_output=True, text=True, timeout=120)
    assert "ended cleanly" not in an.stdout and "ENDED EARLY" in an.stdout, an.stdout
    return an


def test_sigint_ending_the_program_marks_the_end_record(tmp_path):
    trace = tmp_path / "int.npusan"
    p = _start(tmp_path, RACE_THEN_LOOP, trace)
    p.send_signal(signal.SIGINT)
    assert _finish(p, 30) == -signal.SIGINT  # as without npusan: the process ends by SIGINT
    assert "KeyboardInterrupt" in p.stderr.read()
    reader, kernels = _read(trace)
    assert reader.ended_cleanly and reader.end_stats["signal"] == "SIGINT" and kernels > 4
    an = _says_interrupted(trace, "SIGINT")
    assert "data-race" in an.stdout  # the race recorded before the interrupt is still found
    assert an.returncode == 1


def test_ctrl_c_under_npusan_record_exits_130_and_the_trace_says_sigint(tmp_path):
    script = write_script(tmp_path, LOOP)
    trace = tmp_path / "rec.npusan"
    p = subprocess.Popen([*NPUSAN, "record", "--backend", "sim", "-o", str(trace), "--", sys.executable, str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        import os
        import time

        time.sleep(0.3)
        os.killpg(p.pid, signal.SIGINT)  # Ctrl-C on a terminal: the whole foreground group
        assert p.wait(30) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader, _ = _read(trace)
    assert reader.end_stats["signal"] == "SIGINT"
    _says_interrupted(trace, "SIGINT")


def test_a_keyboard_interrupt_the_program_raises_and_does_not_catch_is_noted(tmp_path):
    code = "import torch\nx = torch.ones(4) * 2\nraise KeyboardInterrupt\n"
    script = write_script(tmp_path, code)
    trace = tmp_path / "raised.npusan"
    out = subprocess.run([sys.executable, str(script)], env=_env(trace), capture_output=True, text=True, timeout=120)
    assert out.returncode == -signal.SIGINT, out.stderr
    reader, kernels = _read(trace)
    assert reader.end_stats["signal"] == "SIGINT" and kernels >= 1


@pytest.mark.parametrize("caught", [True, False])
def test_a_keyboard_interrupt_caught_or_not_ending_normally_is_not_noted(tmp_path, caught):
    """Only the exception that ends the program counts: one the program handled leaves a clean end."""
    code = "import torch\ntry:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    pass\nx = torch.ones(4)\n"
    if not caught:
        code = "import torch\nx = torch.ones(4)\nraise SystemExit(3)\n"
    script = write_script(tmp_path, code)
    trace = tmp_path / "clean.npusan"
    out = subprocess.run([sys.executable, str(script)], env=_env(trace), capture_output=True, text=True, timeout=120)
    assert out.returncode == (0 if caught else 3), out.stderr
    reader, _ = _read(trace)
    assert reader.ended_cleanly and reader.end_reason is None


def test_a_keyboard_interrupt_leaving_the_with_block_says_recording_was_interrupted(tmp_path):
    path = tmp_path / "with.npusan"
    with pytest.raises(KeyboardInterrupt):
        with npusan.record(str(path), backend="sim"):
            x = torch.ones(8) * 2
            raise KeyboardInterrupt
    assert float(x.sum()) == 16.0
    reader, kernels = _read(path)
    assert reader.ended_cleanly and reader.end_stats["stopped"] == INTERRUPTED and kernels >= 1
    assert "signal" not in reader.end_stats
    assert any(r[0] == R.NOTE and INTERRUPTED in r[2] for r in TraceReader(str(path)).records())
    _says_interrupted(path, "interrupted")
