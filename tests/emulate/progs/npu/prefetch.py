"""The data prefetcher of ../prefetch.py as torch_npu code (``import torch_npu``, ``npu``).

argv[1]: "clean" (wait_stream + record_stream), "no-record" (wait, no record_stream),
"no-wait" (record_stream, no wait), "reuse" (no record_stream; the freed block is
re-allocated on the same stream and written).
"""
import sys

import torch
import torch_npu

variant = sys.argv[1]
assert torch.npu.is_available() and torch_npu.npu.device_count() == 1
side = torch_npu.npu.Stream()
w = torch.randn(64, 64, device="npu")
assert w.is_npu and str(w.device) == "npu:0"
batches = [torch.randn(16, 64).pin_memory() for _ in range(4)]


def load(i):
    with torch.npu.stream(side):
        return batches[i].npu(non_blocking=True)


nxt = load(0)
for i in range(4):
    if variant != "no-wait":
        torch.npu.current_stream().wait_stream(side)
    x = nxt
    if variant in ("clean", "no-wait"):
        x.record_stream(torch.npu.current_stream())
    if i + 1 < 4:
        nxt = load(i + 1)
    y = x @ w
    if variant == "reuse":
        del x
        with torch.npu.stream(side):
            again = torch.empty(16, 64, device="npu:0")
            again.fill_(1.0)
        break
    del x
    y.sum().item()
torch.npu.synchronize()
print("done")
