"""torch.compile in each of its forms under the emulator (a function, the decorator with
arguments, a module, ``Module.compile()``): each computes what the eager code computes,
and the program is told once that compiled code runs eagerly. ``race``: the compiled
module reads a batch a side stream wrote without a wait."""

import sys

import torch


def f(x):
    return (x * 2 + 1).relu()


@torch.compile(dynamic=False)
def g(x):
    return x.sin() + 1


cf = torch.compile(f)
model = torch.nn.Linear(16, 4).cuda()
cm = torch.compile(model)
inplace = torch.nn.Linear(16, 4).cuda()
inplace.compile()
x = torch.randn(8, 16, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    x.mul_(3)
if sys.argv[1] != "race":
    torch.cuda.current_stream().wait_stream(side)
for _ in range(2):
    assert isinstance(cm, torch.nn.Module)  # still the module torch.compile made
    assert torch.equal(cm(x), model(x))
    assert torch.equal(cf(x), f(x))
    assert torch.equal(g(x), x.sin() + 1)
    assert torch.equal(inplace(x), torch.nn.functional.linear(x, inplace.weight, inplace.bias))
print("ok")
