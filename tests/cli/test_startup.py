"""`npusan analyze` starts fast: it imports its own verb and the one report format it prints.

The wall-clock target (<= 0.3 s on a tiny trace) is a benchmark, not a timed test
(docs/benchmarks.md); what is tested here is what makes it possible: the modules a plain
text report needs, and not the other verbs, report formats, the trace writer, the process
pool or rich.
"""

from __future__ import annotations

import json
import subprocess
import sys

from .npusan_scenarios import scenario, workdir  # noqa: F401  (fixtures)

NOT_FOR_A_TEXT_REPORT = [
    "npusan.cli.record", "npusan.cli.info", "npusan.cli.export", "npusan.cli.redact", "npusan.cli.history",
    "npusan.analyzer.report.json_report", "npusan.analyzer.report.sarif",
    "npusan.analyzer.report.junit", "npusan.analyzer.report.html",
    "npusan.trace_format.writer", "npusan.trace_format.encoder", "concurrent.futures", "rich", "torch",
]


def _modules_after(*args: str) -> set:
    code = ("import json, sys\nfrom npusan.cli import cli\n"
            f"try:\n    cli({list(args)!r}, prog_name='npusan')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return set(json.loads(p.stderr.rsplit("MODULES ", 1)[1]))


def test_analyze_imports_only_what_a_text_report_needs(scenario):
    loaded = _modules_after("analyze", scenario("data_race"))
    assert "npusan.analyzer.report.text" in loaded and "npusan.cli.analyze" in loaded
    assert not loaded & set(NOT_FOR_A_TEXT_REPORT), sorted(loaded & set(NOT_FOR_A_TEXT_REPORT))


def test_a_chosen_format_is_imported_when_asked_for(scenario):
    loaded = _modules_after("analyze", scenario("data_race"), "--format", "sarif")
    assert "npusan.analyzer.report.sarif" in loaded and "npusan.analyzer.report.html" not in loaded


def test_every_verb_is_still_listed_and_runs():
    from click.testing import CliRunner

    from npusan.cli import cli

    assert sorted(cli.all_commands()) == ["analyze", "export", "history", "info", "record", "redact"]
    out = CliRunner().invoke(cli, ["--help"]).output
    for name in ("analyze", "export", "history", "info", "record", "redact"):
        assert f"  {name} " in out
    assert CliRunner().invoke(cli, ["info", "--help"]).exit_code == 0
