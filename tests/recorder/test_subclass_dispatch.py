"""Tensor subclasses with their own ``__torch_dispatch__`` (a wrapper holding a plain tensor,
DTensor) run their ops on the tensors they hold from inside that dispatch: the recorder's
mode answers ``NotImplemented`` so that those inner ops come back to it and are recorded,
once each, with the user's stack. Plain subclasses and Parameters are recorded directly."""

from __future__ import annotations

import pytest

from npusan.trace_format import records as R

from .conftest import analyze, free_port, kinds, line_of, records, run_record, user_lines

WRAPPER = """
import torch
from torch.utils._pytree import tree_map
from npusan import sim


class Wrapper(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.elem if isinstance(x, Wrapper) else x
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda x: Wrapper(x) if type(x) is torch.Tensor else x, out)


side = sim.Stream()
w = Wrapper(torch.zeros(256))
side.wait_stream(sim.current_stream())
with sim.stream(side):
    w.add_(1)  # WRITE
SYNC
y = w * 2  # READ
assert type(y) is Wrapper
sim.synchronize()
print(float(y.elem.sum()))
"""


def _kernel_names(trace) -> list:
    recs, reader = records(trace)
    return [reader.symbols.strings[r[2]] for r in recs if r[0] == R.KERNEL]


def test_wrapper_subclass_inner_ops_race_with_user_stacks(tmp_path):
    code = WRAPPER.replace("SYNC", "")
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert "512.0" in proc.stdout
    found = analyze(trace)
    assert kinds(found) == ["data-race"]
    f = found[0]
    # the op's line, not the subclass's __torch_dispatch__ (also in prog.py) that ran it
    assert user_lines(f.access.stack) == [line_of(code, "# READ")]
    assert user_lines(f.previous.stack) == [line_of(code, "# WRITE")]
    assert f.access.op == "aten::mul.Tensor" and f.previous.op == "aten::add_.Tensor"
    # each op once: the inner op on the plain tensor, not the outer one on the wrapper too
    names = _kernel_names(trace)
    assert names.count("aten::add_.Tensor") == 1 and names.count("aten::mul.Tensor") == 1, names


def test_wrapper_subclass_ordered_by_wait_stream_is_clean(tmp_path):
    proc, trace = run_record(tmp_path, WRAPPER.replace("SYNC", "sim.current_stream().wait_stream(side)"))
    assert proc.returncode == 0, proc.stderr
    assert analyze(trace) == []


PLAIN_SUBCLASSES = """
import torch
from npusan import sim


class Plain(torch.Tensor):
    pass


side = sim.Stream()
p = torch.Tensor._make_subclass(Plain, torch.zeros(256))
q = torch.nn.Parameter(torch.zeros(256))
side.wait_stream(sim.current_stream())
with sim.stream(side):
    p.add_(1)  # WRITE_P
    with torch.no_grad():
        q.add_(1)  # WRITE_Q
a = p * 2  # READ_P
b = q * 2  # READ_Q
sim.synchronize()
"""


def test_plain_subclass_and_parameter_recorded_directly(tmp_path):
    proc, trace = run_record(tmp_path, PLAIN_SUBCLASSES)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    assert kinds(found) == ["data-race", "data-race"]
    pairs = sorted((user_lines(f.previous.stack)[0], user_lines(f.access.stack)[0]) for f in found)
    c = PLAIN_SUBCLASSES
    assert pairs == sorted([(line_of(c, "# WRITE_P"), line_of(c, "# READ_P")),
                            (line_of(c, "# WRITE_Q"), line_of(c, "# READ_Q"))])


DTENSOR = """
import os
import sys
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from npusan import sim

dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{sys.argv[1]}")
mesh = init_device_mesh("cpu", (1,))
d = distribute_tensor(torch.zeros(64, 8), mesh, [Shard(0)])
side = sim.Stream()
side.wait_stream(sim.current_stream())
with sim.stream(side):
    d.add_(1)  # WRITE
SYNC
y = d * 2  # READ
sim.synchronize()
print(type(y).__name__, float(y.to_local().sum()))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("sync", [False, True], ids=["no-wait", "wait_stream"])
def test_dtensor_local_shard_races_with_side_stream(tmp_path, sync):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    code = DTENSOR.replace("SYNC", "sim.current_stream().wait_stream(side)" if sync else "")
    proc, trace = run_record(tmp_path, code, args=[str(free_port())])
    assert proc.returncode == 0, proc.stderr
    assert "DTensor 1024.0" in proc.stdout
    assert "FakeTensor" not in proc.stderr  # sharding propagation's fake ops are not recorded
    found = analyze(trace)
    if sync:
        assert found == []
        return
    assert kinds(found) == ["data-race"]
    f = found[0]
    assert user_lines(f.access.stack) == [line_of(code, "# READ")]
    assert user_lines(f.previous.stack) == [line_of(code, "# WRITE")]
    assert f.previous.op == "aten::add_.Tensor" and f.access.op == "aten::mul.Tensor"


def _frames(cap, key) -> list:
    return [fn for _, _, fn in cap.resolve(key)]


def test_stack_starts_at_the_caller_of_the_outermost_torch_dispatch():
    from npusan.recorder.stacks import StackCapture

    def deep(cap, n):
        return deep(cap, n - 1) if n else cap.key(1)

    class Sub:
        @classmethod
        def __torch_dispatch__(cls, cap, n):
            return deep(cap, n)  # the subclass's own code: folded away

    def user_call(cap, n):
        return Sub.__torch_dispatch__(cap, n)

    for depth in (32, 2):  # also when the frames inside fill the depth
        cap = StackCapture(depth=depth)
        names = _frames(cap, user_call(cap, 5))
        assert names[-1].endswith(".user_call")
        assert not [n for n in names if n.endswith((".deep", ".__torch_dispatch__"))]
    kept = StackCapture(keep_internal=True)
    assert any(n.endswith("__torch_dispatch__") for n in _frames(kept, user_call(kept, 1)))
