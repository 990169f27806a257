"""The same emulated CUDA programs under PyTorch's CSAN and npusan at once.

``npusan record --emulate cuda -- python csan.py SCENARIO...``: the emulator's mode is
lowest, npusan's recorder above it, CSAN's (``enable_cuda_sanitizer()``) on top; all three
see every op and CSAN reads the same ``torch.cuda._gpu_trace`` hooks the recorder does.
Each scenario runs in its own function; a CSAN report is caught and printed as one line
``CSAN SCENARIO data-race`` (CSAN raises at the first error), then the scenario stops.
``CSAN SCENARIO clean`` when CSAN reported nothing.
"""

import sys

import torch
import torch.distributed as dist
from torch.cuda._sanitizer import CUDASanitizerErrors, enable_cuda_sanitizer


def ok_prefetch():
    """A side stream copies the next batch; the main stream waits and record_streams it."""
    side = torch.cuda.Stream()
    w = torch.randn(64, 64, device="cuda")
    batches = [torch.randn(16, 64).pin_memory() for _ in range(3)]
    for b in batches:
        with torch.cuda.stream(side):
            x = b.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        y = x @ w
        del x
    torch.cuda.synchronize()
    return y


def bug_data_race():
    """The main stream reads what a side stream writes, without a wait."""
    side = torch.cuda.Stream()
    a = torch.ones(256, device="cuda")
    torch.cuda.current_stream().synchronize()
    with torch.cuda.stream(side):
        a.mul_(2)  # EARLIER:data_race
    b = a + 1  # LATER:data_race
    torch.cuda.synchronize()
    return b


def bug_missing_record_stream():
    """Allocated on a side stream, used on the main stream, freed without record_stream;
    the block goes to the side stream's next allocation at once."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(4096, device="cuda")
    torch.cuda.current_stream().wait_stream(side)
    y = x * 3
    del x  # FREED:missing_record_stream
    with torch.cuda.stream(side):
        z = torch.zeros(4096, device="cuda")
    torch.cuda.synchronize()
    return y, z


def bug_rmw_race():
    """An in-place read-modify-write on a side stream races with a read on the main stream
    (CSAN counts an in-place op's ``self`` as a write only, which still conflicts with the read)."""
    side = torch.cuda.Stream()
    acc = torch.zeros(256, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        acc.add_(1)  # EARLIER:rmw_race
    total = acc.sum()  # LATER:rmw_race
    torch.cuda.synchronize()
    return total


def bug_collective_no_wait():
    """An async all_reduce's result read before work.wait() (a 1-rank NCCL group)."""
    g = torch.ones(1024, device="cuda")
    work = dist.all_reduce(g, async_op=True)  # EARLIER:collective_no_wait
    y = g * 2  # LATER:collective_no_wait
    work.wait()
    torch.cuda.synchronize()
    return y


if __name__ == "__main__":
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    enable_cuda_sanitizer()
    for name in sys.argv[1:]:
        try:
            globals()[name]()
            print(f"CSAN {name} clean", flush=True)
        except CUDASanitizerErrors as e:
            # CSAN stopped the scenario before its own synchronize: order the host after
            # its streams before its tensors (held by the traceback) are freed
            torch.cuda.synchronize()
            print(f"CSAN {name} data-race", flush=True)
            print(str(e.errors[0])[:2000], file=sys.stderr)
    dist.destroy_process_group()
