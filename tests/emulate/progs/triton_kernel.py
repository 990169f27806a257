"""A hand-written Triton kernel on the emulated CUDA device, launched on the default stream
while its input is produced on a user stream (``race``) or after waiting for it (``clean``)."""

import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + tl.load(y_ptr + offs, mask=m), mask=m)


variant = sys.argv[1]
print("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET"))
torch.manual_seed(0)
a, b = torch.randn(32, 32, device="cuda"), torch.randn(32, 32, device="cuda")
bias = torch.randn(32 * 32, device="cuda")
user = torch.cuda.Stream()
user.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(user):
    h = a @ b
    out = torch.empty(32 * 32, device="cuda")
if variant == "clean":
    torch.cuda.current_stream().wait_stream(user)
scale_add[(triton.cdiv(h.numel(), 256),)](h, bias, out, h.numel(), 2.0, BLOCK=256)
torch.cuda.current_stream().wait_stream(user)
want = (a.cpu() @ b.cpu()).flatten() * 2.0 + bias.cpu()
assert out.is_cuda and torch.allclose(out.cpu(), want, atol=1e-4), "wrong values"
print("ok")
