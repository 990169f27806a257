"""The collective scenarios of ``dist_prog.py`` on CUDA: a single-rank NCCL process group
under ``npusan record --backend cuda -- torchrun --nproc_per_node=1`` (marker ``gpu``).

Here the process group's events come from the CUDA trace hooks, and the recorder must put
each collective's accesses between the NCCL stream's wait and its end event.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from npusan.analyzer.replay.traces import analyze_traces  # noqa: E402

from .test_collectives_dist import SCENARIOS, by_scenario, check_findings, launch  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_nccl_available()),
                       reason="needs NCCL"),
]


def test_nccl_scenarios_clean_or_found_where_they_race(tmp_path):
    from npusan.emulate.install import installed

    # On the emulated device (no GPU: test_gpu_emulated.py), the ranks run emulated too.
    traces = launch(tmp_path, SCENARIOS, nproc=1, backend="cuda", emulate=installed(), NPUSAN_TEST_DEVICE="cuda")
    result = analyze_traces([str(t) for t in traces])
    check_findings(result, "nccl", ranks=1)
    f = by_scenario(result)["bug_use_before_wait"][0]
    assert f.previous.op == "all_reduce" and f.previous.stream.role == "comm"
