"""The hostile-trace corpus (tests/data/hostile/): each trace gives its expected exit and message.

The corpus is written by tests/data/make_hostile_corpus.py (each case says which attack it
is) and committed, so a change of behaviour shows up as a diff of expected.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from npusan.cli import cli

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hostile"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())
VERBS = {"analyze": ["--format", "json"], "info": ["--json"], "export": []}


def test_corpus_is_complete():
    assert sorted(p.stem for p in CORPUS.glob("*.npusan")) == sorted(EXPECTED)


@pytest.mark.parametrize("name, verb", [(n, v) for n in sorted(EXPECTED) for v in VERBS])
def test_hostile_trace(name, verb, tmp_path):
    exit_code, needle = EXPECTED[name][verb]
    # export streams: to stdout a failure can follow a partial document, so write a file
    # (which must then not exist at all).
    out = tmp_path / "timeline.json"
    extra = ["-o", str(out)] if verb == "export" else []
    r = CliRunner().invoke(cli, [verb, str(CORPUS / f"{name}.npusan"), *VERBS[verb], *extra])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == exit_code, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    if exit_code == 2:
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("npusan: error: ")
        assert r.stdout == "" and not out.exists()
    else:
        json.loads(out.read_text() if verb == "export" else r.stdout)
    written = out.read_text() if out.exists() else ""
    for bad in ("\x1b", "\x9b", "\u202e", "\x07"):
        assert bad not in r.stdout + r.stderr + written


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_trace_redact_agrees_with_analyze(name, tmp_path):
    """redact refuses what analyze refuses (exit 2, one line, analyze's message, nothing
    written); what analyze reads, redact copies into a trace analyze reads the same way."""
    exit_code, needle = EXPECTED[name]["analyze"]
    out = tmp_path / "public.npusan"
    r = CliRunner().invoke(cli, ["redact", str(CORPUS / f"{name}.npusan"), "-o", str(out)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.stderr
    for bad in ("\x1b", "\x9b", "\u202e", "\x07"):
        assert bad not in r.stdout + r.stderr
    if exit_code == 2:
        assert r.exit_code == 2, r.stderr
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("npusan: error: ") and needle in r.stderr
        assert not out.exists() and list(tmp_path.iterdir()) == []
    else:
        assert r.exit_code == 0, r.stderr
        a = CliRunner().invoke(cli, ["analyze", str(out), "--format", "json"])
        assert a.exit_code == exit_code, a.stderr
