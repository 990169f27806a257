"""Traces that stand on their own: compressed recording that survives a kill, recorded
source lines, and fingerprints that survive edits elsewhere and another checkout."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import time

from npusan.analyzer.runs.batch import BatchOptions, analyze_inputs
from npusan.analyzer.report.sources import SourceSettings
from npusan.trace_format.reader import TraceReader

from .conftest import NPUSAN, analyze, kinds, records, run_record, write_script
from .test_process import KILLED, _kernel_names, _spawn

RACE = """
import torch
from npusan import sim

def step(x, side):
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        x.add_(1)
    return x.sum()                      # the racing read

side = sim.Stream()
x = torch.zeros(1024)
step(x, side)
sim.synchronize()
"""


def test_record_to_zst_writes_a_compressed_trace_that_analyzes(tmp_path):
    proc, trace = run_record(tmp_path, RACE, trace=tmp_path / "trace.npusan.zst")
    assert proc.returncode == 0, proc.stderr
    assert trace.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstandard, not plain msgpack
    assert kinds(analyze(trace)) == ["data-race"]
    recs, reader = records(trace)
    assert reader.ended_cleanly and reader.version == (1, 3)


def test_a_killed_run_leaves_a_readable_zst_up_to_its_last_complete_frame(tmp_path):
    """As the plain-trace SIGKILL test, with each flush written as one zstandard frame."""
    script = write_script(tmp_path, KILLED)
    trace = tmp_path / "killed.npusan.zst"
    p = _spawn(script, trace)
    try:
        assert p.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the periodic flush writes frames while idle
            time.sleep(0.25)
            if _kernel_names(trace)[0].count("aten::mul_.Tensor") == 200:
                break
        p.kill()
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    names, reader = _kernel_names(trace)
    assert reader.truncated and not reader.ended_cleanly
    assert names.count("aten::mul_.Tensor") == 200
    assert kinds(analyze(trace)) == ["data-race"]


def test_frames_carry_their_source_line_and_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    proc, trace = run_record(tmp_path, RACE)
    assert proc.returncode == 0, proc.stderr
    r = TraceReader(str(trace))
    list(r.records())
    recorded = r.symbols.recorded_sources()
    mine = {k: v for k, v in recorded.items() if k[0].endswith("prog.py")}
    assert ("return x.sum()                      # the racing read", str(tmp_path)) in mine.values()
    # Each frame is defined once, with its text, not once per use.
    assert len(r.symbols.frame_sources) == len(set(r.symbols.frame_sources))


def _record_in(folder, code, tmp_path, name):
    return _record_each(tmp_path, [(folder, code, name)])[0]


def _record_each(tmp_path, programs):
    """``[(trace, script)]``: each ``(folder, code, name)`` recorded in its own checkout,
    the recordings run side by side (each is a Python that imports torch)."""
    started = []
    for folder, code, name in programs:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "pyproject.toml").write_text("[project]\nname = 'x'\n")
        script = folder / "prog.py"
        script.write_text(textwrap.dedent(code))
        trace = tmp_path / f"{name}.npusan"
        proc = subprocess.Popen([*NPUSAN, "record", "--backend", "sim", "-o", str(trace), "--", str(script)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(folder))
        started.append((proc, trace, script))
    out = []
    for proc, trace, script in started:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        out.append((trace, script))
    return out


def _fingerprints(trace, cwd_root=None):
    result = analyze_inputs([str(trace)], BatchOptions(sources=SourceSettings(roots=(cwd_root,) if cwd_root else ())))
    return sorted(f.fingerprint() for f in result.findings), result


def test_fingerprints_survive_lines_inserted_above_and_another_checkout(tmp_path):
    shifted = RACE.replace("import torch\n", "import torch\nimport os\nimport sys\n\n# a comment\n", 1)
    # Cosmetic edits (a formatter run, comments on the racing and the calling line) keep it.
    cosmetic = (RACE.replace("return x.sum()                      # the racing read", "return x.sum( )  # racy")
                .replace("step(x, side)\n", "step(x,side)  # the caller\n"))
    assert cosmetic != RACE
    # Editing the racing line itself is another bug.
    edited = RACE.replace("return x.sum()", "return x.sum() * 2")
    (first, script), (second, _), (tidy, _), (third, _) = _record_each(tmp_path, [
        (tmp_path / "checkout-a", RACE, "a"),
        (tmp_path / "elsewhere" / "checkout-b", shifted, "b"),
        (tmp_path / "checkout-d", cosmetic, "d"),
        (tmp_path / "checkout-c", edited, "c"),
    ])
    fa, ra = _fingerprints(first)
    fb, rb = _fingerprints(second)
    assert fa and fa == fb
    # ... although the line numbers and absolute paths differ.
    la = ra.findings[0].access.stack[-1]
    lb = rb.findings[0].access.stack[-1]
    assert la.lineno != lb.lineno and la.filename != lb.filename
    # The source is gone (a bug report on another machine): recorded text still decides.
    shutil.rmtree(tmp_path / "checkout-a")
    assert _fingerprints(first)[0] == fa
    assert _fingerprints(tidy)[0] == fa
    fc, _ = _fingerprints(third)
    assert fc and fc != fa
