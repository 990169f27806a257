"""``torch.cuda.make_graphed_callables`` under the emulator: a graphed module trained for a
few steps (``train``: clean, and its losses equal the eager module's), and a graphed
callable whose static input another stream writes before each call (``race``: no wait;
``clean``: the call's stream waits for the writer)."""

import sys

import torch

variant = sys.argv[1]
torch.manual_seed(0)

if variant == "train":
    def build():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()

    def losses(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(1)
        out = []
        for _ in range(4):
            data = torch.randn(8, 16, generator=gen).cuda()
            target = torch.randn(8, 4, generator=gen).cuda()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward()
            opt.step()
            out.append(float(loss.item()))
        return out

    eager = losses(build())
    graphed = losses(torch.cuda.make_graphed_callables(build(), (torch.randn(8, 16, device="cuda"),)))
    assert graphed == eager, (graphed, eager)
    print("losses", graphed)
    sys.exit(0)


def scale(x):
    return x * 3 + 1


x = torch.zeros(256, device="cuda", requires_grad=False)  # the static input
f = torch.cuda.make_graphed_callables(scale, (x,))
side = torch.cuda.Stream()
for i in range(3):
    if variant == "clean":
        side.wait_stream(torch.cuda.current_stream())  # the previous call has read x
    with torch.cuda.stream(side):
        x.fill_(i)  # the next input, written in place on another stream
    if variant == "clean":
        torch.cuda.current_stream().wait_stream(side)
    y = f(x)  # x is the static input itself: the replay reads it, no copy
    if variant == "clean":
        assert float(y[0].item()) == 3 * i + 1
torch.cuda.synchronize()
print("done")
