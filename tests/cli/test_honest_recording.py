"""Recording says so when it cannot record what was asked, and a trace without device work
is not silently called clean."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import TraceWriter

NPUSAN = [sys.executable, "-m", "npusan"]


def _cuda_usable() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@pytest.mark.parametrize("backend, reason", [("cuda", "no usable CUDA device"), ("npu", "torch_npu is not installed")])
def test_record_with_a_device_that_is_not_here_exits_2_before_running(tmp_path, backend, reason):
    if backend == "cuda" and _cuda_usable():
        pytest.skip("this machine has CUDA")
    if backend == "npu" and importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    marker = tmp_path / "ran"
    exported = tmp_path / "exported.npusan"  # NPUSAN_TRACE in the shell must not record npusan itself
    proc = subprocess.run(
        [*NPUSAN, "record", "--backend", backend, "-o", str(tmp_path / "t.npusan"), "--",
         "-c", f"open({str(marker)!r}, 'w').close()"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NPUSAN_TRACE": str(exported)},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"npusan: error: --backend {backend}: {reason}")
    assert "--backend sim" in lines[0]
    assert not marker.exists() and not (tmp_path / "t.npusan").exists() and not exported.exists()


@pytest.fixture
def no_kernels(tmp_path):
    path = tmp_path / "empty.npusan"
    with TraceWriter(str(path), backend="cuda") as w:
        w.stream_created(0x10)
        w.memory_allocated(0x1000, 0, 256)
        w.memory_freed(0x1000)
    return path


def test_analyze_warns_about_a_trace_without_kernels(no_kernels):
    result = CliRunner().invoke(cli, ["analyze", str(no_kernels)])
    assert result.exit_code == 0
    assert "npusan: warning:" in result.stderr and "no kernels" in result.stderr
    assert "the cuda device" in result.stderr


def test_info_warns_about_a_trace_without_kernels(no_kernels):
    for args in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["info", str(no_kernels), *args])
        assert result.exit_code == 0
        assert "npusan: warning: the trace has no kernels" in result.stderr


def test_a_trace_with_kernels_gets_no_such_warning(tmp_path):
    path = tmp_path / "one.npusan"
    with TraceWriter(str(path), backend="cuda") as w:
        w.kernel(0, "aten::add_", writes=[(0x1000, 64)])
    result = CliRunner().invoke(cli, ["analyze", str(path)])
    assert result.exit_code == 0 and "no kernels" not in result.stderr
