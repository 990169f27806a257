"""``torch.compile`` under the recorder (CPU Inductor, simulated device): the program
compiles as without npusan, and each compiled region is recorded as one kernel of its
inputs and outputs, forward and backward, on the stream it runs on."""

from __future__ import annotations

import pytest
import torch

import npusan
from npusan import sim
from npusan.analyzer.replay.traces import analyze_traces
from npusan.recorder.compiled import COARSE_NOTE
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

pytestmark = pytest.mark.slow  # Inductor compiles C++ (seconds per new graph)

dynamo = pytest.importorskip("torch._dynamo")
from torch._dynamo.utils import counters  # noqa: E402 (after the importorskip)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _scale_add(x, y):
    return (x * 2 + y).relu()


def _kernel_names(path) -> list:
    with TraceReader(str(path)) as r:
        ops = [rec[2] for rec in r.records() if rec[0] == R.KERNEL]
        return [r.symbols.string(op) for op in ops]


def _side_write_then_compiled_read(path, wait: bool):
    f = torch.compile(_scale_add)
    x, y = torch.randn(64), torch.randn(64)
    with npusan.record(str(path), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            x.mul_(3)
        if wait:
            sim.current_stream().wait_stream(side)
        out = f(x, y)  # COMPILED CALL
        sim.synchronize()
    return out


def test_compiles_under_the_recorder(tmp_path):
    f = torch.compile(_scale_add)
    x, y = torch.randn(16), torch.randn(16)
    with npusan.record(str(tmp_path / "t.npusan"), backend="sim"):
        out = f(x, y)
        out2 = f(x, y)
    assert counters["stats"]["calls_captured"] > 0
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(out, (x * 2 + y).relu()) and torch.equal(out, out2)


def test_compiled_read_of_side_stream_write_races(tmp_path):
    trace = tmp_path / "race.npusan"
    _side_write_then_compiled_read(trace, wait=False)
    res = analyze_traces([str(trace)])
    races = [f for f in res.findings if f.kind.value == "data-race"]
    assert len(races) == 1
    f = races[0]
    assert f.access.op == "compiled:_scale_add" and f.access.type == "read"
    assert f.previous.op == "aten::mul_.Tensor"
    lines = [fr.lineno for fr in f.access.stack if fr.filename.endswith("test_compiled.py")]
    import inspect

    src, start = inspect.getsourcelines(_side_write_then_compiled_read)
    call_line = start + next(i for i, s in enumerate(src) if "# COMPILED CALL" in s)
    assert lines and lines[-1] == call_line  # innermost: the user's call, not the compiled def line
    assert res.traces[0].notes == [("info", COARSE_NOTE)]


def test_compiled_read_after_wait_stream_is_clean(tmp_path):
    trace = tmp_path / "clean.npusan"
    _side_write_then_compiled_read(trace, wait=True)
    assert analyze_traces([str(trace)]).findings == []
    assert counters["stats"]["calls_captured"] > 0


def test_report_says_once_that_compiled_code_was_recorded_coarsely(tmp_path):
    a, b = tmp_path / "a.npusan", tmp_path / "b.npusan"
    _side_write_then_compiled_read(a, wait=True)
    _side_write_then_compiled_read(b, wait=True)
    report = npusan.analyze(str(a), str(b))
    text = report.render("text")
    assert text.count("recorded coarsely") == 1, text


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def test_compiled_training_loop_with_prefetch_stream_is_clean(tmp_path):
    torch.manual_seed(0)
    model = _Net()
    step_model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(4)]
    trace = tmp_path / "train.npusan"
    with npusan.record(str(trace), backend="sim"):
        prefetch = sim.Stream()
        cur = sim.current_stream()
        with sim.stream(prefetch):
            nxt = [t.clone() for t in batches[0]]
        for i in range(len(batches)):
            cur.wait_stream(prefetch)
            x, y = nxt
            x.record_stream(cur)
            y.record_stream(cur)
            if i + 1 < len(batches):
                prefetch.wait_stream(cur)
                with sim.stream(prefetch):
                    nxt = [t.clone() for t in batches[i + 1]]
            loss = torch.nn.functional.mse_loss(step_model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sim.synchronize()
    assert counters["stats"]["calls_captured"] > 0
    res = analyze_traces([str(trace)])
    assert res.findings == []
    names = set(_kernel_names(trace))
    assert "compiled:forward" in names and "compiled:forward.backward" in names, names
