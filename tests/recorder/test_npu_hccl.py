"""Collectives through the NPU adapter: a ProcessGroupHCCL-shaped stand-in fires the event,
record_stream and erase_stream hooks from inside ``c10d::allreduce_`` and ``work.wait()``
as torch_npu does; the recorder puts the collective's accesses between the HCCL stream's
wait and its end event, and the analyzer honours the erase_stream of ``work.wait()``."""

from __future__ import annotations

import torch
import torch.distributed as dist
import pytest

from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .fake_torch_npu.loader import fake_torch_npu  # noqa: F401  (fixture)
from .test_npu_recording import CpuAsNpu, kinds, record


@pytest.fixture
def hccl(tmp_path, fake_torch_npu):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    from torch_npu._hccl import ProcessGroupHCCL

    pg = ProcessGroupHCCL().install()
    try:
        yield fake_torch_npu, pg
    finally:
        pg.uninstall()
        dist.destroy_process_group()


def ordered(path):
    """The trace's records as (name, stream handle or None, op or None)."""
    out = []
    with TraceReader(str(path)) as r:
        for rec in r.records():
            t = rec[0]
            if t == R.KERNEL:
                out.append(("kernel", r.symbols.streams[rec[1]][1], r.symbols.strings[rec[2]]))
            elif t in (R.EVENT_RECORD, R.EVENT_WAIT, R.RECORD_STREAM, R.ERASE_STREAM):
                out.append((R.RECORD_NAMES[t], r.symbols.streams[rec[2]][1], None))
        labels = dict(r.symbols.stream_labels)
        streams = dict(r.symbols.streams)
    return out, {streams[s][1]: lab for s, lab in labels.items()}


def test_accesses_sit_between_the_hccl_wait_and_the_end_event(tmp_path, hccl):
    npu, pg = hccl

    def prog():
        x = torch.ones(256)
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        _ = x + 1

    path, result = record(tmp_path, prog, CpuAsNpu())
    assert result.findings == [] and pg.launched == 1
    seq, labels = ordered(path)
    hccl_raw = npu._fake.state.raw[(0, pg.stream.stream_id)]
    assert labels[hccl_raw] == ("comm", "comm stream of process group 0")
    on_hccl = [(name, op) for name, h, op in seq if h == hccl_raw]
    assert on_hccl == [("event-wait", None), ("record-stream", None), ("kernel", "all_reduce"),
                       ("event-record", None), ("erase-stream", None)]


def test_result_used_before_wait_is_a_race_on_the_hccl_stream(tmp_path, hccl):
    npu, pg = hccl

    def prog():
        x = torch.ones(256)
        w = dist.all_reduce(x, async_op=True)
        y = x * 2  # before w.wait()
        w.wait()
        return y

    _, result = record(tmp_path, prog, CpuAsNpu())
    (f,) = result.findings
    assert f.kind.value == "data-race"
    assert f.previous.op == "all_reduce" and f.previous.stream.role == "comm"
    assert f.access.op == "aten::mul.Tensor"


def _erase_prog(npu, *, fix: bool):
    rt = npu.npu

    def prog():
        side = rt.Stream()
        with rt.stream(side):
            y = torch.ones(256)  # allocated on the side stream
        rt.current_stream().wait_stream(side)
        w = dist.all_reduce(y, async_op=True)  # record_stream(y, hccl stream)
        w.wait()  # the default stream waits for HCCL; erase_stream(y, hccl stream)
        if fix:
            side.wait_stream(rt.current_stream())
        del w, y  # the side stream never waited for the HCCL use, and the record is erased

    return prog


def test_erase_stream_of_work_wait_is_honoured(tmp_path, hccl):
    npu, _ = hccl
    _, result = record(tmp_path, _erase_prog(npu, fix=False), CpuAsNpu())
    assert kinds(result) == {"missing-record-stream"}
    (f,) = result.findings
    assert f.previous.op == "all_reduce" and f.previous.stream.role == "comm"
    _, result = record(tmp_path, _erase_prog(npu, fix=True), CpuAsNpu())
    assert result.findings == []
