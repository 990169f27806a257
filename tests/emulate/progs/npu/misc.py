"""torch_npu APIs beyond streams: checkpoints, threads, a pinning DataLoader, torch.tensor,
Module.npu(), autocast("npu"). Asserts what it sees; prints "ok"."""
import io
import threading

import torch
import torch_npu  # noqa: F401
from torch.utils.data import DataLoader, TensorDataset

x = torch.randn(4, 4).npu()
buf = io.BytesIO()
torch.save(x, buf)
buf.seek(0)
y = torch.load(buf)
assert y.is_npu and torch.equal(y.cpu(), x.cpu())
assert not torch.load(io.BytesIO(buf.getvalue()), map_location="cpu").is_npu

out = []


def work():
    s = torch.npu.Stream()
    with torch.npu.stream(s):
        out.append(((torch.ones(3, device="npu") * 2).device, torch.npu.current_stream() == s))


t = threading.Thread(target=work)
t.start()
t.join()
assert out == [(torch.device("npu", 0), True)], out
assert torch.npu.current_stream() == torch.npu.default_stream()

batch = next(iter(DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4, pin_memory=True)))[0]
assert batch.is_pinned() and not batch.is_npu
assert torch.tensor([1, 2], device="npu").is_npu
m = torch.nn.Linear(3, 3).npu()
assert all(p.is_npu and not p.is_cuda for p in m.parameters())
with torch.autocast("npu"):
    m(batch.npu()).sum().backward()
assert m.weight.grad.is_npu
torch.npu.synchronize()
print("ok")
