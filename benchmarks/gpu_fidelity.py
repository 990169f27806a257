#!/usr/bin/env python3
"""Fidelity check: do the emulated CUDA device and a real GPU give the same findings?

npusan's emulated CUDA device (``npusan record --emulate cuda``) is how the CUDA programs
of the test suite run without a GPU, and each test pins the findings the emulated run
must give. This script runs the same unmodified programs, with the same arguments, twice:
recorded on the real CUDA device (no ``--emulate``) and on the emulated one; it analyzes
both traces and puts side by side the finding kinds the tests expect, the emulated ones
and the real ones. A row agrees when both runs meet what the test asserts and the two sets
of kinds are equal: a row that does not is either a place where the emulator does not
behave as CUDA does, or a place where the recorder sees a real device differently.

Run from a checkout, no install needed::

    PYTHONPATH=src python3 benchmarks/gpu_fidelity.py [--out DIR] [--jobs N] [--only SUBSTR]

Without a CUDA device only the emulated column runs (the real one says it was skipped).
The emulated runs hide the GPU (``CUDA_VISIBLE_DEVICES=``): the emulator refuses to
install where a CUDA device is visible. Writes ``gpu_fidelity.txt`` and
``gpu_fidelity.json`` to ``--out`` (or ``$OUT``) when given. Exits 1 when a row does not
agree (or, with the real column skipped, when an emulated run misses its expected value).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
PROGS = ROOT / "tests" / "emulate" / "progs"
HOST_WATCH = ROOT / "tests" / "recorder" / "host_watch_prog.py"
TIMEOUT = 120  # seconds, per subprocess
TAIL = 15  # stderr lines shown for a failed run


@dataclass(frozen=True)
class Row:
    """One invocation and what the test that runs it emulated asserts.

    ``kinds``: the finding kinds expected; ``None`` when the test asserts none (then only
    the two columns are compared). ``exact=False``: the test asserts these kinds are among
    the findings, not that they are all. ``rc``: the expected ``npusan analyze`` exit code
    (0 clean, 1 findings). ``stdout``: text the program must print.
    """

    name: str
    prog: str  # a path under ROOT, or the name of an INLINE program
    args: tuple = ()
    rc: Optional[int] = 0
    kinds: Optional[tuple] = ()
    exact: bool = True
    stdout: tuple = ()
    env: dict = field(default_factory=dict)  # both runs
    emu_env: dict = field(default_factory=dict)  # the emulated run only
    cite: str = ""


# Programs the tests write inline, copied verbatim from the test cited beside each.
INLINE = {
    # tests/emulate/test_emulated_programs.py::test_apis_a_new_user_tripped_on
    "apis": (
        "import torch\n"
        "s = torch.cuda.Stream()\n"
        "with torch.cuda.stream(stream=s):\n"
        "    x = torch.ones(4, device='cuda')\n"
        "torch.cuda.current_stream().wait_stream(s)\n"
        "h = torch.tensor([1, 2, 3], dtype=torch.int64, pin_memory=True, device='cpu')\n"
        "assert h.is_pinned() and h.device.type == 'cpu'\n"
        "d = h.to('cuda', non_blocking=True)\n"
        "torch.cuda.synchronize()\n"
        "print('ok', x.sum().item(), d.tolist())\n"),
    # tests/emulate/test_emulated_programs.py::test_device_is_visible_and_values_match_cpu
    # (torch.equal of a CUDA matmul with the CPU one: a real GPU may round differently)
    "dev": (
        "import torch\n"
        "assert torch.cuda.is_available() and torch.cuda.device_count() == 1\n"
        "torch.manual_seed(0); a = torch.randn(8, 8); b = torch.randn(8, 8)\n"
        "x, y = a.cuda(), b.to('cuda')\n"
        "assert str((x @ y).device) == 'cuda:0'\n"
        "assert torch.equal((x @ y).cpu(), a @ b)\n"
        "h = torch.ones(3).pin_memory(); assert h.is_pinned() and h.device.type == 'cpu'\n"
        "assert torch.cuda.memory_allocated() > 0\n"
        "print(torch.cuda.get_device_properties(0).name)\n"),
    # tests/emulate/test_emulated_programs.py::test_literals_checkpoints_and_torch_utilities
    "ckpt": (
        "import copy, io, torch\n"
        "t = torch.tensor([1.0, 2.0], device='cuda', requires_grad=True)\n"
        "assert t.is_cuda and t.requires_grad and torch.as_tensor(t, device='cuda') is t\n"
        "h = torch.ones(2); assert h.to(t).is_cuda and not h.to(t).is_cpu and t.to(h).is_cpu\n"
        "d = t.detach(); assert d.to(t) is d and d.to('cuda') is d and d.cuda() is d\n"
        "m = torch.nn.Linear(3, 3).cuda()\n"
        "b = io.BytesIO(); torch.save(m.state_dict(), b); b.seek(0)\n"
        "sd = torch.load(b); assert sd['weight'].is_cuda\n"
        "b.seek(0); assert torch.load(b, map_location='cpu')['weight'].device.type == 'cpu'\n"
        "m2 = copy.deepcopy(m); m2.load_state_dict(sd); assert m2.weight.is_cuda\n"
        "assert torch.equal(m2.weight.cpu(), m.weight.cpu())\n"
        "g, = torch.autograd.grad((t * t).sum(), t); assert g.is_cuda and g.tolist() == [2.0, 4.0]\n"
        "(m(torch.ones(2, 3, device='cuda')).sum()).backward()\n"
        "assert torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0).is_cuda\n"
        "print('ok')\n"),
    # tests/emulate/test_emulated_graphs.py::test_a_host_sync_inside_a_capture_raises_as_cuda_does
    "capture_sync": (
        "import torch\nx = torch.ones(4, device='cuda')\ng = torch.cuda.CUDAGraph()\n"
        "try:\n    with torch.cuda.graph(g):\n        x.sum().item()\nexcept RuntimeError as e:\n"
        "    assert 'not permitted when stream is capturing' in str(e), e\n    print('raised')\n"),
    # tests/recorder/test_triton.py::_EMULATED (test_emulated_cuda_program)
    "triton": (
        "import torch, triton, triton.language as tl\n\n"
        "@triton.jit\n"
        "def copy_scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    mask = offs < n\n"
        "    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)\n\n"
        "x = torch.ones(1000, device=\"cuda\")\n"
        "y = torch.zeros(1000, device=\"cuda\")\n"
        "side = torch.cuda.Stream()\n"
        "side.wait_stream(torch.cuda.current_stream())\n"
        "x.mul_(3)\n"
        "with torch.cuda.stream(side):\n"
        "    copy_scaled[(4,)](x, y, 1000, BLOCK=256)\n"
        "torch.cuda.current_stream().wait_stream(side)\n"
        "assert y.is_cuda and y.sum().item() == 6000.0, y.sum().item()\n"),
    # tests/emulate/test_emulated_futures.py::DEVICE_FUTURE
    "device_future": (
        "import sys, torch\n"
        "side = torch.cuda.Stream()\n"
        "with torch.cuda.stream(side):\n"
        "    x = torch.ones(64, device=\"cuda\") * 3\n"
        "    fut = torch.futures.Future(devices=[torch.device(\"cuda\", 0)])\n"
        "    fut.set_result(x)\n"
        "if sys.argv[1] == \"wait\":\n"
        "    y = fut.wait() + 1\n"
        "else:\n"
        "    y = fut.value() + 1\n"
        "assert y[0].item() == 4\n"
        "cpu = torch.futures.Future()\n"
        "cpu.set_result(5)\n"
        "assert cpu.wait() == 5\n"),
}

#: The test file each inline program is copied from (tests check the copies stay verbatim).
INLINE_FROM = {"apis": "tests/emulate/test_emulated_programs.py", "dev": "tests/emulate/test_emulated_programs.py",
               "ckpt": "tests/emulate/test_emulated_programs.py", "capture_sync": "tests/emulate/test_emulated_graphs.py",
               "triton": "tests/recorder/test_triton.py", "device_future": "tests/emulate/test_emulated_futures.py"}

_P = "tests/emulate/progs/"
_RACE = ("data-race",)
_HB = "tests/emulate/test_host_buffers.py"
_HW = "tests/recorder/test_host_watch.py"
_HB_CASES = ("vllm-47644", "trtllm-15546", "vllm-ascend-12071", "vllm-36013-numpy", "vllm-36013-tolist",
             "vllm-36013-item", "d2h-to-cpu", "d2h-to-cpu-copy")  # test_host_buffers.CASES


def rows() -> list:
    """Every invocation, longest-running first (torch.compile, Triton, CSAN), so the pool
    does not end waiting on one of them."""
    tp = "tests/emulate/test_emulated_programs.py"
    tg = "tests/emulate/test_emulated_graphs.py"
    out = [
        # test_emulated_graphs.py::test_reduce_overhead_runs_eagerly_and_says_so (it checks the
        # text report for "data race"; a clean run has no findings at all)
        Row("reduce_overhead clean", _P + "reduce_overhead.py", ("clean",), 0, (), stdout=("ok",), cite=tg),
        Row("reduce_overhead race", _P + "reduce_overhead.py", ("race",), 1, _RACE, exact=False, stdout=("ok",),
            cite=tg),
        # test_triton.py::test_emulated_cuda_program: one finding, a data race; the emulated
        # device runs Triton's interpreter
        Row("triton side-stream", "triton", (), 1, _RACE, emu_env={"TRITON_INTERPRET": "1"},
            cite="tests/recorder/test_triton.py"),
        Row("amp_loader", _P + "amp_loader.py", (), 0, (), stdout=("ok",), cite=tp),
    ]
    # test_csan.py: one recording per scenario here (the test runs them all in one), with
    # CSAN's own verdict (its "CSAN NAME VERDICT" line) as the test asserts it
    tc = "tests/emulate/test_csan.py"
    for scen, rc, kinds, exact, csan in [
        ("ok_prefetch", 0, (), True, "clean"),
        ("bug_data_race", 1, _RACE, True, "data-race"),
        ("bug_rmw_race", 1, _RACE, True, "data-race"),
        ("bug_missing_record_stream", 1, ("missing-record-stream",), False, "clean"),
        ("bug_collective_no_wait", 1, _RACE, True, "clean"),
    ]:
        out.append(Row(f"csan {scen}", _P + "csan.py", (scen,), rc, kinds, exact, (f"CSAN {scen} {csan}",), cite=tc))
    # test_emulated_programs.py
    out += [
        Row(f"train {v}", _P + "train.py", (v,), 0, (), stdout=("losses",), cite=tp)
        for v in ("plain", "prefetch", "prefetch-no-record", "side-forward")
    ]
    out += [
        Row("prefetch clean", _P + "prefetch.py", ("clean",), 0, (), cite=tp),
        Row("prefetch no-record", _P + "prefetch.py", ("no-record",), 0, (), cite=tp),
        Row("prefetch no-wait", _P + "prefetch.py", ("no-wait",), 1, _RACE, cite=tp),
        Row("prefetch reuse", _P + "prefetch.py", ("reuse",), 1, ("missing-record-stream", "reuse-race"),
            exact=False, cite=tp),
        Row("threads clean", _P + "threads.py", ("clean",), 0, (), cite=tp),
        Row("threads racy", _P + "threads.py", ("racy",), 1, _RACE, cite=tp),
        Row("resize clean", _P + "resize.py", ("clean",), 0, (), cite=tp),
        Row("resize no-record", _P + "resize.py", ("no-record",), 1, ("missing-record-stream", "reuse-race"),
            cite=tp),
        Row("backward_streams", _P + "backward_streams.py", (), 0, (), stdout=("done",), cite=tp),
        Row("inline apis", "apis", (), 0, (), stdout=("ok 4.0 [1, 2, 3]",), cite=tp),
        Row("inline dev", "dev", (), 0, (), cite=tp),
        Row("inline ckpt", "ckpt", (), 0, (), stdout=("ok",), cite=tp),
    ]
    # test_emulated_graphs.py
    out += [Row(f"graphs {v}", _P + "graphs.py", (v,), rc, k, cite=tg)
            for v, rc, k in [("values", 0, ()), ("clean", 0, ()), ("race", 1, _RACE), ("unjoined", 1, _RACE)]]
    out += [Row(f"graphed_callables {v}", _P + "graphed_callables.py", (v,), rc, k, cite=tg)
            for v, rc, k in [("train", 0, ()), ("clean", 0, ()), ("race", 1, _RACE)]]
    # the test only checks that the program prints "raised" (no analysis asserted)
    out.append(Row("inline capture_sync", "capture_sync", (), None, None, stdout=("raised",), cite=tg))
    # test_emulated_futures.py::test_a_future_made_with_the_device_synchronizes_like_a_cuda_future
    tf = "tests/emulate/test_emulated_futures.py"
    out += [Row("device_future wait", "device_future", ("wait",), 0, (), cite=tf),
            Row("device_future value", "device_future", ("value",), 1, _RACE, cite=tf)]
    # test_host_buffers.py: bug races with the host (data races only), fixed and pageable clean
    for case in _HB_CASES:
        out.append(Row(f"host_buffers {case} bug", _P + "host_buffers.py", (case, "bug"), 1, _RACE, cite=_HB))
        for v in ("fixed", "pageable"):
            out.append(Row(f"host_buffers {case} {v}", _P + "host_buffers.py", (case, v), 0, (), cite=_HB))
    # test_host_watch.py: the page-fault watch of pinned memory (NPUSAN_HOST_FAULTS=1)
    hw = {"NPUSAN_HOST_FAULTS": "1"}
    for case in ("numpy-view", "raw-pointer", "memoryview-read"):
        out.append(Row(f"host_watch {case} bug", "tests/recorder/host_watch_prog.py", (case, "bug"), 1, _RACE,
                       env=hw, cite=_HW))
        for v in ("fixed", "pageable"):
            out.append(Row(f"host_watch {case} {v}", "tests/recorder/host_watch_prog.py", (case, v), 0, (),
                           env=hw, cite=_HW))
    # test_host_watch.py::test_a_forked_child_writes_the_buffer_unharmed_and_the_parent_is_still_watched
    out.append(Row("host_watch fork bug", "tests/recorder/host_watch_prog.py", ("fork", "bug"), 1, _RACE, env=hw,
                   cite=_HW))
    return out


#: What is not run, and why (printed with the table).
NOT_RUN = [
    ("tests/emulate/progs/ddp.py, futures.py (test_emulated_dist.py, test_emulated_futures.py)",
     "two NCCL ranks: NCCL refuses two ranks on one GPU, and the expected findings are per 2-rank run"),
    ("tests/emulate/progs/npu_graphs.py, test_emulated_npu.py", "torch_npu programs: no NPU here"),
    ("test_emulated_programs.py::test_unsupported_api_stops_with_one_line", "the emulator's own refusal"),
    ("tests/recorder/test_compiled.py, test_triton.py (all but _EMULATED)",
     "run on npusan's simulated device, not CUDA programs"),
    ("host_watch_prog.py segfault", "checks the process dies, not findings"),
]


# ----------------------------------------------------------------------------- running


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NPUSAN_", "TORCH_NCCL_"))}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    env.update(extra)
    return env


def _run(cmd: list, env: dict, cwd: Path) -> dict:
    """Run ``cmd`` in its own process group with the timeout; on expiry kill the whole
    group (the recorded program is a child of ``npusan record``)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
        rc: object = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = "timeout"
    return {"rc": rc, "stdout": out, "stderr": err, "wall_s": round(time.perf_counter() - t0, 2)}


def _side(row: Row, real: bool, work: Path) -> dict:
    """Record ``row`` on one side (real or emulated) and analyze the trace."""
    d = Path(tempfile.mkdtemp(prefix="real-" if real else "emu-", dir=work))
    # an inline program's file is not named after it: triton.py would shadow the package
    prog = str(ROOT / row.prog) if row.prog not in INLINE else str(d / f"inline_{row.prog}.py")
    if row.prog in INLINE:
        Path(prog).write_text(INLINE[row.prog])
    extra = dict(row.env)
    if not real:
        extra.update(row.emu_env, CUDA_VISIBLE_DEVICES="")  # the emulator refuses where CUDA is visible
    env = _env(extra)
    trace = d / "t.npusan"
    record = [sys.executable, "-m", "npusan", "record", *(() if real else ("--emulate", "cuda")), "-o", str(trace),
              "--", sys.executable, prog, *row.args]
    r = _run(record, env, d)
    res = {"record_rc": r["rc"], "record_s": r["wall_s"], "stderr_tail": "", "stdout_missing": [],
           "analyze_rc": None, "kinds": None, "findings": None}
    res["stdout_missing"] = [s for s in row.stdout if s not in r["stdout"]]
    if r["rc"] != 0 or res["stdout_missing"]:
        res["stderr_tail"] = "\n".join((r["stderr"] or "").splitlines()[-TAIL:])
    if trace.exists():
        a = _run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(trace)], env, d)
        res["analyze_rc"] = a["rc"]
        try:
            found = json.loads(a["stdout"])["findings"]
            res["kinds"], res["findings"] = sorted({f["kind"] for f in found}), len(found)
        except (ValueError, KeyError, TypeError):
            res["analyze_error"] = "\n".join((a["stderr"] or "").splitlines()[-TAIL:])
    shutil.rmtree(d, ignore_errors=True)
    return res


def meets(row: Row, res: Optional[dict]) -> bool:
    """Whether one side's result is what the test asserts of the emulated run."""
    if res is None or res["record_rc"] != 0 or res["stdout_missing"]:
        return False
    if row.kinds is None:
        return True
    if res["kinds"] is None or res["analyze_rc"] != row.rc:
        return False
    return res["kinds"] == sorted(row.kinds) if row.exact else set(row.kinds) <= set(res["kinds"])


def verdict(row: Row, emu: Optional[dict], real: Optional[dict], real_ran: bool) -> str:
    """``agree``, ``emulated only`` (real column skipped, emulated as expected), or what differs."""
    if not meets(row, emu):
        return "NO: emulated != expected"
    if not real_ran:
        return "emulated ok"
    if not meets(row, real):
        return "NO: real != expected"
    if emu["kinds"] != real["kinds"]:
        return "NO: real != emulated"
    return "agree"


# ----------------------------------------------------------------------------- report


def _expected(row: Row) -> str:
    if row.kinds is None:
        return "runs" + (f" [{row.stdout[0]}]" if row.stdout else "")
    k = ",".join(sorted(row.kinds)) or "-"
    return f"rc{row.rc} {k}{'' if row.exact else ' +any'}"


def _cell(res: Optional[dict], skipped: bool, wall: bool = False) -> str:
    text = _result(res, skipped)
    return f"{text} {res['record_s']:.0f}s" if wall and res else text


def _result(res: Optional[dict], skipped: bool) -> str:
    if skipped:
        return "(skipped)"
    if res is None:
        return "?"
    if res["record_rc"] != 0:
        return f"RECORD rc={res['record_rc']}"
    if res["stdout_missing"]:
        return "OUTPUT missing"
    if res["kinds"] is None:
        return f"ANALYZE rc={res['analyze_rc']}"
    return f"rc{res['analyze_rc']} {','.join(res['kinds']) or '-'} ({res['findings']})"


def render(results: list, meta: dict) -> str:
    hdr = ("invocation", "expected", "emulated", "real", "agree?")
    skipped = not meta["real"]
    table = [hdr] + [(r["name"], r["expected"], _cell(r["emulated"], False), _cell(r["real"], skipped, wall=True),
                     r["verdict"])
                     for r in results]
    widths = [max(len(t[i]) for t in table) for i in range(len(hdr))]
    lines = [f"npusan GPU fidelity check: {meta['device']} | torch {meta['torch']} | "
             f"{len(results)} invocations, --jobs {meta['jobs']}, {meta['wall_s']:.0f} s wall"]
    if skipped:
        lines.append(f"real column skipped: {meta['real_skipped']}")
    lines.append("expected: analyze exit code and finding kinds as the tests assert them (+any: these at least); "
                 "cells: rc, kinds, (number of findings); real: the recording's wall time")
    for i, t in enumerate(table):
        lines.append(" | ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    bad = [r for r in results if r["verdict"] not in ("agree", "emulated ok")]
    lines.append("")
    lines.append(f"{len(results) - len(bad)} of {len(results)} rows {'agree' if not skipped else 'as expected'}; "
                 f"{len(bad)} do not" + (":" if bad else "."))
    for r in bad:
        lines.append(f"  {r['name']}: {r['verdict']}   ({' '.join(r['argv'])}; expected per {r['cite']})")
        for side in ("emulated", "real"):
            res = r[side]
            if res and (res["stderr_tail"] or res.get("analyze_error")):
                tail = res["stderr_tail"] or res["analyze_error"]
                lines.append(f"    {side} stderr (last {TAIL} lines):")
                lines += [f"      {ln}" for ln in tail.splitlines()]
            if res and res["stdout_missing"]:
                lines.append(f"    {side} stdout lacks: {res['stdout_missing']}")
    if meta["real"]:
        walls = [r["real"]["record_s"] for r in results if r["real"]]
        lines.append(f"real recordings: {sum(walls):.0f} s in all, slowest {max(walls):.0f} s")
    lines.append("not run here:")
    lines += [f"  {what}: {why}" for what, why in NOT_RUN + meta["not_run_extra"]]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def _probe() -> tuple:
    """(torch version, CUDA device name or None, why the real column is skipped)."""
    code = ("import torch,json;a=torch.cuda.is_available();"
            "print(json.dumps([torch.__version__,torch.cuda.get_device_name(0) if a else None]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    if p.returncode != 0:
        return None, None, "torch does not import: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    version, device = json.loads(p.stdout)
    return version, device, None if device else "no CUDA device"


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_fidelity.{txt,json} (default $OUT)")
    ap.add_argument("--jobs", type=int, default=8, help="recordings at once (default 8)")
    ap.add_argument("--only", action="append", default=[], help="run only rows whose name contains this")
    ap.add_argument("--no-real", action="store_true", help="skip the real column even where there is a GPU")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    version, device, why = _probe()
    if version is None:
        print(f"gpu_fidelity: {why}", file=sys.stderr)
        return 2
    if args.no_real and device:
        why = "--no-real"
    real = why is None
    table = [r for r in rows() if not args.only or any(s in r.name for s in args.only)]
    if not table:
        ap.error(f"no row matches {args.only}")
    not_run_extra = []
    try:
        import importlib.util

        sys.path.insert(0, str(ROOT / "src"))
        hostfault = importlib.util.find_spec("npusan.recorder._hostfault") is not None
    finally:
        sys.path.pop(0)
    if not hostfault:
        table = [r for r in table if not r.name.startswith("host_watch")]
        not_run_extra.append(("host_watch rows", "npusan.recorder._hostfault is not built (setup.py build_ext)"))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="npusan-fidelity-") as work, ThreadPoolExecutor(args.jobs) as pool:
        futs = [(pool.submit(_side, r, False, Path(work)), pool.submit(_side, r, True, Path(work)) if real else None)
                for r in table]
        results = []
        for r, (fe, fr) in zip(table, futs):
            emu, rl = fe.result(), fr.result() if fr else None
            results.append({"name": r.name, "argv": [r.prog, *r.args], "cite": r.cite, "expected": _expected(r),
                            "expected_rc": r.rc, "expected_kinds": None if r.kinds is None else sorted(r.kinds),
                            "expected_exact": r.exact, "emulated": emu, "real": rl,
                            "verdict": verdict(r, emu, rl, real)})
    meta = {"device": device or "no CUDA device", "torch": version, "python": sys.version.split()[0],
            "jobs": args.jobs, "wall_s": round(time.perf_counter() - t0, 1), "real": real, "real_skipped": why,
            "not_run_extra": not_run_extra}
    text = render(results, meta)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_fidelity.txt").write_text(text)
        doc = {"meta": meta, "rows": results, "not_run": [{"what": w, "why": y} for w, y in NOT_RUN + not_run_extra]}
        (out / "gpu_fidelity.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["verdict"] in ("agree", "emulated ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
