"""NPU graphs under the emulator (the CUDA graph programs of graphs.py on ``torch_npu``):
a captured graph replayed while another stream writes its static input (``race``: no wait;
``clean``: the write is waited for), a two-stream capture that never joins back
(``unjoined``), and replays recomputing the outputs in place (``values``)."""

import sys

import torch
import torch_npu  # noqa: F401

variant = sys.argv[1]
x = torch.zeros(1024, device="npu")  # the graph's static input
side = torch.npu.Stream()
g = torch.npu.NPUGraph()

if variant == "unjoined":
    fork = torch.npu.Stream()
    with torch.npu.graph(g):
        y = x * 2
        fork.wait_stream(torch.npu.current_stream())
        with torch.npu.stream(fork):
            z = y + 1  # on the side stream: never joined back
    for _ in range(3):
        g.replay()
        print(float(z.sum().item() * 0))  # reads z on the launching stream: races the side stream
    sys.exit(0)

with torch.npu.graph(g):
    y = x * 2 + 1  # the static output

ptr = y.data_ptr()
for i in range(3):
    if variant == "values":
        x.fill_(i)
        g.replay()
        assert y.data_ptr() == ptr
        assert float(y[0].item()) == 2 * i + 1, float(y[0].item())
        continue
    if variant == "clean":
        side.wait_stream(torch.npu.current_stream())  # the previous replay has read x
    with torch.npu.stream(side):
        x.fill_(i)  # the next input, written on another stream
    if variant == "clean":
        torch.npu.current_stream().wait_stream(side)
    g.replay()
torch.npu.synchronize()
print("done", float(y[0].item()))
