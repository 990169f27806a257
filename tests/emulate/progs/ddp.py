"""2-rank NCCL programs run unchanged under ``npusan record --emulate cuda --emulate-devices 2
-- torchrun --nproc_per_node=2 ddp.py SCENARIO...``: each scenario's findings must point into
it (``bug_*``) or nowhere (``ok_*``); a ``known_*`` scenario is a correct program on which
npusan reports what it reports on a GPU too, asserted exactly by the test."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def ok_ddp():
    """DDP: the reducer's bucket all-reduce in backward, on the comm stream, waited by C++."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(16, 32, device="cuda")
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    # the replicas stay equal: the all-reduce really ran
    w = model[0].weight.detach().clone()
    others = [torch.empty_like(w) for _ in range(dist.get_world_size())]
    dist.all_gather(others, w)
    assert all(torch.equal(o.cpu(), w.cpu()) for o in others)


def ok_ddp_default_device():
    """DDP built and trained with ``cuda`` as the default device (a torch function mode, which
    the recorder's re-dispatch of each op passes through): the broadcasts C++ launches and
    waits for itself (the constructor's ``_broadcast_coalesced``, the bucket rebuild's
    index sync in forward) are still waited on the current stream."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        ddp = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), bucket_cap_mb=0.0001)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for _ in range(3):
            x, y = torch.randn(4, 8), torch.randn(4, 2)
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


def ok_async_waited():
    """An async all_reduce waited before its result is used."""
    g = torch.ones(1024, device="cuda")
    work = dist.all_reduce(g, async_op=True)
    work.wait()
    y = g * 2
    assert y[0].item() == 2 * dist.get_world_size()


def bug_async_no_wait():
    """The result of an async all_reduce read before work.wait()."""
    g = torch.ones(1024, device="cuda")
    work = dist.all_reduce(g, async_op=True)  # EARLIER:async_no_wait
    y = g * 2  # LATER:async_no_wait
    work.wait()
    return y


def known_fsdp2():
    """FSDP2: parameter all-gathers on the all-gather stream, gradient reduce-scatters on the
    reduce-scatter stream, a few AdamW steps (the optimizer's ops on the DTensors' local
    tensors are recorded: the modes answer NotImplemented to DTensor). The sharded
    gradients (the reduce-scatter outputs, allocated on the reduce-scatter stream) are read
    by the optimizer on the default stream and freed by zero_grad without record_stream;
    the reduce-scatter stream waits for the default stream before its next allocation, so
    only the last step's free, which no allocation follows before the trace ends, is
    reported as a missing record_stream: see docs/emulation.md."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).cuda()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(16, 32, device="cuda")
        loss = model(x).square().mean()
        loss.backward()  # ALLOC:fsdp2_grads
        opt.step()  # USE:fsdp2_grads
        opt.zero_grad()  # FREE:fsdp2_grads


if __name__ == "__main__":
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    assert dist.get_backend() == "nccl"
    for name in sys.argv[1:]:
        globals()[name]()
    dist.barrier()
    dist.destroy_process_group()
