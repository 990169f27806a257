"""The host as a party of the ordering on the emulated CUDA device: serving-loop bugs ported
from vLLM, TensorRT-LLM and vLLM-Ascend (progs/host_buffers.py names each source) are
races, their fixes are clean, and pageable host memory is never reported."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from npusan.trace_format import records as R  # noqa: E402
from npusan.trace_format.reader import TraceReader  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "host_buffers.py")
CASES = ["vllm-47644", "trtllm-15546", "vllm-ascend-12071", "vllm-36013-numpy", "vllm-36013-tolist",
         "vllm-36013-item", "d2h-to-cpu", "d2h-to-cpu-copy"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
    env.pop("NPUSAN_TRACE", None)
    env.pop("NPUSAN_HOST_FAULTS", None)  # torch ops only (tests/recorder/test_host_watch.py: with page faults)
    return env


def _run(tmp_path, case, variant):
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(out), "--", PROG,
                        case, variant], env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", "json", str(out)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return out, json.loads(a.stdout)["findings"]


def _records(path):
    return list(TraceReader(str(path)).records())


@pytest.mark.parametrize("case", CASES)
def test_the_bug_is_a_race_with_the_host(tmp_path, case):
    _, found = _run(tmp_path, case, "bug")
    assert found and {f["kind"] for f in found} == {"data-race"}, found
    reads = case.startswith(("vllm-36013", "d2h-"))
    for f in found:
        host, stream = (f["access"], f["previous"]) if f["access"]["stream"]["device"] == R.HOST_DEVICE \
            else (f["previous"], f["access"])
        assert host["stream"]["device"] == R.HOST_DEVICE and stream["stream"]["device"] == 0
        assert host["type"] == ("read" if reads else "write")


@pytest.mark.parametrize("case", CASES)
def test_the_fix_is_clean_and_the_host_was_watched(tmp_path, case):
    path, found = _run(tmp_path, case, "fixed")
    assert found == []
    recs = _records(path)
    if case != "trtllm-15546":  # (its fix never touches a buffer a copy may still read)
        assert any(r[0] == R.HOST_ACCESS for r in recs)
    if case == "vllm-ascend-12071":  # clean because event.query() answered True
        assert any(r[0] == R.EVENT_SYNC for r in recs)


@pytest.mark.parametrize("case", CASES)
def test_pageable_host_memory_is_never_reported(tmp_path, case):
    path, found = _run(tmp_path, case, "pageable")
    assert found == []
    assert not any(r[0] == R.HOST_ACCESS for r in _records(path))


def _text_report(path):
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", str(path)], env=_env(), capture_output=True,
                       text=True, timeout=300)
    return a.stdout


def test_the_report_says_once_what_the_host_watch_does_not_see(tmp_path):
    path, _ = _run(tmp_path, "vllm-36013-numpy", "fixed")
    note = "host accesses outside torch ops (numpy views, raw pointers) are not seen"
    assert _text_report(path).count(note) == 1
    path, _ = _run(tmp_path, "vllm-36013-numpy", "pageable")  # no pinned memory watched: no note
    assert note not in _text_report(path)


def test_pinned_memory_is_described_as_such_with_its_size(tmp_path):
    """Pinned host memory has no allocation in the trace (the host allocator reports none):
    the trace defines it with its size when a stream first touches it, reports call it
    pinned host memory (not memory allocated before recording began), and ``npusan info``
    counts it apart from memory used without an allocation."""
    path, found = _run(tmp_path, "d2h-to-cpu", "bug")
    assert [f["block"]["size"] for f in found] == [64 * 4]  # 64 float32, copied to the host
    text = _text_report(path)
    assert "data race on a 256 B tensor in pinned host memory" in text
    assert "before recording began" not in text
    i = subprocess.run([sys.executable, "-m", "npusan", "info", "--json", str(path)], env=_env(),
                       capture_output=True, text=True, timeout=300)
    mem = json.loads(i.stdout)["memory"]
    assert mem["pinned_host_blocks"] == 1 and mem["unallocated_blocks"] == 0
