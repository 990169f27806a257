"""Host memory on the simulated device: ``sim.host_tensor`` marks memory that no kernel
writes, so an Apex-style prefetcher copying host batches on a copy stream is clean."""

from __future__ import annotations

import torch

from npusan import sim
from npusan.trace_format import records as R

from .conftest import analyze, kinds, records


def _prefetch(mark: bool) -> None:
    copy = sim.Stream()
    weight = torch.randn(16, 4)
    for _ in range(2):
        host = torch.randn(8, 16)  # what the data loader hands over
        if mark:
            host = sim.host_tensor(host)
        with sim.stream(copy):
            batch = sim.to_device(host)
        sim.current_stream().wait_stream(copy)
        batch.record_stream(sim.current_stream())
        (batch @ weight).sum()


def test_unmarked_host_batch_counts_as_device_memory(sim_recording):
    rec, path = sim_recording
    _prefetch(mark=False)
    rec.stop()
    # the copy stream reads the batch the default stream wrote: a race on a device
    assert "data-race" in kinds(analyze(path))


def test_host_tensor_is_not_device_memory(sim_recording):
    rec, path = sim_recording
    _prefetch(mark=True)
    rec.stop()
    assert analyze(path) == []
    recs, reader = records(path)
    strings = reader.symbols.strings
    # the copy writes the new device tensor and reads the pinned batch on the copy stream
    # (format 1.2: a non_blocking copy from pinned memory is an access of it on the stream)
    copies = [r for r in recs if r[0] == R.KERNEL and strings[r[2]] == "aten::_to_copy"]
    assert copies and all(len(r) == 6 and r[4] >= 0 and r[5] < 0 for r in copies)  # reads first


def test_marking_frees_the_block_already_recorded(sim_recording):
    rec, path = sim_recording
    host = torch.ones(64)  # recorded as a device allocation on the default stream
    sim.host_tensor(host)
    assert sim.is_host(host) and sim.is_host(host[8:])
    _ = host * 2  # reads pinned memory on the stream (a copy to the device, format 1.2)
    rec.stop()
    recs, _ = records(path)
    allocs = [r for r in recs if r[0] == R.ALLOC]
    frees = [r for r in recs if r[0] == R.FREE]
    assert frees and frees[0][1] == allocs[0][1]
    mul = [r for r in recs if r[0] == R.KERNEL][-1]
    reads = [a for a in mul[4:] if a >= 0]
    assert len(reads) == 1 and reads[0] != allocs[0][1]  # the pinned memory, no longer the freed block
