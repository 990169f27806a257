"""``npusan.pth``: the environment variables alone turn recording on, in any Python process.

These run plain ``python prog.py`` with nothing of npusan on ``PYTHONPATH`` (no
``npusan record``, no ``import npusan.auto``): only the start-up hook that installing the
package puts into site-packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .conftest import analyze, kinds, write_script

PTH = Path(sysconfig.get_paths()["purelib"]) / "npusan.pth"
REPO = Path(__file__).resolve().parents[2]

PROG = """
import npusan.sim as sim
import torch
x = torch.ones(1024)
s = sim.Stream()
with sim.stream(s):
    y = x * 2          # reads x on the side stream
x.add_(1)              # writes x on the default stream, unordered: a data race
print("ok")
"""

SHOW_MODULES = (
    "import sys; print(sorted({m.split('.')[0] for m in sys.modules} & {'npusan', 'torch', 'rich', 'click'}))"
)


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def _python(args, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=str(cwd), capture_output=True, text=True,
                          timeout=240)


def test_the_hook_is_installed_in_site_packages():
    assert PTH.is_file(), f"{PTH} is missing: reinstall npusan into this environment (make test does)"
    line = PTH.read_text()
    assert line.startswith("import ") and line.count("\n") == 1  # site runs one "import" line
    assert "'NPUSAN_TRACE' in os.environ or 'NPUSAN_ONLINE' in os.environ" in line


def test_unset_variables_import_nothing(tmp_path):
    proc = _python(["-c", SHOW_MODULES], _env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]" and proc.stderr == ""


def test_set_variables_arm_the_recorder_without_importing_torch(tmp_path):
    proc = _python(["-c", SHOW_MODULES], _env(NPUSAN_TRACE=str(tmp_path / "t.npusan")), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['npusan']"  # armed; torch (and the CLI's libraries) untouched
    assert not (tmp_path / "t.npusan").exists()


def test_npusan_trace_alone_records_a_plain_python_run(tmp_path):
    script = write_script(tmp_path, PROG)
    trace = tmp_path / "t.npusan"
    proc = _python([str(script)], _env(NPUSAN_TRACE=str(trace)), tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    assert set(kinds(analyze(trace))) == {"data-race"}


def test_npusan_online_raise_alone_stops_the_program_at_the_race(tmp_path):
    script = write_script(tmp_path, PROG)
    proc = _python([str(script)], _env(NPUSAN_ONLINE="raise"), tmp_path)
    assert proc.returncode == 1
    assert "npusan.recorder.errors.RaceError" in proc.stderr and "ok" not in proc.stdout


def test_npusan_online_warn_alone_warns_and_runs_on(tmp_path):
    script = write_script(tmp_path, PROG)
    warn = _python([str(script)], _env(NPUSAN_ONLINE="warn"), tmp_path)
    assert warn.returncode == 0 and "ok" in warn.stdout
    assert "data race" in warn.stderr


def test_a_bad_npusan_online_value_is_said_once(tmp_path):
    script = write_script(tmp_path, PROG)
    proc = _python([str(script)], _env(NPUSAN_ONLINE="maybe", NPUSAN_BACKEND="sim"), tmp_path)
    assert proc.stderr.count("NPUSAN_ONLINE='maybe' is not 'raise' or 'warn'; using 'warn'") == 1, proc.stderr


def test_npusan_disable_turns_the_hook_off(tmp_path):
    script = write_script(tmp_path, PROG)
    trace = tmp_path / "t.npusan"
    proc = _python([str(script)], _env(NPUSAN_TRACE=str(trace), NPUSAN_DISABLE="1"), tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr
    assert not trace.exists() and proc.stderr == ""


@pytest.mark.slow
@pytest.mark.timeout(900)  # builds the package, C core included
def test_a_built_wheel_installs_the_hook_at_the_top_of_site_packages(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("npusan-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert "npusan.pth" in z.namelist()  # top level: installed into site-packages itself
        assert z.read("npusan.pth").decode() == PTH.read_text()


def _import_auto(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN_")}
    base["PYTHONPATH"] = str(REPO / "src")
    base.update(env)
    return subprocess.run([sys.executable, "-c", "import npusan.auto"], env=base,
                          capture_output=True, text=True, timeout=120)


def test_import_npusan_auto_without_npusan_trace_says_nothing_is_recorded():
    r = _import_auto()
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "NPUSAN_TRACE is not set; nothing is recorded" in lines[0], r.stderr


def test_import_npusan_auto_is_quiet_when_asked_to_record_online_or_disabled():
    assert "nothing is recorded" not in _import_auto(NPUSAN_ONLINE="warn").stderr
    assert "nothing is recorded" not in _import_auto(NPUSAN_DISABLE="1").stderr
