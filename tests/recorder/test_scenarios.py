"""The seed's scenarios as real PyTorch programs on the simulated device, recorded through
``npusan record`` (a subprocess) and analyzed with the real analyzer."""

from __future__ import annotations

import subprocess

from .conftest import NPUSAN, analyze, kinds, line_of, run_record, user_lines

WORKED_EXAMPLE = """
import torch
from npusan import sim

x = torch.ones(256)                     # allocated on the default stream, kernel seq 1
x.mul_(2)
s1 = sim.Stream()                       # created after the default stream's kernel
s1.wait_stream(sim.current_stream())
with sim.stream(s1):
    y = x + 1                           # USE on s1
del x                                   # FREE with the default stream unaware of s1's use
z = torch.empty(256)                    # the default stream allocates again: it could get x's block
sim.synchronize()
print(float(y.sum()))
"""


def test_worked_example_reports_missing_record_stream(tmp_path):
    proc, trace = run_record(tmp_path, WORKED_EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    assert "768.0" in proc.stdout  # 256 * (2 + 1)
    found = analyze(trace)
    # z gets x's block when the simulated device's malloc returns the same address: then the
    # block is in use on the default stream while s1 may still read it, a reuse race as well
    assert kinds(found) in (["missing-record-stream"], ["missing-record-stream", "reuse-race"])
    (f,) = [f for f in found if f.kind.value == "missing-record-stream"]
    assert user_lines(f.access.stack) == [line_of(WORKED_EXAMPLE, "# FREE")]
    assert user_lines(f.previous.stack) == [line_of(WORKED_EXAMPLE, "# USE")]
    assert f.previous.op == "aten::add.Tensor" and f.previous.type == "read"


CORRECT = """
import torch
from npusan import sim

side = sim.Stream()
cur = sim.current_stream()

# 1. wait_stream both ways + record_stream
x = torch.ones(128)
side.wait_stream(cur)
with sim.stream(side):
    y = x * 3
x.record_stream(side)
cur.wait_stream(side)
z = y + x
y.record_stream(cur)     # y was allocated on side, used here
del x, y

# 2. events
a = torch.zeros(64)
ev = sim.Event()
ev.record(cur)
side.wait_event(ev)
with sim.stream(side):
    a.add_(1)
    done = side.record_event()
cur.wait_event(done)
b = a * 2
a.record_stream(side)
del a

# 3. host synchronization
c = torch.zeros(32)
side.wait_stream(cur)
with sim.stream(side):
    c.fill_(5)
side.synchronize()
d = c.sum()
sim.synchronize()
del c

# 4. same stream only, views, in-place
e = torch.arange(100.)
e[10:].mul_(2)
e.view(10, 10).t().sum()
del e
print(float(z.sum()), float(b.sum()), float(d))
"""


def test_correct_patterns_report_nothing(tmp_path):
    proc, trace = run_record(tmp_path, CORRECT)
    assert proc.returncode == 0, proc.stderr
    assert analyze(trace) == []


RACE = """
import torch
from npusan import sim

side = sim.Stream()
x = torch.zeros(1000)
side.wait_stream(sim.current_stream())
with sim.stream(side):
    x[500:].add_(1)          # WRITE on side
total = x.sum()              # READ on the default stream, no wait
print(float(total))
"""


def test_planted_race_found_with_both_stacks(tmp_path):
    proc, trace = run_record(tmp_path, RACE)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    assert kinds(found) == ["data-race"]
    f = found[0]
    assert user_lines(f.access.stack) == [line_of(RACE, "# READ")]
    assert user_lines(f.previous.stack) == [line_of(RACE, "# WRITE")]
    assert (f.access.type, f.previous.type) == ("read", "write")
    assert f.previous.offset == 2000 and f.previous.nbytes == 2000  # the view's byte range


def test_view_race_csan_misses(tmp_path):
    """A write to x[10:] on one stream and a read of x on another: byte ranges overlap."""
    code = """
    import torch
    from npusan import sim
    s = sim.Stream()
    x = torch.zeros(100)
    s.wait_stream(sim.current_stream())
    with sim.stream(s):
        x[10:].fill_(1)
    x[:20].sum()
    x[:10].sum()          # no overlap with x[10:]: no second finding
    """
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    assert kinds(found) == ["data-race"]
    assert found[0].count == 1


def test_example_program_reports_exactly_its_two_planted_bugs(tmp_path):
    trace = tmp_path / "example.npusan"
    proc = subprocess.run(
        [*NPUSAN, "record", "-o", str(trace), "--", "-m", "npusan.examples.multistream"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "step 2" in proc.stdout
    found = analyze(trace)
    assert kinds(found) == ["data-race", "missing-record-stream"]
    from npusan.examples import multistream

    src = open(multistream.__file__).read().splitlines()
    race = next(f for f in found if f.kind.value == "data-race")
    line = race.access.stack[-1].lineno
    assert "return out.sum()" in src[line - 1]
    missing = next(f for f in found if f.kind.value == "missing-record-stream")
    assert "del tmp" in src[missing.access.stack[-1].lineno - 1]


def test_record_exit_status_and_bad_command(tmp_path):
    proc, trace = run_record(tmp_path, "import sys, torch\nsys.exit(3)\n")
    assert proc.returncode == 3
    assert trace.exists()
    bad = subprocess.run([*NPUSAN, "record", "-o", str(tmp_path / "t"), "--", "no-such-command-xyz"],
                         capture_output=True, text=True)
    assert bad.returncode == 127 and "command not found" in bad.stderr and "Traceback" not in bad.stderr
    empty = subprocess.run([*NPUSAN, "record", "-o", str(tmp_path / "t")], capture_output=True, text=True)
    assert empty.returncode == 2 and "Traceback" not in empty.stderr
