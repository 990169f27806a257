"""torch Futures and DDP communication hooks end to end: ``dist_hooks_prog.py`` on two gloo
ranks under ``npusan record --backend sim`` (one torchrun launch for every scenario).

DDP with each of torch's hooks and with a correct hook of one's own is clean; a hook that
hands back a bucket still being reduced, and ``Future.value()`` read without a wait, are
races; the callbacks run on pool streams that waited for the collective.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from npusan.analyzer.replay.traces import analyze_traces
from npusan.analyzer.report.sources import user_site
from npusan.trace_format import records as R

from .conftest import records
from .test_collectives_dist import launch

PROG = Path(__file__).with_name("dist_hooks_prog.py")
SOURCE = PROG.read_text()
SCENARIOS = [n.name for n in ast.parse(SOURCE).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith(("ok_", "bug_", "torch_"))]


def _line(marker: str) -> int:
    for i, text in enumerate(SOURCE.splitlines(), 1):
        if text.rstrip().endswith(marker):
            return i
    raise AssertionError(marker)


def scenario_of(stack) -> str:
    for fr in reversed(stack):
        if os.path.basename(fr.filename) == PROG.name and fr.function in SCENARIOS:
            return fr.function
    return "?"


def _where(f) -> tuple:
    return (f.kind.value, f.access.op, user_site(f.access.stack), f.previous.op, user_site(f.previous.stack))


@pytest.fixture(scope="module")
def hooks_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("c10d_futures")
    traces = launch(tmp, SCENARIOS, prog=PROG)
    result = analyze_traces([str(t) for t in traces])
    found: dict = {}
    for f in result.findings:  # a free at exit has no stack: the use it outlived tells
        # a reuse race belongs to the scenario whose use the block outlived (the allocation
        # that got the block, by the simulated malloc's chance, may be a later scenario's)
        name = scenario_of(f.access.stack) if f.kind.value != "reuse-race" else "?"
        found.setdefault(name if name != "?" else scenario_of(f.previous.stack), []).append(f)
    return traces, result, found


def test_torch_hooks_and_a_correct_hook_are_clean(hooks_run):
    _, _, found = hooks_run
    oks = [n for n in SCENARIOS if n.startswith("ok_")]
    assert {"ok_allreduce_hook", "ok_fp16_compress_hook", "ok_bf16_compress_hook", "ok_powersgd_hook",
            "ok_custom_hook"} <= set(oks)
    assert not {n: [_where(f) for f in fs] for n, fs in found.items() if n in oks}
    assert "?" not in found, [_where(f) for f in found["?"]]


@pytest.mark.parametrize("name", ["bug_hook_returns_unwaited_bucket", "bug_future_value_without_wait"])
def test_races_through_futures_are_found_where_they_are(hooks_run, name):
    _, _, found = hooks_run
    fs = [f for f in found.get(name, []) if f.kind.value == "data-race"]
    # on each rank (the racy hook races once per bucket whose blocks differ)
    assert sorted({f.trace for f in fs}) == [0, 1], [_where(f) for f in found.get(name, [])]
    for f in found.get(name, []):  # and what it leads to (the bucket freed while reduced)
        assert user_site(f.previous.stack).lineno == _line(f"EARLIER:{name}"), _where(f)
    for f in fs:
        assert f.kind.value == "data-race"
        assert f.previous.op == "all_reduce"
        assert user_site(f.access.stack).lineno == _line(f"LATER:{name}"), _where(f)
        assert user_site(f.previous.stack).lineno == _line(f"EARLIER:{name}"), _where(f)


def test_powersgd_error_feedback_is_only_allocator_lifetimes(hooks_run):
    """torch's PowerSGD hook with error feedback (the default) hands tensors between the
    backward stream and its callbacks' pool streams without ``record_stream``: it frees
    ``input_tensor_cp`` (made on the backward stream) on the host right after ``decompress``
    read it on a pool stream, and the backward stream allocates again before it waits for
    that stream: reported. ``error_dict``'s tensors (made on a pool stream) are freed after
    the next backward read them, but the pool stream waits for the backward stream before it
    allocates again (a callback stream first waits for the future): not reported, since a
    free is judged when its block could first be handed out. No data race."""
    _, _, found = hooks_run
    fs = found.get("torch_powersgd_error_feedback", [])
    assert fs and sorted({f.trace for f in fs}) == [0, 1]
    assert any(f.kind.value == "missing-record-stream" for f in fs)
    for f in fs:
        # the simulated device's malloc sometimes hands the freed address to that next
        # allocation: then a reuse race of the same block as well
        assert f.kind.value in ("missing-record-stream", "reuse-race"), _where(f)
        assert f.previous.op == "aten::sub.Tensor", _where(f)  # decompress's read of input_tensor_cp
        assert not f.block.stream.label, _where(f)  # made on the backward stream, no pool stream


def test_callbacks_run_on_pool_streams_that_waited(hooks_run):
    traces, _, _ = hooks_run
    recs, reader = records(traces[0])
    labels = reader.symbols.stream_labels
    pool = {s for s, (role, _) in labels.items() if role == "pool"}
    comm = {s for s, (role, _) in labels.items() if role == R.ROLE_COMM}
    assert pool and comm
    strings = reader.symbols.strings
    on_pool = {strings[r[2]] for r in recs if r[0] == R.KERNEL and r[1] in pool}
    assert "aten::copy_" in on_pool  # fp16/bf16 decompress: the bucket written back there
    # every pool stream waits for an event before its first kernel
    first_kernel = {}
    first_wait = {}
    for i, r in enumerate(recs):
        if r[0] == R.KERNEL and r[1] in pool:
            first_kernel.setdefault(r[1], i)
        if r[0] == R.EVENT_WAIT and r[2] in pool:
            first_wait.setdefault(r[2], i)
    assert first_kernel and all(first_wait.get(s, 1 << 60) < i for s, i in first_kernel.items())
