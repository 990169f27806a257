"""NCCL programs on 2 ranks under ``npusan record --emulate cuda --emulate-devices 2 --
torchrun --nproc_per_node=2``: gloo carries the emulated tensors, the emulator fires what
ProcessGroupNCCL does on the device, and the CUDA backend records it unchanged.

Two launches (torchrun start-up dominates): the installed torch's process-group model, and
torch < 2.8's (``NPUSAN_C10D_MODEL=2.7``: every collective on the comm stream, tensors
``record_stream``-ed), each running every scenario of ``progs/ddp.py``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch without gloo", allow_module_level=True)

from npusan.analyzer.replay.traces import analyze_traces  # noqa: E402
from npusan.analyzer.report.sources import user_site  # noqa: E402
from npusan.trace_format import records as R  # noqa: E402

from ..recorder.conftest import free_port, records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROG = Path(__file__).with_name("progs") / "ddp.py"
SOURCE = PROG.read_text()
SCENARIOS = [n.name for n in ast.parse(SOURCE).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith(("ok_", "bug_", "known_"))]


def _line(marker: str) -> int:
    return next(i for i, t in enumerate(SOURCE.splitlines(), 1) if t.rstrip().endswith(marker))


def _launch(tmp: Path, **env: str) -> list:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NPUSAN_", "TORCH_NCCL_"))}
    full.update(env, OMP_NUM_THREADS="1", PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    exe = Path(sys.executable).with_name("torchrun")
    run = [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]
    cmd = [sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "--emulate-devices", "2",
           "-o", str(tmp / "d.npusan"), "--", *run, "--nproc_per_node=2", f"--master_port={free_port()}",
           str(PROG), *SCENARIOS]
    p = subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=str(tmp), timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    traces = sorted(tmp.glob("d.rank*.npusan"))
    assert len(traces) == 2, p.stderr[-2000:]
    return traces


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    traces = _launch(tmp_path_factory.mktemp("emu_nccl"))
    return traces, analyze_traces([str(t) for t in traces])


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    traces = _launch(tmp_path_factory.mktemp("emu_nccl27"), NPUSAN_C10D_MODEL="2.7")
    return traces, analyze_traces([str(t) for t in traces])


def _scenario(stack) -> str:
    for fr in reversed(stack):
        if os.path.basename(fr.filename) == PROG.name and fr.function in SCENARIOS:
            return fr.function
    return "?"


def _kernels(path):
    """(op, stream handle, comm stream handles) of every kernel of a trace; the records;
    the symbols."""
    recs, reader = records(path)
    sy = reader.symbols
    comm = {sy.streams[s][1] for s, (role, _) in sy.stream_labels.items() if role == R.ROLE_COMM}
    return [(sy.strings[r[2]], sy.streams[r[1]][1], comm) for r in recs if r[0] == R.KERNEL], recs, sy


#: AdamW's per-parameter ops on the DTensors' local tensors (recorded since the modes answer
#: NotImplemented to DTensor: they run inside DTensor's own dispatch).
OPTIMIZER_OPS = {"aten::lerp_.Scalar", "aten::addcmul_", "aten::sqrt", "aten::addcdiv_"}


@pytest.mark.parametrize("model", ["current", "legacy"])
def test_ddp_clean_async_result_used_before_wait_races_fsdp2_grads_free_reported(model, request):
    _, result = request.getfixturevalue(model)
    found: dict = {}
    for f in result.findings:
        found.setdefault(_scenario(f.access.stack), []).append(f)
    assert set(found) == {"bug_async_no_wait", "known_fsdp2"}, {
        n: [(f.kind.value, f.previous.op, user_site(f.access.stack)) for f in fs] for n, fs in found.items()}
    fs = found["bug_async_no_wait"]
    assert sorted(f.trace for f in fs) == [0, 1]  # one per rank
    for f in fs:
        assert f.kind.value == "data-race" and f.previous.op == "all_reduce"
        assert f.previous.stream.label == "comm stream of process group 0"
        assert user_site(f.access.stack).lineno == _line("LATER:async_no_wait")
        assert user_site(f.previous.stack).lineno == _line("EARLIER:async_no_wait")
    # FSDP2's sharded gradients: reduce-scatter outputs allocated on the reduce-scatter
    # stream in backward, read by the optimizer on the default stream, freed by zero_grad
    # without record_stream. The reduce-scatter stream waits for the default stream before
    # its next allocation, so the frees of the first two steps are judged clean there; the
    # last step's free sees no later allocation and is judged at the end of the trace,
    # where nothing has ordered it: see docs/emulation.md. No reuse race follows.
    fs = found["known_fsdp2"]
    assert {f.kind.value for f in fs} == {"missing-record-stream"}
    assert {t for f in fs for t in f.traces} == {0, 1}
    for f in fs:
        assert len({occ[0] for occ in f.occurrences}) == 1  # one free: the last step's
        assert user_site(f.access.stack).lineno == _line("FREE:fsdp2_grads")
        assert user_site(f.previous.stack).lineno == _line("USE:fsdp2_grads")
        assert f.previous.op in OPTIMIZER_OPS and f.previous.type == "read" and f.previous.stream.is_default
        assert user_site(f.block.stack).lineno == _line("ALLOC:fsdp2_grads")
        assert not f.block.stream.is_default and f.block.stream.label is None  # FSDP2's own stream


def test_fsdp2_optimizer_reads_sharded_grads_on_the_default_stream(current):
    """The optimizer's kernels on the DTensors' local tensors are in the trace, and they read
    blocks allocated on the stream that ran the reduce-scatters (the sharded gradients)."""
    for path in current[0]:
        recs, reader = records(path)
        sy = reader.symbols
        default = {s for s, (_, handle) in sy.streams.items() if handle == 0}
        rs = {r[1] for r in recs if r[0] == R.KERNEL and sy.strings[r[2]] == "reduce_scatter_tensor"}
        assert len(rs) == 1 and not rs & default
        live_rs: set = set()  # blocks allocated on the reduce-scatter stream, not yet freed
        reads: dict = {}
        for r in recs:
            if r[0] == R.ALLOC:
                (live_rs.add if r[4] in rs else live_rs.discard)(r[1])
            elif r[0] == R.FREE:
                live_rs.discard(r[1])
            elif r[0] == R.KERNEL and r[1] in default and sy.strings[r[2]] in OPTIMIZER_OPS:
                for a in r[4:]:
                    b = a[0] if isinstance(a, list) else a
                    if 0 <= b and b in live_rs:
                        reads[sy.strings[r[2]]] = reads.get(sy.strings[r[2]], 0) + 1
        # each step reads every parameter's sharded gradient (6 parameters, 3 steps)
        assert reads.get("aten::addcmul_", 0) >= 18 and reads.get("aten::lerp_.Scalar", 0) >= 18, reads


def test_each_rank_records_its_own_device(current):
    traces, result = current
    for rank, t in enumerate(traces):
        _, recs, sy = _kernels(t)
        devices = {d for d, _ in sy.streams.values()}
        assert devices == {rank}, (t, devices)


def test_collectives_run_where_processgroupnccl_runs_them(current, legacy):
    kern, recs, sy = _kernels(current[0][0])
    on_comm = {op for op, s, comm in kern if s in comm}
    # DDP's bucket all-reduce (launched by the C++ reducer in backward) and the async
    # all_reduce of the scenarios run on the comm stream; torch >= 2.8 runs FSDP2's
    # async_op=False collectives on its own all-gather / reduce-scatter streams
    assert "all_reduce" in on_comm
    side = {op for op, s, comm in kern if s != 0 and s not in comm}
    assert {"all_gather_into_tensor", "reduce_scatter_tensor"} <= side
    assert not [r for r in recs if r[0] == R.RECORD_STREAM]
    kern, recs, sy = _kernels(legacy[0][0])
    on_comm = {op for op, s, comm in kern if s in comm}
    assert {"all_reduce", "all_gather_into_tensor (async_op=False)",
            "reduce_scatter_tensor (async_op=False)"} <= on_comm
    comm = {s for s, (_, h) in sy.streams.items() if h in kern[0][2]}
    assert [r for r in recs if r[0] == R.RECORD_STREAM and r[2] in comm]


def test_nccl_version_answers_on_the_emulated_device(monkeypatch):
    """torch's c10d logger asks ``torch.cuda.nccl.version()`` while it reports a failed
    collective; on a CPU build that raised AttributeError, which replaced the collective's
    own error in the surviving rank (a peer that died ended it with AttributeError, not the
    RuntimeError a real GPU gives)."""
    import torch
    import torch.cuda.nccl as nccl

    from npusan.emulate import dist as emulated_dist

    monkeypatch.setattr(nccl, "version", nccl.version)  # (restored after the test)
    if hasattr(torch._C, "_nccl_version"):
        pytest.skip("a CUDA build of torch answers by itself")
    with pytest.raises(AttributeError):
        nccl.version()
    emulated_dist._nccl_version()
    v = nccl.version()
    assert v == emulated_dist.NCCL_VERSION and all(isinstance(x, int) for x in v)
