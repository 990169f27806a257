"""The captures CUDA refuses, on the real device: the same programs the emulator refuses
(tests/emulate/progs/graphs.py ``unjoined``: a fork never joined back, refused at
capture_end; ``outside_wait``: a wait inside the capture for work outside it), recorded by
the CUDA backend. Each program asserts the error text itself and prints "refused"; the trace
ends the refused capture and launches nothing. Marker ``gpu``: skipped without CUDA
(``pytest -m gpu tests/recorder``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "emulate", "progs", "graphs.py")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("variant", ["unjoined", "outside_wait"])
def test_cuda_refuses_the_captures_the_emulator_refuses(tmp_path, variant):
    from npusan.trace_format import TraceReader
    from npusan.trace_format import records as R

    out = tmp_path / "t.npusan"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + ROOT)
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "-o", str(out), "--", sys.executable, PROG, variant],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "refused" in p.stdout, p.stdout
    types = [r[0] for r in TraceReader(io.BytesIO(out.read_bytes())).records()]
    assert types.count(R.GRAPH_BEGIN) == types.count(R.GRAPH_END) == 1 and types.count(R.GRAPH_LAUNCH) == 0
