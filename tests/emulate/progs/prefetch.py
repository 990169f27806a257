"""A CUDA-form data prefetcher: a side stream copies the next batch, the main stream computes.

argv[1]: "clean" (wait_stream + record_stream), "no-record" (wait, no record_stream),
"no-wait" (record_stream, no wait), "reuse" (no record_stream; the freed block is
re-allocated on the same stream and written). "no-record" is safe: each step's ``.item()``
synchronizes before the side stream allocates again.
"""
import sys

import torch

variant = sys.argv[1]
assert torch.cuda.is_available()
side = torch.cuda.Stream()
w = torch.randn(64, 64, device="cuda")
batches = [torch.randn(16, 64).pin_memory() for _ in range(4)]


def load(i):
    with torch.cuda.stream(side):
        return batches[i].to("cuda", non_blocking=True)


nxt = load(0)
for i in range(4):
    if variant != "no-wait":
        torch.cuda.current_stream().wait_stream(side)
    x = nxt
    if variant in ("clean", "no-wait"):
        x.record_stream(torch.cuda.current_stream())
    if i + 1 < 4:
        nxt = load(i + 1)
    y = x @ w
    if variant == "reuse":
        # x (allocated on the side stream, used on the main stream, no record_stream) is
        # freed; the allocator hands its block to the next side-stream allocation at once.
        del x
        with torch.cuda.stream(side):
            again = torch.empty(16, 64, device="cuda")
            again.fill_(1.0)
        break
    del x
    y.sum().item()
torch.cuda.synchronize()
print("done")
