"""Fixtures for the analyze/export CLI tests: scenario traces in a scratch working directory."""

import pytest
from click.testing import CliRunner
from npusan_scenarios import SCENARIOS, copy_source

from npusan.cli import cli


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory holding train.py, so reports quote it by a relative name."""
    copy_source(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return tmp_path


@pytest.fixture
def scenario(workdir):
    """``scenario("data_race")`` writes that trace into the working directory; returns its name."""

    def make(name: str, file: str = "", **kw) -> str:
        file = file or f"{name}.bin"
        SCENARIOS[name](workdir / file, **kw)
        return file

    return make


@pytest.fixture
def run():
    """Invoke ``npusan ARGS...``; the result has exit_code, stdout and stderr."""

    def invoke(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert "Traceback" not in result.output
        return result

    return invoke
