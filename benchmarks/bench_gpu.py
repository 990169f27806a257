#!/usr/bin/env python3
"""GPU benchmark: a transformer training step, plain vs recorded by npusan vs CSAN.

The shape of the reference measurement (one H200, torch 2.11: the no-op interception floor
1.88x, CSAN 10.8x per step): a 4-layer transformer encoder,
d_model=512, 8 heads, batch 32 x 128 tokens, AdamW, the next batch prefetched on a side
stream (pinned host memory, ``non_blocking`` copy, ``wait_stream`` + ``record_stream``).

Modes, each in its own subprocess (CSAN cannot be switched off once enabled, and GPU
tracing cannot either):

- ``plain``: nothing installed (run first and again last, to show drift);
- ``floor``: a no-op ``TorchDispatchMode`` plus the ten ``torch.cuda._gpu_trace`` hooks
  with no-op callbacks -- the cost of intercepting at all;
- ``npusan``: ``npusan.record(trace)`` (stacks at the default depth);
- ``npusan-nostack``: the same with ``stack_depth=0`` (only with ``--modes``);
- ``csan``: ``torch.cuda._sanitizer.enable_cuda_sanitizer()``.

Prints per-step times (median and mean of individually synchronized steps) and the ratio
to plain; with ``$OUT`` set (or ``--out DIR``) also writes ``bench_gpu.json`` and
``bench_gpu.txt`` there. After timing, the npusan trace is analyzed and its findings are
counted: the loop is correct, so any finding is a false positive worth reporting.

Run from a checkout, no install needed (torch, msgpack, click, rich)::

    PYTHONPATH=src python3 benchmarks/bench_gpu.py [--steps 30] [--warmup 5]

Without CUDA it says so and exits 0.
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

DEFAULT_MODES = ("plain", "floor", "npusan", "csan", "plain")
ALL_MODES = ("plain", "floor", "npusan", "npusan-nostack", "csan")

D_MODEL, N_HEADS, N_LAYERS, D_FF = 512, 8, 4, 2048
BATCH, SEQ, VOCAB = 32, 128, 8192


# ----------------------------------------------------------------------------- worker


def _build(torch):
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
    model = Model().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n_host = 4
    batches = [
        (
            torch.randint(0, VOCAB, (BATCH, SEQ)).pin_memory(),
            torch.randint(0, VOCAB, (BATCH, SEQ)).pin_memory(),
        )
        for _ in range(n_host)
    ]
    return model, opt, batches


def _loop(torch, model, opt, batches, steps: int, times: list) -> None:
    """``steps`` training steps with a prefetch stream; appends each step's seconds."""
    F = torch.nn.functional
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()

    def prefetch(i):
        with torch.cuda.stream(side):
            x, y = batches[i % len(batches)]
            return x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)

    nxt = prefetch(0)
    for i in range(steps):
        t0 = time.perf_counter()
        main.wait_stream(side)
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        nxt = prefetch(i + 1)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    del nxt, x, y, logits, loss
    torch.cuda.synchronize()


def _install_floor(torch) -> None:
    """No-op dispatch mode + no-op GPU trace callbacks: interception alone."""
    import torch.cuda._gpu_trace as gpu_trace
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoOpMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torch._C._activate_gpu_trace()
    for name in dir(gpu_trace):
        if name.startswith("register_callback_for_"):
            getattr(gpu_trace, name)(lambda *a: None)
    NoOpMode().__enter__()  # autograd's device threads inherit the mode stack


def worker(mode: str, steps: int, warmup: int) -> dict:
    import torch

    model, opt, batches = _build(torch)
    _loop(torch, model, opt, batches, 3, [])  # cuBLAS/cuDNN handles, allocator pools
    torch.cuda.synchronize()
    out: dict = {"mode": mode}
    rec = None
    trace_path = None
    if mode == "floor":
        _install_floor(torch)
    elif mode == "csan":
        import torch.cuda._sanitizer as csan

        csan.enable_cuda_sanitizer()
    elif mode.startswith("npusan"):
        import npusan

        fd, trace_path = tempfile.mkstemp(suffix=".npusan")
        os.close(fd)
        kw = {"stack_depth": 0} if mode == "npusan-nostack" else {}
        rec = npusan.record(trace_path, backend="cuda", **kw)
        rec.start()
    elif mode != "plain":
        raise SystemExit(f"unknown mode {mode!r}")

    times: list = []
    try:
        _loop(torch, model, opt, batches, warmup, [])
        _loop(torch, model, opt, batches, steps, times)
    except Exception as e:  # CSAN raises on what it believes is a race
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if rec is not None:
        rec.stop()
    if times:
        out["step_ms"] = [round(t * 1e3, 3) for t in times]
        out["median_ms"] = statistics.median(times) * 1e3
        out["mean_ms"] = statistics.fmean(times) * 1e3
    if trace_path is not None:
        try:
            out["trace_bytes"] = os.path.getsize(trace_path)
            out["trace_bytes_per_step"] = out["trace_bytes"] / max(1, steps + warmup)
            from npusan.analyzer.replay.traces import analyze_traces

            t0 = time.perf_counter()
            result = analyze_traces([trace_path])
            out["analyze_s"] = time.perf_counter() - t0
            out["findings"] = len(result.findings)
            out["finding_kinds"] = sorted({f.kind.value for f in result.findings})
            if result.findings and os.environ.get("OUT"):  # the loop is correct: keep the report to study
                with open(os.path.join(os.environ["OUT"], f"bench_gpu_findings_{mode}.txt"), "w") as f:
                    subprocess.run([sys.executable, "-m", "npusan", "analyze", trace_path], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=300)
        except Exception as e:
            out["analyze_error"] = f"{type(e).__name__}: {e}"
        finally:
            os.unlink(trace_path)
    return out


# ----------------------------------------------------------------------- orchestrator


def _run_mode(mode: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {args.timeout}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"mode": mode, "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def _report(results: list, meta: dict) -> str:
    plains = [r["median_ms"] for r in results if r["mode"] == "plain" and "median_ms" in r]
    base = statistics.fmean(plains) if plains else None
    lines = [
        f"npusan GPU benchmark: {meta['device']}, torch {meta['torch']}, "
        f"{N_LAYERS}-layer transformer d={D_MODEL}, batch {BATCH}x{SEQ}, AdamW, prefetch stream",
        f"{meta['steps']} timed steps after {meta['warmup']} warm-up steps, each step synchronized",
        "",
        f"{'mode':<16}{'median ms':>11}{'mean ms':>10}{'x plain':>9}  notes",
    ]
    for r in results:
        if "median_ms" not in r:
            lines.append(f"{r['mode']:<16}{'-':>11}{'-':>10}{'-':>9}  {r.get('error', 'no data')}")
            continue
        ratio = r["median_ms"] / base if base else float("nan")
        r["ratio_vs_plain"] = ratio
        notes = []
        if "trace_bytes_per_step" in r:
            notes.append(f"trace {r['trace_bytes_per_step'] / 1024:.0f} KiB/step")
        if "findings" in r:
            notes.append(f"{r['findings']} findings {r['finding_kinds'] or ''}".strip())
            notes.append(f"analyzed in {r['analyze_s']:.2f}s")
        if "error" in r:
            notes.append(r["error"])
        lines.append(f"{r['mode']:<16}{r['median_ms']:>11.2f}{r['mean_ms']:>10.2f}{ratio:>8.2f}x  {'; '.join(notes)}")
    lines += ["", "Targets (issue 3): npusan <= 2.2x plain; anchor floor 1.88x, CSAN 10.8x (H200, torch 2.11)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES),
                    help=f"comma-separated, from {', '.join(ALL_MODES)} (default: %(default)s)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mode")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="directory for bench_gpu.json/.txt (default: $OUT)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.warmup)))
        return 0

    try:
        import torch
    except ImportError:
        print("bench_gpu: torch is not installed; nothing to benchmark.")
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device available; nothing to benchmark (run this on a GPU machine).")
        return 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        print(f"bench_gpu: unknown mode(s) {', '.join(bad)}; choose from {', '.join(ALL_MODES)}", file=sys.stderr)
        return 2
    meta = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "steps": args.steps,
        "warmup": args.warmup,
        "shape": {"layers": N_LAYERS, "d_model": D_MODEL, "heads": N_HEADS, "batch": BATCH, "seq": SEQ,
                  "vocab": VOCAB},
    }
    results = []
    for m in modes:
        print(f"bench_gpu: running {m} ...", file=sys.stderr, flush=True)
        results.append(_run_mode(m, args))
    text = _report(results, meta)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_gpu.json"), "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
        with open(os.path.join(args.out, "bench_gpu.txt"), "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
