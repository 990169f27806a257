"""The GPU tests of the CUDA backend, run on the emulated CUDA device where there is no GPU.

``test_gpu_adapter.py``, ``test_gpu_streams.py`` and ``test_gpu_collectives.py`` (marker
``gpu``) check npusan's CUDA backend against the real CUDA runtime and skip without one.
Here, on a machine without CUDA, they run unchanged in a separate pytest process with
``--npusan-emulate cuda`` (the emulator is installed for that whole process, so it
cannot share this one): the backend then records the hooks the emulator fires, which is
how ``npusan record --emulate cuda`` records. On a GPU machine this test skips and the
files run on the real device as before.

What cannot run emulated, and why (each is a skip of the file itself, checked below):
two-device tests (the emulator has one device); a reuse test whose allocator happened not to hand the block back
(as on a GPU, it depends on what earlier tests left in the caching allocator).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FILES = ["test_gpu_adapter.py", "test_gpu_streams.py", "test_gpu_collectives.py"]
#: Skip reasons a file may give under the emulator (see the module docstring).
EXPECTED_SKIPS = ("needs two CUDA devices", "the caching allocator did not hand the block back")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the gpu tests run on it")
def test_gpu_tests_pass_on_the_emulated_device():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    for var in ("NPUSAN_TRACE", "NPUSAN_ONLINE", "NPUSAN_EMULATE", "PYTEST_XDIST_WORKER"):
        env.pop(var, None)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--npusan-emulate", "cuda",
         "-m", "gpu", "-rs", *[str(HERE / f) for f in FILES]],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 15, summary  # the adapter tests and the [cuda] stream scenarios ran, not just collected
    for line in out.splitlines():
        if line.startswith("SKIPPED"):
            assert any(reason in line for reason in EXPECTED_SKIPS), line
