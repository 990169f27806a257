"""``torch.compile`` under the emulator (npusan/emulate/compiled.py): compiled code runs
eagerly, and the first compiled call says so once, on stderr and in the report."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.emulate.test_emulated_programs import _env, _record

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # two processes importing torch

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "compiled_forms.py")
SAID = "torch.compile runs eagerly under the emulator"


@pytest.mark.parametrize("variant,rc", [("clean", 0), ("race", 1)])
def test_compiled_code_runs_eagerly_and_the_first_call_says_so_once(tmp_path, variant, rc):
    p, trace = _record(tmp_path, PROG, variant)
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    assert p.stderr.count(f"npusan: note: {SAID}") == 1, p.stderr
    assert "Inductor's generated kernels and their stream placement are not run or checked" in p.stderr
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--no-color", str(trace)], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert a.returncode == rc, a.stdout
    assert a.stdout.count(SAID) == 1, a.stdout
    assert ("data race" in a.stdout) == bool(rc)


def test_nothing_is_said_without_a_compiled_call(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("import torch\nf = torch.compile(lambda x: x + 1)\n"
                    "print((torch.ones(2, device='cuda') * 2).sum().item())\n")
    p, _ = _record(tmp_path, str(prog))
    assert p.returncode == 0, p.stderr
    assert SAID not in p.stderr
