"""Golden tests of the terminal report on the seed's scenarios.

The traces are written with TraceWriter (fixed header, synthetic stacks pointing at
``train.py``, copied next to the trace), so the report must be byte-for-byte the same on
every run and machine. Regenerate after an intended change with::

    NPUSAN_UPDATE_GOLDEN=1 .venv/bin/pytest tests/cli/test_golden_reports.py
"""

import os
from pathlib import Path

import pytest

from .npusan_scenarios import run, scenario, workdir  # noqa: F401  (fixtures)

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("NPUSAN_UPDATE_GOLDEN") == "1"

CASES = {
    "seed_example": (["seed_example"], []),
    "data_race": (["data_race"], []),
    "view_race": (["view_race"], []),
    "reuse_race": (["reuse_race"], []),
    "correct": (["correct"], []),
    "seed_example_full_stacks": (["seed_example"], ["--full-stacks"]),
    "several_traces": (["seed_example", "data_race", "reuse_race"], []),
    "seed_example_3_steps_no_group": (["seed_example:3"], ["--no-group"]),
}


def make_traces(scenario, specs):
    paths = []
    for spec in specs:
        name, _, steps = spec.partition(":")
        kw = {"steps": int(steps)} if steps else {}
        paths.append(scenario(name, **kw))
    return paths


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_report_matches_golden(case, scenario, run):
    specs, options = CASES[case]
    traces = make_traces(scenario, specs)
    result = run("analyze", *traces, "--no-color", *options)
    assert result.exit_code == (0 if specs == ["correct"] else 1)
    again = run("analyze", *traces, "--no-color", *options)
    assert again.stdout == result.stdout  # deterministic within a run too
    golden = GOLDEN / f"{case}.txt"
    if UPDATE:
        golden.write_text(result.stdout)
    assert golden.exists(), f"missing {golden}; run with NPUSAN_UPDATE_GOLDEN=1"
    assert result.stdout == golden.read_text()


def test_golden_files_have_no_machine_specific_content():
    for golden in GOLDEN.glob("*.txt"):
        text = golden.read_text()
        assert "/tmp" not in text and "pytest-of" not in text and "\x1b[" not in text, golden
