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


def _matmul_bias(x, w, b):
    return torch.relu(x @ w + b)


def test_extern_kernels_inside_a_region_are_its_record_alone(tmp_path):
    """The mode is off while a region runs: the matrix product Inductor calls through the
    dispatcher (an extern kernel) is not recorded on its own; the region's record has its
    inputs and outputs, and a side-stream write of the weight still races with it."""
    f = torch.compile(_matmul_bias)
    x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    f(x, w, b)  # compiled before recording (the first call while recording has its own test)
    trace = tmp_path / "mm.npusan"
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            w.mul_(2)
        out = f(x, w, b)
        out2 = f(x, w, b)
        sim.synchronize()
    assert torch.allclose(out, _matmul_bias(x, w, b)) and torch.equal(out, out2)
    names = _kernel_names(trace)
    assert names.count("compiled:_matmul_bias") == 2, names
    assert not [n for n in names if n.startswith("aten::mm") or n.startswith("aten::addmm")], names
    races = [r for r in analyze_traces([str(trace)]).findings if r.kind.value == "data-race"]
    assert races  # both calls read w unordered after the side stream's write
    assert all(r.access.op == "compiled:_matmul_bias" and r.previous.op == "aten::mul_.Tensor" for r in races)


def _scale_inplace(x):
    x.mul_(2)
    return x.sum()


def test_region_mutating_an_input_races_with_a_side_stream_read(tmp_path):
    f = torch.compile(_scale_inplace)
    x = torch.randn(32)
    trace = tmp_path / "mut.npusan"
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            y = x * 3  # reads x on the side stream; nothing orders the region after it
        f(x)
        sim.synchronize()
    del y
    races = [r for r in analyze_traces([str(trace)]).findings if r.kind.value == "data-race"]
    assert races, "a region writing x while the side stream reads it"
    assert any(r.access.type == "write" and r.previous.op == "aten::mul.Tensor" for r in races)


class _FakeGraph:
    def __init__(self, body: str) -> None:
        self.source_code = ("import torch\nempty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory\n"
                            f"\ndef call(args):\n{body}\n\ndef benchmark_compiled_module():\n"
                            "    torch.cuda.synchronize()\n")


@pytest.mark.parametrize("body, quiet", [
    ("    extern_kernels.mm(a, b, out=buf0)", True),
    ("    torch.ops._c10d_functional.all_reduce_.default(buf0, 'sum', '0')", False),
    ("    buf1 = torch.ops._c10d_functional.wait_tensor.default(buf0)", False),
    ("    u0 = buf0.item()", False),
    ("    torch.ops.streams.record_event.default(0, 1)", False),
])
def test_mode_stays_on_in_a_region_that_syncs_or_communicates(body, quiet):
    """Only a region whose code calls nothing the recorder records as more than an access
    runs without the recording mode (the module header and benchmark code do not count)."""
    from npusan.recorder.compiled import _may_suspend

    assert _may_suspend(_FakeGraph(body)) is quiet
    assert _may_suspend(object()) is False  # no code to read: the mode stays on


def test_program_mode_on_top_still_sees_the_region_recorded_once(tmp_path):
    """Under a program's own mode (pushed after recording started) the recording mode comes
    off from under it while a region runs: the program's mode still sees the region's
    extern kernels, and the trace has the region alone, not its kernels once more."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Count(TorchDispatchMode):
        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    f = torch.compile(_matmul_bias)
    x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    f(x, w, b)
    trace = tmp_path / "own.npusan"
    with npusan.record(str(trace), backend="sim"):
        with Count() as mine:
            out = f(x, w, b)
            from torch._C import _get_dispatch_stack_at, _len_torch_dispatch_stack

            stack = [_get_dispatch_stack_at(i) for i in range(_len_torch_dispatch_stack())]
        sim.synchronize()
    assert stack[-1] is mine and type(stack[-2]).__name__ == "RecordingMode"  # put back in order
    assert torch.allclose(out, _matmul_bias(x, w, b))
    assert any("addmm" in s for s in seen), seen
    names = _kernel_names(trace)
    assert names.count("compiled:_matmul_bias") == 1 and not [n for n in names if "addmm" in n], names


class _Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        return self.lin(x).relu()


def test_first_call_compiling_under_the_recorder_is_one_finding_at_the_users_line(tmp_path):
    """The first call compiles while recording, and AOTAutograd runs that call's graph
    under a mode of its own: the race is still found once, on the region, at the line
    that called the compiled model (not at a line of Inductor's generated file)."""
    model = torch.compile(_Lin())
    x = torch.empty(16, 32)
    trace = tmp_path / "first.npusan"
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            x.normal_()
        y = model(x)  # FIRST CALL
        sim.current_stream().wait_stream(side)
    assert torch.allclose(y, _Lin.forward(model._orig_mod, x))
    names = _kernel_names(trace)
    assert not [n for n in names if "addmm" in n or n.startswith("aten::mm")], names
    races = [r for r in analyze_traces([str(trace)]).findings if r.kind.value == "data-race"]
    assert len(races) == 1, [(r.access.op, r.access.stack[:1]) for r in races]
    r = races[0]
    assert r.access.op == "compiled:forward" and r.previous.op == "aten::normal_"
    import inspect

    src, start = inspect.getsourcelines(test_first_call_compiling_under_the_recorder_is_one_finding_at_the_users_line)
    call_line = start + next(i for i, s in enumerate(src) if "# FIRST CALL" in s)
    mine = [fr.lineno for fr in r.access.stack if fr.filename.endswith("test_compiled.py")]
    assert mine and mine[-1] == call_line, r.access.stack
    assert not [fr for fr in r.access.stack if "torchinductor" in fr.filename], r.access.stack


def _switching(side, wait: bool):
    @torch.compile
    def fn(x, w):
        y = x @ w
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            z = torch.relu(y) * 2  # on the side stream
        if wait:
            sim.current_stream().wait_stream(side)
        return z.sum() + y.sum()  # READ OF Z

    return fn


@pytest.mark.parametrize("wait", [False, True])
def test_sim_streams_inside_a_compiled_function(tmp_path, wait):
    """Dynamo does not trace into the simulated stream API (it used to, and crashed on a
    guard of its thread-local current stream): the function compiles around the stream
    calls, computes what it computes eagerly, and the side stream's ops are recorded on
    the side stream (the missing wait is found, the waited version is clean)."""
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    want = (torch.relu(x @ w) * 2).sum() + (x @ w).sum()
    trace = tmp_path / "switch.npusan"
    with npusan.record(str(trace), backend="sim"):
        fn = _switching(sim.Stream(), wait)
        got = [fn(x, w) for _ in range(2)]
        sim.synchronize()
    assert all(torch.allclose(g, want) for g in got)
    assert counters["stats"]["unique_graphs"] >= 1  # still compiled, around the stream calls
    races = [r for r in analyze_traces([str(trace)]).findings if r.kind.value == "data-race"]
    if wait:
        assert races == []
        return
    assert races and all(r.previous.op == "aten::mul.Tensor" for r in races), races
    import inspect

    src, start = inspect.getsourcelines(_switching)
    read_line = start + next(i for i, s in enumerate(src) if "# READ OF Z" in s)
    assert any(fr.lineno == read_line for r in races for fr in r.access.stack)
