"""Reading a device value on the host synchronizes, on the simulated device as on CUDA.

On CUDA, ``t.item()`` (``aten::_local_scalar_dense``) and a blocking device-to-host copy
(``t.tolist()``, ``t.cpu()``) run ``at::cuda::memcpy_and_sync``: a copy on the current
stream, then ``cudaStreamSynchronize`` of that stream, which torch's GPU trace hooks report
as a stream synchronization. The simulated device records the same synchronization, so a
tensor freed after the host read is not reported.
"""

from __future__ import annotations

import pytest
import torch

from npusan import sim
from npusan.trace_format import records as R

from .conftest import analyze, kinds, records

READS = {
    "item": lambda t: t.item(),
    "float": lambda t: float(t),
    "int": lambda t: int(t),
    "bool": lambda t: bool(t),
    "tolist": lambda t: t.tolist(),
    "str": lambda t: str(t),
}


def _side_computation(read) -> None:
    side = sim.Stream()
    x = torch.ones(1024)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        out = x * 2  # allocated on the side stream
        tmp = out + 1
    sim.current_stream().wait_stream(side)
    total = out.sum() + tmp.sum()  # the default stream uses both side-stream tensors
    read(total)  # the host waits for the default stream: both uses are done
    del out, tmp  # so freeing them (to the side stream's pool) is safe


@pytest.mark.parametrize("how", sorted(READS))
def test_host_read_is_a_stream_synchronization(sim_recording, how):
    rec, path = sim_recording
    _side_computation(READS[how])
    rec.stop()
    assert kinds(analyze(path)) == []
    recs, _ = records(path)
    syncs = [r for r in recs if r[0] == R.STREAM_SYNC]
    assert len(syncs) == 1  # of the current stream, not the device


def test_without_the_host_read_the_frees_are_reported(sim_recording):
    rec, path = sim_recording
    _side_computation(lambda t: None)
    rec.stop()
    assert kinds(analyze(path)) == ["missing-record-stream", "missing-record-stream"]


def test_host_read_on_a_side_stream_synchronizes_only_that_stream(sim_recording):
    rec, path = sim_recording
    side = sim.Stream()
    x = torch.ones(1024)
    with sim.stream(side):
        y = x * 2
        y.sum().item()  # synchronizes the side stream, the current one here
    rec.stop()
    recs, reader = records(path)
    created = [r[1] for r in recs if r[0] == R.STREAM_CREATED]  # the side stream's index
    syncs = [r[1] for r in recs if r[0] == R.STREAM_SYNC]
    assert syncs == created and len(created) == 1
    assert not [r for r in recs if r[0] == R.DEVICE_SYNC]


def test_host_tensor_read_is_no_synchronization(sim_recording):
    rec, path = sim_recording
    host = sim.host_tensor(torch.ones(4))
    host[0].item()  # no device involved, as .item() of a CPU tensor on CUDA
    host.tolist()
    rec.stop()
    recs, _ = records(path)
    assert not [r for r in recs if r[0] == R.STREAM_SYNC]


def test_host_readers_are_restored_after_recording(tmp_path):
    import npusan

    before = (torch.Tensor.tolist, torch.Tensor.__repr__)
    rec = npusan.record(str(tmp_path / "t.npusan"), backend="sim")
    rec.start()
    try:
        assert torch.Tensor.tolist is not before[0]
    finally:
        rec.stop()
    assert (torch.Tensor.tolist, torch.Tensor.__repr__) == before
    assert "tolist" not in vars(torch.Tensor)
