"""2-rank NCCL programs with torch Futures, run unchanged under ``npusan record --emulate cuda
--emulate-devices 2 -- torchrun --nproc_per_node=2 futures.py SCENARIO...``: a Work's future,
``then`` callbacks, futures made with ``devices=["cuda"]`` and DDP communication hooks. Each
``ok_*`` scenario must be clean; each ``bug_*`` one is a race whose later access is on the line
marked ``LATER:<name>``."""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps


def _ones():
    return torch.ones(256, device="cuda") * (dist.get_rank() + 1)


def _expected():
    ws = dist.get_world_size()
    return ws * (ws + 1) / 2


def ok_wait():
    fut = dist.all_reduce(_ones(), async_op=True).get_future()
    r = fut.wait()[0]
    assert (r * 2)[0].item() == 2 * _expected()


def ok_then():
    fut = dist.all_reduce(_ones(), async_op=True).get_future()
    child = fut.then(lambda f: f.value()[0] * 2)
    assert child.wait()[0].item() == 2 * _expected()


def ok_add_done_callback():
    seen = []
    fut = dist.all_reduce(_ones(), async_op=True).get_future()
    fut.add_done_callback(lambda f: seen.append(f.value()[0].sum()))
    fut.wait()
    assert seen[0].item() == 256 * _expected()


def ok_device_future():
    """A future made with the device among its devices: set_result records an event on the
    current stream, a then callback on a pool stream waits for it."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(64, device="cuda") * 3
        fut = torch.futures.Future(devices=[torch.device("cuda", torch.cuda.current_device())])
        fut.set_result(x)
    assert fut.then(lambda f: f.value() + 1).wait()[0].item() == 4


def bug_value_nowait():
    fut = dist.all_reduce(_ones(), async_op=True).get_future()
    s = (fut.value()[0] * 2).sum()  # LATER:value_nowait
    fut.wait()
    s.item()


def bug_then_value_nowait():
    fut = dist.all_reduce(_ones(), async_op=True).get_future()
    child = fut.then(lambda f: f.value()[0] * 2)
    s = child.value().sum()  # LATER:then_value_nowait
    child.wait()
    s.item()


def _train(hook, state=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(8, 32, device="cuda")
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()  # LATER:hook
        opt.step()
    w = model[0].weight.detach().clone()
    others = [torch.empty_like(w) for _ in range(dist.get_world_size())]
    dist.all_gather(others, w)
    return all(torch.equal(o.cpu(), w.cpu()) for o in others)


def _then_hook(state, bucket):
    t = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def _broken_hook(state, bucket):
    """Returns the bucket as done while its all-reduce still runs on the comm stream."""
    t = bucket.buffer()
    dist.all_reduce(t, async_op=True)
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut


def ok_hook_allreduce():
    assert _train(dh.allreduce_hook)


def ok_hook_fp16():
    assert _train(dh.fp16_compress_hook)


def ok_hook_powersgd_noef():
    _train(ps.powerSGD_hook, ps.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                              start_powerSGD_iter=2, min_compression_rate=0.5,
                                              use_error_feedback=False, warm_start=False))


def ok_hook_powersgd():
    """PowerSGD with error feedback: its ``decompress`` callback reads ``input_tensor_cp`` (made
    on the default stream in the hook) on the callback's pool stream, and the tensor is freed
    when the callback chain is done, with no record_stream. The model has one bucket, so the
    backward stream's next allocation comes after the reducer waited for the hook's future
    (which orders it after ``decompress``): the block cannot be handed to racing work."""
    _train(ps.powerSGD_hook, ps.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                              start_powerSGD_iter=2, min_compression_rate=0.5))


def ok_hook_then():
    assert _train(_then_hook)


def bug_hook_broken():
    _train(_broken_hook)


if __name__ == "__main__":
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    for name in sys.argv[1:]:
        globals()[name]()
    dist.barrier()
    dist.destroy_process_group()
