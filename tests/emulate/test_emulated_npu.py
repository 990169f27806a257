"""torch_npu programs run unchanged under ``npusan record --emulate npu`` (an emulated
``torch_npu``, recorded by the NPU backend), with the verdicts they get on CUDA."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "npu")


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
    env.pop("NPUSAN_TRACE", None)
    env.update(extra)
    return env


def _record(tmp_path, *args):
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "npu", "-o", str(out), "--", *args],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return p, out


def _analyze(trace):
    p = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(trace)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return p.returncode, json.loads(p.stdout)


def _kinds(trace):
    rc, report = _analyze(trace)
    return rc, sorted({f["kind"] for f in report["findings"]})


@pytest.mark.parametrize("variant,rc,kinds", [
    ("clean", 0, []),
    # no record_stream, but each step's .item() synchronizes before the side stream
    # allocates again: the allocator cannot hand the block to racing work
    ("no-record", 0, []),
    ("no-wait", 1, ["data-race"]),
])
def test_prefetcher(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, os.path.join(PROGS, "prefetch.py"), variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_missing_record_stream_block_reused_is_a_reuse_race_every_run(tmp_path):
    p, trace = _record(tmp_path, os.path.join(PROGS, "prefetch.py"), "reuse")
    assert p.returncode == 0, p.stderr
    rc, kinds = _kinds(trace)
    assert rc == 1 and "reuse-race" in kinds and "missing-record-stream" in kinds


@pytest.mark.parametrize("variant,rc,kinds", [
    ("plain", 0, []),
    ("prefetch", 0, []),
    ("prefetch-no-record", 0, []),  # safe: loss.item() synchronizes every step (see "no-record")
    ("side-forward", 0, []),
])
def test_adamw_training_loop(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, os.path.join(PROGS, "train.py"), variant)
    assert p.returncode == 0, p.stderr
    assert "losses" in p.stdout
    assert _kinds(trace) == (rc, kinds)


HOOKS_PROG = r'''
import torch
import torch_npu
from torch_npu.utils import _npu_trace
assert torch_npu._npusan_emulated and torch.npu is torch_npu.npu
seen = []
for name in ("stream_creation", "event_record", "memory_allocation", "record_stream"):
    getattr(_npu_trace, "register_callback_for_npu_" + name)(lambda *a, n=name: seen.append((n,) + a), "prog")
# The recorder activated the trace (stream mode) at start-up: the hooks fire.
default = torch_npu._C._npu_getCurrentRawStreamNoWait(0)
assert default != 0 and default == torch.npu.default_stream().npu_stream
assert torch_npu._C._npu_getDefaultStream(0) == (torch.npu.default_stream().stream_id, 0, 20)
s = torch_npu.npu.Stream()
x = torch.ones(4, device="npu")
x.record_stream(s)
e = torch_npu.npu.Event(); e.record(s)
kinds = [k[0] for k in seen]
assert kinds == ["stream_creation", "memory_allocation", "record_stream", "event_record"], seen
assert seen[2][1:] == (seen[1][1], s.npu_stream), seen
# torch_npu's allocator adds 32 bytes before rounding to 512: 480 floats take 2048 B
before = torch.npu.memory_allocated()
y = torch.empty(480, device="npu")
assert torch.npu.memory_allocated() - before == 2048
print("ok")
'''


def test_torch_npu_hook_registry_and_allocator(tmp_path):
    """The emulated torch_npu has the real registry shape and fires from the allocator
    (record_stream with the block's pointer); the default stream's handle is not 0."""
    prog = tmp_path / "hooks.py"
    prog.write_text(HOOKS_PROG)
    p, trace = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    rc, report = _analyze(trace)
    assert rc == 0
    header = report["traces"][0]["header"]
    assert header["backend"] == "npu" and header["default_streams"] == {"0": 0x1000}


@pytest.mark.parametrize("code,line", [
    ("import torch, torch_npu\ng = torch.npu.NPUGraph()\ng.update(None)\n",
     "npusan --emulate npu: torch.npu.NPUGraph.update is not emulated"),
    ("import torch, torch_npu, torch.distributed as dist\n"
     "dist.init_process_group('hccl', init_method='tcp://127.0.0.1:{port}', rank=0, world_size=1)\n",
     "npusan --emulate npu: the hccl process-group backend is not emulated"),
])
def test_unsupported_api_stops_with_one_line(tmp_path, code, line):
    from tests.recorder.conftest import free_port

    prog = tmp_path / "prog.py"
    prog.write_text(code.format(port=free_port()))
    p, _ = _record(tmp_path, str(prog))
    assert p.returncode == 1
    assert line in p.stderr


def test_environment_and_api_switches(tmp_path):
    """``NPUSAN_EMULATE=npu`` (with NPUSAN_TRACE) and ``npusan.record(emulate="npu")``."""
    out = tmp_path / "env.npusan"
    p = subprocess.run([sys.executable, os.path.join(PROGS, "prefetch.py"), "no-wait"], capture_output=True,
                       text=True, timeout=300, env=_env(NPUSAN_TRACE=str(out), NPUSAN_EMULATE="npu"))
    assert p.returncode == 0, p.stderr
    assert _kinds(out) == (1, ["data-race"])
    api = tmp_path / "api.npusan"
    prog = tmp_path / "api.py"
    prog.write_text(
        "import npusan\n"
        f"with npusan.record({str(api)!r}, emulate='npu'):\n"
        "    import torch, torch_npu\n"
        "    s = torch.npu.Stream()\n"
        "    x = torch.ones(8, device='npu')\n"
        "    with torch.npu.stream(s):\n"
        "        y = x * 2\n")
    p = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 0, p.stderr
    assert _kinds(api) == (1, ["data-race"])


def test_checkpoints_threads_dataloader_autocast(tmp_path):
    p, trace = _record(tmp_path, os.path.join(PROGS, "misc.py"))
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert _kinds(trace) == (0, [])
