"""CUDA graphs under the emulator: a captured graph replayed while another stream writes its
static input (``race``: no wait; ``clean``: the side stream's write is waited for); a
two-stream capture that forks to a side stream without joining back (``unjoined``: CUDA
refuses to end it, and so does the emulator), one that waits for work outside the capture
(``outside_wait``: refused too), one that joins back (``joined``), and one
that joins back but whose side-stream output another stream reads unordered after the
replays (``side_race``); ``values`` checks that replays recompute the outputs into the
same static buffers."""

import sys

import torch

variant = sys.argv[1]
x = torch.zeros(1024, device="cuda")  # the graph's static input
side = torch.cuda.Stream()
g = torch.cuda.CUDAGraph()

if variant == "unjoined":
    fork = torch.cuda.Stream()
    try:
        with torch.cuda.graph(g):
            y = x * 2
            fork.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(fork):
                z = y + 1  # on the side stream: never joined back
    except RuntimeError as e:  # torch.AcceleratorError on a GPU too
        assert "capturing stream has unjoined work" in str(e), e
        print("refused")
    else:
        sys.exit("the unjoined capture was not refused")
    try:
        g.replay()  # the graph holds nothing: torch refuses to replay it
    except RuntimeError:
        sys.exit(0)
    sys.exit("the refused graph was replayed")

if variant == "outside_wait":
    # a wait inside the capture for work outside it (as a fix placed inside the capture would)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.fill_(1.0)
    try:
        with torch.cuda.graph(g):
            torch.cuda.current_stream().wait_stream(side)
            y = x * 2
    except RuntimeError as e:
        assert "operation failed due to a previous error during capture" in str(e), e
        assert "dependency created on uncaptured work in another stream" in str(e.__context__), e.__context__
        print("refused")
        sys.exit(0)
    sys.exit("the wait for uncaptured work was not refused")

if variant in ("joined", "side_race"):
    fork = torch.cuda.Stream()
    reader = torch.cuda.Stream()
    with torch.cuda.graph(g):
        y = x * 2
        fork.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(fork):
            z = y + 1  # on the side stream, joined back below
        torch.cuda.current_stream().wait_stream(fork)
    for _ in range(3):
        g.replay()
        if variant == "joined":
            reader.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(reader):
            print(float(z.sum().item() * 0))  # side_race: reads z unordered after the replay
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
