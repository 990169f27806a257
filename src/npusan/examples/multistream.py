"""A small multi-stream PyTorch program with two planted bugs, on npusan's simulated device.

Run it under the recorder and analyze the trace::

    npusan record -o out/example.npusan -- python -m npusan.examples.multistream
    npusan analyze out/example.npusan

It runs on any machine: ``npusan.sim`` gives CPU tensors CUDA-shaped streams and events
(on a GPU, replace ``sim`` with ``torch.cuda`` and the same bugs are real). Expected
findings: one **data race** (``scale_on_side_stream`` forgets ``wait_stream`` before the
default stream reads the result) and one **missing record_stream** (``stage_batch``
hands a tensor to the side stream and frees it without ``record_stream``). The correct
patterns (``prefetch``, an Apex-style prefetcher copying host batches on a copy stream,
with ``wait_stream`` + ``record_stream``; event waits) report nothing.

Host batches are made with ``sim.host_tensor`` (the simulated ``pin_memory()``): on a GPU
a pinned host batch is not device memory, and here an unmarked CPU tensor would be.
"""

from __future__ import annotations

import torch

from npusan import sim


def prefetch(host_batch: torch.Tensor, copy_stream: sim.Stream) -> torch.Tensor:
    """Correct: copy a host batch to the device on a copy stream (on a GPU:
    ``host_batch.cuda(non_blocking=True)``), make the consumer wait, tell the allocator."""
    with sim.stream(copy_stream):
        staged = sim.to_device(host_batch)
    sim.current_stream().wait_stream(copy_stream)
    staged.record_stream(sim.current_stream())
    return staged


def event_handoff(x: torch.Tensor, side: sim.Stream) -> torch.Tensor:
    """Correct: an event recorded on the side stream, waited on by the default stream."""
    side.wait_stream(sim.current_stream())  # x was written on the default stream
    with sim.stream(side):
        y = x.sin()
        done = sim.Event()
        done.record(side)
    done.wait(sim.current_stream())
    y.record_stream(sim.current_stream())  # allocated on side, used here
    x.record_stream(side)  # allocated here, used on side
    return y + 1


def scale_on_side_stream(x: torch.Tensor, out: torch.Tensor, side: sim.Stream) -> torch.Tensor:
    """BUG (data race): the default stream reads ``out`` without waiting for ``side``."""
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        torch.mul(x, 2.0, out=out)
    x.record_stream(side)
    # missing: sim.current_stream().wait_stream(side)
    return out.sum()


def stage_batch(side: sim.Stream) -> float:
    """BUG (missing record_stream): ``tmp`` is used on ``side`` and freed on the default stream."""
    tmp = torch.arange(64, dtype=torch.float32)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        total = (tmp * tmp).sum()
    # missing: tmp.record_stream(side)  (and nothing makes the default stream wait for side)
    del tmp
    torch.empty(1 << 18)  # the default stream allocates again: from now on its allocator could hand out tmp's block
    return float(total)


def main() -> None:
    torch.manual_seed(0)
    side = sim.Stream()
    copy_stream = sim.Stream()
    weight = torch.randn(16, 16)
    scaled = torch.empty(8, 16)  # a buffer reused every step
    for step in range(3):
        batch = sim.host_tensor(torch.randn(8, 16))  # a pinned batch from the data loader
        x = prefetch(batch, copy_stream) @ weight
        x = event_handoff(x, side)
        loss = scale_on_side_stream(x, scaled, side)
        print(f"step {step}: loss {loss.item():.4f}")
    print(f"staged total {stage_batch(side):.1f}")
    sim.synchronize()


if __name__ == "__main__":
    main()
