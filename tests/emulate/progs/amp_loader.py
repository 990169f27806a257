"""A DataLoader with pin_memory=True (its pin-memory thread), autocast and GradScaler."""
import torch
from torch.utils.data import DataLoader, TensorDataset
m = torch.nn.Linear(8, 2).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
ds = TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
for x, y in DataLoader(ds, batch_size=8, pin_memory=True):
    assert x.is_pinned(), "not pinned"
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    with torch.autocast("cuda"):
        loss = torch.nn.functional.cross_entropy(m(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt); scaler.update(); opt.zero_grad()
print("ok", loss.item(), scaler.get_scale())
