"""Host accesses of pinned memory that no torch op makes, in the shape of a serving loop.

Run as ``python host_watch_prog.py CASE VARIANT`` under ``npusan record --emulate cuda``
with ``NPUSAN_HOST_FAULTS=1``. VARIANT ``bug`` races with the copy, ``fixed`` synchronizes
first, ``pageable`` is the bug with ordinary host memory (nothing to race with).
"""

import ctypes
import sys

import torch

STEPS = 3
N = 1024  # int32: one page


def numpy_view(variant):
    """vLLM #47644's pattern: the input ids go into the pinned buffer through a numpy view
    made once at start-up, while the previous step's non_blocking H2D copy may still read it."""
    cpu = torch.zeros(N, dtype=torch.int32, pin_memory=variant != "pageable")
    gpu = torch.zeros(N, dtype=torch.int32, device="cuda")
    cpu_np = cpu.numpy()  # once, before the loop
    copied = torch.cuda.Event()
    for step in range(STEPS):
        n = 16 + step
        if variant == "fixed":
            copied.synchronize()
        cpu_np[:n] = step + 1  # the host writes the buffer: no torch op
        gpu[:n].copy_(cpu[:n], non_blocking=True)
        copied.record()
        gpu[:n].float().sum()  # the step's kernels
    torch.cuda.synchronize()
    assert int(gpu[:16].sum()) == 16 * STEPS  # the program computed what it computes unrecorded


def raw_pointer(variant):
    """The same loop writing through ctypes.memmove into the buffer's address."""
    cpu = torch.zeros(N, dtype=torch.int32, pin_memory=variant != "pageable")
    gpu = torch.zeros(N, dtype=torch.int32, device="cuda")
    ptr = cpu.data_ptr()
    copied = torch.cuda.Event()
    for step in range(STEPS):
        src = (ctypes.c_int32 * 8)(*([step + 1] * 8))
        if variant == "fixed":
            copied.synchronize()
        ctypes.memmove(ptr, src, ctypes.sizeof(src))
        gpu[:8].copy_(cpu[:8], non_blocking=True)
        copied.record()
        gpu.float().sum()
    torch.cuda.synchronize()
    assert int(gpu[:8].sum()) == 8 * STEPS


def memoryview_read(variant):
    """vLLM #36013's shape: a non_blocking D2H copy into pinned memory, read on the host
    through a memoryview made once, without waiting for the copy."""
    cpu = torch.zeros(N, dtype=torch.int64, pin_memory=variant != "pageable")
    mv = memoryview(cpu.numpy())
    done = torch.cuda.Event()
    total = 0
    for step in range(STEPS):
        accepted = torch.full((N,), step + 1, dtype=torch.int64, device="cuda")
        cpu.copy_(accepted, non_blocking=True)
        done.record()
        if variant == "fixed":
            done.synchronize()
        total += mv[0]
    assert total == sum(range(1, STEPS + 1))


def segfault(variant):
    """A genuine segfault while a pinned buffer is protected: the process dies by SIGSEGV."""
    cpu = torch.zeros(N, dtype=torch.int32, pin_memory=True)
    gpu = torch.zeros(N, dtype=torch.int32, device="cuda")
    gpu.copy_(cpu, non_blocking=True)  # (its pages are protected now)
    print("protected", flush=True)
    ctypes.string_at(0)


def fork(variant):
    """A child forked while a pinned buffer is protected writes it: no fault reaches it
    (the recorder lifts every page in the child), and the parent's watch goes on."""
    import os

    cpu = torch.zeros(N, dtype=torch.int32, pin_memory=True)
    gpu = torch.zeros(N, dtype=torch.int32, device="cuda")
    cpu_np = cpu.numpy()
    gpu.copy_(cpu, non_blocking=True)
    pid = os.fork()
    if pid == 0:
        cpu_np[:] = 7
        os._exit(0 if int(cpu_np.sum()) == 7 * N else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    cpu_np[0] = 1  # the parent's own write: still seen


CASES = {"numpy-view": numpy_view, "fork": fork, "raw-pointer": raw_pointer, "memoryview-read": memoryview_read,
         "segfault": segfault}

if __name__ == "__main__":
    CASES[sys.argv[1]](sys.argv[2])
