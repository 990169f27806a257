"""``npusan.kernel``: declaring a kernel the dispatcher does not see, as a call and as a
decorator, on the simulated device."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

import npusan
from npusan import sim
from npusan.analyzer.replay.traces import analyze_traces


def _launch_unseen(out, x):
    """What an extension's direct launch looks like to npusan: nothing at all."""
    with _disable_current_modes():
        out.copy_(x * 2)


@npusan.kernel("ext::scale", reads=["x"], writes=["out"])
def ext_scale(x, out):
    _launch_unseen(out, x)


def _program(path, *, form: str, wait: bool):
    x, out = torch.ones(64), torch.empty(64)
    with npusan.record(str(path), backend="sim"):
        side = sim.Stream()
        side.wait_stream(sim.current_stream())
        with sim.stream(side):
            if form == "decorator":
                ext_scale(x, out)
            else:
                _launch_unseen(out, x)
                npusan.kernel("ext::scale", reads=[x], writes=[out])
        if wait:
            sim.current_stream().wait_stream(side)
        y = out + 1  # READ
        sim.synchronize()
    return y


@pytest.mark.parametrize("form", ["decorator", "call"])
def test_declared_kernel_races_with_an_unsynchronized_read(tmp_path, form):
    trace = tmp_path / "t.npusan"
    y = _program(trace, form=form, wait=False)
    assert torch.equal(y, torch.full((64,), 3.0))
    found = analyze_traces([str(trace)]).findings
    assert [f.kind.value for f in found] == ["data-race"]
    assert found[0].previous.op == "ext::scale" and found[0].previous.type == "write"
    assert found[0].access.op == "aten::add.Tensor"
    assert any(fr.filename == __file__ for fr in found[0].previous.stack)


@pytest.mark.parametrize("form", ["decorator", "call"])
def test_declared_kernel_after_wait_stream_is_clean(tmp_path, form):
    trace = tmp_path / "t.npusan"
    _program(trace, form=form, wait=True)
    assert analyze_traces([str(trace)]).findings == []


def test_undeclared_launch_is_not_seen(tmp_path):
    """Why the annotation exists: without it the same program reports nothing."""
    trace = tmp_path / "t.npusan"
    x, out = torch.ones(64), torch.empty(64)
    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        with sim.stream(side):
            _launch_unseen(out, x)
        out + 1
    assert analyze_traces([str(trace)]).findings == []


def test_explicit_stream_argument(tmp_path):
    trace = tmp_path / "t.npusan"
    x, out = torch.ones(8), torch.empty(8)

    @npusan.kernel("ext::on", reads=["x"], writes=["out"], stream="s")
    def on(x, out, s):
        _launch_unseen(out, x)

    with npusan.record(str(trace), backend="sim"):
        side = sim.Stream()
        on(x, out, side)  # launched on side although the current stream is the default one
        out + 1
    found = analyze_traces([str(trace)]).findings
    assert [f.kind.value for f in found] == ["data-race"]


def test_no_op_when_not_recording():
    x, out = torch.ones(4), torch.empty(4)
    npusan.kernel("ext::scale", reads=[x], writes=[out])
    ext_scale(x, out)
    assert torch.equal(out, torch.full((4,), 2.0))


def test_misuse_is_a_type_error():
    with pytest.raises(TypeError):
        npusan.kernel("k", reads=["x"])(lambda y: y)  # no argument named x
    with pytest.raises(TypeError):
        npusan.kernel("k", reads=["x", torch.ones(1)])
    with pytest.raises(TypeError):
        npusan.kernel("k", reads=[torch.ones(1)])(lambda x: x)
