"""Backward nodes run on their forward's stream, also when backward is called on a side stream."""
import torch
side = torch.cuda.Stream()
seen = []
class Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x.clone()
    @staticmethod
    def backward(ctx, g):
        seen.append(torch.cuda.current_stream()); return g * 1.0
w = torch.randn(4, 4, device="cuda", requires_grad=True)
y = Probe.apply(w)          # default stream
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    z = Probe.apply(y * 2)  # side stream
    loss = z.sum()
    loss.backward()         # called on the side stream
print(seen, torch.cuda.current_stream())
assert seen == [side, torch.cuda.default_stream()], seen
torch.cuda.current_stream().wait_stream(side)
print(w.grad.is_cuda)
print("done")
