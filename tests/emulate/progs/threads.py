"""Device tensors made in worker threads (a thread pool and a plain Thread).

argv[1]: "clean" (the main stream waits for the worker's stream before reading) or
"racy" (it does not: a data race).
"""
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

variant = sys.argv[1]
side = torch.cuda.Stream()
done = torch.cuda.Event()


def make(n):
    with torch.cuda.stream(side):
        t = torch.ones(n, n, device="cuda")
        t.mul_(2)
        done.record(side)
    assert t.is_cuda and t.device.type == "cuda"
    return t


with ThreadPoolExecutor(1) as pool:
    y = pool.submit(make, 32).result()
if variant == "clean":
    torch.cuda.current_stream().wait_event(done)
z = y @ y
out = []
th = threading.Thread(target=lambda: out.append(torch.zeros(3, device="cuda") + 1))
th.start()
th.join()
assert out[0].is_cuda and z.is_cuda
y.record_stream(torch.cuda.current_stream())
torch.cuda.synchronize()
assert float(z[0, 0]) == 4.0 * 32
print("done")
