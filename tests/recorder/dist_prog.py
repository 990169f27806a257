"""Collective scenarios on the simulated device, run by ``test_collectives_dist.py`` under
``npusan record --backend sim -- torchrun --nproc_per_node=2 dist_prog.py SCENARIO...``.

With ``NPUSAN_TEST_DEVICE=cuda`` the same scenarios run on CUDA streams with an NCCL
process group (``test_gpu_collectives.py``): ``dev`` is then ``torch.cuda`` with the two
host-memory calls of the simulated device mapped to ``pin_memory`` and ``.cuda()``.

``ok_*`` scenarios are correct programs (no finding may point into them). Each ``bug_*``
scenario has one race: its earlier access carries the comment ``EARLIER:<name>`` and its
later one ``LATER:<name>``; the test checks that the finding points at those lines.
"""

from __future__ import annotations

import os
import sys
import types
import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

ON_CUDA = os.environ.get("NPUSAN_TEST_DEVICE") == "cuda"
if ON_CUDA:
    sim = types.SimpleNamespace(
        Stream=torch.cuda.Stream, stream=torch.cuda.stream, current_stream=torch.cuda.current_stream,
        synchronize=torch.cuda.synchronize, host_tensor=lambda t: t.pin_memory(),
        to_device=lambda t: t.cuda(non_blocking=True))
else:
    from npusan import sim

warnings.filterwarnings("ignore")


def ranks():
    return dist.get_rank(), dist.get_world_size()


def ok_sync_all():
    """Every collective kind with async_op=False, results used afterwards."""
    r, W = ranks()
    x = torch.ones(4)
    y = torch.ones(4)
    dist.all_reduce(x)
    _ = x + 1
    outs = [torch.empty(4) for _ in range(W)]
    dist.all_gather(outs, x)
    _ = outs[-1] + 1
    big = torch.empty(4 * W)
    dist.all_gather_into_tensor(big, x)
    _ = big + 1
    o = torch.empty(4)
    dist.reduce_scatter(o, [torch.ones(4) for _ in range(W)])
    _ = o + 1
    dist.reduce_scatter_tensor(o, torch.ones(4 * W))
    _ = o + 1
    dist.broadcast(x, 0)
    _ = x + 1
    dist.reduce(x, 0)
    _ = x + 1
    a2a = [torch.empty(4) for _ in range(W)]
    dist.all_to_all(a2a, [torch.ones(4) for _ in range(W)])
    _ = a2a[0] + 1
    s = torch.empty(4 * W)
    dist.all_to_all_single(s, torch.ones(4 * W))
    _ = s + 1
    dist.gather(x, [torch.empty(4) for _ in range(W)] if r == 0 else None, dst=0)
    sc = torch.empty(4)
    dist.scatter(sc, [torch.ones(4) for _ in range(W)] if r == 0 else None, src=0)
    _ = sc + 1
    if W > 1 and r == 0:
        dist.send(x, 1)
    elif W > 1 and r == 1:
        dist.recv(x, 0)
    x.add_(1)
    dist.barrier()
    dist.all_reduce_coalesced([x, y])
    _ = x + y


def ok_async_all():
    """Every collective kind with async_op=True, waited before the results are used."""
    r, W = ranks()
    x = torch.ones(4)
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    _ = x + 1
    big = torch.empty(4 * W)
    w = dist.all_gather_into_tensor(big, x, async_op=True)
    w.wait()
    _ = big + 1
    outs = [torch.empty(4) for _ in range(W)]
    w = dist.all_gather(outs, x, async_op=True)
    w.wait()
    _ = outs[0] + 1
    o = torch.empty(4)
    w = dist.reduce_scatter_tensor(o, torch.ones(4 * W), async_op=True)
    w.wait()
    _ = o + 1
    w = dist.broadcast(x, 0, async_op=True)
    w.wait()
    x.mul_(2)
    s = torch.empty(4 * W)
    w = dist.all_to_all_single(s, torch.ones(4 * W), async_op=True)
    w.wait()
    _ = s + 1
    if W > 1:
        w = dist.isend(x, 1) if r == 0 else dist.irecv(x, 0)
        w.wait()
    x.add_(1)
    fut = dist.all_reduce_coalesced([x, torch.ones(2)], async_op=True)
    fut.wait()
    _ = x + 1
    w = dist.barrier(async_op=True)
    w.wait()


def ok_functional():
    """Functional collectives: results wait for themselves when used (AsyncCollectiveTensor)."""
    _, W = ranks()
    g = dist.group.WORLD
    x = torch.ones(4)
    a = fc.all_reduce(x, "sum", g)
    _ = a + 1
    b = fc.all_gather_tensor(x, 0, g)
    _ = b * 2
    c = fc.reduce_scatter_tensor(torch.ones(4 * W), "sum", 0, g)
    _ = c - 1
    d = torch.ops._c10d_functional.all_reduce(x, "sum", g.group_name)
    d = torch.ops._c10d_functional.wait_tensor(d)
    _ = d + 1


def ok_bucket():
    """Gradient buckets all-reduced on a communication stream of the program's own: the
    stream waits for the producer, the consumer waits for the stream, record_stream."""
    _, W = ranks()
    comm = sim.Stream()
    param = torch.zeros(64)
    for _ in range(2):
        bucket = torch.randn(64)
        comm.wait_stream(sim.current_stream())
        with sim.stream(comm):
            dist.all_reduce(bucket)
            bucket.div_(W)
        bucket.record_stream(comm)
        sim.current_stream().wait_stream(comm)
        param.sub_(bucket * 0.1)


def ok_free_before_wait():
    """A tensor dropped before its collective is waited (kept alive or record_stream'ed)."""
    for _ in range(2):
        x = torch.ones(256)
        w = dist.all_reduce(x, async_op=True)
        del x
        w.wait()
        _ = torch.ones(256) + 1


def ok_prefetch_host():
    """An Apex-style prefetcher: host batches copied to the device on a copy stream."""
    copy = sim.Stream()
    weight = torch.randn(16, 4)
    for _ in range(2):
        host = sim.host_tensor(torch.randn(8, 16, device="cpu"))  # a pinned batch from the data loader
        with sim.stream(copy):
            batch = sim.to_device(host)
        sim.current_stream().wait_stream(copy)
        batch.record_stream(sim.current_stream())
        _ = (batch @ weight).sum()


def bug_use_before_wait():
    x = torch.ones(4)
    w = dist.all_reduce(x, async_op=True)  # EARLIER:bug_use_before_wait
    y = x * 2  # LATER:bug_use_before_wait
    w.wait()
    return y


def bug_overwrite_before_wait():
    _, W = ranks()
    inp = torch.ones(4)
    out = torch.empty(4 * W)
    work = dist.all_gather_into_tensor(out, inp, async_op=True)  # EARLIER:bug_overwrite_before_wait
    inp.fill_(3.0)  # LATER:bug_overwrite_before_wait
    work.wait()


def bug_producer_not_waited():
    side = sim.Stream()
    x = torch.empty(4)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        x.fill_(1.0)  # EARLIER:bug_producer_not_waited
    w = dist.all_reduce(x, async_op=True)  # LATER:bug_producer_not_waited
    w.wait()
    x.record_stream(side)


def bug_consumer_not_waiting():
    """ok_bucket without the consumer's wait for the communication stream."""
    _, W = ranks()
    comm = sim.Stream()
    param = torch.zeros(64)
    bucket = torch.randn(64)
    comm.wait_stream(sim.current_stream())
    with sim.stream(comm):
        dist.all_reduce(bucket)  # EARLIER:bug_consumer_not_waiting
    bucket.record_stream(comm)
    param.sub_(bucket * 0.1)  # LATER:bug_consumer_not_waiting
    sim.current_stream().wait_stream(comm)


def bug_functional_no_wait():
    x = torch.ones(4)
    g = dist.group.WORLD.group_name
    y = torch.ops._c10d_functional.all_reduce(x, "sum", g)  # EARLIER:bug_functional_no_wait
    z = y + 1  # LATER:bug_functional_no_wait
    torch.ops._c10d_functional.wait_tensor(y)
    return z


def ok_ddp():
    """A DistributedDataParallel training loop."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)),
                bucket_cap_mb=0.0001)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 2)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def main(names) -> None:
    if ON_CUDA:
        torch.cuda.set_device(0)
        torch.set_default_device("cuda")
    dist.init_process_group("nccl" if ON_CUDA else "gloo")
    try:
        for name in names:
            globals()[name]()
            dist.barrier()
        sim.synchronize()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
