"""Triton under ``npusan record --emulate cuda``: kernels are interpreted on the CPU without
the user setting ``TRITON_INTERPRET``, and a kernel compiled for a GPU all the same stops
at its launch with one line saying what to do (a new-user trial got Triton's traceback,
ending in "libcuda.so cannot found")."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed")

from tests.emulate.test_emulated_programs import _env, _kinds  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "triton_kernel.py")


def _record(tmp_path, variant, interpret=None):
    env = _env()
    env.pop("TRITON_INTERPRET", None)
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(out), "--",
                        PROG, variant], env=env, capture_output=True, text=True, timeout=300)
    return p, out


@pytest.mark.slow  # subprocesses that import torch and Triton
@pytest.mark.parametrize("variant,rc,kinds", [("race", 1, ["data-race"]), ("clean", 0, [])])
def test_kernels_are_interpreted_without_setting_anything(tmp_path, variant, rc, kinds):
    p, trace = _record(tmp_path, variant)
    assert p.returncode == 0, p.stderr
    assert "TRITON_INTERPRET 1" in p.stdout and "ok" in p.stdout  # the program's own check of the values
    assert _kinds(trace) == (rc, kinds)


@pytest.mark.slow
def test_a_compiled_kernel_stops_with_one_line(tmp_path):
    p, _ = _record(tmp_path, "race", interpret="0")
    assert p.returncode == 1, p.stderr
    assert ("npusan: error: npusan --emulate cuda: Triton kernel scale_add is compiled for a GPU "
            "(TRITON_INTERPRET=0 is set)") in p.stderr, p.stderr
    assert "run with TRITON_INTERPRET=1" in p.stderr
    assert "Traceback" not in p.stderr and "libcuda" not in p.stderr, p.stderr


_DEFINED_FIRST = """
import os
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton, triton.language as tl

@triton.jit
def k(x_ptr):
    tl.store(x_ptr, 1.0)

from npusan.emulate.install import install
from npusan.emulate.cuda import Unsupported
install("cuda")
assert os.environ["TRITON_INTERPRET"] == "1"
x = torch.zeros(1, device="cuda")
try:
    k[(1,)](x)
except Unsupported as e:
    print(e)

@triton.jit
def k2(x_ptr):
    tl.store(x_ptr, 1.0)

k2[(1,)](x)
print(float(x.item()))
"""


@pytest.mark.slow
def test_a_kernel_defined_before_the_emulator_started(tmp_path):
    """Triton imported and a kernel defined before the emulator is installed in process:
    that kernel stops with the line (and why), one defined after runs interpreted."""
    prog = tmp_path / "defined_first.py"  # (Triton reads a kernel's source from its file)
    prog.write_text(_DEFINED_FIRST)
    p = subprocess.run([sys.executable, str(prog)], env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("npusan --emulate cuda: Triton kernel k is compiled for a GPU "
                               "(it was defined before the emulator started)"), p.stdout
    assert lines[1] == "1.0", p.stdout
