"""FSDP's way of freeing and re-materializing a parameter: ``untyped_storage().resize_``.

argv[1]: "clean" (the side stream that read the parameter is recorded with
record_stream before the storage is freed) or "no-record" (it is not: missing
record_stream).
"""
import sys

import torch

variant = sys.argv[1]
side = torch.cuda.Stream()
p = torch.randn(256, 256, device="cuda")
nbytes = p.untyped_storage().nbytes()
for _ in range(2):
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        s = p.sum()  # a side-stream read of the parameter
    if variant == "clean":
        p.record_stream(side)
    before = torch.cuda.memory_allocated()
    p.untyped_storage().resize_(0)  # freed: its block goes back to the allocator
    assert p.untyped_storage().nbytes() == 0 and p.untyped_storage().data_ptr() == 0
    assert torch.cuda.memory_allocated() == before - nbytes
    p.untyped_storage().resize_(nbytes)  # re-materialized: a new block
    assert torch.cuda.memory_allocated() == before and p.untyped_storage().data_ptr() != 0
    p.copy_(torch.ones(256, 256, device="cuda"))
    torch.cuda.current_stream().wait_stream(side)
    del s
torch.cuda.synchronize()
assert float(p.sum()) == 256 * 256
print("done")
