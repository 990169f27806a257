"""Nightly batch analysis: directories, globs, compressed traces, unreadable traces among
good ones, --jobs, history across runs, `npusan history`, and a real Dask LocalCluster."""

from __future__ import annotations

import gzip
import os
import json
import sqlite3

import pytest
import zstandard

from .npusan_scenarios import copy_source, run, scenario, workdir  # noqa: F401  (fixtures)


def _nightly(workdir, scenario):
    """ranks/ with nested folders, plain, .gz and .zst traces, and files that are not traces."""
    (workdir / "night" / "node0" / "deep").mkdir(parents=True)
    (workdir / "night" / "node1").mkdir(parents=True)
    scenario("data_race", "night/node0/rank0.npusan")
    scenario("seed_example", "night/node0/deep/rank1.bin")
    raw = (workdir / scenario("reuse_race", "tmp.bin")).read_bytes()
    (workdir / "night" / "node1" / "rank2.npusan.gz").write_bytes(gzip.compress(raw))
    raw = (workdir / scenario("correct", "tmp2.bin")).read_bytes()
    (workdir / "night" / "node1" / "rank3.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    (workdir / "night" / "notes.txt").write_text("not a trace\n")
    (workdir / "night" / "node1" / "junk.gz").write_bytes(gzip.compress(b"also not a trace"))
    return workdir / "night"


def test_a_directory_is_searched_recursively_for_plain_and_compressed_traces(workdir, scenario, run):
    night = _nightly(workdir, scenario)
    r = run("analyze", str(night), "--format", "json", "--jobs", "1")
    assert r.exit_code == 1, r.stderr
    doc = json.loads(r.stdout)
    paths = [t["path"].replace(str(workdir) + "/", "") for t in doc["traces"]]
    assert paths == ["night/node0/deep/rank1.bin", "night/node0/rank0.npusan",
                     "night/node1/rank2.npusan.gz", "night/node1/rank3.zst"]
    assert doc["errors"] == []
    assert [t["status"] for t in doc["traces"]] == ["findings", "findings", "findings", "clean"]
    assert doc["traces"][2]["findings"] == {"data-race": 0, "missing-record-stream": 1, "reuse-race": 1}
    assert sorted(f["kind"] for f in doc["findings"]) == [
        "data-race", "missing-record-stream", "missing-record-stream", "reuse-race"]


def test_glob_patterns_and_info_take_the_same_inputs(workdir, scenario, run):
    night = _nightly(workdir, scenario)
    r = run("analyze", f"{night}/**/rank[01]*", "--format", "json")
    assert [t["path"].rsplit("/", 1)[-1] for t in json.loads(r.stdout)["traces"]] == ["rank1.bin", "rank0.npusan"]
    r = run("info", str(night), "--json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)) == 4
    r = run("analyze", "nothing-*.bin")
    assert r.exit_code == 2 and "no file matches" in r.stderr


def test_an_unreadable_trace_does_not_stop_the_others(workdir, scenario, run):
    night = _nightly(workdir, scenario)
    good = (night / "node0" / "rank0.npusan").read_bytes()
    (night / "node0" / "rank9.npusan").write_bytes(good[:40] + b"\xc1" * 32)  # corrupt after the magic
    r = run("analyze", str(night), "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert [e["trace"].rsplit("/", 1)[-1] for e in doc["errors"]] == ["rank9.npusan"]
    assert doc["errors"][0]["error"] and "rank9" not in doc["errors"][0]["error"]
    assert len(doc["findings"]) == 4  # everything readable was analyzed
    assert "rank9.npusan" in r.stderr and "the other traces are reported" in r.stderr
    text = run("analyze", str(night), "--no-color")
    assert text.exit_code == 2
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["trace", "rank", "kernels", "data-race", "missing-record-stream", "reuse-race", "status"]
    assert any(l.endswith("unreadable") and "rank9.npusan" in l for l in lines[:7])
    assert any(l.strip().startswith("unreadable: ") and "rank9.npusan" in l for l in lines)


def test_jobs_give_the_same_report_as_a_serial_run(workdir, scenario, run):
    night = _nightly(workdir, scenario)
    serial = run("analyze", str(night), "--format", "json", "--jobs", "1")
    parallel = run("analyze", str(night), "--format", "json", "--jobs", "2")
    assert serial.exit_code == parallel.exit_code == 1
    assert parallel.stdout == serial.stdout
    assert run("analyze", str(night), "--jobs", "0").exit_code == 2


def _history_runs(workdir, scenario, run, db):
    scenario("data_race", "dr.bin")
    scenario("seed_example", "se.bin")
    runs = [("mon", ["dr.bin", "se.bin"]), ("tue", ["dr.bin"]), ("wed", ["dr.bin", "se.bin"])]
    docs = []
    for label, traces in runs:
        r = run("analyze", *traces, "--history", db, "--run-label", label, "--format", "json")
        assert r.exit_code == 1, r.stderr
        docs.append(json.loads(r.stdout))
    return docs


def test_history_marks_new_persisting_fixed_and_reappearing(workdir, scenario, run):
    mon, tue, wed = _history_runs(workdir, scenario, run, "h.db")
    status = lambda doc: {f["kind"]: f["status"] for f in doc["findings"]}  # noqa: E731
    assert status(mon) == {"data-race": "new", "missing-record-stream": "new"}
    assert mon["fixed"] == []
    assert status(tue) == {"data-race": "persisting"}
    assert [(k["kind"], bool(k["title"])) for k in tue["fixed"]] == [("missing-record-stream", True)]
    assert status(wed) == {"data-race": "persisting", "missing-record-stream": "new"}  # back again
    assert wed["fixed"] == []
    sarif = json.loads(run("analyze", "dr.bin", "se.bin", "--history", "h.db", "--format", "sarif").stdout)
    assert sorted(r["baselineState"] for r in sarif["runs"][0]["results"]) == ["unchanged", "unchanged"]
    db = sqlite3.connect(workdir / "h.db")
    assert [r[0] for r in db.execute("SELECT label FROM runs ORDER BY id")][:3] == ["mon", "tue", "wed"]
    assert db.execute("SELECT COUNT(*) FROM trace_findings WHERE run <= 3").fetchone()[0] == 5


def test_history_command_in_each_format(workdir, scenario, run):
    _history_runs(workdir, scenario, run, "h.db")
    doc = json.loads(run("history", "h.db", "--format", "json").stdout)
    assert [r["label"] for r in doc["runs"]] == ["mon", "tue", "wed"]
    assert [r["by_kind"]["missing-record-stream"] for r in doc["runs"]] == [1, 0, 1]
    mrs = next(f for f in doc["fingerprints"] if f["kind"] == "missing-record-stream")
    assert (mrs["first_run"], mrs["last_run"]) == ("mon", "wed")
    assert [o["run"] for o in mrs["occurrences"]] == ["mon", "wed"]
    text = run("history", "h.db").stdout
    assert "3 runs, 2 distinct findings" in text and mrs["fingerprint"][:16] in text
    r = run("history", "h.db", "--format", "html", "-o", "h.html")
    assert r.exit_code == 0
    page = (workdir / "h.html").read_text()
    assert page.count('<polyline class="kind"') == 3 and "<svg" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert run("history", "missing.db").exit_code == 2
    (workdir / "bad.db").write_text("not sqlite")
    r = run("history", "bad.db")
    assert r.exit_code == 2 and "not an npusan history database" in r.stderr


def test_baseline_sets_status_and_fixed_too(workdir, scenario, run):
    scenario("data_race", "dr.bin")
    scenario("seed_example", "se.bin")
    base = run("analyze", "dr.bin", "se.bin", "--format", "json", "-o", "base.json")
    assert base.exit_code == 1
    doc = json.loads(run("analyze", "dr.bin", "--baseline", "base.json", "--format", "json").stdout)
    assert doc["findings"] == []
    assert [k["kind"] for k in doc["fixed"]] == ["missing-record-stream"]
    doc = json.loads(run("analyze", "se.bin", "--format", "json").stdout)
    assert doc["fixed"] is None and doc["findings"][0]["status"] is None


def test_dask_cluster_reports_exactly_what_a_local_run_reports(workdir, scenario, run, dask_cluster):
    night = _nightly(workdir, scenario)
    good = (night / "node0" / "rank0.npusan").read_bytes()
    (night / "node0" / "rank9.npusan").write_bytes(good[:40] + b"\xc1" * 32)
    local = run("analyze", str(night), "--format", "json", "--jobs", "1")
    by_path = run("analyze", str(night), "--format", "json", "--scheduler", dask_cluster)
    by_bytes = run("analyze", str(night), "--format", "json", "--scheduler", dask_cluster, "--send-traces")
    assert json.loads(by_path.stdout)["errors"] == json.loads(local.stdout)["errors"]
    assert local.exit_code == by_path.exit_code == by_bytes.exit_code == 2
    assert json.loads(by_path.stdout) == json.loads(local.stdout)
    assert json.loads(by_bytes.stdout) == json.loads(local.stdout)


def test_export_takes_a_directory_naming_one_trace(workdir, scenario, run):
    (workdir / "one").mkdir()
    scenario("data_race", "one/r0.bin")
    r = run("export", "one", "-o", "t.json")
    assert r.exit_code == 0, r.stderr
    assert json.loads((workdir / "t.json").read_text())["traceEvents"]
    scenario("seed_example", "one/r1.bin")
    r = run("export", "one")
    assert r.exit_code == 2 and "names 2 traces" in r.stderr


def test_scheduler_options_are_checked_before_analysis(workdir, scenario, run):
    scenario("data_race", "dr.bin")
    r = run("analyze", "dr.bin", "--scheduler", "localhost")
    assert r.exit_code == 2 and "tcp://" in r.stderr
    r = run("analyze", "dr.bin", "--send-traces")
    assert r.exit_code == 2 and "--scheduler" in r.stderr
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on: refused at once, not after Dask's timeout
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.monotonic()
    r = run("analyze", "dr.bin", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert r.exit_code == 2 and f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in r.stderr
    assert time.monotonic() - t < 12


def test_empty_and_barely_started_traces_in_a_directory_are_unreadable_not_skipped(workdir, scenario, run):
    """A rank that crashed before writing anything leaves an empty or cut file: exit 2, listed."""
    night = _nightly(workdir, scenario)
    (night / "node1" / "empty.npusan").write_bytes(b"")
    good = (workdir / "tmp.bin").read_bytes()
    (night / "node1" / "tiny.zst").write_bytes(zstandard.ZstdCompressor().compress(good)[:10])
    (night / "node1" / "cut.npusan.gz").write_bytes(gzip.compress(good)[:12])
    (night / "node1" / "text.npusan").write_text("hello\n")
    (night / "empty.log.gz").write_bytes(b"")
    r = run("analyze", str(night), "--format", "json", "--jobs", "1")
    assert r.exit_code == 2, r.stderr
    doc = json.loads(r.stdout)
    errors = {e["trace"].rsplit("/", 1)[-1]: e["error"] for e in doc["errors"]}
    assert sorted(errors) == ["cut.npusan.gz", "empty.log.gz", "empty.npusan", "text.npusan", "tiny.zst"]
    assert "empty" in errors["empty.npusan"]
    assert "zstd data ends before any of it could be decoded" in errors["tiny.zst"]
    assert "gzip data ends before any of it could be decoded" in errors["cut.npusan.gz"]
    assert "does not start with the magic" in errors["text.npusan"]
    assert len(doc["findings"]) == 4  # the good traces are still analyzed; junk.gz and notes.txt are not traces
    assert "junk.gz" not in r.stdout and "notes.txt" not in r.stdout
    # Named directly, a cut zstd stream is not called an empty file.
    r = run("analyze", str(night / "node1" / "tiny.zst"))
    assert r.exit_code == 2 and "the file is empty" not in r.stderr
    assert "zstd data ends before any of it could be decoded" in r.stderr


def _night(workdir, name, traces):
    """nights/<name>/ with the given {file name: bytes}: a folder per night, as CI keeps them."""
    folder = workdir / "nights" / name
    folder.mkdir(parents=True)
    for file, data in traces.items():
        (folder / file).write_bytes(data)
    return str(folder)


def test_a_finding_whose_trace_became_unreadable_is_unchecked_not_fixed(workdir, scenario, run):
    dr = (workdir / scenario("data_race", "dr.bin")).read_bytes()
    se = (workdir / scenario("seed_example", "se.bin")).read_bytes()
    corrupt = se[:40] + b"\xc1" * 32
    docs = {}
    for label, traces in [("n1", {"dr.npusan": dr, "se.npusan": se}), ("n2", {"dr.npusan": dr, "se.npusan": se}),
                          ("n3", {"dr.npusan": dr, "se.npusan": corrupt}), ("n4", {"dr.npusan": dr, "se.npusan": se})]:
        r = run("analyze", _night(workdir, label, traces), "--history", "h.db", "--run-label", label, "--format", "json")
        assert r.exit_code == (2 if label == "n3" else 1), r.stderr
        docs[label] = json.loads(r.stdout)
    n3 = docs["n3"]
    assert n3["fixed"] == []
    assert [(k["kind"], [t.rsplit("/", 2)[-2:] for t in k["traces"]]) for k in n3["unchecked"]] == [
        ("missing-record-stream", [["n2", "se.npusan"]])]
    assert n3["comparison"]["unchecked"] == 1 and n3["comparison"]["unreadable_traces"] == 1
    # The next night it is back: persisting, not new, and the history keeps its first run.
    assert {f["kind"]: f["status"] for f in docs["n4"]["findings"]} == {
        "data-race": "persisting", "missing-record-stream": "persisting"}
    assert docs["n4"]["unchecked"] == [] and docs["n4"]["fixed"] == []
    hist = json.loads(run("history", "h.db", "--format", "json").stdout)
    mrs = next(f for f in hist["fingerprints"] if f["kind"] == "missing-record-stream")
    assert (mrs["first_run"], mrs["last_run"]) == ("n1", "n4")
    assert [r["unchecked"] for r in hist["runs"]] == [0, 0, 1, 0]
    # The text report says so, and that the fixed list may be incomplete.
    r = run("analyze", _night(workdir, "n5", {"dr.npusan": dr, "se.npusan": corrupt}), "--history", "h.db",
            "--no-color")
    assert r.exit_code == 2
    assert "0 new, 1 persisting, 0 fixed, 1 unchecked:" in r.stdout
    assert "unchecked: last seen only in" in r.stdout and "the fixed list may be incomplete" in r.stdout


def test_a_readable_trace_without_the_finding_still_makes_it_fixed(workdir, scenario, run):
    dr = (workdir / scenario("data_race", "dr.bin")).read_bytes()
    se = (workdir / scenario("seed_example", "se.bin")).read_bytes()
    clean = (workdir / scenario("correct", "ok.bin")).read_bytes()
    run("analyze", _night(workdir, "a", {"dr.npusan": dr, "se.npusan": se}), "--history", "h.db")
    r = run("analyze", _night(workdir, "b", {"dr.npusan": b"", "se.npusan": clean}), "--history", "h.db",
            "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert [k["kind"] for k in doc["fixed"]] == ["missing-record-stream"]
    assert [k["kind"] for k in doc["unchecked"]] == ["data-race"]


def test_history_with_a_baseline_counts_what_the_baseline_hid(workdir, scenario, run):
    scenario("data_race", "dr.bin")
    scenario("seed_example", "se.bin")
    assert run("analyze", "dr.bin", "se.bin", "--history", "h.db", "--format", "json", "-o", "base.json").exit_code == 1
    r = run("analyze", "dr.bin", "se.bin", "--history", "h.db", "--baseline", "base.json", "--no-color")
    assert r.exit_code == 0, r.stderr
    assert "0 new, 2 persisting (not shown: 2 persisting in the baseline), 0 fixed" in r.stdout
    doc = json.loads(run("analyze", "dr.bin", "--history", "h.db", "--baseline", "base.json", "--format", "json").stdout)
    c = doc["comparison"]
    assert (c["new"], c["persisting"], c["fixed"], c["unchecked"]) == (0, 1, 1, 0)
    assert c["hidden_by_baseline"] == {"new": 0, "persisting": 1}


def test_run_labels_are_unique_and_need_a_history(workdir, scenario, run):
    scenario("data_race", "dr.bin")
    assert run("analyze", "dr.bin", "--history", "h.db", "--run-label", "mon").exit_code == 1
    r = run("analyze", "dr.bin", "--history", "h.db", "--run-label", "mon")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "npusan: error: history h.db: a run labelled 'mon' is already recorded (labels name runs; choose another)"]
    r = run("analyze", "dr.bin", "--run-label", "tue")
    assert r.exit_code == 2 and r.stderr.strip() == "npusan: error: --run-label only applies with --history"
    assert run("analyze", "dr.bin", "--history", "h.db", "--run-label", " ").exit_code == 2
    db = sqlite3.connect(workdir / "h.db")
    assert [r[0] for r in db.execute("SELECT label FROM runs")] == ["mon"]
    # Default labels (the date and time) never collide: a second run in the same second gets '#2'.
    from npusan.analyzer.runs.history import History, HistoryError
    from npusan.analyzer.report.base import Report

    h = History.open(str(workdir / "h2.db"))
    labels = [h.record(Report(groups=[], traces=[])).label for _ in range(3)]
    assert len(set(labels)) == 3
    with pytest.raises(HistoryError):
        h.record(Report(groups=[], traces=[]), label=labels[0])


def test_history_chart_has_sensible_y_ticks(workdir, scenario, run):
    import re

    from npusan.analyzer.report.history import y_ticks

    assert y_ticks(0) == [0, 1]
    assert y_ticks(2) == [0, 1, 2]
    assert y_ticks(3) == [0, 1, 2, 3]
    assert y_ticks(7) == [0, 2, 4, 6, 8]
    assert y_ticks(37) == [0, 10, 20, 30, 40]
    assert y_ticks(1234) == [0, 500, 1000, 1500]
    _history_runs(workdir, scenario, run, "h.db")  # at most 1 finding of a kind per run
    run("history", "h.db", "--format", "html", "-o", "h.html")
    page = (workdir / "h.html").read_text()
    assert re.findall(r'<text class="ytick"[^>]*>(\d+)</text>', page) == ["0", "1"]


def test_an_unreadable_file_or_folder_in_a_directory_is_listed_not_skipped(workdir, scenario, run, monkeypatch):
    """docs/nightly.md: a file the search cannot read is an unreadable trace, a folder it
    cannot list an error line; neither is skipped silently. (Permissions are simulated:
    the tests may run as root, who reads everything.)"""
    import builtins

    from npusan.trace_format import inputs

    (workdir / "night" / "locked").mkdir(parents=True)
    scenario("data_race", "night/rank0.bin")
    (workdir / "night" / "rank1.bin").write_bytes(b"x")
    real_open, real_scandir = builtins.open, os.scandir

    def no_rank1(path, *a, **k):
        if str(path).endswith("rank1.bin"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    def no_locked(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(inputs, "open", no_rank1, raising=False)
    monkeypatch.setattr(os, "scandir", no_locked)
    found = inputs.find_traces(["night"])
    assert found.paths == ["night/rank0.bin", "night/rank1.bin"]
    assert found.problems == [("night/locked", "cannot list this folder (Permission denied)")]
