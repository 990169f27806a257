"""`npusan export`: a loadable Chrome trace, and one-line errors."""

import json
import os

import pytest

from .npusan_scenarios import run, scenario, workdir  # noqa: F401  (fixtures)


def test_export_to_file_parses_back(scenario, run, workdir):
    trace = scenario("reuse_race")
    r = run("export", trace, "--format", "chrome", "-o", "timeline.json")
    assert r.exit_code == 0 and r.stdout == ""
    doc = json.loads((workdir / "timeline.json").read_text())
    assert doc["otherData"]["trace"] == trace
    kinds = {e["args"]["kind"] for e in doc["traceEvents"] if e.get("cat") == "finding"}
    assert kinds == {"missing-record-stream", "reuse-race"}
    tracks = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert len(tracks) == 3  # host + two streams


def test_export_to_stdout_with_window(scenario, run):
    r = run("export", scenario("data_race"), "--around-findings", "0")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["otherData"]["around_findings"] == 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--format", "perfetto"], "unknown timeline format 'perfetto'"),
        (["--around-findings", "-1"], "--around-findings must be 0 or more"),
        (["-o", "nodir/t.json"], "cannot write the timeline to nodir/t.json: directory"),
    ],
)
def test_export_usage_problems(scenario, run, args, needle):
    r = run("export", scenario("data_race"), *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_export_unusable_traces(run, workdir):
    (workdir / "junk.bin").write_bytes(b"NPUSANv\x01\xc1\xc1")
    for name in ("missing.bin", "junk.bin"):
        r = run("export", name)
        assert r.exit_code == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("npusan: error: ") and name in lines[0]


def test_export_refuses_to_overwrite_without_force(scenario, run, workdir):
    trace = scenario("data_race")
    (workdir / "t.json").write_text("keep me")
    r = run("export", trace, "-o", "t.json")
    assert r.exit_code == 2 and "t.json exists; add --force to overwrite it" in r.stderr
    assert (workdir / "t.json").read_text() == "keep me"
    r = run("export", trace, "-o", "t.json", "--force")
    assert r.exit_code == 0 and json.loads((workdir / "t.json").read_text())["traceEvents"]
    assert not [p for p in workdir.iterdir() if p.name.startswith(".npusan-export-")]


def test_export_says_what_it_left_out_and_all_exports_everything(run, workdir):
    from tests.analyzer.export.test_timeline_streaming import long_trace

    long_trace(workdir / "long.bin", 100, race_at=50)
    r = run("export", "long.bin", "--max-kernels", "20", "-o", "a.json")
    assert r.exit_code == 0
    assert "kept 20 of 200 kernels" in r.stderr and "--all exports everything" in r.stderr
    assert json.loads((workdir / "a.json").read_text())["otherData"]["kernels_left_out"] == 180
    r = run("export", "long.bin", "--all", "-o", "b.json")
    assert r.exit_code == 0 and "exported all 200 kernels" in r.stderr
    r = run("export", "long.bin", "--all", "--max-kernels", "5")
    assert r.exit_code == 2 and "--all exports everything" in r.stderr


def test_export_counts_findings_as_analyze_does(run, workdir):
    """The same bug on two side streams is two findings of the engine and one of the report:
    export's note about what it kept counts it as `npusan analyze` does."""
    from npusan.trace_format import TraceWriter

    with TraceWriter("two.npusan", backend="cuda", header={"default_streams": {0: 0}}) as w:
        for side, buf in ((1, 0x10000), (2, 0x20000)):  # one buffer each, made by the same line
            w.memory_allocated(buf, 0, size=256, stack=[("train.py", 4, "f")])
            w.kernel(side, "aten::fill_", writes=[buf], stack=[("train.py", 5, "f")])
            w.kernel(0, "aten::sum", reads=[buf], stack=[("train.py", 6, "f")])
        w.memory_allocated(0x30000, 0, size=256)
        for i in range(50):  # kernels far from the findings, which the window leaves out
            w.kernel(0, "aten::mul", writes=[0x30000], stack=[("train.py", 7, "f")])
    assert "npusan: 1 finding " in run("analyze", "two.npusan").stdout
    r = run("export", "two.npusan", "--around-findings", "2", "-o", "t.json")
    assert "(the 2 kernels before and after the finding's accesses)" in r.stderr, r.stderr
    assert "1 findings" not in r.stderr


def test_export_file_gets_the_mode_of_any_other_output(scenario, run, workdir):
    trace = scenario("data_race")
    old = os.umask(0o027)
    try:
        assert run("export", trace, "-o", "new.json").exit_code == 0
        assert (workdir / "new.json").stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not 0600
        (workdir / "old.json").write_text("x")
        os.chmod(workdir / "old.json", 0o604)
        assert run("export", trace, "-o", "old.json", "--force").exit_code == 0
        assert (workdir / "old.json").stat().st_mode & 0o777 == 0o604  # an overwritten file keeps its mode
    finally:
        os.umask(old)


def test_export_markers_match_the_report(scenario, run, workdir):
    # the same fingerprints and fixes as `npusan analyze` gives from the same folder
    trace = scenario("reuse_race")
    doc = json.loads(run("export", trace).stdout)
    report = json.loads(run("analyze", "--format", "json", trace).stdout)
    marked = {e["args"]["fingerprint"]: e["args"]["fix"] for e in doc["traceEvents"] if e.get("cat") == "finding"}
    assert set(marked) == {f["fingerprint"] for f in report["findings"]}
    for f in report["findings"]:
        assert marked[f["fingerprint"]] == f["fix"]
    r = run("export", trace, "--source-root", "missing-dir")
    assert r.exit_code == 2 and "--source-root missing-dir: not a directory" in r.stderr


def test_export_narrows_the_window_to_fit_the_cap(run, workdir):
    """A race at kernels 1503/1504 and --max-kernels 10: the default window of 1000 is
    narrowed to 4 so the race is drawn, rather than kernels 503-512 with both markers
    piled up after them on no kernel."""
    from tests.analyzer.export.test_timeline_streaming import markers_sit_on_drawn_kernels, races_trace

    races_trace(workdir / "t.bin", 2000, [1503])
    r = run("export", "t.bin", "--max-kernels", "10", "-o", "t.json")
    assert r.exit_code == 0
    assert ("kept 10 of 2,000 kernels (the 4 kernels before and after the finding's accesses, "
            "narrowed from 1,000 by the cap of 10 kernels); left out 1,990; --all exports everything") in r.stderr
    doc = json.loads((workdir / "t.json").read_text())
    assert sorted(m["args"]["seq"] for m in markers_sit_on_drawn_kernels(doc)) == [1503, 1504]
    assert doc["otherData"]["around_findings"] == 4 and doc["otherData"]["around_findings_narrowed_from"] == 1000
    assert doc["otherData"]["findings_left_out"] == 0


def test_export_says_which_findings_markers_it_left_out(run, workdir):
    from tests.analyzer.export.test_timeline_streaming import markers_sit_on_drawn_kernels, races_trace

    races_trace(workdir / "t.bin", 300, [20, 60, 100, 140, 180])
    r = run("export", "t.bin", "--max-kernels", "4", "-o", "t.json")
    assert r.exit_code == 0
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("npusan: warning: t.bin: kept 4 of 300 kernels")
    assert "6 finding markers (of 3 findings) on kernels past the cap: --max-kernels 10 draws every marker" in line
    assert "--all everything" in line
    doc = json.loads((workdir / "t.json").read_text())
    assert len(markers_sit_on_drawn_kernels(doc)) == 4
    assert doc["otherData"]["findings_left_out"] == 3 and doc["otherData"]["markers_left_out"] == 6
    r = run("export", "t.bin", "--max-kernels", "10", "-o", "t.json", "--force")
    assert r.exit_code == 0 and "marker" not in r.stderr
    assert len(markers_sit_on_drawn_kernels(json.loads((workdir / "t.json").read_text()))) == 10


def test_export_help_says_what_source_root_does_for_a_timeline(run):
    text = " ".join(run("export", "--help").stdout.split())
    assert "--source-root DIR Project folder" in text and "markers' fixes" in text
    assert "SARIF" not in text and "JUnit" not in text
    assert "SARIF" in run("analyze", "--help").stdout  # analyze's own help is unchanged


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_export_never_replaces_its_trace(scenario, run, workdir, force):
    trace = scenario("data_race")
    before = (workdir / trace).read_bytes()
    os.symlink(trace, "link")
    for out in (trace, "link"):
        r = run("export", trace, "-o", out, *force)
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and "it is a trace being read" in lines[0], r.stderr
    assert (workdir / trace).read_bytes() == before
