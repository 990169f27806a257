"""CUDA graphs under the emulator: a captured graph replayed while another stream writes its
static input (``race``: no wait; ``clean``: the side stream's write is waited for), and a
two-stream capture that forks to a side stream without joining back (``unjoined``);
``values`` checks that replays recompute the outputs into the same static buffers."""

import sys

import torch

variant = sys.argv[1]
x = torch.zeros(1024, device="cuda")  # the graph's static input
side = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()

if variant == "unjoined":
    fork = torch.cuda.Stream()
    with torch.cuda.graph(g):
        y = x * 2
        fork.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(fork):
            z = y + 1  # on the side stream: never joined back
    for _ in range(3):
        g.replay()
        print(float(z.sum().item() * 0))  # reads z on the launching stream: races the side stream
    sys.exit(0)

with torch.cuda.graph(g):
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
        side.wait_stream(torch.cuda.current_stream())  # the previous replay has read x
    with torch.cuda.stream(side):
        x.fill_(i)  # the next input, written on another stream
    if variant == "clean":
        torch.cuda.current_stream().wait_stream(side)
    g.replay()
torch.cuda.synchronize()
print("done", float(y[0].item()))
