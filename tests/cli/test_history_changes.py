"""`npusan history`: what each run changed against the run before it (docs/nightly.md).

A night that fixed four races and brought one new one must read as a regression, not as a
fall from five to two: every format shows per run the new, persisting and fixed findings,
marks the run with a new one, and lists them by short fingerprint so that two findings
with one title stay apart.
"""

from __future__ import annotations

import json
import re

from npusan.analyzer.runs.history import History

from .npusan_scenarios import run, workdir  # noqa: F401  (fixtures)

SHARED = "data race on a 4.0 KiB tensor allocated at train.py:12: read on side not ordered after a write on default"


def _nights(path) -> None:
    """mon: five races (two with one title); tue: one of them persists, four are fixed, one is new
    (with the shared title again); wed: the same as tue."""
    h = History.open(str(path))
    with h.db:
        for i, label in enumerate(["mon", "tue", "wed"], 1):
            h.db.execute("INSERT INTO runs (label, created, traces, errors) VALUES (?, ?, 1, 0)",
                         (label, 1767225600.0 + i * 86400))
        for fp in ("a1", "b2", "c3", "d4", "e5"):
            title = SHARED if fp in ("a1", "b2") else f"race {fp}"
            h.db.execute("INSERT INTO findings VALUES (1, ?, 'data-race', ?, 2)", (fp * 32, title))
        for run_id in (2, 3):
            h.db.execute("INSERT INTO findings VALUES (?, ?, 'data-race', 'race e5', 3)", (run_id, "e5" * 32))
            h.db.execute("INSERT INTO findings VALUES (?, ?, 'data-race', ?, 1)", (run_id, "f6" * 32, SHARED))
    h.close()


def test_json_has_new_persisting_fixed_per_run(workdir, run):
    _nights(workdir / "h.db")
    doc = json.loads(run("history", "h.db", "--format", "json").stdout)
    got = [(r["label"], r["findings"], r["new"], r["persisting"], r["fixed"], r["regression"]) for r in doc["runs"]]
    assert got == [("mon", 5, 5, 0, 0, False),  # the first run is compared with nothing
                   ("tue", 2, 1, 1, 4, True),
                   ("wed", 2, 0, 2, 0, False)]
    tue = doc["runs"][1]
    assert tue["new_fingerprints"] == ["f6" * 32]
    assert tue["fixed_fingerprints"] == ["a1" * 32, "b2" * 32, "c3" * 32, "d4" * 32]


def test_text_marks_the_regression_and_tells_shared_titles_apart(workdir, run):
    _nights(workdir / "h.db")
    text = run("history", "h.db").stdout
    rows = {line.split()[0]: line for line in text.splitlines() if re.match(r"(mon|tue|wed) ", line)}
    assert rows["tue"].endswith("1    1           4      <- regression")
    assert "regression" not in rows["mon"] and "regression" not in rows["wed"]
    assert "tue: REGRESSION: 1 new, 1 persisting, 4 fixed" in text
    assert "wed:" not in text  # nothing changed
    listed = [line.split()[:2] for line in text.splitlines() if line.startswith("  ")]
    assert listed == [["+", "f6" * 8], ["-", "a1" * 8], ["-", "b2" * 8], ["-", "c3" * 8], ["-", "d4" * 8]]
    assert sum(SHARED in line for line in text.splitlines()) == 6  # 3 listed, 3 in the findings table


def test_html_highlights_the_regression_and_stays_script_free(workdir, run):
    _nights(workdir / "h.db")
    assert run("history", "h.db", "--format", "html", "-o", "h.html").exit_code == 0
    page = (workdir / "h.html").read_text()
    assert page.count('<tr class="regression">') == 1 and '<tr class="regression"><td>tue</td>' in page
    assert re.findall(r'data-change="(\w+)"[^>]*><title>\w+: (\d+)</title>', page) == [
        ("new", "1"), ("fixed", "4"), ("new", "0"), ("fixed", "0")]
    assert f'<td class="new">new</td><td><code>{"f6" * 8}</code></td>' in page
    assert f'<td class="fixed">fixed</td><td><code>{"a1" * 8}</code></td>' in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "default-src 'none'; style-src 'unsafe-inline'" in page


def test_unchecked_findings_are_neither_fixed_nor_new_when_they_come_back(workdir, run):
    h = History.open(str(workdir / "h.db"))
    with h.db:
        for label in ("mon", "tue", "wed"):
            h.db.execute("INSERT INTO runs (label, created, traces, errors) VALUES (?, 1767225600.0, 1, 0)", (label,))
        h.db.execute("INSERT INTO findings VALUES (1, ?, 'data-race', 'r', 1)", ("a1" * 32,))
        h.db.execute("INSERT INTO unchecked VALUES (2, ?, 'data-race', 'r', 'rank0.npusan')", ("a1" * 32,))
        h.db.execute("INSERT INTO findings VALUES (3, ?, 'data-race', 'r', 1)", ("a1" * 32,))
    h.close()
    doc = json.loads(run("history", "h.db", "--format", "json").stdout)
    assert [(r["new"], r["persisting"], r["fixed"], r["unchecked"]) for r in doc["runs"]] == [
        (1, 0, 0, 0), (0, 0, 0, 1), (0, 1, 0, 0)]
