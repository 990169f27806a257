"""torch Futures of NCCL programs on 2 ranks under ``npusan record --emulate cuda
--emulate-devices 2 -- torchrun``: a Work's future, ``then`` callbacks on pool streams, futures
made with ``devices=["cuda"]`` and DDP communication hooks synchronize as a CUDA Future does
(progs/futures.py), so correct hooks are clean and the broken ones race where they break."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch without gloo", allow_module_level=True)

from npusan.analyzer.replay.traces import analyze_traces  # noqa: E402
from npusan.analyzer.report.sources import user_site  # noqa: E402
from npusan.recorder.futures import POOL_LABEL  # noqa: E402
from npusan.trace_format import records as R  # noqa: E402

from ..recorder.conftest import records  # noqa: E402
from . import test_emulated_dist as emu  # noqa: E402

PROG = Path(__file__).with_name("progs") / "futures.py"
SOURCE = PROG.read_text()
SCENARIOS = [n.name for n in ast.parse(SOURCE).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith(("ok_", "bug_", "known_"))]


def _line(marker: str) -> int:
    return next(i for i, t in enumerate(SOURCE.splitlines(), 1) if t.rstrip().endswith(marker))


def _scenario(stack) -> str:
    for fr in reversed(stack):
        if os.path.basename(fr.filename) == PROG.name and fr.function in SCENARIOS:
            return fr.function
    return "?"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    old = emu.PROG, emu.SCENARIOS
    emu.PROG, emu.SCENARIOS = PROG, SCENARIOS
    try:
        traces = emu._launch(tmp_path_factory.mktemp("emu_futures"))
    finally:
        emu.PROG, emu.SCENARIOS = old
    return traces, analyze_traces([str(t) for t in traces])


def test_correct_futures_and_hooks_are_clean_broken_ones_race(run):
    _, result = run
    found: dict = {}
    for f in result.findings:
        found.setdefault(_scenario(f.access.stack), []).append(f)
    assert set(found) == {"bug_value_nowait", "bug_then_value_nowait", "bug_hook_broken"}, {
        n: [(f.kind.value, f.previous.op, user_site(f.access.stack)) for f in fs] for n, fs in found.items()}
    for name, marker in [("bug_value_nowait", "LATER:value_nowait"),
                         ("bug_then_value_nowait", "LATER:then_value_nowait"),
                         ("bug_hook_broken", "LATER:hook")]:
        fs = found[name]
        assert {f.kind.value for f in fs} == {"data-race"}
        assert {t for f in fs for t in f.traces} == {0, 1}
        for f in fs:
            assert user_site(f.access.stack).lineno == _line(marker)
            assert f.access.stream.is_default and not f.previous.stream.is_default
    # the value of a Work's future is written by the all-reduce; a then callback's result
    # on the pool stream the callback ran on
    assert {f.previous.op for f in found["bug_value_nowait"]} == {"all_reduce"}
    assert {f.previous.op for f in found["bug_then_value_nowait"]} == {"aten::mul.Tensor"}
    assert {f.previous.stream.label for f in found["bug_then_value_nowait"]} == {POOL_LABEL}


def test_a_wait_records_the_value_on_the_waiting_stream(run):
    """CUDA's future record_streams its value's storages to the stream that waits (in the
    allocator): the trace has those RECORD_STREAM records."""
    traces, _ = run
    recs, reader = records(traces[0])
    sy = reader.symbols
    default = {s for s, (_, handle) in sy.streams.items() if handle == 0}
    assert any(r[0] == R.RECORD_STREAM and r[2] in default for r in recs)
    # then callbacks ran on pool streams: kernels on streams neither default nor comm
    comm = {s for s, (role, _) in sy.stream_labels.items() if role == R.ROLE_COMM}
    assert any(r[0] == R.KERNEL and r[1] not in default and r[1] not in comm for r in recs)


DEVICE_FUTURE = """
import sys, torch
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    x = torch.ones(64, device="cuda") * 3
    fut = torch.futures.Future(devices=[torch.device("cuda", 0)])
    fut.set_result(x)
if sys.argv[1] == "wait":
    y = fut.wait() + 1
else:
    y = fut.value() + 1
assert y[0].item() == 4
cpu = torch.futures.Future()
cpu.set_result(5)
assert cpu.wait() == 5
"""


@pytest.mark.parametrize("how", ["wait", "value"])
def test_a_future_made_with_the_device_synchronizes_like_a_cuda_future(tmp_path, how):
    """``torch.futures.Future(devices=[cuda])`` works (a CPU torch refuses that device): its
    ``set_result`` records an event on the current stream, ``wait()`` orders the waiting
    stream after it, ``value()`` does not."""
    import json
    import subprocess
    import sys

    prog = tmp_path / "fut.py"
    prog.write_text(DEVICE_FUTURE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    env["PYTHONPATH"] = f"{emu.ROOT / 'src'}{os.pathsep}{emu.ROOT}"
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(out), "--",
                        sys.executable, str(prog), how], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    found = json.loads(a.stdout)["findings"]
    if how == "wait":
        assert found == []
    else:
        assert [f["kind"] for f in found] == ["data-race"], found
