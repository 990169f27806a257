"""Shell completion offers option values: report formats, finding kinds (after those already
typed), backends, and file names for trace and file arguments. Driven through click's own
completion machinery, as ``_NPUSAN_COMPLETE=bash_complete`` runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.shell_completion import ShellComplete

from npusan.cli import cli


def complete(*words: str) -> list:
    """What completing the last word of ``npusan WORDS...`` offers: ``[(type, value), ...]``."""
    *args, incomplete = words
    items = ShellComplete(cli, {}, "npusan", "_NPUSAN_COMPLETE").get_completions(list(args), incomplete)
    return [(i.type, i.value) for i in items]


def values(*words: str) -> list:
    return [v for _, v in complete(*words)]


def test_analyze_format_offers_every_report_format():
    from npusan.analyzer.report import FORMATS

    assert values("analyze", "t.npusan", "--format", "") == [f.name for f in FORMATS]
    assert values("analyze", "t.npusan", "--format", "s") == ["sarif", "short"]


def test_fail_on_offers_kinds_after_those_typed():
    assert values("analyze", "t.npusan", "--fail-on", "") == ["data-race", "missing-record-stream", "reuse-race"]
    assert values("analyze", "t.npusan", "--fail-on", "data-race,") == [
        "data-race,missing-record-stream", "data-race,reuse-race"]
    assert values("analyze", "t.npusan", "--fail-on", "data-race,re") == ["data-race,reuse-race"]


def test_history_format_and_record_backend():
    assert values("history", "runs.db", "--format", "") == ["text", "json", "html"]
    assert values("record", "--backend", "") == ["auto", "cuda", "npu", "sim"]
    assert values("export", "t.npusan", "--format", "") == ["chrome"]


@pytest.mark.parametrize("words", [("analyze", "tr"), ("analyze", "t.npusan", "-o", "r"),
                                   ("analyze", "t.npusan", "--baseline", "b"), ("history", "ru")])
def test_paths_complete_as_file_names(words):
    assert complete(*words) == [("file", words[-1])]  # the shell lists the files


def test_the_installed_command_completes_through_the_environment_variable():
    env = {**os.environ, "_NPUSAN_COMPLETE": "bash_complete", "COMP_WORDS": "npusan analyze x --format j",
           "COMP_CWORD": "4"}
    out = subprocess.run([sys.executable, "-m", "npusan"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.splitlines() == ["plain,json", "plain,junit"], out
