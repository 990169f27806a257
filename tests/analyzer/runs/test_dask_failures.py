"""A Dask cluster that cannot be used, or stops being usable mid-run: one SchedulerError line,
within the timeout, never a hang or distributed's own traceback."""

from __future__ import annotations

import socket
import threading

import pytest

import tests.cli.npusan_scenarios as S

distributed = pytest.importorskip("distributed")


class FakeServer:
    """A TCP server on the loopback that accepts and then stays silent, or sends ``reply``."""

    def __init__(self, reply: bytes = b"") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.reply = reply
        self.conns: list = []
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply:
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def trace(tmp_path):
    return str(S.data_race(tmp_path / "dr.bin"))


# The client given up on stays in its thread, and its garbage collection later can deadlock
# Dask's shared event-loop runner: in the command that is the end of the process, but a
# pytest worker goes on, so these run in a fresh interpreter (see _in_a_fresh_python).

def test_a_scheduler_that_accepts_and_never_answers_fails_within_the_timeout(trace):
    server = FakeServer()
    try:
        _in_a_fresh_python(trace, f"""
            t = time.monotonic()
            try:
                analyze_paths([trace], BatchOptions(scheduler={server.address!r}, scheduler_timeout=1))
            except SchedulerError as e:
                assert "accepted the connection but did not answer within 1 s" in str(e), e
            else:
                raise AssertionError("no SchedulerError")
            assert time.monotonic() - t < 10
        """)
    finally:
        server.close()


@pytest.mark.parametrize("reply", [b"\xff" * 16, b"\x00" * 7 + b"\x10" + b"\xff" * 8, b"garbage-reply!!\n"])
def test_a_garbage_reply_is_one_line_exit_2(trace, reply):
    import subprocess
    import sys

    server = FakeServer(reply)
    try:
        r = subprocess.run([sys.executable, "-m", "npusan", "analyze", trace, "--scheduler", server.address],
                           capture_output=True, text=True, timeout=120, env=_fresh_env())
    finally:
        server.close()
    assert r.returncode == 2, r.stdout + r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"at {server.address}" in line
    assert "out of memory" not in line


def _fresh_env() -> dict:
    """This checkout first on the path, no recording variables."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root)]))
    for var in [v for v in env if v.startswith("NPUSAN_")]:
        env.pop(var)
    return env


def _in_a_fresh_python(trace, body: str) -> None:
    """Run ``body`` (with ``trace`` bound) in a new interpreter: an in-process LocalCluster
    starts threads, and an earlier test of the same pytest worker may have left threads
    patched (a recording started in process patches thread start-up), which can keep Dask's
    event loop from starting."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading, time
        import distributed
        from npusan.analyzer.runs.batch import BatchOptions, SchedulerError, analyze_paths
        trace = {trace!r}
    """).format(trace=trace) + textwrap.dedent(body) + "\nprint('ok')\n"
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=_fresh_env(), timeout=120)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stdout[-2000:] + p.stderr[-4000:]


def test_a_cluster_without_workers_fails_instead_of_waiting_forever(trace):
    _in_a_fresh_python(trace, """
        with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, silence_logs=50) as c:
            t = time.monotonic()
            try:
                analyze_paths([trace], BatchOptions(scheduler=c.scheduler_address, scheduler_timeout=1))
            except SchedulerError as e:
                assert "has had no worker for 1 s" in str(e), e
            else:
                raise AssertionError("no SchedulerError")
            assert time.monotonic() - t < 15
    """)


def test_a_scheduler_gone_mid_run_is_one_scheduler_error(trace):
    _in_a_fresh_python(trace, """
        c = distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, silence_logs=50)
        threading.Timer(1.0, c.close).start()  # the scheduler goes away while the task waits
        t = time.monotonic()
        try:
            analyze_paths([trace], BatchOptions(scheduler=c.scheduler_address, scheduler_timeout=2))
        except SchedulerError:
            pass
        else:
            raise AssertionError("no SchedulerError")
        assert time.monotonic() - t < 15
    """)


def test_a_working_cluster_still_analyzes(trace):
    _in_a_fresh_python(trace, """
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                                      silence_logs=50) as c:
            for send in (False, True):
                (found, summary), = analyze_paths([trace], BatchOptions(scheduler=c.scheduler_address,
                                                                         send_bytes=send, scheduler_timeout=5))
                assert summary.error is None and [f.kind.value for f in found] == ["data-race"], found
    """)
