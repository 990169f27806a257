"""Which replay engine runs is visible: ``npusan --version`` names it (and why the compiled
core is not used, when it is not), and ``npusan analyze`` says once on stderr when the core
is not available, however many worker processes replay the traces."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npusan.analyzer.replay import native

from .npusan_scenarios import scenario, workdir  # noqa: F401  (fixtures)

#: Runs the CLI as if the compiled core were not built (its import fails with a reason).
WITHOUT_CORE = ("import sys\nsys.modules['npusan.analyzer.replay._core'] = None\n"
                "sys.argv = ['npusan'] + sys.argv[1:]\nfrom npusan.cli import main\nmain()\n")
NOTE = "npusan: note: the compiled replay core is not available"


def _npusan(*args, without_core: bool = False, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", WITHOUT_CORE] if without_core else [sys.executable, "-m", "npusan"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built here")
def test_version_names_the_compiled_core():
    out = _npusan("--version")
    assert out.returncode == 0 and out.stdout.splitlines()[1] == "replay engine: compiled core (npusan.analyzer.replay._core)"


def test_version_says_why_the_python_engine_runs():
    out = _npusan("--version", without_core=True)
    assert out.returncode == 0 and out.stderr == ""
    engine = out.stdout.splitlines()[1]
    assert engine.startswith("replay engine: Python, much slower: the compiled core is not available (")
    assert "npusan.analyzer.replay._core" in engine  # the import error, as native.IMPORT_ERROR has it


def test_version_names_an_engine_chosen_by_the_environment(monkeypatch):
    import os

    out = _npusan("--version", env={**os.environ, "NPUSAN_ENGINE": "python"})
    assert out.stdout.splitlines()[1].startswith("replay engine: Python (selected by NPUSAN_ENGINE=python;")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_engine_that_is_no_choice_is_warned_about_once(scenario, jobs):
    """NPUSAN_ENGINE=pyhton (a typo) must not pass for a choice when comparing the engines."""
    import os

    env = {**os.environ, "NPUSAN_ENGINE": "pyhton"}
    out = _npusan("analyze", scenario("data_race"), scenario("correct"), "--jobs", jobs, env=env)
    assert out.returncode == 1
    warning = "npusan: warning: NPUSAN_ENGINE='pyhton' is not one of native, python; using the default engine"
    assert out.stderr.count(warning) == 1, out.stderr
    assert warning in _npusan("--version", env=env).stderr
    for ok in ("python", "Python", "native", ""):
        assert "NPUSAN_ENGINE" not in _npusan("analyze", scenario("correct"), env={**os.environ, "NPUSAN_ENGINE": ok}).stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_analyze_says_once_that_the_core_is_missing(scenario, jobs):
    traces = [scenario("data_race"), scenario("correct")]
    out = _npusan("analyze", *traces, "--jobs", jobs, without_core=True)
    assert out.returncode == 1, out.stderr
    assert out.stderr.count(NOTE) == 1, out.stderr
    assert "import of npusan.analyzer.replay._core halted" in out.stderr  # the reason


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built here")
def test_analyze_is_quiet_about_the_engine_when_the_core_runs(scenario):
    out = _npusan("analyze", scenario("data_race"))
    assert out.returncode == 1 and NOTE not in out.stderr
