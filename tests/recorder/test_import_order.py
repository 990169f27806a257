"""Any import order of ``npusan``, ``npusan.sim``, ``torch`` and ``torch_npu`` records.

``import npusan.sim`` (or ``import torch_npu``) as a program's first import loads torch from
inside its own module body; recording must wait until that import finishes rather than
start against a half-initialized module. Every permutation runs in its own process, with
recording turned on by the environment alone (what ``npusan record`` sets).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import pytest

from npusan.recorder.activate import child_env
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .conftest import analyze, kinds
from .test_npu_activation import FAKE

IMPORTS = {
    "npusan": "import npusan",
    "sim": "import npusan.sim as sim",
    "sim-from": "from npusan import sim",
    "torch": "import torch",
    "torch_npu": "import torch_npu",
}

SIM_BODY = """
x = torch.ones(1024)
s = sim.Stream()
with sim.stream(s):
    y = x * 2          # reads x on the side stream
x.add_(1)              # writes x on the default stream: a data race
print("ok")
"""

NPU_BODY = """
s1 = torch_npu.npu.Stream()
s1.wait_stream(torch_npu.npu.current_stream())
torch_npu.npu.synchronize()
assert npusan.__name__ == "npusan" and sim.Stream is not None
print("ok")
"""


def _run_all(tmp_path: Path, programs: dict, extra_path: str = "") -> dict:
    """Run each program (name -> source) in its own process, two at a time, recording."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_") and k != "TORCH_NPU_SANITIZER"}

    def run(item):
        name, code = item
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(code))
        trace = tmp_path / f"{name}.npusan"
        env = child_env(str(trace), backend="auto", base=base)
        if extra_path:
            env["PYTHONPATH"] = extra_path + os.pathsep + env["PYTHONPATH"]
        proc = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            cwd=str(tmp_path),
        )
        return name, (proc, trace)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, programs.items()))


def _programs(modules: tuple, body: str, first: Optional[str] = None) -> dict:
    """Every import order of ``modules`` (name -> source), or those that import ``first``
    first; the two spellings of the sim import alternate over the orders of all modules."""
    programs = {}
    for i, order in enumerate(itertools.permutations(modules)):
        if first is not None and order[0] != first:
            continue
        names = [("sim-from" if i % 2 else "sim") if n == "sim" else n for n in order]
        programs["_".join(names).replace("-", "_")] = "\n".join(IMPORTS[n] for n in names) + body
    return programs


SIM_MODULES = ("npusan", "sim", "torch")
NPU_MODULES = ("npusan", "sim", "torch", "torch_npu")


@pytest.mark.parametrize("modules, body, count", [(SIM_MODULES, SIM_BODY, 6), (NPU_MODULES, NPU_BODY, 24)],
                         ids=["sim", "npu"])
def test_the_orders_in_parts_by_first_import_are_every_order_once(modules, body, count):
    """The tests below run the orders in parts, one per first import (so that no one test
    runs them all): together the parts are every order, once each."""
    parts = [_programs(modules, body, first) for first in modules]
    assert [len(p) for p in parts] == [count // len(modules)] * len(modules)
    every = _programs(modules, body)
    assert len(every) == count
    assert {k: v for p in parts for k, v in p.items()} == every


@pytest.mark.slow
@pytest.mark.timeout(900)  # two Python processes importing torch, in each of three parts
@pytest.mark.parametrize("first", SIM_MODULES)
def test_every_order_of_npusan_sim_and_torch_records_the_simulated_device(tmp_path, first):
    programs = _programs(SIM_MODULES, SIM_BODY, first)
    assert len(programs) == 2
    results = _run_all(tmp_path, programs)
    for name, (proc, trace) in results.items():
        assert proc.returncode == 0 and "ok" in proc.stdout, (name, proc.stderr)
        assert "warning" not in proc.stderr, (name, proc.stderr)
        assert trace.exists(), (name, proc.stderr)
        assert set(kinds(analyze(trace))) == {"data-race"}, name


@pytest.mark.slow
@pytest.mark.timeout(900)  # six Python processes importing torch, in each of four parts
@pytest.mark.parametrize("first", NPU_MODULES)
def test_every_order_of_npusan_sim_torch_and_torch_npu_records_the_npu(tmp_path, first):
    programs = _programs(NPU_MODULES, NPU_BODY, first)
    assert len(programs) == 6
    results = _run_all(tmp_path, programs, extra_path=FAKE)
    for name, (proc, trace) in results.items():
        assert proc.returncode == 0 and "ok" in proc.stdout, (name, proc.stderr)
        # the one warning expected: sim streams are not what the NPU backend records (and the
        # line NPUSAN_TRACE prints at exit)
        other = [ln for ln in proc.stderr.splitlines()
                 if "npusan.sim is used while recording" not in ln and not ln.startswith("npusan: trace written: ")]
        assert not other, (name, proc.stderr)
        with TraceReader(str(trace)) as r:
            header, types = r.header, [rec[0] for rec in r.records()]
        assert header["backend"] == "npu", name
        assert R.STREAM_CREATED in types and R.EVENT_WAIT in types and R.DEVICE_SYNC in types, name
