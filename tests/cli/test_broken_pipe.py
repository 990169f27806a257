"""A reader of the output that goes away (``npusan analyze T | head``) ends npusan quietly,
as it ends git or cat: no traceback, no ``npusan: error: Broken pipe`` line, no "Exception
ignored ... BrokenPipeError" at exit, and exit status 141 (128 + SIGPIPE, what the shell
reports for those tools) rather than 1, which ``analyze`` uses for findings.

Real pipes, real processes: the noise came from the interpreter's last flush as much as
from the commands.
"""

import os
import subprocess
import sys

import pytest

from tests.analyzer.export.test_timeline_streaming import races_trace

from .npusan_scenarios import scenario, workdir  # noqa: F401  (fixtures)

NPUSAN = [sys.executable, "-m", "npusan"]
NOISE = ("Traceback", "Broken pipe", "BrokenPipeError", "Exception ignored", "npusan: error")


def assert_quiet(returncode: int, stderr: bytes) -> None:
    text = stderr.decode(errors="replace")
    assert not [n for n in NOISE if n in text], text
    assert returncode == 141, text


@pytest.mark.parametrize("args", [
    ["analyze", "{trace}"],
    ["analyze", "{trace}", "--format", "json", "-o", "-"],
    ["analyze", "{trace}", "--format", "short"],
    ["export", "{trace}", "-o", "-"],
    ["info", "{trace}"],
    ["info", "{trace}", "--json"],
    ["--help"],
    ["--version"],
    ["analyze", "--help"],
])
def test_a_reader_gone_before_the_output_ends_the_command_quietly(scenario, args):
    """The reader exits before npusan writes (``| head -0``, ``| true``): every write fails."""
    trace = scenario("data_race")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([*NPUSAN, *(a.format(trace=trace) for a in args)], stdout=write_end,
                           stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert_quiet(r.returncode, r.stderr)


def test_a_reader_that_reads_a_few_bytes_and_leaves_ends_the_export_quietly(workdir):
    """``npusan export T | head -c 100``: the timeline (megabytes, written as it is drawn)
    meets the closed pipe in the middle."""
    races_trace(workdir / "races.bin", 20000, range(10, 20000, 20))
    p = subprocess.Popen([*NPUSAN, "export", "races.bin", "--all"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert len(p.stdout.read(100)) == 100
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert_quiet(p.returncode, err)


def test_a_reader_that_reads_a_few_bytes_and_leaves_ends_analyze_quietly(workdir):
    """``npusan analyze T | head -1`` on a report several times larger than a pipe holds
    (240 KB of text, 1 MB of JSON): a single write of it all came back cut short, without
    an error, once the reader left, and analyze exited 1 as if the report had been read;
    written in pieces, a later piece meets the closed pipe."""
    races_trace(workdir / "races.bin", 4000, range(10, 4000, 20))
    for fmt in ("text", "json"):
        p = subprocess.Popen([*NPUSAN, "analyze", "races.bin", "--format", fmt], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.readline()
        p.stdout.close()
        _, err = p.communicate(timeout=120)
        text = err.decode(errors="replace")
        assert_quiet(p.returncode, err)


@pytest.mark.parametrize("args", [
    ["analyze", "{trace}", "-o", "/dev/stdout"],
    ["analyze", "{trace}", "--format", "json", "-o", "/dev/stdout"],
    ["export", "{trace}", "-o", "/dev/stdout", "--force"],
])
def test_dev_stdout_into_a_pipe_is_written(scenario, args):
    """``-o /dev/stdout | cat``: written into the pipe (resolving the link gave a name under
    /proc that cannot be opened, and nothing was written)."""
    trace = scenario("data_race")
    r = subprocess.run([*NPUSAN, *(a.format(trace=trace) for a in args)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert r.returncode in (0, 1), r.stderr.decode()
    assert b"data race" in r.stdout.lower() or b'"traceEvents"' in r.stdout or b'"findings"' in r.stdout, r.stdout[:300]
