"""CUDA graphs captured and replayed for real under ``npusan record --emulate cuda``, then
analyzed (format 1.3: one GRAPH_LAUNCH record per replay, the captured kernels replayed by
the analyzer at each launch)."""

import os

import pytest

from tests.emulate.test_emulated_programs import _kinds, _record

pytest.importorskip("torch")

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "graphs.py")


@pytest.mark.parametrize("variant,rc,kinds", [
    ("values", 0, []),  # replays recompute the static output in place (the program asserts it)
    ("clean", 0, []),  # the static input's writer on another stream is waited for, both ways
    ("race", 1, ["data-race"]),  # ... and is not: the replayed graph reads it unordered
    ("joined", 0, []),  # a capture forks to a side stream and joins it back
    ("side_race", 1, ["data-race"]),  # ... whose output another stream reads unordered
])
def test_graph_programs(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, PROG, variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_an_unjoined_capture_is_refused_at_capture_end_as_cuda_refuses_it(tmp_path):
    """CUDA's cudaStreamEndCapture fails with cudaErrorStreamCaptureUnjoined ("capturing
    stream has unjoined work") when a stream the capture forked to was not joined back;
    torch's capture_end raises it. The trace's capture ends there too, with no launch."""
    import io

    from npusan.trace_format import TraceReader
    from npusan.trace_format import records as R

    p, trace = _record(tmp_path, PROG, "unjoined")
    assert p.returncode == 0, p.stderr
    assert "refused" in p.stdout
    types = [r[0] for r in TraceReader(io.BytesIO(trace.read_bytes())).records()]
    assert types.count(R.GRAPH_BEGIN) == types.count(R.GRAPH_END) == 1 and types.count(R.GRAPH_LAUNCH) == 0
    assert _kinds(trace) == (0, [])


def test_a_wait_inside_a_capture_for_work_outside_it_is_refused_as_cuda_refuses_it(tmp_path):
    """cudaStreamWaitEvent of a capturing stream for an event recorded outside the capture
    fails (cudaErrorStreamCaptureIsolation) and invalidates the capture, so capture_end
    fails too (cudaErrorStreamCaptureInvalidated): a wait belongs before the replay."""
    p, trace = _record(tmp_path, PROG, "outside_wait")
    assert p.returncode == 0, p.stderr
    assert "refused" in p.stdout
    assert _kinds(trace) == (0, [])


def test_a_replay_is_one_record_and_races_point_at_the_captured_op_and_its_launch(tmp_path):
    import io

    from npusan.analyzer.replay import traces as replay
    from npusan.trace_format import TraceReader
    from npusan.trace_format import records as R

    p, trace = _record(tmp_path, PROG, "side_race")
    assert p.returncode == 0, p.stderr
    with open(trace, "rb") as f:
        data = f.read()
    types = [r[0] for r in TraceReader(io.BytesIO(data)).records()]
    assert types.count(R.GRAPH_BEGIN) == types.count(R.GRAPH_END) == 1 and types.count(R.GRAPH_LAUNCH) == 3
    found, _ = replay.analyze_trace(io.BytesIO(data))
    side = [f for f in found if f.previous.op == "aten::add.Tensor"]
    assert side, [(f.access.op, f.previous.op) for f in found]
    with open(PROG) as f:
        lines = f.read().splitlines()
    add = lines.index("            z = y + 1  # on the side stream, joined back below") + 1
    capture = max(i for i, ln in enumerate(lines[:add]) if "with torch.cuda.graph(g):" in ln) + 1
    launch = next(i for i, ln in enumerate(lines) if i >= add and "g.replay()" in ln) + 1
    earlier = side[0].previous
    assert any(fr.lineno == add and fr.filename.endswith("graphs.py") for fr in earlier.stack)
    assert earlier.replay is not None and side[0].access.replay is None  # the read ran outside the graph
    assert any(fr.lineno == launch and fr.filename.endswith("graphs.py") for fr in earlier.replay.stack)
    assert any(fr.lineno == capture and fr.filename.endswith("graphs.py") for fr in earlier.replay.captured)


def test_a_host_sync_inside_a_capture_raises_as_cuda_does(tmp_path):
    prog = tmp_path / "sync.py"
    prog.write_text("import torch\nx = torch.ones(4, device='cuda')\ng = torch.cuda.CUDAGraph()\n"
                    "try:\n    with torch.cuda.graph(g):\n        x.sum().item()\nexcept RuntimeError as e:\n"
                    "    assert 'not permitted when stream is capturing' in str(e), e\n    print('raised')\n")
    p, _ = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert "raised" in p.stdout


CALLABLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "graphed_callables.py")


@pytest.mark.parametrize("variant,rc,kinds", [
    ("train", 0, []),  # a graphed module trains to the eager module's losses (the program asserts it)
    ("clean", 0, []),  # the static input's writer on another stream is waited for
    ("race", 1, ["data-race"]),  # ... and is not
])
def test_make_graphed_callables(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, CALLABLES, variant)
    assert p.returncode == 0, p.stderr
    assert _kinds(trace) == (rc, kinds)


def test_a_graphed_callable_race_points_at_the_captured_op(tmp_path):
    import io

    from npusan.analyzer.replay import traces as replay

    p, trace = _record(tmp_path, CALLABLES, "race")
    assert p.returncode == 0, p.stderr
    with open(trace, "rb") as f:
        found, _ = replay.analyze_trace(io.BytesIO(f.read()))
    reads = [f for f in found if f.access.op == "aten::mul.Tensor"]
    assert reads, [(f.access.op, f.previous.op) for f in found]
    assert any(fr.lineno == 40 and fr.filename.endswith("graphed_callables.py") for fr in reads[0].access.stack)
    assert reads[0].previous.op == "aten::fill_.Scalar"


NPU_PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "npu_graphs.py")


@pytest.mark.parametrize("variant,rc,kinds", [
    ("values", 0, []),
    ("clean", 0, []),
    ("race", 1, ["data-race"]),
    ("unjoined", 1, ["data-race"]),
])
def test_npu_graph_programs(tmp_path, variant, rc, kinds):
    """torch_npu's NPUGraph and torch.npu.graph on the emulated NPU, recorded by the NPU
    backend as CUDA graphs are: one GRAPH_BEGIN/GRAPH_END per capture, one GRAPH_LAUNCH
    per replay."""
    import io

    from npusan.trace_format import TraceReader
    from npusan.trace_format import records as R
    from tests.emulate.test_emulated_npu import _kinds as npu_kinds
    from tests.emulate.test_emulated_npu import _record as npu_record

    p, trace = npu_record(tmp_path, NPU_PROG, variant)
    assert p.returncode == 0, p.stderr
    with open(trace, "rb") as f:
        types = [r[0] for r in TraceReader(io.BytesIO(f.read())).records()]
    assert types.count(R.GRAPH_BEGIN) == types.count(R.GRAPH_END) == 1 and types.count(R.GRAPH_LAUNCH) == 3
    assert npu_kinds(trace) == (rc, kinds)


@pytest.mark.parametrize("variant,rc,kinds", [("train", 0, []), ("race", 1, ["data-race"])])
def test_npu_make_graphed_callables(tmp_path, variant, rc, kinds):
    """torch.npu.make_graphed_callables: the CUDA program with torch_npu's names."""
    from tests.emulate.test_emulated_npu import _kinds as npu_kinds
    from tests.emulate.test_emulated_npu import _record as npu_record

    with open(CALLABLES) as f:
        src = f.read()
    src = src.replace("import torch\n", "import torch\nimport torch_npu  # noqa: F401\n", 1)
    src = src.replace("torch.cuda", "torch.npu").replace('device="cuda"', 'device="npu"').replace(".cuda()", ".npu()")
    prog = tmp_path / "graphed_npu.py"
    prog.write_text(src)
    p, trace = npu_record(tmp_path, str(prog), variant)
    assert p.returncode == 0, p.stderr
    assert npu_kinds(trace) == (rc, kinds)


@pytest.mark.parametrize("variant", ["race", "unjoined", "clean"])
@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_online_check_reports_what_offline_reports(tmp_path, variant, device):
    """``--online`` (the live engine, the compiled core) on a program with a captured
    graph warns of the same findings, worded and with streams and kernels numbered alike,
    as ``npusan analyze`` finds in the trace the same run wrote."""
    import json
    import re
    import subprocess
    import sys

    from npusan.analyzer.replay import native
    from tests.emulate.test_emulated_programs import _env

    if not native.available():
        pytest.skip("compiled core not built")
    prog = PROG if device == "cuda" else NPU_PROG
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", device, "--online", "-o", str(out),
                        "--", prog, variant], env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(out)], env=_env(),
                       capture_output=True, text=True, timeout=300)
    offline = json.loads(a.stdout)["findings"]
    online = [ln[len("npusan: warning: "):] for ln in p.stderr.splitlines() if ln.startswith("npusan: warning: ")]
    assert sorted(online) == sorted(f["title"] for f in offline), (online, [f["title"] for f in offline])
    # (CUDA refuses an unjoined capture at its end; the emulated NPU ends it: the race stays)
    quiet = variant == "clean" or (variant == "unjoined" and device == "cuda")
    assert (len(online) > 0) == (not quiet) and a.returncode == (0 if quiet else 1)
    if online:  # the first warning is in full: its kernels are numbered as offline
        first = p.stderr[p.stderr.index("npusan: warning: "):].split("\n  fix:", 1)[0]
        seqs = [int(n) for n in re.findall(r"^  (?:later|earlier):.*\[kernel (\d+)\]$", first, re.M)]
        f = next(f for f in offline if f["title"] == online[0])
        assert seqs == [f["access"]["seq"], f["previous"]["seq"]], (seqs, f["access"], f["previous"])


@pytest.mark.parametrize("variant,rc", [("clean", 0), ("race", 1)])
def test_reduce_overhead_runs_eagerly_and_says_so(tmp_path, variant, rc):
    """torch.compile(mode="reduce-overhead"): no CUDA graph trees on the emulated device
    (npusan/emulate/compiled.py): one line on stderr, a coarse note in the report."""
    import subprocess
    import sys

    from tests.emulate.test_emulated_programs import _env

    prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "reduce_overhead.py")
    p, trace = _record(tmp_path, prog, variant)
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert p.stderr.count("npusan: note: torch.compile(mode='reduce-overhead') runs eagerly") == 1, p.stderr
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--no-color", str(trace)], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert a.returncode == rc, a.stdout
    assert "recorded coarsely: torch.compile(mode='reduce-overhead') runs eagerly" in a.stdout, a.stdout
    assert ("data race" in a.stdout) == bool(rc)


@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_online_raise_comes_out_of_the_replay(tmp_path, device):
    """``--online-raise``: the race a replayed graph has with its input's writer is raised
    by the ``g.replay()`` line itself (a new-user trial got it from the next op)."""
    import re
    import subprocess
    import sys

    from tests.emulate.test_emulated_programs import _env

    prog = PROG if device == "cuda" else NPU_PROG
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", device, "--online-raise",
                        "-o", str(tmp_path / "t.npusan"), "--", prog, "race"], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "RaceError: data race" in p.stderr, p.stderr
    frames = re.findall(r'^  File "(.*)", line (\d+), in .*\n    (.*)$', p.stderr, re.M)
    user = [(int(line), code) for f, line, code in frames if f == prog]
    assert user and user[-1][1].strip() == "g.replay()", p.stderr
