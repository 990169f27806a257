#!/usr/bin/env python3
"""Emulated CUDA benchmark: a training step on the emulated device vs plain CPU tensors.

The step is CUDA code: a small transformer encoder (2 layers, d_model=128, 4 heads,
batch 8 x 64 tokens), AdamW, the next batch prefetched on a side stream (pinned host
memory, ``non_blocking`` copy, ``wait_stream`` + ``record_stream``). Modes, each in its
own subprocess (the emulator cannot be uninstalled):

- ``cpu``: the same step on plain CPU tensors, no npusan (no streams: a CPU has none);
- ``emulated``: ``npusan.emulate.install("cuda")``, nothing recorded;
- ``recorded``: the same, recorded by ``npusan.record(trace, emulate="cuda")`` (the trace
  is analyzed afterwards: the loop is correct, so any finding is a false positive).

The modes run in interleaved rounds (``--rounds``, default 3: cpu, emulated, recorded,
cpu, ...) and each mode's time is the lowest of its per-round median step times, so that
load from other processes on a shared machine, which only ever adds time, skews the
ratios least. Prints each mode's time and the ratios (emulated / cpu, recorded /
emulated), and each mode's peak resident memory (whole process, and its growth above
the resident memory after imports) with the ratio to the cpu run -- all measured in this
run. Targets: emulated at most 3x cpu, recorded at most 1.3x emulated, peak memory at
most 1.5x cpu. Run from a checkout, no install needed::

    PYTHONPATH=src python3 benchmarks/bench_emulate.py [--steps 20] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

D_MODEL, N_HEADS, N_LAYERS, D_FF = 128, 4, 2, 512
BATCH, SEQ, VOCAB = 8, 64, 1000
MODES = ("cpu", "emulated", "recorded")


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _build(torch, dev: str):
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D_MODEL)
            layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
            self.head = nn.Linear(D_MODEL, VOCAB)

        def forward(self, tokens):
            return self.head(self.enc(self.emb(tokens)))

    torch.manual_seed(0)
    model = Model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pin = dev == "cuda"
    batches = []
    for _ in range(4):
        x, y = torch.randint(0, VOCAB, (BATCH, SEQ)), torch.randint(0, VOCAB, (BATCH, SEQ))
        batches.append((x.pin_memory(), y.pin_memory()) if pin else (x, y))
    return model, opt, batches


def _loop(torch, dev: str, model, opt, batches, steps: int, times: list) -> None:
    F = torch.nn.functional
    cuda = dev == "cuda"
    side = torch.cuda.Stream() if cuda else None
    main = torch.cuda.current_stream() if cuda else None

    def prefetch(i):
        x, y = batches[i % len(batches)]
        if not cuda:
            return x, y
        with torch.cuda.stream(side):
            return x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)

    nxt = prefetch(0)
    for i in range(steps):
        t0 = time.perf_counter()
        if cuda:
            main.wait_stream(side)
        x, y = nxt
        if cuda:
            x.record_stream(main)
            y.record_stream(main)
        nxt = prefetch(i + 1)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)


def worker(mode: str, steps: int, warmup: int) -> dict:
    import torch

    torch.set_num_threads(1)  # a shared machine: one thread keeps the ratios stable
    out: dict = {"mode": mode}
    rec = trace_path = None
    if mode != "cpu":
        import npusan
        import npusan.emulate.install

        npusan.emulate.install.install("cuda")
    base = _rss_kib()
    dev = "cpu" if mode == "cpu" else "cuda"
    model, opt, batches = _build(torch, dev)
    if mode == "recorded":
        fd, trace_path = tempfile.mkstemp(suffix=".npusan")
        os.close(fd)
        rec = npusan.record(trace_path, emulate="cuda")
        rec.start()
    times: list = []
    _loop(torch, dev, model, opt, batches, warmup, [])
    _loop(torch, dev, model, opt, batches, steps, times)
    if rec is not None:
        rec.stop()
    out["median_ms"] = statistics.median(times) * 1e3
    out["step_ms"] = [round(t * 1e3, 2) for t in times]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out["peak_rss_mib"] = peak / 1024
    out["peak_growth_mib"] = max(0, peak - base) / 1024
    if trace_path is not None:
        out["trace_bytes"] = os.path.getsize(trace_path)
        from npusan.analyzer.replay.traces import analyze_traces

        result = analyze_traces([trace_path])
        out["findings"] = sorted({f.kind.value for f in result.findings})
        os.unlink(trace_path)
    return out


def _run(mode: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"mode": mode, "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--worker", choices=MODES)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.warmup)))
        return 0
    runs: dict = {m: [] for m in MODES}
    for _ in range(max(1, args.rounds)):
        for m in MODES:
            runs[m].append(_run(m, args))
    r = {}
    for m in MODES:
        ok = [x for x in runs[m] if "median_ms" in x]
        r[m] = min(ok, key=lambda x: x["median_ms"]) if ok else runs[m][0]
        if ok:
            r[m]["rounds_ms"] = [round(x["median_ms"], 2) for x in ok]
    for m in MODES:
        x = r[m]
        if "error" in x:
            print(f"{m:9s} error: {x['error']}")
            continue
        extra = f"  findings {x['findings']}" if "findings" in x else ""
        rounds = " ".join(f"{v:.1f}" for v in x["rounds_ms"])
        print(f"{m:9s} step {x['median_ms']:8.2f} ms (rounds: {rounds})  peak RSS {x['peak_rss_mib']:7.1f} MiB"
              f"  (+{x['peak_growth_mib']:.1f} MiB above imports){extra}")
    if all("median_ms" in r[m] for m in MODES):
        c, e, k = (r[m] for m in MODES)
        print(f"emulated / cpu time      {e['median_ms'] / c['median_ms']:.2f}x  (target <= 3x)")
        print(f"recorded / emulated time {k['median_ms'] / e['median_ms']:.2f}x  (target <= 1.3x)")
        print(f"recorded / cpu time      {k['median_ms'] / c['median_ms']:.2f}x")
        for m in ("emulated", "recorded"):
            print(f"{m} / cpu peak RSS {r[m]['peak_rss_mib'] / c['peak_rss_mib']:.2f}x (target <= 1.5x), "
                  f"growth {r[m]['peak_growth_mib'] / max(c['peak_growth_mib'], 1e-9):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
