"""`npusan history` and `analyze --history` on databases and trace names from strangers.

A history database travels like a trace (attached to a bug report), and SQLite keeps any
value in any column: showing one must escape every value, never write to it, and fail in
one line; recording a run must not cost the run its report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sqlite3

import pytest

from .npusan_scenarios import run, scenario, workdir  # noqa: F401  (fixtures)

SCRIPT = "<script>alert(1)</script>"


def _history(workdir, scenario, run) -> sqlite3.Connection:
    scenario("data_race", "dr.bin")
    assert run("analyze", "dr.bin", "--history", "h.db", "--run-label", "mon").exit_code == 1
    return sqlite3.connect(workdir / "h.db")


def test_every_value_of_the_history_page_is_escaped(workdir, scenario, run):
    db = _history(workdir, scenario, run)
    with db:  # text where integers belong, as a crafted database has them
        db.execute("UPDATE runs SET traces = ?, errors = ?, label = ?", (SCRIPT, "<img src=x onerror=alert(1)>",
                                                                      "mon\u202e\u2028" + SCRIPT))
        db.execute("UPDATE findings SET count = ?", (SCRIPT,))
    db.close()
    r = run("history", "h.db", "--format", "html")
    assert r.exit_code == 0, r.stderr
    assert "<script" not in r.stdout and "<img" not in r.stdout and "&lt;script&gt;" in r.stdout
    assert "\u202e" not in r.stdout and "\u2028" not in r.stdout
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
                     r"style-src 'unsafe-inline'\">", r.stdout)
    for fmt in ("text", "json"):
        out = run("history", "h.db", "--format", fmt).stdout
        assert "\u202e" not in out and "\u2028" not in out, fmt


def test_odd_values_are_shown_not_tracebacks(workdir, scenario, run):
    db = _history(workdir, scenario, run)
    with db:
        db.execute("INSERT INTO runs (label, created, traces, errors) VALUES (?, 1e300, 1, 0)", (b"\xff\xfebin",))
        db.execute("INSERT INTO runs (label, created, traces, errors) VALUES ('t', 'yesterday', 1, 0)")
        db.execute("INSERT INTO findings VALUES (99, 'f' , 'data-race', 'gone', 1)")  # a run that is missing
    db.close()
    for fmt in ("text", "json", "html"):
        r = run("history", "h.db", "--format", fmt)
        assert r.exit_code == 0, (fmt, r.stderr)
    doc = json.loads(run("history", "h.db", "--format", "json").stdout)
    assert [x["created"] for x in doc["runs"]][1:] == ["?", "?"]
    assert doc["runs"][1]["label"] == "\ufffd\ufffdbin"
    assert doc["fingerprints"][-1]["first_run"] == "(run 99, missing)"


@pytest.mark.parametrize("content", [b"", None], ids=["empty file", "another SQLite database"])
def test_showing_a_file_never_writes_to_it(workdir, run, content):
    path = workdir / "x.db"
    if content is None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (t TEXT)")
        db.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    r = run("history", "x.db")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("npusan: error: history x.db: not an npusan history database")
    assert len(r.stderr.splitlines()) == 1
    assert path.read_bytes() == before and sorted(os.listdir(workdir)).count("x.db-journal") == 0


def test_the_analyze_html_report_allows_exactly_its_own_script(workdir, scenario, run):
    scenario("data_race", "dr.bin")
    page = run("analyze", "dr.bin", "--format", "html").stdout
    (policy,) = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy


def test_a_run_that_cannot_be_recorded_still_gets_its_report(workdir, scenario, run, monkeypatch):
    from npusan.analyzer.runs.history import History

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(History, "_record", full)
    scenario("correct", "ok.bin")
    r = run("analyze", "ok.bin", "--history", "h.db", "-o", "report.txt")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "npusan: error: history h.db: the run was not recorded (database or disk is full)"]
    assert "no stream-synchronization problems found" in (workdir / "report.txt").read_text()


def test_a_trace_name_that_is_not_utf8(workdir, scenario, run):
    name = os.fsdecode(b"r\xff.bin")
    scenario("data_race", name)
    r = run("analyze", name, "--format", "sarif")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["runs"][0]["artifacts"][0]["location"]["uri"].endswith("r%FF.bin")
    assert run("analyze", name, "--history", "h.db").exit_code == 1
    assert run("analyze", name, "--history", "h.db").exit_code == 1
    r = run("history", "h.db", "--format", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["runs"]) == 2
