"""A Dask cluster that cannot be used, or stops being usable mid-run: one SchedulerError line,
within the timeout, never a hang or distributed's own traceback."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from click.testing import CliRunner

import tests.cli.npusan_scenarios as S
from npusan.analyzer.runs.batch import BatchOptions, SchedulerError, analyze_paths
from npusan.cli import cli

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


def test_a_scheduler_that_accepts_and_never_answers_fails_within_the_timeout(trace):
    server = FakeServer()
    try:
        t = time.monotonic()
        with pytest.raises(SchedulerError, match="accepted the connection but did not answer within 1 s"):
            analyze_paths([trace], BatchOptions(scheduler=server.address, scheduler_timeout=1))
        assert time.monotonic() - t < 10
    finally:
        server.close()


@pytest.mark.parametrize("reply", [b"\xff" * 16, b"\x00" * 7 + b"\x10" + b"\xff" * 8, b"garbage-reply!!\n"])
def test_a_garbage_reply_is_one_line_exit_2(trace, reply):
    server = FakeServer(reply)
    try:
        r = CliRunner().invoke(cli, ["analyze", trace, "--scheduler", server.address])
    finally:
        server.close()
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"at {server.address}" in line
    assert "out of memory" not in line


def test_a_cluster_without_workers_fails_instead_of_waiting_forever(trace):
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, silence_logs=50) as cluster:
        t = time.monotonic()
        with pytest.raises(SchedulerError, match="has had no worker for 1 s"):
            analyze_paths([trace], BatchOptions(scheduler=cluster.scheduler_address, scheduler_timeout=1))
        assert time.monotonic() - t < 15


def test_a_scheduler_gone_mid_run_is_one_scheduler_error(trace):
    cluster = distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, silence_logs=50)
    threading.Timer(1.0, cluster.close).start()  # the scheduler goes away while the task waits
    t = time.monotonic()
    with pytest.raises(SchedulerError):
        analyze_paths([trace], BatchOptions(scheduler=cluster.scheduler_address, scheduler_timeout=2))
    assert time.monotonic() - t < 15


def test_a_working_cluster_still_analyzes(trace):
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                                  silence_logs=50) as cluster:
        for send in (False, True):
            (found, summary), = analyze_paths([trace], BatchOptions(scheduler=cluster.scheduler_address,
                                                                     send_bytes=send, scheduler_timeout=5))
            assert summary.error is None and [f.kind.value for f in found] == ["data-race"]
