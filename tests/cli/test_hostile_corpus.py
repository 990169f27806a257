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
