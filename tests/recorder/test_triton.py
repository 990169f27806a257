"""Hand-written Triton kernels under the recorder, run by Triton's interpreter on the CPU
(``TRITON_INTERPRET``): each launch is one kernel on the current stream, its tensor
arguments read or written as the kernel's source says, conservative (and noted) where the
source does not say."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
tl = pytest.importorskip("triton.language")
if not hasattr(triton, "knobs"):
    pytest.skip("triton is older than 3.4 (no triton.knobs)", allow_module_level=True)

import npusan  # noqa: E402 (after the importorskip)
from npusan import sim  # noqa: E402
from npusan.analyzer.replay.traces import analyze_traces  # noqa: E402
from npusan.recorder import triton_kernels  # noqa: E402
from npusan.recorder.triton_writes import analyze  # noqa: E402
from npusan.trace_format import records as R  # noqa: E402
from npusan.trace_format.reader import TraceReader  # noqa: E402

# The kernels are interpreted: ``triton.jit`` decides at decoration time. (Triton's own
# jit functions -- ``tl.sum``... -- were made when it was imported, compiled: the kernels
# here do without them.)
with triton.knobs.runtime.scope():
    triton.knobs.runtime.interpret = True

    @triton.jit
    def copy_scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

    @triton.jit
    def count_positive(x_ptr, count_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.atomic_add(count_ptr + offs * 0, (x > 0).to(tl.int32), mask=offs < n)

    @triton.jit
    def block_copy(src_ptr, dst_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
        src = tl.make_block_ptr(base=src_ptr, shape=(M, N), strides=(stride_m, 1), offsets=(0, 0),
                                block_shape=(BM, BN), order=(1, 0))
        dst = tl.make_block_ptr(base=dst_ptr, shape=(M, N), strides=(stride_m, 1), offsets=(0, 0),
                                block_shape=(BM, BN), order=(1, 0))
        for _ in range(0, N, BN):
            tl.store(dst, tl.load(src, boundary_check=(0, 1)), boundary_check=(0, 1))
            src = tl.advance(src, (0, BN))
            dst = tl.advance(dst, (0, BN))

    @triton.jit
    def _load_block(ptr, offs, n):
        return tl.load(ptr + offs, mask=offs < n)

    @triton.jit
    def copy_via_helper(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, _load_block(x_ptr, offs, n), mask=offs < n)

    @triton.jit
    def select_store(a_ptr, b_ptr, c_ptr, flag, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        ptrs = tl.where(flag > 0, a_ptr + offs, b_ptr + offs)
        tl.store(ptrs, tl.load(c_ptr + offs))

    @triton.jit
    def gather_scatter(idx_ptr, table_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        idx = tl.load(idx_ptr + offs)
        tl.store(out_ptr + idx, tl.load(table_ptr + idx))

    @triton.jit
    def store_through_loaded_pointer(ptrs_ptr, x_ptr):
        p = tl.load(ptrs_ptr).to(tl.pointer_type(tl.float32))
        tl.store(p, tl.load(x_ptr))

    @triton.jit
    def pointers_in_a_tuple(x_ptr, y_ptr, BLOCK: tl.constexpr):
        both = (x_ptr, y_ptr)
        tl.store(both[1] + tl.arange(0, BLOCK), 1.0)


    @triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
    @triton.jit
    def copy_scaled_sized(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    @triton.jit
    def _halve(v):
        return v * 0.5

    @triton.jit
    def locked_accumulate(x_ptr, acc_ptr, lock_ptr, n, BLOCK: tl.constexpr):
        """The spin lock of Triton's layer-norm tutorial: atomic_cas/atomic_xchg write the lock."""
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        while tl.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
        acc = tl.load(acc_ptr + offs, mask=offs < n) + _halve(x.to(acc_ptr.dtype.element_ty))
        tl.store(acc_ptr + offs, acc, mask=offs < n)
        tl.atomic_xchg(lock_ptr, 0)


def _written(kernel) -> tuple:
    """The pointer parameters (``*_ptr``) written and unclear, and whether all are written.
    (Integer parameters that flow into addresses -- strides, sizes -- show up among the
    written names too; a launch ignores them, as they are no tensors.)"""
    w = analyze(kernel.fn)
    ptrs = [p for p in w.written if p.endswith("_ptr")]
    return sorted(ptrs), sorted(p for p in w.unclear if p.endswith("_ptr")), bool(w.blind)


# -- which arguments a kernel writes, from its source


def test_load_and_store():
    assert _written(copy_scaled) == (["y_ptr"], [], False)


def test_atomic_add_writes_its_pointer():
    assert _written(count_positive) == (["count_ptr"], [], False)


def test_block_pointers_through_advance():
    assert _written(block_copy) == (["dst_ptr"], [], False)


def test_pointer_passed_to_a_helper_is_conservatively_written():
    written, unclear, blind = _written(copy_via_helper)
    assert written == ["x_ptr", "y_ptr"] and unclear == ["x_ptr"] and not blind
    assert "_load_block()" in analyze(copy_via_helper.fn).unclear["x_ptr"]


def test_where_selects_either_pointer():
    assert _written(select_store) == (["a_ptr", "b_ptr"], [], False)


def test_scatter_through_loaded_indices_writes_only_the_output():
    assert _written(gather_scatter) == (["out_ptr"], [], False)


def test_store_through_a_loaded_pointer_writes_everything():
    w = analyze(store_through_loaded_pointer.fn)
    assert w.blind and "derives from no argument" in w.blind


def test_pointers_put_into_a_tuple_are_unclear():
    written, unclear, _ = _written(pointers_in_a_tuple)
    assert written == ["x_ptr", "y_ptr"] and unclear == ["x_ptr", "y_ptr"]


def test_spin_lock_and_a_helper_on_values():
    """A helper given loaded values (their dtype taken from a pointer) is no escape."""
    assert _written(locked_accumulate) == (["acc_ptr", "lock_ptr"], [], False)


def test_kernel_without_source_writes_everything():
    ns: dict = {"tl": tl}
    exec("def k(x_ptr, y_ptr):\n    tl.store(y_ptr, tl.load(x_ptr))\n", ns)
    w = analyze(ns["k"])
    assert w.blind and "source" in w.blind


# -- launches recorded on the simulated device


def _kernels(path) -> list:
    with TraceReader(str(path)) as r:
        return [r.symbols.string(rec[2]) for rec in r.records() if rec[0] == R.KERNEL]


def _notes(path) -> list:
    with TraceReader(str(path)) as r:
        return [rec[2] for rec in r.records() if rec[0] == R.NOTE]


def _side_launch(path, kernel, *, wait: bool, default_op):
    """``default_op(x)`` on the default stream, then ``kernel`` reading x and writing y on
    a side stream (waiting for the default stream first when ``wait``)."""
    x, y = torch.randn(1000), torch.zeros(1000)
    with npusan.record(str(path), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        default_op(x)
        if wait:
            side.wait_stream(sim.current_stream())
        with sim.stream(side):
            kernel[(4,)](x, y, 1000, BLOCK=256)  # LAUNCH
        sim.current_stream().wait_stream(side)
        y.sum()
    return x, y


def _launch_line() -> int:
    import inspect

    src, start = inspect.getsourcelines(_side_launch)
    return start + next(i for i, s in enumerate(src) if "# LAUNCH" in s)


def test_kernel_reading_a_side_stream_input_races(tmp_path):
    trace = tmp_path / "t.npusan"
    x, y = _side_launch(trace, copy_scaled, wait=False, default_op=lambda x: x.mul_(3))
    assert torch.allclose(y, x * 2)  # the program computes as without npusan
    found = analyze_traces([str(trace)]).findings
    assert [f.kind.value for f in found] == ["data-race"]
    f = found[0]
    assert f.access.op == "triton:copy_scaled" and f.access.type == "read"
    assert f.previous.op == "aten::mul_.Tensor" and f.previous.type == "write"
    assert (f.access.stack[-1].filename, f.access.stack[-1].lineno) == (__file__, _launch_line())


def test_kernel_after_wait_stream_is_clean(tmp_path):
    trace = tmp_path / "t.npusan"
    _side_launch(trace, copy_scaled, wait=True, default_op=lambda x: x.mul_(3))
    assert analyze_traces([str(trace)]).findings == []


def test_kernel_reads_alongside_another_read_without_a_race(tmp_path):
    """x is only loaded: the default stream reading it meanwhile is no race (were the
    interpreter's copy-back recorded, x would read as written)."""
    trace = tmp_path / "t.npusan"
    _side_launch(trace, copy_scaled, wait=False, default_op=lambda x: x.sum())
    assert analyze_traces([str(trace)]).findings == []
    assert _kernels(trace) == ["aten::sum", "triton:copy_scaled", "aten::sum"]  # nothing of the interpreter's


def test_unclear_kernel_is_written_and_noted_once(tmp_path):
    trace = tmp_path / "t.npusan"
    x, y = torch.randn(1000), torch.zeros(1000)
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        x.sum()  # a read: races only because x counts as written
        with sim.stream(side):
            copy_via_helper[(4,)](x, y, 1000, BLOCK=256)
            copy_via_helper[(4,)](x, y, 1000, BLOCK=256)
    assert torch.allclose(y, x)
    res = analyze_traces([str(trace)])
    assert [(f.access.op, f.access.type) for f in res.findings] == [("triton:copy_via_helper", "write")]
    notes = [n for n in _notes(trace) if n.startswith("coarse: ")]
    assert len(notes) == 1 and "copy_via_helper" in notes[0] and "_load_block()" in notes[0]


def test_report_says_once_that_a_kernel_was_recorded_coarsely(tmp_path):
    trace = tmp_path / "t.npusan"
    x, y = torch.randn(1000), torch.zeros(1000)
    with npusan.record(str(trace), backend="sim"):
        copy_via_helper[(4,)](x, y, 1000, BLOCK=256)
        pointers_in_a_tuple[(1,)](x, y, BLOCK=16)
    text = npusan.analyze(str(trace)).render("text")
    assert text.count("recorded coarsely") == 1, text
    assert "Triton kernel copy_via_helper" in text and "Triton kernel pointers_in_a_tuple" in text


def test_atomic_kernel_writes_only_its_counter(tmp_path):
    """count_positive reads x and writes count: a side stream reading x meanwhile is clean,
    one reading count is not."""
    trace = tmp_path / "t.npusan"
    x, count = torch.randn(1000), torch.zeros(1, dtype=torch.int32)
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        count_positive[(4,)](x, count, 1000, BLOCK=256)
        with sim.stream(side):
            x.sum()
            count.sum()
    assert int(count) == int((x > 0).sum())
    found = analyze_traces([str(trace)]).findings
    assert [(f.access.op, f.previous.op, f.previous.type) for f in found] == [
        ("aten::sum", "triton:count_positive", "write")]
    assert found[0].access.stack[-1].lineno != found[0].previous.stack[-1].lineno


def test_heuristics_wrapper_records_the_kernel_at_the_launch_line(tmp_path):
    """A ``@triton.heuristics`` kernel ends in the same launch; its frames are not the
    user's, so the stack still starts at the launch line."""
    import inspect

    trace = tmp_path / "t.npusan"
    x, y = torch.randn(100), torch.zeros(100)
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        with sim.stream(side):
            copy_scaled_sized[(1,)](x, y, 100)
        line = inspect.currentframe().f_lineno - 1
        y.add_(1)
    assert torch.allclose(y, x * 2 + 1)
    found = analyze_traces([str(trace)]).findings
    assert [(f.access.op, f.previous.op, f.previous.type) for f in found] == [
        ("aten::add_.Tensor", "triton:copy_scaled_sized", "write")]
    assert (found[0].previous.stack[-1].filename, found[0].previous.stack[-1].lineno) == (__file__, line)


def test_hooks_only_while_recording(tmp_path):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    plain = (InterpretedFunction.__dict__["run"], JITFunction.__dict__["run"])
    assert not any(getattr(r, "_npusan_triton", False) for r in plain)
    with npusan.record(str(tmp_path / "t.npusan"), backend="sim"):
        assert InterpretedFunction.__dict__["run"].__wrapped__ is plain[0]
        assert JITFunction.__dict__["run"].__wrapped__ is plain[1]
        triton_kernels.install()  # idempotent
        assert InterpretedFunction.__dict__["run"].__wrapped__ is plain[0]
    assert (InterpretedFunction.__dict__["run"], JITFunction.__dict__["run"]) == plain


def test_a_failure_in_the_hook_stops_recording_not_the_program(tmp_path, monkeypatch, capsys):
    def broken(fn):
        raise RuntimeError("boom")

    monkeypatch.setattr(triton_kernels, "writes_of", broken)
    x, y = torch.randn(100), torch.zeros(100)
    with npusan.record(str(tmp_path / "t.npusan"), backend="sim") as rec:
        copy_scaled[(1,)](x, y, 100, BLOCK=128)
        assert not rec.active
    assert torch.allclose(y, x * 2)
    assert "recording stopped" in capsys.readouterr().err


_EMULATED = """
import torch, triton, triton.language as tl

@triton.jit
def copy_scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

x = torch.ones(1000, device="cuda")
y = torch.zeros(1000, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
x.mul_(3)
with torch.cuda.stream(side):
    copy_scaled[(4,)](x, y, 1000, BLOCK=256)
torch.cuda.current_stream().wait_stream(side)
assert y.is_cuda and y.sum().item() == 6000.0, y.sum().item()
"""


@pytest.mark.slow  # a subprocess that imports torch and Triton
def test_emulated_cuda_program(tmp_path):
    """An unmodified CUDA program (``--emulate cuda``) with a Triton kernel on a side stream:
    the interpreter runs it on the emulated device's memory and the race is found, once
    (the interpreter's synchronizing copies do not hide it)."""
    from .conftest import run_record

    env = {"TRITON_INTERPRET": "1"}
    proc, trace = run_record(tmp_path, _EMULATED, record_args=("--emulate", "cuda"), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = analyze_traces([str(trace)]).findings
    assert [(f.access.op, f.access.type, f.previous.op) for f in found] == [
        ("triton:copy_scaled", "read", "aten::mul_.Tensor")]


def test_not_recording_runs_as_usual():
    x, y = torch.randn(100), torch.zeros(100)
    copy_scaled[(1,)](x, y, 100, BLOCK=128)
    assert torch.allclose(y, x * 2)


def test_online_mode_raises_at_the_racing_launch():
    """``npusan.enable(mode="raise")``: the race is raised at the launch, after the kernel ran."""
    x, y = torch.randn(100), torch.zeros(100)
    npusan.enable(mode="raise", backend="sim")
    try:
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        x.mul_(3)
        with pytest.raises(npusan.RaceError) as ei, sim.stream(side):
            copy_scaled[(1,)](x, y, 100, BLOCK=128)
    finally:
        npusan.disable()
    assert torch.allclose(y, x * 2)
    msg = str(ei.value)
    assert "triton:copy_scaled" in msg and "aten::mul_.Tensor" in msg
