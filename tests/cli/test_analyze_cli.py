"""`npusan analyze`: exit status, formats, options CI needs, and one-line errors."""

import json
import os
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from npusan.analyzer.report.schema import REPORT_SCHEMA

from .npusan_scenarios import DATA, run, scenario, truncate, workdir  # noqa: F401  (fixtures)

SARIF_SCHEMA = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())


def one_error_line(result, *needles):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("npusan: error: ")
    for n in needles:
        assert n in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize(
    "name, code, kinds",
    [
        ("seed_example", 1, ["missing-record-stream"]),
        ("data_race", 1, ["data-race"]),
        ("view_race", 1, ["data-race"]),
        ("reuse_race", 1, ["missing-record-stream", "reuse-race"]),
        ("correct", 0, []),
    ],
)
def test_exit_status_and_kinds(scenario, run, name, code, kinds):
    r = run("analyze", scenario(name), "--format", "json")
    assert r.exit_code == code
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, REPORT_SCHEMA)
    assert sorted(f["kind"] for f in doc["findings"]) == kinds
    assert r.stderr == ""


def test_text_report_to_stdout_has_no_color_when_not_a_tty(scenario, run):
    r = run("analyze", scenario("data_race"))
    assert r.exit_code == 1
    assert r.stdout.startswith("error[data-race]") and "\x1b[" not in r.stdout


def test_output_file_and_every_format(scenario, run, workdir):
    trace = scenario("reuse_race")
    for fmt, check in [
        ("text", lambda s: ": reuse-race: " in s),  # under the root cause it shares (--expand: in full)
        ("json", lambda s: jsonschema.validate(json.loads(s), REPORT_SCHEMA) is None),
        ("sarif", lambda s: jsonschema.validate(json.loads(s), SARIF_SCHEMA) is None),
        ("junit", lambda s: len(ET.fromstring(s).findall("testsuite/testcase/failure")) == 2),
    ]:
        out = workdir / f"report.{fmt}"
        r = run("analyze", trace, "--format", fmt, "-o", out)
        assert r.exit_code == 1 and r.stdout == ""
        assert check(out.read_text()), fmt


def test_several_traces_give_one_report_grouped_across_them(scenario, run):
    a = scenario("seed_example", "rank0.bin")
    b = scenario("seed_example", "rank1.bin", base=0x7E0000000000, side=0x1234)
    c = scenario("data_race", "rank2.bin")
    r = run("analyze", a, b, c, "--format", "json")
    doc = json.loads(r.stdout)
    assert [t["path"] for t in doc["traces"]] == ["rank0.bin", "rank1.bin", "rank2.bin"]
    by_kind = {f["kind"]: f for f in doc["findings"]}
    assert by_kind["missing-record-stream"]["traces"] == [0, 1]
    assert by_kind["missing-record-stream"]["count"] == 2
    assert sorted(by_kind["missing-record-stream"]["addresses"]) == [0x7E0000000000, 0x7F0000000000]
    assert by_kind["data-race"]["traces"] == [2]
    text = run("analyze", a, b, c).stdout
    assert "twice" in text or "2 times in rank0.bin, rank1.bin" in text


def test_no_group_lists_each_occurrence(scenario, run):
    trace = scenario("seed_example", steps=3)
    # The default stream never waits for the side stream: every step misses a
    # record_stream, and from the second step on the block is reused under the old use.
    grouped = json.loads(run("analyze", trace, "--format", "json").stdout)
    missing = [f for f in grouped["findings"] if f["kind"] == "missing-record-stream"]
    assert [f["count"] for f in missing] == [3]
    flat = json.loads(run("analyze", trace, "--format", "json", "--no-group").stdout)
    flat_missing = [f for f in flat["findings"] if f["kind"] == "missing-record-stream"]
    assert [f["count"] for f in flat_missing] == [1, 1, 1]
    assert len({f["first"]["seq"] for f in flat_missing}) == 3
    assert {f["fingerprint"] for f in flat_missing} == {missing[0]["fingerprint"]}
    assert len(flat["findings"]) == sum(f["count"] for f in grouped["findings"])


def test_fail_on_and_min_count(scenario, run):
    race = scenario("data_race")
    assert run("analyze", race, "--fail-on", "missing-record-stream").exit_code == 0
    assert run("analyze", race, "--fail-on", "data-race,reuse-race").exit_code == 1
    r = run("analyze", race, "--fail-on", "missing-record-stream", "--format", "json")
    assert len(json.loads(r.stdout)["findings"]) == 1  # still reported, just not failing
    seed = scenario("seed_example", steps=3)
    assert run("analyze", seed, "--min-count", "3").exit_code == 1
    r = run("analyze", seed, "--min-count", "4")
    assert r.exit_code == 0
    assert "not shown: 2 findings seen fewer than --min-count 4 times" in r.stdout


def test_suppressions_silence_count_and_warn_about_unused(scenario, run, workdir):
    trace = scenario("reuse_race")
    (workdir / "s.toml").write_text(
        '[[suppress]]\nkind = "reuse-race"\nreason = "tracked in #12"\n'
        '[[suppress]]\nframe = "train.py:40"\nop = "free"\nreason = "freed on purpose"\n'
        '[[suppress]]\nop = "aten::never*"\nreason = "stale"\n'
    )
    r = run("analyze", trace, "--suppress", "s.toml")
    assert r.exit_code == 0
    assert "suppressed: 2 findings (2 occurrences) by s.toml" in r.stdout
    warnings = r.stderr.strip().splitlines()
    assert warnings == ["npusan: warning: suppression file s.toml: entry 3 (op=aten::never*; reason: stale) "
                        "matched no finding"]
    doc = json.loads(run("analyze", trace, "--suppress", "s.toml", "--format", "json").stdout)
    assert doc["summary"]["suppressed"] == 2 and doc["findings"] == []


def test_baseline_reports_only_new_findings_and_what_disappeared(scenario, run, workdir):
    old = scenario("reuse_race", "old.bin")
    r = run("analyze", old, "--format", "json", "-o", "known.json")
    assert r.exit_code == 1
    # Same bugs, other pointers: nothing new.
    same = scenario("reuse_race", "same.bin", base=0x7A0000000000, side=0x4444)
    r = run("analyze", same, "--baseline", "known.json")
    assert r.exit_code == 0
    assert "baseline known.json: 2 known findings still present (not shown), 0 gone" in r.stdout
    # Tonight: the reuse bug is fixed, a data race is new.
    new = scenario("data_race", "new.bin")
    r = run("analyze", new, "--baseline", "known.json", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert [f["kind"] for f in doc["findings"]] == ["data-race"]
    assert sorted(g["kind"] for g in doc["baseline"]["gone"]) == ["missing-record-stream", "reuse-race"]
    text = run("analyze", new, "--baseline", "known.json").stdout
    assert "2 gone since the baseline:" in text and "[reuse-race] allocator reuse race" in text


def test_truncated_trace_is_analyzed_with_a_warning(scenario, run, workdir):
    trace = scenario("seed_example", steps=20)
    truncate(workdir / trace, 0.6)
    r = run("analyze", trace, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["summary"]["truncated"] is True and doc["traces"][0]["truncated"] is True
    assert doc["findings"][0]["kind"] == "missing-record-stream"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusan: warning: ") and trace in lines[0]
    assert "TRUNCATED" in run("analyze", trace).stdout


def test_a_block_with_more_strided_views_than_are_kept_is_warned_about(run, workdir):
    """Two streams write 32 disjoint column pairs of one matrix (strided views), then read
    their own back: past the 16 views kept exactly per block the oldest are kept as their
    whole span, and the write/read races reported then are false; the trace's warning and
    each such finding say so, as for merged byte ranges. The same program with 8 column
    pairs stays exact: no race, no warning."""
    from npusan.trace_format import Strided, TraceWriter

    def program(path, pairs):
        cols = 64 // pairs
        with TraceWriter(path, backend="cuda", header={"default_streams": {0: 0}}) as w:
            w.memory_allocated(0x10000, 0, size=64 * 64 * 4)
            views = [Strided(0x10000 + 4 * cols * k, (64, cols), (64, 1), 4) for k in range(pairs)]
            for k, v in enumerate(views):
                w.kernel(1 + k % 2, "aten::copy_", writes=[v])
            for k, v in enumerate(views):
                w.kernel(1 + k % 2, "aten::sum", reads=[v])

    program("views.npusan", 32)
    r = run("analyze", "views.npusan", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    (warning,) = doc["traces"][0]["warnings"]
    assert "1 block had more than 16 strided views in use at once" in warning and "may be false" in warning
    assert doc["findings"] and all(f["merged_ranges"] for f in doc["findings"])
    assert "a view's whole span" in run("analyze", "views.npusan").stdout
    program("few.npusan", 8)
    r = run("analyze", "few.npusan")
    assert r.exit_code == 0 and "may be false" not in r.stderr + r.stdout


def test_a_block_whose_ranges_were_merged_is_warned_about(run, workdir):
    """Two streams writing alternate pieces of one buffer, 300 pieces, then reading them
    back: past the cap of 256 ranges neighbours are merged, and the races reported there are
    false; the report says which trace it was and why its races may be false (a trace with
    no race gets no such warning)."""
    from npusan.trace_format import TraceWriter

    with TraceWriter("pieces.npusan", backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.memory_allocated(0x10000, 0, size=1 << 20)
        for i in range(300):
            w.kernel(1 + i % 2, "aten::copy_", writes=[(0x10000 + 64 * i, 64)])
        for i in range(300):  # each stream reads its own pieces back
            w.kernel(1 + i % 2, "aten::sum", reads=[(0x10000 + 64 * i, 64)])
    r = run("analyze", "pieces.npusan", "--format", "json")
    assert r.exit_code == 1  # the false races merging makes here (no merge policy avoids them)
    doc = json.loads(r.stdout)
    (warning,) = doc["traces"][0]["warnings"]
    assert "1 block had more than 256 separately accessed byte ranges" in warning and "may be false" in warning
    assert "may be false" in r.stderr
    # and so does each finding there
    assert [f["merged_ranges"] for f in doc["findings"]] == [True]
    text = run("analyze", "pieces.npusan").stdout
    assert text.count("note:") == 1 and "neighbouring range's" in text
    run("analyze", "pieces.npusan", "--format", "html", "-o", "r.html")
    assert "may be a neighbouring range" in open("r.html").read()
    sarif = json.loads(run("analyze", "pieces.npusan", "--format", "sarif").stdout)
    assert "may be a neighbouring range" in sarif["runs"][0]["results"][0]["message"]["text"]
    with TraceWriter("clean.npusan", backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.memory_allocated(0x10000, 0, size=1 << 20)
        for i in range(300):  # over the cap too, but one stream: no race, nothing to doubt
            w.kernel(1, "aten::copy_", writes=[(0x10000 + 64 * i, 64)])
    r = run("analyze", "clean.npusan")
    assert r.exit_code == 0 and "may be false" not in r.stderr + r.stdout
    with TraceWriter("few.npusan", backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.memory_allocated(0x10000, 0, size=1 << 20)
        for i in range(200):  # under the cap: a race that is what it says
            w.kernel(1 + i % 2, "aten::copy_", writes=[(0x10000 + 64 * i, 64)])
        w.kernel(3, "aten::sum", reads=[(0x10000, 64)])
    doc = json.loads(run("analyze", "few.npusan", "--format", "json").stdout)
    assert [f["merged_ranges"] for f in doc["findings"]] == [False]


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--format", "xml"], ["unknown report format 'xml'", "text, json, sarif, junit"]),
        (["--fail-on", "races"], ["unknown finding kind 'races'"]),
        (["--fail-on", ","], ["--fail-on needs at least one"]),
        (["--min-count", "0"], ["--min-count must be at least 1"]),
        (["--suppress", "missing.toml"], ["cannot read suppression file missing.toml"]),
        (["--baseline", "missing.json"], ["cannot read baseline missing.json"]),
        (["-o", "no/such/dir/out.txt"], ["cannot write the report", "does not exist"]),
        (["-o", "."], ["is a directory"]),
        (["-o", "data_race.bin/out.txt"], ["cannot write the report", "does not exist"]),
    ],
)
def test_usage_problems_are_one_line(scenario, run, args, needles):
    trace = scenario("data_race")
    one_error_line(run("analyze", trace, *args), *needles)


def test_malformed_suppression_and_baseline_files(scenario, run, workdir):
    trace = scenario("data_race")
    (workdir / "bad.toml").write_text('[[suppress]]\nkind = "data-race"\n')
    one_error_line(run("analyze", trace, "--suppress", "bad.toml"), "bad.toml", "reason")
    (workdir / "bad.json").write_text("{]")
    one_error_line(run("analyze", trace, "--baseline", "bad.json"), "bad.json", "not valid JSON")
    (workdir / "other.json").write_text('{"findings": []}')
    one_error_line(run("analyze", trace, "--baseline", "other.json"), "schema_version")


def test_unusable_traces_are_one_line(run, workdir):
    (workdir / "empty.bin").write_bytes(b"")
    (workdir / "text.bin").write_text("hello, not a trace\n")
    one_error_line(run("analyze", "missing.bin"), "missing.bin")
    one_error_line(run("analyze", "empty.bin"), "empty.bin")
    one_error_line(run("analyze", "text.bin"), "text.bin")
    for verb in ("analyze", "info", "export"):  # an empty argument (a shell variable that was not set)
        one_error_line(run(verb, ""), "'': an empty path names no trace")


def test_the_summary_counts_only_the_traces_it_could_read(scenario, run, workdir):
    trace = scenario("correct")
    (workdir / "text.bin").write_text("hello, not a trace\n")
    r = run("analyze", trace, "text.bin")
    assert r.exit_code == 2
    assert "no stream-synchronization problems found in 1 trace (1 more could not be read)" in r.stdout


def test_unwritable_output_file(scenario, run, workdir):
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    trace = scenario("data_race")
    out = workdir / "ro.txt"
    out.write_text("old")
    out.chmod(0o444)
    one_error_line(run("analyze", trace, "-o", out), "permission denied")
    assert out.read_text() == "old"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_write_failure_after_analysis_is_one_line(scenario, run):
    one_error_line(run("analyze", scenario("data_race"), "-o", "/dev/full"), "cannot write the report to /dev/full")


def test_typo_hints_have_one_wording_everywhere(run, scenario, tmp_path):
    trace = scenario("data_race")
    toml = tmp_path / "s.toml"
    toml.write_text('[[suppress]]\nkind = "data-rase"\nreason = "r"\n')
    cases = [
        (run("analyze", trace, "--formt", "json"), "no such option '--formt'. Did you mean '--format'?"),
        (run("analyz", trace), "no such command 'analyz'. Did you mean 'analyze'?"),
        (run("analyze", trace, "--format", "jsn"), "unknown report format 'jsn'. Did you mean 'json'?"),
        (run("analyze", trace, "--fail-on", "data-rase"), "kind 'data-rase'. Did you mean 'data-race'?"),
        (run("analyze", trace, "--suppress", str(toml)), "kind 'data-rase'. Did you mean 'data-race'?"),
        (run("export", trace, "--format", "chrom"), "format 'chrom'. Did you mean 'chrome'?"),
        (run("record", "--emulat", "cuda", "x.py"), "Did you mean '--emulate' or '--emulate-devices'?"),
    ]
    for result, needle in cases:
        one_error_line(result, needle)
        assert "Did you mean one of" not in result.stderr


def test_click_usage_errors_are_one_line_and_exit_2(run):
    one_error_line(run("analyze"), "missing argument 'TRACE...'", "(try 'npusan analyze --help')")
    one_error_line(run("analyze", "x.bin", "--min-count", "many"), "'--min-count'", "not a valid integer")
    one_error_line(run("analyze", "x.bin", "--bogus"), "no such option '--bogus'")
    one_error_line(run("analyze", "x.bin", "--format"), "'--format' requires an argument")
    one_error_line(run("frobnicate"), "no such command 'frobnicate'", "(try 'npusan --help')")
    one_error_line(run("--bogus"), "no such option '--bogus'")
    one_error_line(run("info"), "missing argument 'TRACE...'", "(try 'npusan info --help')")
    for args in (["--help"], ["analyze", "--help"], ["analyze", "-h"]):
        r = run(*args)
        assert r.exit_code == 0 and r.stdout.startswith("Usage: npusan") and r.stderr == ""


def test_check_leaks_reports_blocks_never_freed(run, workdir):
    from .npusan_scenarios import DEFAULT, SIDE, stack, writer

    with writer(workdir / "leak.bin") as w:
        w.stream_created(SIDE, stack=stack("seed_example", "side = torch.cuda.Stream()"))
        w.memory_allocated(0x1000, DEFAULT, 256, stack=stack("seed_example", "x = torch.empty"))
        w.kernel(SIDE, "aten::mul.Tensor", reads=[0x1000], stack=stack("seed_example", "y = x * 2"))
    r = run("analyze", "leak.bin", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["findings"] == []  # never freed: never reused
    r = run("analyze", "leak.bin", "--check-leaks", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["summary"]["check_leaks"] is True
    (f,) = doc["findings"]
    assert f["kind"] == "missing-record-stream" and f["access"]["seq"] == 0
    text = run("analyze", "leak.bin", "--check-leaks").stdout
    assert "still alive at the end of the trace while stream #1 (cuda:0) may still use it" in text
    assert "  not freed: still allocated when the trace ended, on default stream (cuda:0)\n  used:" in text
    assert "or, before x is freed, make the allocating stream wait for the use" in text
    assert "an unknown location" not in text and "(no stack recorded)" not in text
    assert "blocks still alive at the end were checked (--check-leaks)" in text


def test_progress_bar_appears_only_after_a_moment_and_only_when_enabled(monkeypatch):
    import importlib

    A = importlib.import_module("npusan.cli.analyze")  # the module, not the click command

    quiet = A._Progress(["a.bin"], enabled=False)
    quiet(0, 10, 100)
    assert quiet.bar is None
    p = A._Progress(["dir/a.bin"], enabled=True)
    p(0, 10, 100)
    assert p.bar is None  # too early: fast analyses never flash a bar
    monkeypatch.setattr(importlib.import_module("npusan.cli.progress"), "PROGRESS_AFTER_S", 0.0)
    p(0, 50, 100)
    assert p.bar is not None
    task = p.bar.tasks[0]
    assert (task.completed, task.total, task.description) == (50, 100, "[bold]analyzing[/] a.bin")
    p(0, 80, None)  # unknown size
    p.close()
    # npusan export: one bar per pass
    E = importlib.import_module("npusan.cli.export")
    e = E._Progress(enabled=True)
    e("finding", 5, 10)
    e("writing", 7, 10)
    assert [t.description for t in e.bar.tasks] == ["[bold]finding bugs[/]", "[bold]writing timeline[/]"]
    e.close()


def test_analyze_and_export_work_without_torch(scenario, workdir):
    import subprocess
    import sys

    trace = scenario("reuse_race")
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any import of torch now fails
        "from npusan.cli import cli\n"
        "for args in (['analyze', sys.argv[1], '--format', 'sarif', '-o', 'r.sarif'], ['export', sys.argv[1], '-o', 't.json']):\n"
        "    try:\n"
        "        cli(args, prog_name='npusan')\n"
        "    except SystemExit as e:\n"
        "        print(args[0], e.code)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["analyze", "1", "export", "0"], out.stderr
    assert json.loads((workdir / "r.sarif").read_text())["runs"][0]["results"]
    assert json.loads((workdir / "t.json").read_text())["traceEvents"]


def test_source_root_option_and_detection(scenario, run, workdir):
    import json as _json

    trace = scenario("data_race")
    r = run("analyze", trace, "--format", "sarif", "--source-root", str(workdir))
    doc = _json.loads(r.stdout)
    assert doc["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"] == workdir.as_uri() + "/"
    (workdir / "pyproject.toml").write_text("")  # the detected root: nearest folder with it
    (workdir / "sub").mkdir()
    import os

    os.chdir(workdir / "sub")
    doc = _json.loads(run("analyze", workdir / trace, "--format", "sarif").stdout)
    assert doc["runs"][0]["originalUriBaseIds"]["SRCROOT"]["uri"] == workdir.as_uri() + "/"
    r = run("analyze", workdir / trace, "--source-root", str(workdir / "nope"))
    assert r.exit_code == 2 and "--source-root" in r.stderr and "not a directory" in r.stderr


def test_a_dash_reads_standard_input_and_writes_standard_output(scenario, workdir):
    """``npusan analyze - -o -``: the usual meaning of ``-`` (a trial got 'No such file' and a
    report named '-'). A real pipe: ``-`` is the process's standard input."""
    import subprocess
    import sys

    trace = scenario("data_race")
    npusan = [sys.executable, "-m", "npusan"]
    data = (workdir / trace).read_bytes()
    r = subprocess.run([*npusan, "analyze", "-", "--format", "json", "-o", "-"], input=data,
                       capture_output=True, timeout=120)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [f["kind"] for f in doc["findings"]] == ["data-race"]
    assert not os.path.exists(workdir / "-")
    import zstandard  # a compressed trace through a pipe is recognized by its first bytes too

    r = subprocess.run([*npusan, "analyze", "-", "--format", "json"], input=zstandard.compress(data),
                       capture_output=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert [f["kind"] for f in json.loads(r.stdout)["findings"]] == ["data-race"]
    # export reads its trace twice: a pipe is refused, in one line
    r = subprocess.run([*npusan, "export", "-"], input=data, capture_output=True, timeout=120)
    assert r.returncode == 2 and r.stdout == b""
    (line,) = r.stderr.decode().splitlines()
    assert "export reads its trace twice" in line and "not a pipe or standard input" in line


def test_a_trace_read_from_standard_input_is_called_stdin(scenario, workdir):
    """``cat t | npusan analyze -``: reports, warnings, errors and ``info`` call the trace
    ``<stdin>``, as Python does, not ``/dev/stdin`` (the device it was read through)."""
    import subprocess
    import sys

    npusan = [sys.executable, "-m", "npusan"]
    data = (workdir / scenario("data_race")).read_bytes()

    def through_stdin(*args, data=data):
        r = subprocess.run([*npusan, *args], input=data, capture_output=True, timeout=120)
        out, err = r.stdout.decode(), r.stderr.decode()
        assert "/dev/stdin" not in out + err, out + err
        return r.returncode, out, err

    code, out, _ = through_stdin("analyze", "-", "--format", "json")
    assert code == 1 and [t["path"] for t in json.loads(out)["traces"]] == ["<stdin>"]
    code, out, _ = through_stdin("analyze", "-")
    assert code == 1 and "  trace <stdin>: " in out and "seen:      once in <stdin>" in out
    code, out, _ = through_stdin("analyze", "-", "--format", "sarif")
    assert json.loads(out)["runs"][0]["artifacts"][0]["location"]["uri"] == "%3Cstdin%3E"
    code, out, _ = through_stdin("analyze", "-", "--format", "junit")
    assert 'name="trace" value="&lt;stdin&gt;"' in out
    code, out, _ = through_stdin("analyze", "-", "--format", "html")
    assert "<h3>&lt;stdin&gt;</h3>" in out
    # worker processes (two traces: a pool) name it as this process does
    code, out, _ = through_stdin("analyze", "-", "data_race.bin", "--format", "json", "-j", "2")
    assert [t["path"] for t in json.loads(out)["traces"]] == ["<stdin>", "data_race.bin"]
    code, out, _ = through_stdin("info", "-", "--json")
    assert code == 0 and json.loads(out)["path"] == "<stdin>"
    code, out, _ = through_stdin("info", "-")
    assert code == 0 and out.splitlines()[0].startswith("<stdin>")

    code, _, err = through_stdin("analyze", "-", data=data[:-8])  # cut: the end record is gone
    assert code == 1 and "npusan: warning: <stdin>: " in err
    code, _, err = through_stdin("analyze", "-", data=b"")
    assert code == 2 and err == "npusan: error: <stdin>: the file is empty: not an npusan trace\n"
    code, _, err = through_stdin("export", "-")
    assert code == 2 and err.startswith("npusan: error: <stdin>: export reads its trace twice")


@pytest.mark.parametrize("how", ["same name", "absolute path", "symlink", "hard link", "in a directory argument"])
def test_the_report_never_replaces_a_trace_it_reads(scenario, run, workdir, how):
    trace = scenario("data_race")
    before = (workdir / trace).read_bytes()
    args = [trace]
    out = trace
    if how == "absolute path":
        out = str(workdir / trace)
    elif how == "symlink":
        os.symlink(trace, "link.npusan")
        out = "link.npusan"
    elif how == "hard link":
        os.link(trace, "hard.npusan")
        out = "hard.npusan"
    elif how == "in a directory argument":
        os.makedirs("traces")
        os.replace(trace, "traces/t.npusan")
        trace, args, out = "traces/t.npusan", ["traces"], "traces/t.npusan"
    one_error_line(run("analyze", *args, "-o", out), "it is a trace being read")
    assert (workdir / trace).read_bytes() == before


def _runs_in(db) -> list:
    from npusan.analyzer.runs.history import History

    h = History.open(str(db), create=False)
    try:
        return h.runs()
    finally:
        h.close()


@pytest.mark.parametrize("where", ["replay", "writing the report"])
def test_ctrl_c_exits_130_and_leaves_no_report_nor_history_row(scenario, run, workdir, monkeypatch, where):
    trace = scenario("data_race")
    run("analyze", trace, "--history", "h.db", "-o", "first.txt")  # the history exists, with one run

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "replay":
        monkeypatch.setattr("npusan.analyzer.runs.pipeline.replay_inputs", interrupt)
    else:
        monkeypatch.setattr("npusan.cli.output.os.fsync", interrupt)
    before = sorted(os.listdir(workdir))
    r = run("analyze", trace, "--history", "h.db", "-o", "report.txt")
    assert r.exit_code == 130, r.output
    assert "Aborted!" not in r.output and r.stderr.strip().splitlines() == ["npusan: interrupted"]
    assert sorted(os.listdir(workdir)) == before  # no report.txt, no temporary file beside it
    assert len(_runs_in(workdir / "h.db")) == 1


def test_a_real_sigint_exits_130(scenario, workdir):
    import subprocess
    import sys

    trace = scenario("data_race")
    code = ("import os, signal, sys\n"
            "import npusan.analyzer.runs.pipeline as p\n"
            "p.replay_inputs = lambda *a, **k: os.kill(os.getpid(), signal.SIGINT)\n"
            "from npusan.cli import main\n"
            "sys.argv = ['npusan', 'analyze', sys.argv[1], '-o', 'report.txt']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "npusan: interrupted" and "Traceback" not in r.stderr
    assert not (workdir / "report.txt").exists()
