"""The host as a party of the ordering, recorded on the simulated device: a reused pinned
input buffer rewritten on the host while the previous step's non_blocking copy from it may
still run, and a non_blocking device-to-host copy read on the host without a
synchronization, are data races; pageable host memory is never recorded."""

from __future__ import annotations

import torch

from npusan import sim
from npusan.trace_format import records as R

from .conftest import analyze, kinds, records


def _serve(steps: int, sync: bool, write) -> None:
    """A serving loop: each step fills the reused pinned input buffer on the host, copies it
    to the device on a copy stream (non_blocking), and computes on the default stream."""
    copy = sim.Stream()
    buf = sim.host_tensor(torch.zeros(64))
    weight = torch.ones(64)
    done = None
    for step in range(steps):
        if sync and done is not None:
            done.synchronize()  # the previous copy from buf has run
        write(buf, step)
        with sim.stream(copy):
            x = sim.to_device(buf)
            done = copy.record_event()
        sim.current_stream().wait_event(done)
        x.record_stream(sim.current_stream())
        (x * weight).sum()


def _copy_write(buf, step):
    buf.copy_(sim.host_tensor(torch.full((64,), float(step)), pinned=False))  # from pageable memory


def _slice_write(buf, step):
    # (``buf[:] = step`` would copy from a scalar tensor torch makes, which the simulated
    # device counts as device memory: a device-to-host copy instead of a host write)
    buf[:32].fill_(step)
    buf[32:].fill_(step)


def _race_at_host_write(path):
    found = analyze(path)
    races = [f for f in found if f.kind.value == "data-race"]
    assert races, kinds(found)
    f = races[0]
    assert f.access.stream.device == R.HOST_DEVICE and f.access.type == "write"
    assert f.previous.type == "read" and f.previous.op == "aten::_to_copy"
    return found


def test_rewriting_the_pinned_buffer_without_a_synchronize_is_a_race(sim_recording):
    rec, path = sim_recording
    _serve(3, sync=False, write=_copy_write)
    rec.stop()
    found = _race_at_host_write(path)
    assert found[0].access.op == "aten::copy_"


def test_rewriting_it_through_slices_is_a_race_too(sim_recording):
    rec, path = sim_recording
    _serve(3, sync=False, write=_slice_write)
    rec.stop()
    _race_at_host_write(path)


def test_the_event_synchronize_makes_the_loop_clean(sim_recording):
    rec, path = sim_recording
    _serve(3, sync=True, write=_copy_write)
    _serve(3, sync=True, write=_slice_write)
    rec.stop()
    assert analyze(path) == []
    recs, _ = records(path)
    assert [r for r in recs if r[0] == R.HOST_ACCESS]  # the host writes were recorded and checked


def _read_back(sync: bool, read) -> None:
    x = torch.arange(16.0)
    y = x * 2  # on the default stream
    out = sim.to_host(y)  # out.copy_(y, non_blocking=True) into new pinned memory
    if sync:
        sim.current_stream().synchronize()
    read(out)


def test_reading_a_non_blocking_device_to_host_copy_needs_a_synchronize(sim_recording):
    rec, path = sim_recording
    _read_back(False, lambda out: out[3].item())
    _read_back(False, lambda out: out.tolist())
    rec.stop()
    races = [f for f in analyze(path) if f.kind.value == "data-race"]
    assert len(races) == 2
    for f in races:
        assert f.access.stream.device == R.HOST_DEVICE and f.access.type == "read"
        assert f.previous.op == "aten::copy_" and f.previous.type == "write"


def test_with_the_synchronize_the_read_is_clean(sim_recording):
    rec, path = sim_recording
    _read_back(True, lambda out: out[3].item())
    _read_back(True, lambda out: out.tolist())
    rec.stop()
    assert analyze(path) == []


def test_a_blocking_copy_orders_the_host(sim_recording):
    rec, path = sim_recording
    y = torch.arange(16.0) * 2
    out = sim.to_host(y, non_blocking=False)
    out[3].item()
    buf = sim.host_tensor(torch.zeros(16))
    sim.to_device(buf, non_blocking=False)
    buf.fill_(1.0)
    rec.stop()
    assert analyze(path) == []


def test_pageable_host_memory_is_never_recorded(sim_recording):
    rec, path = sim_recording
    copy = sim.Stream()
    page = sim.host_tensor(torch.zeros(64), pinned=False)
    for step in range(3):
        page.fill_(float(step))
        with sim.stream(copy):
            x = sim.to_device(page)
        page.add_(1)
        page[:8].fill_(3)
        page.tolist()
        del x
    rec.stop()
    assert analyze(path) == []
    recs, reader = records(path)
    assert not [r for r in recs if r[0] == R.HOST_ACCESS]
    assert all(d != R.HOST_DEVICE for d, _ in reader.symbols.streams.values())
    assert reader.header["host_accesses"] == R.HOST_WATCH_TORCH


def test_pinned_memory_no_stream_touched_costs_no_record(sim_recording):
    rec, path = sim_recording
    pinned = sim.host_tensor(torch.zeros(64))
    pinned.fill_(2.0)
    pinned.tolist()
    rec.stop()
    recs, _ = records(path)
    assert not [r for r in recs if r[0] == R.HOST_ACCESS]


def _serve_polling(steps: int, poll) -> None:
    """The serving loop with a host that never blocks: before reusing the pinned buffer it
    polls the previous copy's event (or stream) with ``query()`` until it answers True."""
    copy = sim.Stream()
    buf = sim.host_tensor(torch.zeros(64))
    done = None
    for step in range(steps):
        if done is not None:
            while not poll(copy, done):
                pass
        buf.fill_(float(step))
        with sim.stream(copy):
            x = sim.to_device(buf)
            done = copy.record_event()
        sim.current_stream().wait_event(done)
        x.record_stream(sim.current_stream())
        x.sum()


def test_polling_event_query_until_true_makes_the_loop_clean(sim_recording):
    rec, path = sim_recording
    _serve_polling(3, lambda stream, ev: ev.query())
    _serve_polling(3, lambda stream, ev: stream.query())
    rec.stop()
    assert analyze(path) == []
    recs, _ = records(path)
    assert [r for r in recs if r[0] == R.EVENT_SYNC] and [r for r in recs if r[0] == R.STREAM_SYNC]


def test_a_query_of_a_never_recorded_event_records_nothing(sim_recording):
    rec, path = sim_recording
    assert sim.Event().query()
    rec.stop()
    recs, _ = records(path)
    assert not [r for r in recs if r[0] == R.EVENT_SYNC]
