#!/usr/bin/env python3
"""What the page-fault watch of pinned memory costs a serving loop (emulated CUDA device).

The loop is a decode step in vLLM's shape: the host writes the next token ids into a
pinned buffer through a numpy view made once at start-up, copies it to the device with
``non_blocking=True``, runs a small model (embedding, two linear layers, argmax), copies the
sampled tokens back into a second pinned buffer with ``non_blocking=True`` and reads them
through its numpy view. Two loops:

- ``synced``: the host synchronizes an event before each write and read (a correct loop:
  every protection is lifted at a synchronization, no page ever faults);
- ``racy``: the host waits for nothing: it writes the next ids while the previous step's
  copy may still read them and reads the sampled tokens while their copy may still write
  them (the races the watch exists to see: two faults per step, reported as races).

Modes, each in its own subprocess (the emulator cannot be uninstalled): ``emulated``
(nothing recorded), ``recorded`` (recorded, ``NPUSAN_HOST_FAULTS`` unset), ``faults``
(recorded with ``NPUSAN_HOST_FAULTS=1``). Rounds interleave the modes; each mode's time is
the lowest of its per-round median step times. Prints the times, faults per step and the
ratios recorded / emulated and faults / recorded, all measured in this run::

    PYTHONPATH=src python3 benchmarks/bench_host.py [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("emulated", "recorded", "faults")
LOOPS = ("synced", "racy")
VOCAB, D, MAX_TOKENS = 512, 64, 256


def _loop(torch, steps: int, racy: bool, times: list) -> None:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(VOCAB, D).to("cuda")
    l1, l2 = torch.nn.Linear(D, D).to("cuda"), torch.nn.Linear(D, VOCAB).to("cuda")
    ids_cpu = torch.zeros(MAX_TOKENS, dtype=torch.int64, pin_memory=True)
    out_cpu = torch.zeros(MAX_TOKENS, dtype=torch.int64, pin_memory=True)
    ids_np, out_np = ids_cpu.numpy(), out_cpu.numpy()  # once, as vLLM's CpuGpuBuffer does
    ids_gpu = torch.zeros(MAX_TOKENS, dtype=torch.int64, device="cuda")
    copied, sampled = torch.cuda.Event(), torch.cuda.Event()
    n = MAX_TOKENS
    with torch.no_grad():
        for _ in range(steps):
            t0 = time.perf_counter()
            if not racy:
                copied.synchronize()
            ids_np[:n] = out_np[:n]  # the next step's input: the tokens just sampled
            ids_gpu[:n].copy_(ids_cpu[:n], non_blocking=True)
            copied.record()
            logits = l2(torch.relu(l1(emb(ids_gpu[:n]))))
            out_cpu[:n].copy_(logits.argmax(-1), non_blocking=True)
            sampled.record()
            if not racy:
                sampled.synchronize()
            int(out_np[:n].sum())  # the host reads the sampled tokens
            times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()


def worker(mode: str, loop: str, steps: int, warmup: int) -> dict:
    if mode == "faults":
        os.environ["NPUSAN_HOST_FAULTS"] = "1"
    else:
        os.environ.pop("NPUSAN_HOST_FAULTS", None)
    import torch

    import npusan
    import npusan.emulate.install

    torch.set_num_threads(1)  # a shared machine: one thread keeps the ratios stable
    npusan.emulate.install.install("cuda")
    out: dict = {"mode": mode, "loop": loop}
    rec = trace_path = None
    if mode != "emulated":
        fd, trace_path = tempfile.mkstemp(suffix=".npusan")
        os.close(fd)
        rec = npusan.record(trace_path, emulate="cuda")
        rec.start()
    times: list = []
    _loop(torch, warmup, loop == "racy", [])
    _loop(torch, steps, loop == "racy", times)
    if rec is not None:
        rec = npusan.recorder.session.current() or rec
        pages = getattr(rec, "pages", None)
        out["faults_per_step"] = (pages.faults / (steps + warmup)) if pages is not None else 0.0
        rec.stop()
    out["median_us"] = statistics.median(times) * 1e6
    if trace_path is not None:
        from npusan.analyzer.replay.traces import analyze_traces

        out["findings"] = len(analyze_traces([trace_path]).findings)
        os.unlink(trace_path)
    return out


def _run(mode: str, loop: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--loop", loop, "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"mode": mode, "loop": loop, "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--worker", choices=MODES)
    ap.add_argument("--loop", choices=LOOPS, default="synced")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.loop, args.steps, args.warmup)))
        return 0
    runs: dict = {(m, lp): [] for lp in LOOPS for m in MODES}
    for _ in range(max(1, args.rounds)):
        for lp in LOOPS:
            for m in MODES:
                runs[(m, lp)].append(_run(m, lp, args))
    best = {}
    for k, rs in runs.items():
        ok = [x for x in rs if "median_us" in x]
        best[k] = min(ok, key=lambda x: x["median_us"]) if ok else rs[0]
        if ok:
            best[k]["rounds_us"] = [round(x["median_us"]) for x in ok]
    for lp in LOOPS:
        for m in MODES:
            x = best[(m, lp)]
            if "error" in x:
                print(f"{lp:10s} {m:9s} error: {x['error']}")
                continue
            extra = ""
            if "findings" in x:
                extra = f"  faults/step {x['faults_per_step']:.2f}  findings {x['findings']}"
            rounds = " ".join(str(v) for v in x["rounds_us"])
            print(f"{lp:10s} {m:9s} step {x['median_us']:8.0f} us (rounds: {rounds}){extra}")
        e, r, f = (best[(m, lp)] for m in MODES)
        if all("median_us" in x for x in (e, r, f)):
            print(f"{lp:10s} recorded / emulated {r['median_us'] / e['median_us']:.2f}x   "
                  f"faults / recorded {f['median_us'] / r['median_us']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
