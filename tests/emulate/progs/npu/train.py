"""The AdamW training loop of ../train.py as torch_npu code.

argv[1]: "plain" (batches copied on the current stream), "prefetch" (a side stream
copies the next batch; wait_stream + record_stream), "prefetch-no-record" (wait_stream,
no record_stream), "side-forward" (a custom function runs on a side stream: its backward
must run on that stream).
"""
import sys

import torch
import torch_npu
import torch.nn.functional as F

variant = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).npu()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
assert all(p.is_npu for p in model.parameters())
data, labels = torch.randn(16, 32), torch.randint(0, 4, (16,))
batches = [(data.clone().pin_memory(), labels.clone().pin_memory()) for _ in range(6)]  # one batch: the loss falls

syncs = []
torch_npu.utils._npu_trace.register_callback_for_npu_stream_synchronization(lambda s: syncs.append(s), "prog")
side = torch.npu.Stream()
seen = []


class Probe(torch.autograd.Function):
    """Identity; its backward (a kernel) notes the stream it runs on."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        seen.append(torch.npu.current_stream())
        return g * 1.0


def load(i):
    x, y = batches[i]
    if variant.startswith("prefetch"):
        with torch.npu.stream(side):
            return x.to("npu", non_blocking=True), y.to("npu", non_blocking=True)
    return x.npu(non_blocking=True), y.npu(non_blocking=True)


losses = []
nxt = load(0)
for i in range(6):
    torch.npu.current_stream().wait_stream(side)
    x, y = nxt
    if variant == "prefetch":
        x.record_stream(torch.npu.current_stream())
        y.record_stream(torch.npu.current_stream())
    if i + 1 < 6:
        nxt = load(i + 1)
    if variant == "side-forward":
        h0 = model[0](x)
        side.wait_stream(torch.npu.current_stream())
        with torch.npu.stream(side):
            h = Probe.apply(h0)
        torch.npu.current_stream().wait_stream(side)
        h.record_stream(torch.npu.current_stream())
        out = model[2](model[1](h))
        del h, h0
    else:
        out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    del x, y, out  # freed while the current stream may still read them
    before = len(syncs)
    opt.step()
    assert len(syncs) == before, "optimizer.step() synchronized the device"
    opt.zero_grad()
    losses.append(loss.item())

for st in opt.state.values():
    assert not st["step"].is_npu and st["exp_avg"].is_npu
assert losses[-1] < losses[0], losses
if variant == "side-forward":
    assert seen and all(s == side for s in seen), seen
torch.npu.synchronize()
print("losses", " ".join(f"{v:.4f}" for v in losses))
