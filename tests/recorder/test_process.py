"""Processes and failures: fork, SIGKILL, SIGTERM, a full disk, naming one trace per
process, activation without the wrapper, and results unchanged by recording."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import npusan
from npusan import sim
from npusan.recorder.activate import child_env
from npusan.trace_format import records as R

from .conftest import analyze, free_port, kinds, records, run_record, write_script


def _kernel_names(path):
    recs, reader = records(path)
    return [reader.symbols.strings[r[2]] for r in recs if r[0] == R.KERNEL], reader


def _spawn(script, trace, **extra):
    env = child_env(str(trace), backend="sim")
    env.update(extra)
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


FORK = """
import os, sys
import torch
from npusan import sim
x = torch.ones(64)
x.mul_(2)
pid = os.fork()
if pid == 0:
    y = x.cos()              # must never reach the parent's trace
    y.add_(1)
    sys.exit(0)              # the normal exit path (atexit) in the child
_, status = os.waitpid(pid, 0)
z = x.sin()
print("child status", status)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_never_writes_into_the_parents_trace(tmp_path):
    proc, trace = run_record(tmp_path, FORK)
    assert proc.returncode == 0, proc.stderr
    assert "child status 0" in proc.stdout
    names, reader = _kernel_names(trace)
    assert "aten::cos" not in names
    assert names[-1] == "aten::sin"
    assert reader.ended_cleanly and not reader.truncated
    assert [p for p in os.listdir(tmp_path) if p.endswith(".npusan")] == ["trace.npusan"]


KILLED = """
import time, torch
from npusan import sim
side = sim.Stream()
x = torch.zeros(4096)
side.wait_stream(sim.current_stream())
with sim.stream(side):
    x.add_(1)
x.sum()                      # a race, recorded before the kill
for i in range(200):
    x.mul_(1.0)
print("ready", flush=True)
time.sleep(60)
"""


def test_sigkill_leaves_a_truncated_trace_analyzable_up_to_shortly_before(tmp_path):
    script = write_script(tmp_path, KILLED)
    trace = tmp_path / "killed.npusan"
    p = _spawn(script, trace)
    try:
        assert p.stdout.readline().strip() == "ready"
        # The periodic flusher (every 0.5 s) must put everything on disk while the program
        # idles, with no exit path involved. Poll rather than sleep a fixed time: this
        # machine may be loaded.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(0.25)
            if _kernel_names(trace)[0].count("aten::mul_.Tensor") == 200:
                break
        p.kill()
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    names, reader = _kernel_names(trace)
    assert reader.truncated and not reader.ended_cleanly
    assert names.count("aten::mul_.Tensor") == 200
    assert kinds(analyze(trace)) == ["data-race"]


def test_sigterm_flushes_and_marks_a_clean_end(tmp_path):
    script = write_script(tmp_path, KILLED)
    trace = tmp_path / "term.npusan"
    p = _spawn(script, trace)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
    names, reader = _kernel_names(trace)
    assert reader.ended_cleanly and not reader.truncated
    assert names.count("aten::mul_.Tensor") == 200


class _FullDisk(io.RawIOBase):
    """A file that accepts ``room`` bytes, then fails like a full disk."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(self.data) + len(b) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.data += b
        return len(b)


def _workload():
    torch.manual_seed(0)
    side = sim.Stream()
    w = torch.randn(32, 32)
    acc = torch.zeros(32)
    for i in range(300):
        x = torch.randn(8, 32)
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            h = torch.tanh(x @ w)
        sim.current_stream().wait_stream(side)
        h.record_stream(sim.current_stream())
        acc += h.sum(0)
    return acc


def test_full_disk_warns_once_and_the_program_continues(tmp_path, capfd):
    expected = _workload()
    sink = _FullDisk(room=4096)
    rec = npusan.record(sink, backend="sim")
    rec.flush_bytes = 1024
    rec.start()
    rec.writer.sink.flush_bytes = 1024  # force writes early
    got = _workload()
    rec.stop()
    err = capfd.readouterr().err
    assert err.count("npusan: warning: recording stopped") == 1
    assert "No space left on device" in err
    assert rec.failed and not rec.active
    assert torch.equal(got, expected)


def test_dev_full_via_environment_warns_once(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    script = write_script(tmp_path, "import torch\nx = torch.ones(3) * 2\nprint('result', x.sum().item())\n")
    env = dict(os.environ, NPUSAN_TRACE="/dev/full", NPUSAN_BACKEND="sim")
    env.pop("NPUSAN_TRACE_OWNER", None)
    out = subprocess.run([sys.executable, "-c", "import npusan.auto; import runpy, sys; runpy.run_path(sys.argv[1])",
                          str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert "result 6.0" in out.stdout
    assert out.stderr.count("npusan: warning:") == 1


def test_results_bit_identical_with_and_without_recording(tmp_path):
    plain = _workload()
    with npusan.record(str(tmp_path / "b.npusan"), backend="sim"):
        recorded = _workload()
    assert plain.dtype == recorded.dtype
    assert plain.numpy().tobytes() == recorded.numpy().tobytes() if hasattr(plain, "numpy") and _has_numpy() else torch.equal(plain, recorded)
    assert torch.equal(plain.view(torch.int32), recorded.view(torch.int32))
    assert analyze(tmp_path / "b.npusan") == []


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


SPAWNS_CHILD = """
import subprocess, sys, torch
x = torch.ones(2) + 1
subprocess.run([sys.executable, "-c", "import torch; print((torch.ones(3) * 3).sum().item())"], check=True)
print("parent done")
"""


def test_one_trace_per_process_named_by_pid_and_rank(tmp_path):
    proc, trace = run_record(tmp_path, SPAWNS_CHILD)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p for p in os.listdir(tmp_path) if p.endswith(".npusan"))
    assert len(files) == 2 and "trace.npusan" in files
    child = next(f for f in files if f != "trace.npusan")
    assert child.startswith("trace.pid")
    assert _kernel_names(tmp_path / child)[0][:3] == ["aten::ones", "aten::mul.Tensor", "aten::sum"]


def test_a_torchrun_style_worker_writes_trace_rank_r(tmp_path):
    # a torchrun-style worker (RANK set) writes trace.rank<R>.npusan
    rank_dir = tmp_path / "ranked"
    rank_dir.mkdir()
    proc, _ = run_record(rank_dir, "import torch\nx = torch.ones(2) * 2\n", env={"RANK": "3", "WORLD_SIZE": "4"})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p for p in os.listdir(rank_dir) if p.endswith(".npusan")) == ["trace.rank3.npusan"]


def test_pid_templates_name_the_trace(tmp_path):
    tdir = tmp_path / "tmpl"
    tdir.mkdir()
    proc, _ = run_record(tdir, "import torch\nx = torch.ones(2) * 2\n", trace=tdir / "t-{pid}.npusan")
    assert proc.returncode == 0, proc.stderr
    made = [p for p in os.listdir(tdir) if p.endswith(".npusan")]
    assert len(made) == 1 and made[0].startswith("t-") and made[0][2:-7].isdigit()


def test_npusan_trace_env_with_import_npusan_auto(tmp_path):
    script = write_script(tmp_path, "import npusan.auto\nimport torch\nx = torch.ones(5) * 4\n")
    trace = tmp_path / "auto.npusan"
    env = dict(os.environ, NPUSAN_TRACE=str(trace), NPUSAN_BACKEND="sim")
    env.pop("NPUSAN_TRACE_OWNER", None)
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    names, reader = _kernel_names(trace)
    assert names == ["aten::ones", "aten::mul.Tensor"] and reader.ended_cleanly


def test_print_env_makes_a_python_process_record(tmp_path):
    trace = tmp_path / "env.npusan"
    from .conftest import NPUSAN

    out = subprocess.run([*NPUSAN, "record", "--print-env", "--backend", "sim", "-o", str(trace)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    for line in out.stdout.splitlines():
        k, v = line[len("export "):].split("=", 1)
        env[k] = v.strip("'\"")
    script = write_script(tmp_path, "import torch\nx = torch.ones(5) * 4\n")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert _kernel_names(trace)[0] == ["aten::ones", "aten::mul.Tensor"]


def test_torchrun_writes_one_trace_per_rank(tmp_path):
    import shutil

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun not installed next to this Python")
    script = write_script(tmp_path, "import os, torch\nx = torch.ones(4) * int(os.environ['RANK'])\n")
    from .conftest import NPUSAN

    out = subprocess.run([*NPUSAN, "record", "--backend", "sim", "-o", str(tmp_path / "t.npusan"), "--",
                          torchrun, "--nproc_per_node=2", f"--master_port={free_port()}", str(script)],
                         capture_output=True, text=True, timeout=180, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    for r in (0, 1):
        recs, reader = records(tmp_path / f"t.rank{r}.npusan")
        assert reader.header["rank"] == r and reader.ended_cleanly
        assert [reader.symbols.strings[x[2]] for x in recs if x[0] == R.KERNEL] == ["aten::ones", "aten::mul.Tensor"]


def test_record_online_raise_flag_stops_the_program(tmp_path):
    code = """
    import torch
    from npusan import sim
    s = sim.Stream()
    x = torch.zeros(4)
    s.wait_stream(sim.current_stream())
    with sim.stream(s):
        x.fill_(1)
    x.sum()
    print("not reached")
    """
    proc, trace = run_record(tmp_path, code, record_args=("--backend", "sim", "--online-raise"))
    assert proc.returncode == 1
    assert "npusan.recorder.errors.RaceError: data race" in proc.stderr
    assert "not reached" not in proc.stdout
    assert kinds(analyze(trace)) == ["data-race"]  # the trace was written too


def test_unwritable_path_warns_once_and_runs_unrecorded(tmp_path, capfd):
    bad = tmp_path / "no-such-dir" / "sub" / "t.npusan"
    with npusan.record(str(bad), backend="sim") as rec:
        y = torch.ones(3) * 2
    assert float(y.sum()) == 6.0
    assert rec.failed and not bad.exists()
    err = capfd.readouterr().err
    assert err.count("npusan: warning: recording stopped") == 1 and str(bad) in err


def test_hooks_fired_while_the_recorder_is_busy_are_queued_not_lost(tmp_path):
    """A free arriving (from the garbage collector) while this thread is inside the
    recorder is emitted right after, in order, and at stop at the latest."""
    path = tmp_path / "q.npusan"
    rec = npusan.record(str(path), backend="sim").start()
    x = torch.ones(8)
    ptr = x.untyped_storage().data_ptr()
    with rec._lock:  # simulate: this thread is inside the recorder
        rec._busy = True
        try:
            before = len(rec._deferred)
            del x  # the storage dies now: its free must be queued
            assert len(rec._deferred) == before + 1
            fn, args = rec._deferred[-1]
            assert fn == rec._free and args[0] == ptr
        finally:
            rec._busy = False
    rec.stop()
    recs, reader = records(path)
    frees = [r for r in recs if r[0] == R.FREE]
    allocs = {r[1]: r[2] for r in recs if r[0] == R.ALLOC}
    assert len(frees) == 1 and allocs[frees[0][1]] == ptr


def test_import_npusan_does_not_import_torch():
    out = subprocess.run([sys.executable, "-c", "import sys, npusan, npusan.recorder.activate; "
                          "print('torch' in sys.modules, callable(npusan.record), npusan.RaceError.__name__)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True", "RaceError"]
