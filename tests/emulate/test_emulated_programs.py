"""Real programs run unchanged under ``npusan record --emulate cuda``, then analyzed."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "prefetch.py")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
    env.pop("NPUSAN_TRACE", None)
    return env


def _record(tmp_path, *args):
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(out), "--", *args],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return p, out


def _kinds(trace):
    p = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(trace)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return p.returncode, sorted({f["kind"] for f in json.loads(p.stdout)["findings"]})


@pytest.mark.parametrize("variant,rc,kinds", [
    ("clean", 0, []),
    # no record_stream, but each step's .item() synchronizes before the side stream
    # allocates again: the allocator cannot hand the block to racing work
    ("no-record", 0, []),
    ("no-wait", 1, ["data-race"]),
])
def test_prefetcher(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, PROG, variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_missing_record_stream_block_reused_is_a_reuse_race_every_run(tmp_path):
    p, trace = _record(tmp_path, PROG, "reuse")
    assert p.returncode == 0, p.stderr
    rc, kinds = _kinds(trace)
    assert rc == 1 and "reuse-race" in kinds and "missing-record-stream" in kinds


def test_unsupported_api_stops_with_one_line(tmp_path):
    prog = tmp_path / "ipc.py"  # (CUDA graphs are emulated: tests/emulate/test_emulated_graphs.py)
    prog.write_text("import torch\ntorch.cuda.ipc_collect()\n")
    p, _ = _record(tmp_path, str(prog))
    assert p.returncode == 1
    assert "npusan --emulate cuda: torch.cuda.ipc_collect (CUDA IPC) is not emulated" in p.stderr
    assert "Traceback" not in p.stderr, p.stderr  # one line, not a traceback (a new-user trial got five)


def test_apis_a_new_user_tripped_on(tmp_path):
    """From a new-user trial (timm's PrefetchLoader, vLLM's async_tensor_h2d): the stream
    context by keyword and ``torch.tensor(..., pin_memory=True)`` on the host."""
    prog = tmp_path / "apis.py"
    prog.write_text(
        "import torch\n"
        "s = torch.cuda.Stream()\n"
        "with torch.cuda.stream(stream=s):\n"
        "    x = torch.ones(4, device='cuda')\n"
        "torch.cuda.current_stream().wait_stream(s)\n"
        "h = torch.tensor([1, 2, 3], dtype=torch.int64, pin_memory=True, device='cpu')\n"
        "assert h.is_pinned() and h.device.type == 'cpu'\n"
        "d = h.to('cuda', non_blocking=True)\n"
        "torch.cuda.synchronize()\n"
        "print('ok', x.sum().item(), d.tolist())\n")
    p, trace = _record(tmp_path, str(prog))
    assert p.returncode == 0 and "ok 4.0 [1, 2, 3]" in p.stdout, p.stderr
    rc, kinds = _kinds(trace)
    assert rc == 0, kinds


def test_device_is_visible_and_values_match_cpu(tmp_path):
    prog = tmp_path / "dev.py"
    prog.write_text(
        "import torch\n"
        "assert torch.cuda.is_available() and torch.cuda.device_count() == 1\n"
        "torch.manual_seed(0); a = torch.randn(8, 8); b = torch.randn(8, 8)\n"
        "x, y = a.cuda(), b.to('cuda')\n"
        "assert str((x @ y).device) == 'cuda:0'\n"
        "assert torch.equal((x @ y).cpu(), a @ b)\n"
        "h = torch.ones(3).pin_memory(); assert h.is_pinned() and h.device.type == 'cpu'\n"
        "assert torch.cuda.memory_allocated() > 0\n"
        "print(torch.cuda.get_device_properties(0).name)\n")
    p, trace = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (0, [])


TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "train.py")


@pytest.mark.parametrize("variant,rc,kinds", [
    ("plain", 0, []),
    ("prefetch", 0, []),
    ("prefetch-no-record", 0, []),  # safe: loss.item() synchronizes every step (see "no-record")
    ("side-forward", 0, []),
])
def test_adamw_training_loop(tmp_path, variant, rc, kinds):
    """loss.backward(), optimizer.step(), zero_grad on emulated tensors: the loss falls,
    AdamW's step counters stay host tensors (step() never synchronizes), a side-stream
    node's backward runs on that stream (the program asserts all three)."""
    p, trace = _record(tmp_path, TRAIN, variant)
    assert p.returncode == 0, p.stderr
    assert "losses" in p.stdout
    assert _kinds(trace) == (rc, kinds)


PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")


@pytest.mark.parametrize("variant,rc,kinds", [("clean", 0, []), ("racy", 1, ["data-race"])])
def test_device_tensors_made_in_worker_threads(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, os.path.join(PROGS, "threads.py"), variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_a_thread_ends_with_no_dispatch_mode_left_on_its_stack(tmp_path):
    """The emulator's (and the recorder's) modes leave a worker thread's stack before the
    thread ends; one left there is released by a C++ destructor after Python let go of the
    thread, and a process exiting at that moment aborted ("terminate called without an
    active exception", exit 134, about one run in twenty)."""
    prog = tmp_path / "thr.py"
    prog.write_text(
        "import threading, torch\n"
        "inner = threading.Thread._bootstrap\n"
        "left = []\n"
        "def outer(self):\n"
        "    inner(self)\n"
        "    left.append(torch._C._len_torch_dispatch_stack())\n"
        "threading.Thread._bootstrap = outer\n"
        "t = threading.Thread(target=lambda: torch.ones(2, device='cuda').sum())\n"
        "t.start()\n"
        "t.join()\n"
        "print('left', left)\n")
    p, _ = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert "left [0]" in p.stdout, p.stdout


@pytest.mark.parametrize("variant,rc,kinds", [
    ("clean", 0, []),
    ("no-record", 1, ["missing-record-stream", "reuse-race"]),
])
def test_storage_resize_frees_and_reallocates(tmp_path, variant, rc, kinds):
    """FSDP frees a parameter with ``untyped_storage().resize_(0)`` and brings it back with
    ``resize_(n)``: the block is freed and a new one allocated (the program checks the
    allocator's counters); without record_stream the new block reuses the old at once."""
    p, trace = _record(tmp_path, os.path.join(PROGS, "resize.py"), variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_literals_checkpoints_and_torch_utilities(tmp_path):
    """torch.tensor(device="cuda"), a checkpoint saved from and loaded to cuda, deepcopy,
    autograd.grad and clip_grad_norm_ on emulated tensors."""
    prog = tmp_path / "ckpt.py"
    prog.write_text(
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
        "print('ok')\n")
    p, trace = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert _kinds(trace) == (0, [])


def test_backward_nodes_run_on_their_forward_stream(tmp_path):
    """A node made on a side stream runs its backward there, one made on the default stream
    runs on the default stream though backward is called on the side stream (the program
    asserts it); the engine's syncs keep it clean."""
    p, trace = _record(tmp_path, os.path.join(PROGS, "backward_streams.py"))
    assert p.returncode == 0, p.stderr
    assert "done" in p.stdout
    assert _kinds(trace) == (0, [])


def test_dataloader_pin_memory_and_grad_scaler(tmp_path):
    p, trace = _record(tmp_path, os.path.join(PROGS, "amp_loader.py"))
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert _kinds(trace) == (0, [])
