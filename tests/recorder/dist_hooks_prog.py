"""DDP communication hooks and torch Futures on the simulated device, run by
``test_collectives_futures.py`` under ``npusan record --backend sim -- torchrun
--nproc_per_node=2 dist_hooks_prog.py SCENARIO...``.

As in ``dist_prog.py``: ``ok_*`` scenarios are correct programs (no finding may point into
them); each ``bug_*`` scenario has one race, its earlier access marked ``EARLIER:<name>``
and its later one ``LATER:<name>``. ``torch_*`` scenarios run torch's own code where the
test expects what it says about them.
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from npusan import sim

warnings.filterwarnings("ignore")


def bf16_hook(state, bucket):
    """torch's ``bf16_compress_hook``: DDP refuses to register it by that name without NCCL
    (``_check_comm_hook``), which gloo on a CPU is not; the code run is torch's."""
    return default_hooks.bf16_compress_hook(state, bucket)


def custom_hook(state, bucket):
    """A correct hook of one's own: the future of an async all_reduce, then a callback."""
    t = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def racy_hook(state, bucket):
    """Hands back the bucket while it is still being reduced: a completed future, no wait."""
    buf = bucket.buffer()
    dist.all_reduce(buf, async_op=True)  # EARLIER:bug_hook_returns_unwaited_bucket
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def train(hook, state=None, steps: int = 3, later: str = "") -> None:
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)),
                bucket_cap_mb=0.0001)
    model.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(4, 8), torch.randn(4, 2)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        if later:
            loss.backward()  # LATER:bug_hook_returns_unwaited_bucket
        else:
            loss.backward()
        opt.step()


def ok_allreduce_hook():
    train(default_hooks.allreduce_hook)


def ok_fp16_compress_hook():
    train(default_hooks.fp16_compress_hook)


def ok_bf16_compress_hook():
    train(bf16_hook)


def ok_powersgd_hook():
    """PowerSGD without error feedback (with it, see torch_powersgd_error_feedback)."""
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                        min_compression_rate=0.5, use_error_feedback=False)
    train(powerSGD_hook.powerSGD_hook, state, steps=4)


def ok_custom_hook():
    train(custom_hook)


def ok_future_then_wait():
    """The Future API outside DDP: a callback, then a wait for its result."""
    x = torch.ones(4)
    fut = dist.all_reduce(x, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    y = doubled.wait()
    _ = y + x


def bug_hook_returns_unwaited_bucket():
    train(racy_hook, later="yes")


def bug_future_value_without_wait():
    x = torch.ones(4)
    fut = dist.all_reduce(x, async_op=True).get_future()  # EARLIER:bug_future_value_without_wait
    y = fut.value()[0] + 1  # LATER:bug_future_value_without_wait
    fut.wait()
    return y


def torch_powersgd_error_feedback():
    """PowerSGD as documented (error feedback on): see test_powersgd_error_feedback."""
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                        min_compression_rate=0.5)
    train(powerSGD_hook.powerSGD_hook, state, steps=4)


def main(names) -> None:
    dist.init_process_group("gloo")
    try:
        for name in names:
            globals()[name]()
            dist.barrier()
        sim.synchronize()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
