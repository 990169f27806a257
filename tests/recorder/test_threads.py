"""Ops launched from several Python threads: each thread's current stream is honoured and
races between threads are found (a dispatch mode entered in one thread alone would miss
them, as CSAN does)."""

from __future__ import annotations

from npusan.trace_format import records as R

from .conftest import analyze, kinds, line_of, records, run_record, user_lines

THREADS_RACE = """
import threading
import torch
from npusan import sim

shared = torch.zeros(1024)
s1, s2 = sim.Stream(), sim.Stream()
s1.wait_stream(sim.current_stream())
s2.wait_stream(sim.current_stream())
go = threading.Barrier(2)

def worker(stream, value, first):
    with sim.stream(stream):
        if not first:
            go.wait()
        shared.fill_(value)          # WRITE from each thread
        if first:
            go.wait()

t1 = threading.Thread(target=worker, args=(s1, 1.0, True))
t2 = threading.Thread(target=worker, args=(s2, 2.0, False))
t1.start(); t2.start(); t1.join(); t2.join()
sim.current_stream().wait_stream(s1)
sim.current_stream().wait_stream(s2)
print(float(shared.sum()))
"""


def test_race_between_two_threads_on_two_streams(tmp_path):
    proc, trace = run_record(tmp_path, THREADS_RACE)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    assert kinds(found) == ["data-race"]
    f = found[0]
    assert (f.access.type, f.previous.type) == ("write", "write")
    assert f.access.stream.handle != f.previous.stream.handle
    line = line_of(THREADS_RACE, "# WRITE")
    assert user_lines(f.access.stack)[-1] == line and user_lines(f.previous.stack)[-1] == line


PER_THREAD_STREAMS = """
import threading
import torch
from npusan import sim

s1, s2 = sim.Stream(), sim.Stream()
print("handles", s1.handle, s2.handle)
out = {}

def worker(name, stream):
    with sim.stream(stream):
        t = torch.ones(16) * 2    # allocated and computed on the thread's stream
    out[name] = t

ta = threading.Thread(target=worker, args=("a", s1))
tb = threading.Thread(target=worker, args=("b", s2))
ta.start(); ta.join(); tb.start(); tb.join()
x = torch.ones(4) + 1             # main thread: default stream
"""


def test_each_thread_current_stream_is_honoured(tmp_path):
    proc, trace = run_record(tmp_path, PER_THREAD_STREAMS)
    assert proc.returncode == 0, proc.stderr
    h1, h2 = (int(v) for v in proc.stdout.split("handles", 1)[1].split()[:2])
    recs, reader = records(trace)
    streams = reader.symbols.streams
    kern = [(reader.symbols.strings[r[2]], streams[r[1]][1]) for r in recs if r[0] == R.KERNEL]
    muls = [h for name, h in kern if name == "aten::mul.Tensor"]
    assert muls == [h1, h2]
    assert kern[-1] == ("aten::add.Tensor", 0)
    allocs = [streams[r[4]][1] for r in recs if r[0] == R.ALLOC]
    assert h1 in allocs and h2 in allocs


def test_thread_started_after_recording_began_in_process(tmp_path):
    import threading

    import torch

    import npusan
    from npusan import sim

    path = tmp_path / "t.npusan"
    with npusan.record(str(path), backend="sim"):
        s = sim.Stream()
        x = torch.zeros(8)
        s.wait_stream(sim.current_stream())

        def work():
            with sim.stream(s):
                x.add_(1)

        th = threading.Thread(target=work)
        th.start()
        th.join()
        y = x * 2  # races with the worker thread's write
    found = analyze(path)
    assert kinds(found) == ["data-race"]
    assert found[0].previous.stream.handle == s.handle
    assert float(y.sum()) == 16.0


def test_thread_pool_workers_and_thread_subclasses_are_recorded(tmp_path):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import torch

    import npusan

    class Worker(threading.Thread):
        def run(self):  # overrides run(): still recorded
            torch.ones(3).neg_()

    path = tmp_path / "pool.npusan"
    with npusan.record(str(path), backend="sim"):
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda i: torch.full((4,), float(i)).exp_(), range(4)))
        w = Worker()
        w.start()
        w.join()
    recs, reader = records(path)
    names = [reader.symbols.strings[r[2]] for r in recs if r[0] == R.KERNEL]
    assert names.count("aten::exp_") == 4 and names.count("aten::neg_") == 1
