"""`npusan record`'s own options: checked before the command runs (nothing runs on a typo)."""

import pytest

from .npusan_scenarios import run, workdir  # noqa: F401  (fixtures)


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if record would start a command."""
    import npusan.cli.record as record

    def started(argv, *a, **k):
        raise AssertionError(f"ran {argv}")

    monkeypatch.setattr(record, "_run", started)


@pytest.mark.parametrize("args, needles", [
    (["--outptu", "x", "--", "python", "t.py"], ["no such option '--outptu'", "Did you mean '--output'?"]),
    (["--bakend", "sim", "python", "t.py"], ["no such option '--bakend'", "Did you mean '--backend'?"]),
    (["-o", "t.npusan", "--frobnicate", "python", "t.py"], ["no such option '--frobnicate'"]),
])
def test_an_unknown_option_before_the_command_is_a_usage_error(run, nothing_runs, args, needles):
    r = run("record", *args)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusan: error: ") and "(try 'npusan record --help')" in lines[0]
    for n in needles:
        assert n in lines[0]


@pytest.mark.parametrize("args, command", [
    (["--", "python", "t.py", "--outptu", "x"], ["python", "t.py", "--outptu", "x"]),
    (["python", "-u", "t.py", "--epochs", "1"], ["python", "-u", "t.py", "--epochs", "1"]),
    (["-o", "t.npusan", "-m", "pkg.train", "--lr", "1"], ["-m", "pkg.train", "--lr", "1"]),
    (["--backend", "sim", "-c", "print(1)"], ["-c", "print(1)"]),
    (["--", "--odd-program-name"], ["--odd-program-name"]),
])
def test_the_command_keeps_its_own_options(run, workdir, monkeypatch, args, command):
    import npusan.cli.record as record

    seen = []
    monkeypatch.setattr(record, "_run", lambda argv, *a, **k: (seen.append(argv), (0, False))[1])
    r = run("record", *args)
    assert r.exit_code == 0, r.output
    assert seen == [record._argv(tuple(command))]
