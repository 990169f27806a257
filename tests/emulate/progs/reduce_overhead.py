"""torch.compile(mode="reduce-overhead") under the emulator: runs (eagerly), computes what
the eager function computes, and a race on its input is still found (the ops are recorded
one by one). ``race``: the input is written on a side stream without a wait."""

import sys

import torch


def f(x):
    return (x * 2 + 1).relu()


cf = torch.compile(f, mode="reduce-overhead")
x = torch.randn(64, device="cuda")
side = torch.cuda.Stream()
for i in range(3):
    if sys.argv[1] == "race":
        with torch.cuda.stream(side):
            x.add_(1)
    y = cf(x)
    assert torch.equal(y, f(x))
print("ok")
