"""The Python API: ``npusan.analyze()`` / ``npusan.load()`` and the Report they give."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import npusan
from npusan.trace_format import TraceFormatError
from npusan.trace_format import records as R

from .cli.npusan_scenarios import line_of, run, scenario, workdir  # noqa: F401  (fixtures)


def test_importing_npusan_stays_cheap():
    code = ("import sys, npusan; heavy = {'torch', 'rich', 'click', 'msgpack'}; "
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_findings_carry_kind_stacks_counts_and_fingerprints(scenario):
    report = npusan.analyze(scenario("data_race"), scenario("seed_example"))
    assert isinstance(report, npusan.Report)
    kinds = sorted(f.kind.value for f in report.findings)
    assert kinds == ["data-race", "missing-record-stream"]
    race = next(f for f in report.findings if f.kind is npusan.Kind.DATA_RACE)
    assert race.count == 1 and len(race.fingerprint) == 32
    assert race.access.type == "read" and race.previous.type == "write"
    # whole stacks (torch frames included), and the program's own line of each side
    assert race.access.stack[-1].filename.endswith("torch/overrides.py")
    assert (race.location.filename, race.location.lineno) == ("train.py", line_of("data_race", "y = x.sum()"))
    assert race.previous_location.lineno == line_of("data_race", "x.fill_(1.0)")
    assert [fr.function for fr in race.access.stack[:2]] == ["main", "data_race"]
    assert race.traces == ["data_race.bin"]
    assert "data race" in race.title and race.block.size == 4096


def test_the_report_is_what_the_cli_reports(scenario, run):
    trace = scenario("data_race")
    report = npusan.analyze(trace)
    cli = run("analyze", "--format", "json", trace)
    assert cli.exit_code == 1
    assert report.to_json() == cli.stdout
    assert report.to_dict()["findings"][0] == report.findings[0].to_dict()
    assert run("analyze", "--no-color", trace).stdout == report.to_text()
    assert report.to_sarif() == run("analyze", "--format", "sarif", trace).stdout
    assert [c.to_dict() for c in report.root_causes] == json.loads(cli.stdout)["root_causes"]
    assert report.root_causes[0].findings == report.findings[:1] and report.root_causes[0].fix
    assert ET.fromstring(report.to_junit()).tag in ("testsuites", "testsuite")
    with pytest.raises(ValueError, match="unknown report format"):
        report.render("yaml")


def test_source_root_and_directories_as_the_command_takes_them(scenario, workdir, run, tmp_path_factory,
                                                              monkeypatch):
    trace = scenario("data_race")
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # no project folder above it
    (elsewhere / "traces").mkdir()
    (elsewhere / "traces" / "a.npusan").write_bytes(open(trace, "rb").read())
    monkeypatch.chdir(elsewhere)
    rooted = npusan.analyze("traces", source_root=workdir, jobs=2)  # a directory, searched for traces
    cli = run("analyze", "--format", "json", "--source-root", str(workdir), "-j", "2", "traces")
    assert rooted.to_json() == cli.stdout
    fix = "\n".join(rooted.root_causes[0].fix)
    assert "event = torch.cuda.current_stream().record_event()" in fix  # names checked in train.py
    bare = npusan.analyze("traces")  # no root: train.py may not be read
    assert "event = torch.cuda.current_stream().record_event()" in "\n".join(bare.root_causes[0].fix)  # unchecked
    assert "<event>" not in "\n".join(bare.root_causes[0].fix)
    assert bare.to_json() == run("analyze", "--format", "json", "traces").stdout
    with pytest.raises(TraceFormatError, match="nothing"):
        npusan.analyze(elsewhere / "nothing*.npusan")
    with pytest.raises(ValueError, match="not a directory"):
        npusan.analyze("traces", source_root=elsewhere / "missing")
    with pytest.raises(ValueError, match="OLD=NEW"):
        npusan.analyze("traces", map_path=["no-equals-sign"])
    with pytest.raises(ValueError, match="jobs"):
        npusan.analyze("traces", jobs=0)


def test_options_baseline_suppressions_min_count_and_grouping(scenario, workdir):
    trace = scenario("seed_example", steps=3)  # a missing record_stream, then the reuse it allows
    assert [(f.kind.value, f.count) for f in npusan.analyze(trace).findings] == [
        ("missing-record-stream", 3), ("reuse-race", 3)]
    assert len(npusan.analyze(trace, group=False).findings) == 6
    below = npusan.analyze(trace, min_count=4)
    assert below.findings == [] and len(below.below_min_count) == 2
    (workdir / "base.json").write_text(npusan.analyze(trace).to_json())
    known = npusan.analyze(trace, baseline=workdir / "base.json")
    assert known.findings == [] and len(known.known) == 2
    (workdir / "s.toml").write_text('[[suppress]]\nkind = "reuse-race"\nreason = "known, tracked"\n')
    quiet = npusan.analyze(trace, suppress=workdir / "s.toml")
    assert [f.kind.value for f in quiet.findings] == ["missing-record-stream"]
    assert [f.kind.value for f in quiet.suppressed] == ["reuse-race"]


def test_clean_trace_and_errors(scenario, workdir):
    assert len(npusan.analyze(scenario("correct"))) == 0
    with pytest.raises(ValueError, match="at least one trace"):
        npusan.analyze()
    with pytest.raises(TraceFormatError, match="missing.bin"):
        npusan.analyze(workdir / "missing.bin")
    with pytest.raises(ValueError, match="min_count"):
        npusan.analyze(scenario("correct"), min_count=0)
    (workdir / "bad.toml").write_text("[[suppress]]\nnot toml at all")
    with pytest.raises(ValueError):
        npusan.analyze(scenario("correct"), suppress=workdir / "bad.toml")


def test_load_reads_the_trace_itself(scenario):
    with npusan.load(scenario("data_race")) as trace:
        assert trace.header["writer"] == "npusan-tests" and trace.header["backend"] == "cuda"
        types = [rec[0] for rec in trace]
        assert types.count(R.KERNEL) == 2 and R.STREAM_CREATED in types
        assert trace.ended_cleanly
        assert len(trace.symbols.streams) == 2


def test_unreadable_traces_among_good_ones_are_listed_not_raised(scenario, workdir):
    (workdir / "night").mkdir()
    (workdir / "night" / "good.npusan").write_bytes(open(scenario("data_race"), "rb").read())
    (workdir / "night" / "bad.npusan").write_bytes(R.MAGIC + b"\x05garbage")
    report = npusan.analyze(workdir / "night")
    assert [f.kind.value for f in report.findings] == ["data-race"]
    assert [str(where).endswith("bad.npusan") for where, _ in report.errors] == [True]
    assert json.loads(report.to_json())["errors"][0]["trace"].endswith("bad.npusan")
    with pytest.raises(TraceFormatError, match="bad.npusan"):
        npusan.analyze(workdir / "night" / "bad.npusan")


def test_a_trace_without_kernels_warns_in_the_report(workdir):
    from npusan.trace_format import TraceWriter

    with TraceWriter(str(workdir / "empty.npusan"), backend="cuda") as w:
        w.stream_created(5)
    report = npusan.analyze(workdir / "empty.npusan")
    assert any("the trace has no kernels" in w for _, w in report.warnings)
    assert any("no kernels" in w for w in report.to_dict()["traces"][0]["warnings"])


def test_history_from_the_api(scenario, workdir):
    db = workdir / "nightly.db"
    first = npusan.analyze(scenario("data_race"), history=db, run_label="night1")
    assert [f.to_dict()["status"] for f in first.findings] == ["new"]
    second = npusan.analyze(scenario("data_race"), history=db, run_label="night2")
    assert [f.to_dict()["status"] for f in second.findings] == ["persisting"]
    clean = npusan.analyze(scenario("correct"), history=db)
    assert [k["kind"] for k in clean.to_dict()["fixed"]] == ["data-race"]
    with pytest.raises(ValueError, match="already recorded"):
        npusan.analyze(scenario("correct"), history=db, run_label="night1")
    with pytest.raises(ValueError, match="run_label only applies with history"):
        npusan.analyze(scenario("correct"), run_label="x")


def test_a_dask_cluster_by_address_or_by_client_reports_what_a_local_run_reports(scenario, workdir, dask_cluster):
    import distributed

    (workdir / "night").mkdir()
    for i, name in enumerate(["data_race", "seed_example", "correct"]):
        (workdir / "night" / f"rank{i}.npusan").write_bytes(open(scenario(name), "rb").read())
    (workdir / "night" / "rank9.npusan").write_bytes(R.MAGIC + b"\x05garbage")
    local = npusan.analyze(workdir / "night")
    by_address = npusan.analyze(workdir / "night", scheduler=dask_cluster)
    by_bytes = npusan.analyze(workdir / "night", scheduler=dask_cluster, send_traces=True)
    with distributed.Client(dask_cluster) as client:
        by_client = npusan.analyze(workdir / "night", scheduler=client)
        again = npusan.analyze(workdir / "night", scheduler=client)  # the caller's client stays open
        assert client.status == "running"
    assert len(local.findings) >= 2 and len(local.errors) == 1
    for report in (by_address, by_bytes, by_client, again):
        assert report.to_json() == local.to_json()


def test_scheduler_options_are_checked(scenario):
    with pytest.raises(ValueError, match="tcp://host:8786"):
        npusan.analyze(scenario("data_race"), scheduler="localhost")
    with pytest.raises(ValueError, match="distributed.Client"):
        npusan.analyze(scenario("data_race"), scheduler=42)
    with pytest.raises(ValueError, match="send_traces only applies with a scheduler"):
        npusan.analyze(scenario("data_race"), send_traces=True)
