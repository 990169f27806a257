"""``npusan record`` with ``--backend auto`` on a machine where torch_npu is installed.

The stand-in torch_npu goes on ``PYTHONPATH`` of a real ``npusan record`` run, so the
activation path (start-up hook -> ``import torch`` -> backend choice) is the one a user
gets. NPU programs import torch first and torch_npu afterwards: the recorder must still
pick the NPU, and must never import torch_npu on the program's behalf.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .conftest import run_record

FAKE = str(Path(__file__).resolve().parent / "fake_torch_npu")


def _env() -> dict:
    pp = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": FAKE + (os.pathsep + pp if pp else ""), "TORCH_NPU_SANITIZER": "",
            "ASCEND_OPP_DEBUG_PATH": ""}


def _header_and_types(path):
    with TraceReader(str(path)) as r:
        return r.header, [rec[0] for rec in r.records()]


NPU_PROG = """
import sys
import torch
assert "torch_npu" not in sys.modules, "npusan imported torch_npu"
import torch_npu
s1 = torch_npu.npu.Stream()
s1.wait_stream(torch_npu.npu.current_stream())
torch_npu.npu.synchronize()
print("ok")
"""


def test_auto_picks_npu_when_torch_npu_is_imported_after_torch(tmp_path):
    proc, trace = run_record(tmp_path, NPU_PROG, record_args=("--backend", "auto"), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    header, types = _header_and_types(trace)
    assert header["backend"] == "npu"
    # the stand-in's hooks reached the recorder: stream creation, the wait_stream's event
    # record/wait, the device synchronization
    assert R.STREAM_CREATED in types and R.EVENT_RECORD in types and R.EVENT_WAIT in types
    assert R.DEVICE_SYNC in types


def test_auto_picks_npu_when_torch_npu_is_imported_first(tmp_path):
    code = NPU_PROG.replace('assert "torch_npu" not in sys.modules, "npusan imported torch_npu"\n', "")
    code = "import torch_npu\n" + code
    proc, trace = run_record(tmp_path, code, record_args=("--backend", "auto"), env=_env())
    assert proc.returncode == 0, proc.stderr
    header, types = _header_and_types(trace)
    assert header["backend"] == "npu" and R.STREAM_CREATED in types


def test_program_without_torch_npu_is_not_made_to_import_it(tmp_path):
    code = """
    import sys
    import torch
    torch.ones(3).add_(1)
    print("imported" if "torch_npu" in sys.modules else "not imported")
    """
    proc, trace = run_record(tmp_path, code, record_args=("--backend", "auto"), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert "not imported" in proc.stdout
    assert not trace.exists()
    assert "--backend sim" in proc.stderr  # the hint says what to do instead


def test_select_backend_auto_finds_an_importable_torch_npu(tmp_path):
    """In-process choice (``npusan.record(path)`` from code): importable counts, too."""
    code = (
        "import sys\n"
        "from npusan.recorder.backends import npu_installed, select_backend\n"
        "assert 'torch_npu' not in sys.modules\n"
        "import npusan\n"
        "assert 'torch_npu' not in sys.modules  # importing npusan never imports it\n"
        "assert npu_installed()\n"
        "print(select_backend('auto').name)\n"
    )
    env = dict(os.environ, **_env())
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "npu"
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code.replace("assert npu_installed()\n", "")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "sim"
