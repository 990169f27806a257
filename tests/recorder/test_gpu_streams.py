"""Real CUDA streams, recorded in process and analyzed: the seed's scenarios and more.

Each scenario is a small function run inside one recording; the trace is then replayed
with ``npusan.analyzer.replay.analyze_traces`` and the kinds of findings are compared.
Buggy programs must report their bug; correct programs must report nothing. Correct
programs end with a device synchronize (or an equivalent wait) *before* their tensors go
out of scope: a tensor used on another stream and freed unsynchronized is exactly the
missing-record_stream bug.

Run with ``pytest -m gpu tests/recorder`` on a CUDA machine; skipped without CUDA.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

N = 1 << 20  # 4 MiB of float32: kernels long enough that a race is real, not just recorded

DATA_RACE = "data-race"
MISSING = "missing-record-stream"
REUSE = "reuse-race"


@pytest.fixture(scope="module", autouse=True)
def _warm_cuda():
    """Create the context, the cuBLAS handle and the stream pool before any recording."""
    if torch.cuda.is_available():
        a = torch.ones(64, 64, device="cuda")
        (a @ a).sum().item()
        torch.cuda.Stream()
        torch.cuda.synchronize()
    yield


def _recorder(path):
    import npusan

    record = getattr(npusan, "record", None)
    if record is not None:
        return record(str(path))
    from npusan.recorder.session import Recorder

    return Recorder(str(path), backend="cuda")


def run(tmp_path, fn):
    """Record ``fn()`` into a trace, analyze it, return the findings."""
    from npusan.analyzer.replay import analyze_traces

    path = tmp_path / "trace.npusan"
    torch.cuda.synchronize()
    with _recorder(path):
        fn()
    result = analyze_traces([str(path)])
    assert not any(t.truncated for t in result.traces)
    return result.findings


def kinds(findings):
    return {f.kind.value for f in findings}


def cur():
    return torch.cuda.current_stream()


# ----------------------------------------------------------------------- buggy programs


def test_seed_worked_example_missing_record_stream(tmp_path):
    """Default stream allocates x, a kernel writes it, stream1 waits for default and uses x,
    x is freed on default: default never waited for stream1 -> missing record_stream."""

    def prog():
        x = torch.empty(N, device="cuda")
        x.fill_(1.0)
        s1 = torch.cuda.Stream()
        s1.wait_stream(cur())
        with torch.cuda.stream(s1):
            y = x + 1
        del x
        torch.cuda.synchronize()
        del y

    f = run(tmp_path, prog)
    assert kinds(f) == {MISSING}
    (m,) = [x for x in f if x.kind.value == MISSING]
    assert m.access.stream != m.previous.stream


def test_data_race_missing_wait(tmp_path):
    """The seed's data race: default writes x, stream1 reads it without waiting."""

    def prog():
        x = torch.empty(N, device="cuda")
        s1 = torch.cuda.Stream()
        x.fill_(2.0)
        with torch.cuda.stream(s1):
            y = x * 3
        torch.cuda.synchronize()
        del x, y

    assert DATA_RACE in kinds(run(tmp_path, prog))


def test_race_on_a_view(tmp_path):
    """x[10:] written on a side stream, x read on the default stream.

    CSAN keys accesses by data_ptr() (which includes the view offset) and misses this.
    """

    def prog():
        x = torch.zeros(N, device="cuda")
        torch.cuda.synchronize()
        s1 = torch.cuda.Stream()
        with torch.cuda.stream(s1):
            x[10:].add_(1.0)
        total = x.sum()
        torch.cuda.synchronize()
        del x, total

    f = run(tmp_path, prog)
    assert kinds(f) == {DATA_RACE}


def test_missing_wait_after_non_blocking_copy_on_side_stream(tmp_path):
    """A pinned host->device copy on a side stream, consumed on default without a wait."""
    host = torch.arange(N, dtype=torch.float32).pin_memory()

    def prog():
        s1 = torch.cuda.Stream()
        with torch.cuda.stream(s1):
            dev = host.to("cuda", non_blocking=True)
        out = dev.sum()
        torch.cuda.synchronize()
        del dev, out

    assert kinds(run(tmp_path, prog)) == {DATA_RACE}


def test_missing_record_stream_prefetched_tensor(tmp_path):
    """Allocated and filled on a side stream, used on default after a correct wait, freed
    without record_stream: the side stream may reuse the block under default's kernel."""

    def prog():
        s1 = torch.cuda.Stream()
        with torch.cuda.stream(s1):
            x = torch.ones(N, device="cuda")
        cur().wait_stream(s1)
        y = x * 2
        del x
        torch.cuda.synchronize()
        del y

    assert kinds(run(tmp_path, prog)) == {MISSING}


def test_reuse_race_by_freeing_and_reallocating(tmp_path):
    """Free a block still being read on a side stream, get it back at once, write it."""
    seen = {}

    def prog():
        x = torch.ones(N, device="cuda")
        s1 = torch.cuda.Stream()
        s1.wait_stream(cur())
        with torch.cuda.stream(s1):
            y = x * 2
        old = x.data_ptr()
        del x
        z = torch.empty(N, device="cuda")  # same size, same stream: the caching allocator hands x's block back
        seen["reused"] = z.data_ptr() == old
        z.fill_(3.0)
        torch.cuda.synchronize()
        del y, z

    f = run(tmp_path, prog)
    if not seen["reused"]:
        pytest.skip("the caching allocator did not hand the block back; nothing to detect")
    assert {MISSING, REUSE} <= kinds(f)


def test_two_threads_two_streams_one_tensor(tmp_path):
    """Work launched from worker threads is recorded (CSAN's dispatch mode misses it)."""

    def prog():
        x = torch.zeros(N, device="cuda")
        torch.cuda.synchronize()
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]

        def worker(s):
            with torch.cuda.stream(s):
                x.add_(1.0)

        threads = [threading.Thread(target=worker, args=(s,)) for s in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        torch.cuda.synchronize()

    assert DATA_RACE in kinds(run(tmp_path, prog))


# ----------------------------------------------------------------------- correct programs


def test_correct_wait_stream_both_ways(tmp_path):
    """Seed §6: usage waits creation (no race) and creation waits usage before the free
    (record_stream not needed)."""

    def prog():
        x = torch.ones(N, device="cuda")
        s1 = torch.cuda.Stream()
        s1.wait_stream(cur())
        with torch.cuda.stream(s1):
            y = x + 1
        cur().wait_stream(s1)
        del x
        z = y * 2
        torch.cuda.synchronize()
        del y, z

    assert run(tmp_path, prog) == []


def test_correct_event_waits(tmp_path):
    def prog():
        x = torch.ones(N, device="cuda")
        s1 = torch.cuda.Stream()
        ev = torch.cuda.Event()
        ev.record()
        s1.wait_event(ev)
        with torch.cuda.stream(s1):
            y = x * 2
            done = torch.cuda.Event()
            done.record(s1)
        cur().wait_event(done)
        z = y + x
        torch.cuda.synchronize()
        del x, y, z

    assert run(tmp_path, prog) == []


def test_correct_stream_and_event_synchronize(tmp_path):
    def prog():
        x = torch.ones(N, device="cuda")
        torch.cuda.synchronize()
        s1 = torch.cuda.Stream()
        with torch.cuda.stream(s1):
            y = x * 2
        s1.synchronize()  # the host (and so every later launch) waits for s1
        z = y + 1
        ev = cur().record_event()
        ev.synchronize()
        with torch.cuda.stream(s1):
            w = z * 2
        torch.cuda.synchronize()
        del x, y, z, w

    assert run(tmp_path, prog) == []


def test_correct_record_stream(tmp_path):
    def prog():
        s1 = torch.cuda.Stream()
        with torch.cuda.stream(s1):
            x = torch.ones(N, device="cuda")
        cur().wait_stream(s1)
        y = x * 2
        x.record_stream(cur())
        del x
        torch.cuda.synchronize()
        del y

    assert run(tmp_path, prog) == []


def test_correct_training_loop_with_prefetch_stream(tmp_path):
    """Batches copied on a prefetch stream, waited for, record_stream'ed, trained on."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(64, 256).pin_memory(), torch.randint(0, 10, (64,)).pin_memory()) for _ in range(4)]
    torch.cuda.synchronize()

    def prog():
        side = torch.cuda.Stream()

        def prefetch(i):
            with torch.cuda.stream(side):
                return tuple(t.to("cuda", non_blocking=True) for t in batches[i])

        nxt = prefetch(0)
        for i in range(len(batches)):
            cur().wait_stream(side)
            x, y = nxt
            x.record_stream(cur())
            y.record_stream(cur())
            if i + 1 < len(batches):
                nxt = prefetch(i + 1)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()

    assert run(tmp_path, prog) == []
