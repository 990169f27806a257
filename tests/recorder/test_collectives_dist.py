"""Collectives end to end: real gloo process groups, ``torchrun --nproc_per_node=2`` under
``npusan record --backend sim``, every collective kind sync and async, correct and racy,
a DDP loop, the communication-stream bucket pattern, and the process-group behaviour of
both torch generations (``NPUSAN_C10D_MODEL``) and ``TORCH_NCCL_AVOID_RECORD_STREAMS``.

Each launch runs many scenarios of ``dist_prog.py`` (torchrun start-up dominates on a
2-core machine), so there are three launches in all.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npusan.analyzer.replay.traces import analyze_traces
from npusan.analyzer.report.describe import fix
from npusan.analyzer.report.sources import SourceCache, user_site
from npusan.trace_format import records as R

from .conftest import NPUSAN, free_port, records

PROG = Path(__file__).with_name("dist_prog.py")
SOURCE = PROG.read_text()
SCENARIOS = [n.name for n in ast.parse(SOURCE).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith(("ok_", "bug_"))]
BUGS = [n for n in SCENARIOS if n.startswith("bug_")]
OKS = [n for n in SCENARIOS if n.startswith("ok_")]


def _line(marker: str) -> int:
    for i, text in enumerate(SOURCE.splitlines(), 1):
        if text.rstrip().endswith(marker):
            return i
    raise AssertionError(marker)


def _torchrun() -> list:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def launch(tmp: Path, names, nproc: int = 2, backend: str = "sim", prog: Path = PROG, emulate=None,
           **env) -> list:
    """Record ``prog names...`` (``dist_prog.py`` by default) on ``nproc`` ranks; return
    the rank traces (``emulate``: record with ``--emulate`` that device)."""
    trace = tmp / "dist.npusan"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NPUSAN_", "TORCH_NCCL_"))}
    full.update(env, OMP_NUM_THREADS="1")
    cmd = [*NPUSAN, "record", "--backend", backend, *(["--emulate", emulate] if emulate else []),
           "-o", str(trace), "--", *_torchrun(),
           f"--nproc_per_node={nproc}", f"--master_port={free_port()}", str(prog), *names]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=str(tmp), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    traces = sorted(tmp.glob("dist.rank*.npusan"))
    assert len(traces) == nproc, (proc.stderr[-2000:], list(tmp.iterdir()))
    return traces


def scenario_of(stack) -> str:
    """The scenario function a stack runs in (its dist_prog.py frame closest to the top)."""
    for fr in reversed(stack):
        if os.path.basename(fr.filename) == PROG.name and fr.function in SCENARIOS:
            return fr.function
    return "?"


@pytest.fixture(scope="module")
def current_model(tmp_path_factory):
    """The installed torch's process-group behaviour (torch >= 2.8 on this machine)."""
    tmp = tmp_path_factory.mktemp("c10d_current")
    traces = launch(tmp, SCENARIOS)
    return traces, analyze_traces([str(t) for t in traces])


@pytest.fixture(scope="module")
def legacy_model(tmp_path_factory):
    """torch < 2.8's process-group behaviour: sync collectives on the comm stream too."""
    tmp = tmp_path_factory.mktemp("c10d_legacy")
    traces = launch(tmp, [n for n in SCENARIOS if n != "ok_ddp"], NPUSAN_C10D_MODEL="2.7")
    return traces, analyze_traces([str(t) for t in traces])


@pytest.fixture(scope="module")
def legacy_avoid_record_streams(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("c10d_avoid")
    traces = launch(tmp, ["ok_free_before_wait", "ok_async_all", "bug_use_before_wait"],
                    NPUSAN_C10D_MODEL="2.7", TORCH_NCCL_AVOID_RECORD_STREAMS="1")
    return traces, analyze_traces([str(t) for t in traces])


def by_scenario(result) -> dict:
    out: dict = {}
    for f in result.findings:
        out.setdefault(scenario_of(f.access.stack), []).append(f)
    return out


def check_findings(result, header_model: str, ranks: int = 2) -> None:
    found = by_scenario(result)
    assert not [n for n in found if not n.startswith("bug_")], {
        n: [(f.kind.value, f.previous.op, user_site(f.access.stack)) for f in fs]
        for n, fs in found.items() if not n.startswith("bug_")}
    for name in BUGS:
        fs = found.get(name, [])
        # one finding per rank trace
        assert sorted(f.trace for f in fs) == list(range(ranks)), (header_model, name, [
            (f.kind.value, user_site(f.access.stack), user_site(f.previous.stack)) for f in fs])
        for f in fs:
            assert f.kind.value == "data-race"
            assert user_site(f.access.stack).lineno == _line(f"LATER:{name}"), (name, f.access.stack)
            assert user_site(f.previous.stack).lineno == _line(f"EARLIER:{name}"), (name, f.previous.stack)


@pytest.mark.parametrize("model", ["current_model", "legacy_model"])
def test_each_scenario_clean_or_found_where_it_races(model, request):
    _, result = request.getfixturevalue(model)
    check_findings(result, model)


def _finding(result, name):
    return by_scenario(result)[name][0]


def _fix_text(result, name) -> str:
    f = _finding(result, name)
    return "\n".join(fix(f, result.traces[f.trace].header, SourceCache([str(PROG.parent)])))


def test_reports_name_the_collective_and_its_comm_stream(current_model):
    traces, result = current_model
    f = _finding(result, "bug_use_before_wait")
    assert f.previous.op == "all_reduce"
    assert f.previous.stream.label == "comm stream of process group 0"
    proc = subprocess.run([*NPUSAN, "analyze", *map(str, traces)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "not ordered after a write on the comm stream of process group 0 (sim:0)" in proc.stdout
    assert "write by all_reduce on the comm stream of process group 0 (sim:0)" in proc.stdout
    assert "c10d::" not in proc.stdout and "c10d." not in proc.stdout


def test_fixes_name_work_wait_or_the_right_wait_stream(current_model, legacy_model):
    for _, result in (current_model, legacy_model):
        assert "    w.wait()" in _fix_text(result, "bug_use_before_wait")
        assert "    work.wait()" in _fix_text(result, "bug_overwrite_before_wait")
        assert "wait_stream(side)" in _fix_text(result, "bug_producer_not_waited")
    # torch >= 2.8: the sync all_reduce ran on the program's own stream `comm`.
    assert "npusan.sim.current_stream().wait_stream(comm)" in _fix_text(current_model[1], "bug_consumer_not_waiting")
    # torch < 2.8: it ran on the process group's stream and torch waited for it on `comm`.
    legacy = _fix_text(legacy_model[1], "bug_consumer_not_waiting")
    assert "async_op=False" in legacy and "current_stream().wait_stream(<s>)" in legacy
    # The fix, applied, is the correct program next to it.
    assert "sim.current_stream().wait_stream(comm)" in SOURCE.split("def ok_bucket")[1].split("def ")[0]


def _comm_streams(path):
    recs, reader = records(path)
    comm = {s for s, (role, _) in reader.symbols.stream_labels.items() if role == R.ROLE_COMM}
    return recs, comm


def test_collectives_run_where_each_torch_version_runs_them(current_model, legacy_model):
    def ops_on(path):
        recs, comm = _comm_streams(path)
        strings = records(path)[1].symbols.strings
        on_comm = {strings[r[2]] for r in recs if r[0] == R.KERNEL and r[1] in comm}
        rs = [r for r in recs if r[0] == R.RECORD_STREAM and r[2] in comm]
        return on_comm, rs

    cur_ops, cur_rs = ops_on(current_model[0][0])
    old_ops, old_rs = ops_on(legacy_model[0][0])
    # async collectives on the comm stream in both; sync ones only before torch 2.8
    assert "all_gather_into_tensor" in cur_ops and "all_gather_into_tensor" in old_ops
    assert "all_to_all_single (async_op=False)" in old_ops
    assert not any(op.endswith("(async_op=False)") for op in cur_ops)
    # torch >= 2.8 never record_streams; torch < 2.8 does
    assert not cur_rs and old_rs


def test_avoid_record_streams_keeps_tensors_until_the_wait(legacy_avoid_record_streams, legacy_model):
    traces, result = legacy_avoid_record_streams
    assert [f.previous.op for f in result.findings] == ["all_reduce"] * 2  # the planted bug, per rank
    recs, comm = _comm_streams(traces[0])
    assert not [r for r in recs if r[0] == R.RECORD_STREAM and r[2] in comm]
    # legacy without the variable: the same program record_streams its tensors
    recs, comm = _comm_streams(legacy_model[0][0])
    assert [r for r in recs if r[0] == R.RECORD_STREAM and r[2] in comm]


def test_ddp_and_every_correct_scenario_recorded_something(current_model):
    traces, result = current_model
    recs, reader = records(traces[0])
    stacks = [reader.symbols.frames_of(r[3]) for r in recs if r[0] == R.KERNEL]
    seen = {fn for st in stacks for (_, _, fn) in st}
    assert set(OKS) <= seen
    assert not [f for f in result.findings if scenario_of(f.access.stack) == "ok_ddp"]
