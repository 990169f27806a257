"""A recorded process that forks says, once, that the child is not recorded and how to
record it: a NOTE in its trace and one warning line on stderr."""

from __future__ import annotations

import os

import pytest

from npusan.recorder.process_hooks import FORK_HINT, FORK_NOTE
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .conftest import run_record

FORKS = """
import os, subprocess, sys, torch
from npusan import sim
x = torch.ones(64)
x.mul_(2)
if sys.argv[1] == "fork":
    for _ in range(3):       # DataLoader workers: several forks, one notice
        pid = os.fork()
        if pid == 0:
            x.cos()
            os._exit(0)
        os.waitpid(pid, 0)
else:                        # subprocess runs the fork handlers when given a preexec_fn
    subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True)
x.sin()
print("done", flush=True)
"""


def _notes_and_kernels(trace):
    reader = TraceReader(str(trace))
    notes, names = [], []
    for r in reader.records():
        if r[0] == R.NOTE:
            notes.append((r[1], r[2], len(names)))
        elif r[0] == R.KERNEL:
            names.append(reader.symbols.strings[r[2]])
    return notes, names, reader


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_first_fork_leaves_a_note_and_one_warning(tmp_path):
    proc, trace = run_record(tmp_path, FORKS, args=["fork"])
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if "forked child process is not recorded" in ln]
    assert len(warnings) == 1 and "'spawn'" in warnings[0] and "'forkserver'" in warnings[0], proc.stderr
    notes, names, reader = _notes_and_kernels(trace)
    assert [(lvl, text) for lvl, text, _ in notes] == [("warning", f"{FORK_NOTE}; {FORK_HINT}")]
    assert notes[0][2] == names.index("aten::mul_.Tensor") + 1  # where the fork happened
    assert "aten::cos" not in names and names[-1] == "aten::sin" and reader.ended_cleanly


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_subprocess_starting_a_program_is_not_taken_for_a_fork(tmp_path):
    proc, trace = run_record(tmp_path, FORKS, args=["exec"])
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert "not recorded" not in proc.stderr
    notes, _, _ = _notes_and_kernels(trace)
    assert notes == []
