"""A FIFO whose writer stalls after the header: ``analyze`` waits for it (a pipe is read
until its writer closes it), says once that it is waiting, and Ctrl-C ends it at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import input_files

from . import npusan_scenarios as S

NPUSAN = [sys.executable, "-c", "import sys; from npusan.cli import main; sys.argv[0] = 'npusan'; main()"]


def _stalling_writer(fifo, data: bytes, first: int, pause: float, done: threading.Event,
                     opened: threading.Event = None):
    def write():
        try:
            with open(fifo, "wb") as f:  # (returns once the reader has opened the FIFO)
                f.write(data[:first])
                f.flush()
                if opened is not None:
                    opened.set()
                done.wait(pause)
                f.write(data[first:])
        except BrokenPipeError:  # the reader was stopped
            pass

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_a_stalled_fifo_is_waited_for_with_one_note_then_read_to_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(input_files, "SILENCE_NOTE_S", 0.3)
    data = S.data_race(tmp_path / "t.npusan").read_bytes()
    fifo = tmp_path / "slow.npusan"
    os.mkfifo(fifo)
    t = _stalling_writer(fifo, data, 40, 1.5, threading.Event())  # the header, then 1.5 s of silence
    r = CliRunner().invoke(cli, ["analyze", str(fifo), "--format", "json"])
    t.join(5)
    assert r.exit_code == 1, r.stderr  # the whole trace was read: its race is found
    notes = [ln for ln in r.stderr.splitlines() if "waiting for data" in ln]
    assert len(notes) == 1 and str(fifo) in notes[0] and "until its writer closes it" in notes[0], r.stderr


def test_ctrl_c_ends_analyze_of_a_stalled_fifo_promptly_with_130(tmp_path):
    data = S.data_race(tmp_path / "t.npusan").read_bytes()
    fifo = tmp_path / "stalled.npusan"
    os.mkfifo(fifo)
    done = threading.Event()
    opened = threading.Event()
    t = _stalling_writer(fifo, data, 40, 120, done, opened)
    p = subprocess.Popen([*NPUSAN, "analyze", str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert opened.wait(60)
        time.sleep(1)  # the header read, waiting for the rest
        assert p.poll() is None
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        assert p.wait(10) == 130
        assert time.monotonic() - t0 < 5
        err = p.stderr.read()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
    finally:
        done.set()
        if p.poll() is None:
            p.kill()
            p.wait()
        t.join(5)


def test_ctrl_c_with_jobs_ends_the_workers_at_once_with_130_and_no_report(tmp_path):
    """With ``-j 2`` each worker is in the middle of a trace (here: waiting on a stalled
    FIFO, as long as a big trace's replay). Ctrl-C reaches the whole process group; the
    workers ignore it and the parent must end them, not wait for their traces."""
    data = S.data_race(tmp_path / "t.npusan").read_bytes()
    done = threading.Event()
    writers, opened = [], []
    for name in ("a.npusan", "b.npusan"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        opened.append(threading.Event())
        writers.append(_stalling_writer(fifo, data, 40, 120, done, opened[-1]))
    out = tmp_path / "rep.json"
    p = subprocess.Popen([*NPUSAN, "analyze", str(tmp_path / "a.npusan"), str(tmp_path / "b.npusan"), "-j", "2",
                          "-o", str(out), "--format", "json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert all(e.wait(60) for e in opened)
        time.sleep(1)  # both workers read the header and wait for the rest
        assert p.poll() is None
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
        t0 = time.monotonic()
        _, err = p.communicate(timeout=30)  # returns once every worker has closed stderr too
        elapsed = time.monotonic() - t0
        assert p.returncode == 130, err
        assert elapsed < 3, elapsed
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "npusan: interrupted", err
        assert not out.exists() and sorted(os.listdir(tmp_path)) == ["a.npusan", "b.npusan", "t.npusan"]
    finally:
        done.set()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for t in writers:
            t.join(5)
