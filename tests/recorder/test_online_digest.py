"""Online warn mode's output: the first finding in full, later ones compactly, a summary,
and a recording from NPUSAN_TRACE says where its trace is."""

import os
import subprocess
import sys
import textwrap

from npusan.recorder.online_digest import OnlineDigest

FULL = "data race on x\n  --> t.py:8\n  later:  ...\n  … 3 torch frames HINT\n  … 2 torch frames HINT\n  fix: ..."


def test_the_first_warning_is_full_with_one_hint_and_later_ones_are_compact():
    d = OnlineDigest()
    assert d.summary() is None
    first = d.message(FULL, " HINT")
    assert first.count("HINT") == 1 and first.endswith("fix: ...")
    second = d.message(FULL.replace("x", "y"), " HINT").splitlines()
    assert second[:2] == ["data race on y", "  --> t.py:8"] and len(second) == 3
    assert d.summary().startswith("npusan: online check: 2 stream-synchronization bugs warned about above")


def test_online_warn_is_compact_and_npusan_trace_says_where_the_trace_is(tmp_path):
    import npusan

    (tmp_path / "loop.py").write_text(textwrap.dedent('''
        import torch
        from npusan import sim
        s = sim.Stream()
        for i in range(3):
            x = torch.ones(1024)
            with sim.stream(s):
                y = x * 2
            x.add_(1)
    '''))
    boot = os.path.join(os.path.dirname(npusan.__file__), "recorder", "_boot")
    src = os.path.dirname(os.path.dirname(npusan.__file__))
    env = {**os.environ, "NPUSAN_ONLINE": "warn", "NPUSAN_BACKEND": "sim", "NPUSAN_TRACE": str(tmp_path / "t.npusan"),
           "PYTHONPATH": os.pathsep.join([boot, src])}
    env.pop("NPUSAN_STATUS", None)
    r = subprocess.run([sys.executable, "loop.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("npusan: warning: ")]
    assert len(warnings) >= 2
    assert r.stderr.count("fix:") == 1  # only the first warning is in full
    lines = r.stderr.strip().splitlines()
    assert lines[-2].startswith(f"npusan: online check: {len(warnings)} stream-synchronization bugs")
    assert lines[-1] == f"npusan: trace written: {tmp_path / 't.npusan'}"
