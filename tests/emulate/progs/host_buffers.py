"""Pinned host buffers shared between the host and a stream, in the shape of four real bugs.

Run as ``python host_buffers.py CASE VARIANT`` under ``npusan record --emulate cuda``.
Each case ports the buggy code path of a serving engine (the source is named in its
docstring); VARIANT ``bug`` is that code, ``fixed`` the fix that landed (or the documented
one), ``pageable`` the bug with ordinary host memory (nothing for the host to race with).
"""

import sys

import torch

STEPS = 3


class CpuGpuBuffer:
    """vLLM's pair of a (pinned) host staging tensor and its device twin."""

    def __init__(self, n, dtype, pinned=True):
        self.cpu = torch.zeros(n, dtype=dtype, pin_memory=pinned)
        self.gpu = torch.zeros(n, dtype=dtype, device="cuda")

    def copy_to_gpu(self, n):
        self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)
        return self.gpu[:n]


def vllm_47644(variant):
    """vLLM PR #47644: under the PP batch queue, input prep for step N+1 rewrites the reused
    pinned CPU input buffers (seq_lens_cpu, query_start_loc_cpu) while step N's non_blocking
    H2D copies from them may not have run. The fix waits for ``prepare_inputs_event``
    (``synchronize_input_prep``) before rewriting them."""
    seq_lens = CpuGpuBuffer(8, torch.int32, pinned=variant != "pageable")
    query_start_loc = CpuGpuBuffer(9, torch.int32, pinned=variant != "pageable")
    prepare_inputs_event = torch.cuda.Event()
    for step in range(STEPS):
        n = 4 + step
        if variant == "fixed":
            prepare_inputs_event.synchronize()  # synchronize_input_prep()
        seq_lens.cpu[:n] = torch.arange(n, dtype=torch.int32) + step  # the host rewrites them
        query_start_loc.cpu[0] = 0
        torch.cumsum(seq_lens.cpu[:n], 0, out=query_start_loc.cpu[1:n + 1])
        s = seq_lens.copy_to_gpu(n)
        q = query_start_loc.copy_to_gpu(n + 1)
        prepare_inputs_event.record()
        (s.sum() + q.sum()).float()  # the step's kernels


def trtllm_15546(variant):
    """TensorRT-LLM PR #15546: ``KVCacheManager.copy_batch_block_offsets`` overwrote one
    persistent pinned host buffer (host_kv_cache_block_offsets) in place every iteration and
    shipped it with an asynchronous H2D; under the overlap scheduler the next iteration's
    overwrite clobbered the pending copy's source. (The fix stages each iteration through a
    fresh host buffer; ``fixed`` does that.)"""
    host_offsets = torch.zeros(4, 16, dtype=torch.int32, pin_memory=variant != "pageable")
    dev_offsets = torch.zeros(4, 16, dtype=torch.int32, device="cuda")
    for it in range(STEPS):
        offsets = torch.randint(0, 1024, (4, 16), dtype=torch.int32)
        if variant == "fixed":
            staged = offsets.pin_memory()  # a fresh host buffer per iteration
            dev_offsets.copy_(staged, non_blocking=True)
        else:
            host_offsets.copy_(offsets)  # in place, over the last iteration's source
            dev_offsets.copy_(host_offsets, non_blocking=True)
        (dev_offsets * 2).sum()  # the attention kernel reads the offsets


def vllm_ascend_12071(variant):
    """vLLM-Ascend PR #12071: the runner writes ``query_start_loc`` on the host (a pinned
    buffer) for decode step N+1 while step N's asynchronous H2D copy of it may not have run.
    (The fix snapshots it to a fresh pinned tensor per copy; ``fixed`` here polls the step's
    event with ``query()`` until it answers True before the write, a serving loop that never
    blocks the host.)"""
    qsl_cpu = torch.zeros(9, dtype=torch.int32, pin_memory=variant != "pageable")
    qsl_dev = torch.zeros(9, dtype=torch.int32, device="cuda")
    copied = torch.cuda.Event()
    for step in range(STEPS):
        if variant == "fixed":
            while not copied.query():
                pass  # other host work would go here
        qsl_cpu[:5] = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32) * (step + 1)
        qsl_dev[:5].copy_(qsl_cpu[:5], non_blocking=True)
        copied.record()
        qsl_dev.float().mean()


def vllm_36013(variant, read):
    """vLLM PR #36013: ``num_accepted_tokens`` is copied from the device into pinned memory
    with non_blocking=True, and the host reads it in the next step (vLLM through a numpy view
    made once; here the read is ``.numpy()``, ``.tolist()`` or ``.item()`` at the point of
    use). The fix records an event after the copy and synchronizes it before the read."""
    cpu = torch.zeros(8, dtype=torch.int64, pin_memory=variant != "pageable")
    done = torch.cuda.Event()
    total = 0
    for step in range(STEPS):
        accepted = torch.randint(0, 3, (8,), device="cuda")  # the sampler's output
        cpu.copy_(accepted, non_blocking=True)
        done.record()
        if variant == "fixed":
            done.synchronize()
        if read == "numpy":
            total += int(cpu.numpy().sum())
        elif read == "tolist":
            total += sum(cpu.tolist())
        else:
            total += cpu[step].item()
    return total


def d2h_to_cpu(variant, how):
    """vLLM-Ascend issue 3372: ``t.to("cpu", non_blocking=True)`` of a device tensor makes a
    pinned host tensor (aten's ``_to_copy`` pins it), and the copy into it may not have run
    when the host reads it. The fix synchronizes the stream (or an event recorded after the
    copy) first; "pageable" copies with ``non_blocking=False``, which the host waits for."""
    g = torch.randn(64, device="cuda") * 2
    nb = variant != "pageable"
    c = g.to("cpu", non_blocking=nb) if how == "to" else g.to(torch.device("cpu"), torch.float64,
                                                               non_blocking=nb, copy=True)
    done = torch.cuda.Event()
    done.record()
    assert c.is_pinned() == nb and c.device.type == "cpu"
    if variant == "fixed":
        if how == "to":
            torch.cuda.current_stream().synchronize()
        else:
            done.synchronize()
    return c.sum().item()


CASES = {
    "vllm-47644": vllm_47644,
    "trtllm-15546": trtllm_15546,
    "vllm-ascend-12071": vllm_ascend_12071,
    "vllm-36013-numpy": lambda v: vllm_36013(v, "numpy"),
    "vllm-36013-tolist": lambda v: vllm_36013(v, "tolist"),
    "vllm-36013-item": lambda v: vllm_36013(v, "item"),
    "d2h-to-cpu": lambda v: d2h_to_cpu(v, "to"),
    "d2h-to-cpu-copy": lambda v: d2h_to_cpu(v, "copy"),
}

if __name__ == "__main__":
    CASES[sys.argv[1]](sys.argv[2])
