"""`npusan redact`: nothing identifying survives, and the analysis does not change."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import TraceReader, TraceWriter
from npusan.trace_format.redact import redact_path

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py"
STDLIB = "/usr/lib/python3.11/threading.py"
SECRET_HOST = "secret-host.corp.example"
SECRET_USER = "alice"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def project_trace(tmp_path, *, steps: int = 2):
    """A recorded-looking trace of a project under /home/alice/...: a race and a reuse race."""
    proj = tmp_path / "home" / SECRET_USER / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    train = str(proj / "pkg" / "train.py")
    helper = f"/srv/{SECRET_USER}/tools/helper.py"
    p = tmp_path / "run.npusan"
    header = {"host": SECRET_HOST, "pid": 777, "argv": [train, "--token", "s3cr3t"], "start_time": 1.7e9,
              "device_count": 1, "default_streams": {0: 0}}
    with TraceWriter(str(p), backend="cuda", metadata={"user": SECRET_USER, "ticket": "INC-1"}, header=header) as w:
        def st(line, fn="step"):
            return [(train, 5, "main"), (helper, 9, "run"), (train, line, fn), (TORCH, 41, "wrapped"),
                    (STDLIB, 1000, "run")]
        w.stream_created(0x51, stack=st(10, "setup"), thread=(1, f"worker-{SECRET_USER}"))
        for i in range(steps):
            base = 0x7F0000000000
            w.memory_allocated(base, 0, 4096, stack=st(20))
            w.kernel(0, "aten::fill_", writes=[base], stack=st(21))
            w.kernel(0x51, "aten::sum", reads=[base], stack=st(22))
            w.memory_freed(base, stack=st(23))
            w.memory_allocated(base, 0, 4096, stack=st(24))
            w.kernel(0, "aten::zero_", writes=[base], stack=st(25))
            w.memory_freed(base, stack=st(26))
        w.note("warning", f"recording stopped: cannot write {proj}/out/trace.npusan")
    return p, proj


def findings(path, *extra):
    r = run("analyze", path, "--format", "json", "--full-stacks", *extra)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)["findings"]


def shape(fs, rename=lambda name: name):
    """Everything a finding says, with file names passed through ``rename``."""
    def frames(stack):
        return [(rename(fr["file"]), fr["line"], fr["function"]) for fr in stack]
    return [(f["kind"], f["count"], f["addresses"], f["access"]["op"], f["previous"]["op"],
             frames(f["access"]["stream"]["created_at"]), frames(f["access"]["stack"]), frames(f["previous"]["stack"]),
             frames(f["block"]["stack"])) for f in fs]


def test_redaction_round_trip_keeps_findings(tmp_path):
    p, proj = project_trace(tmp_path)
    out = tmp_path / "public.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "redacted trace written" in r.stderr
    before, after = findings(p), findings(out)
    assert {f["kind"] for f in before} == {"data-race", "missing-record-stream", "reuse-race"}
    root = str(proj)
    assert shape(after) == shape(before, lambda n: redact_path(n, root))
    # The fingerprints a baseline or history matches on: identical when they do not hang on
    # directories (the project's fingerprints use paths relative to the source root).
    fp = [f["fingerprint"] for f in before] == [f["fingerprint"] for f in after]
    path_free = _fingerprints_ignore_directories()
    assert fp or not path_free


def _fingerprints_ignore_directories() -> bool:
    try:
        from npusan.analyzer.findings import fingerprints  # noqa: F401
    except ImportError:
        return False
    return True


def test_redacted_trace_holds_nothing_identifying(tmp_path):
    p, proj = project_trace(tmp_path)
    out = tmp_path / "public.npusan"
    assert run("redact", p, "-o", out).exit_code == 0
    data = out.read_bytes()
    for secret in (SECRET_HOST, SECRET_USER, "s3cr3t", "INC-1", str(tmp_path), "/srv/", "/opt/venv", "/usr/lib"):
        assert secret.encode() not in data, secret
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        assert reader.header["redacted"] is True
        assert not {"host", "pid", "argv", "start_time", "metadata"} & set(reader.header)
        assert reader.header["default_streams"] == {0: 0} and reader.header["backend"] == "cuda"
        files = {reader.symbols.strings[f] for f, _, _ in reader.symbols.frames.values()}
        assert reader.end_stats and "end_time" not in reader.end_stats
        assert set(reader.symbols.threads.values()) == {"thread 0"}
    assert files == {"/source-root/pkg/train.py", "/redacted/helper.py",
                     "/redacted/site-packages/torch/_tensor.py", "/redacted/lib/python3.11/threading.py"}
    info = run("info", out, "--json")
    assert info.exit_code == 0 and SECRET_USER not in info.stdout


def test_source_root_option_and_common_prefix(tmp_path):
    p, proj = project_trace(tmp_path)
    out = tmp_path / "o.npusan"
    assert run("redact", p, "-o", out, "--source-root", proj / "pkg").exit_code == 0
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        files = {reader.symbols.strings[f] for f, _, _ in reader.symbols.frames.values()}
    assert "/source-root/train.py" in files


def test_redact_path_rules():
    assert redact_path("/home/a/proj/pkg/x.py", "/home/a/proj") == "/source-root/pkg/x.py"
    assert redact_path("/home/a/projX/x.py", "/home/a/proj") == "/redacted/x.py"
    assert redact_path("/v/lib/python3.12/site-packages/torch/nn/f.py", None) == "/redacted/site-packages/torch/nn/f.py"
    assert redact_path("/usr/lib/python3.11/threading.py", None) == "/redacted/lib/python3.11/threading.py"
    assert redact_path("train.py", "/x") == "train.py"
    assert redact_path("<frozen runpy>", "/x") == "<frozen runpy>"
    assert redact_path("C:\\Users\\a\\p\\t.py", "C:/Users/a/p") == "/source-root/t.py"


def test_truncated_trace_redacts_to_a_truncated_trace(tmp_path):
    p, _ = project_trace(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0 and "cut" in r.stderr
    assert run("info", out, "--json").exit_code == 0
    assert json.loads(run("info", out, "--json").stdout)["truncated"] is True


@pytest.mark.parametrize("content, needle", [(b"garbage", "not an npusan trace"), (b"", "empty")])
def test_redact_bad_input_is_one_line_and_writes_nothing(tmp_path, content, needle):
    p = tmp_path / "bad.npusan"
    p.write_bytes(content)
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and needle in r.stderr
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["bad.npusan"]


def _frame_files(path):
    with TraceReader(str(path)) as reader:
        for _ in reader.records():
            pass
        return {reader.symbols.strings[f] for f, _, _ in reader.symbols.frames.values()}


def _trace_with_files(path, names, note=None):
    with TraceWriter(str(path), backend="cuda") as w:
        for i, name in enumerate(names):
            w.kernel(0, "aten::fill_", writes=[0x1000 + i], stack=[(name, 3, "f")])
        if note:
            w.note("warning", note)
    return path


def test_mixed_posix_and_windows_names_do_not_crash(tmp_path):
    p = _trace_with_files(tmp_path / "t.npusan", ["/srv/a/b.py", "C:\\x\\y.py", "rel/z.py"])
    r = run("redact", p, "-o", tmp_path / "o.npusan")
    assert r.exit_code == 0, r.output
    assert _frame_files(tmp_path / "o.npusan") == {"/redacted/b.py", "/redacted/y.py", "rel/z.py"}


def test_names_escaping_the_root_are_outside():
    root = "/home/alice/proj"
    assert redact_path("/home/alice/proj/pkg/../../.ssh/id_rsa", root) == "/redacted/id_rsa"
    assert redact_path("/home/alice/proj/pkg/../x.py", root) == "/source-root/x.py"
    assert redact_path("../../home/alice/private/x.py", root) == "/redacted/x.py"
    assert redact_path("pkg/../x.py", root) == "pkg/../x.py"
    assert redact_path("C:\\Users\\a\\p\\..\\..\\s.py", "C:/Users/a/p") == "/redacted/s.py"


def test_note_text_is_dropped_level_kept(tmp_path):
    p = _trace_with_files(tmp_path / "t.npusan", ["/srv/a/b.py"], note="token=s3cr3t at /home/alice/x")
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0 and "note texts dropped" in r.stderr
    data = out.read_bytes()
    assert b"s3cr3t" not in data and b"alice" not in data and b"warning" in data


def test_redact_refuses_non_regular_input_naming_the_input(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for src in (fifo, "/dev/zero"):
        r = run("redact", src, "-o", tmp_path / "o.npusan")
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
        assert f"{src}: cannot read the trace" in r.stderr and "o.npusan" not in r.stderr


def test_redact_refuses_its_input_and_existing_output_without_force(tmp_path):
    p = _trace_with_files(tmp_path / "t.npusan", ["/srv/a/b.py"])
    before = p.read_bytes()
    r = run("redact", p, "-o", p)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and "is the input" in r.stderr
    os.link(p, tmp_path / "hard.npusan")
    assert run("redact", p, "-o", tmp_path / "hard.npusan", "--force").exit_code == 2
    assert p.read_bytes() == before
    out = tmp_path / "o.npusan"
    out.write_bytes(b"keep")
    r = run("redact", p, "-o", out)
    assert r.exit_code == 2 and "--force" in r.stderr and out.read_bytes() == b"keep"
    assert run("redact", p, "-o", out, "--force").exit_code == 0 and out.read_bytes() != b"keep"


def test_export_writes_a_device_without_force(tmp_path):
    p = _trace_with_files(tmp_path / "t.npusan", ["/srv/a/b.py"])
    r = run("export", p, "-o", "/dev/null")
    assert r.exit_code == 0, r.output
    out = tmp_path / "o.json"
    out.write_text("x")
    assert run("export", p, "-o", out).exit_code == 2


@pytest.mark.parametrize("cut", ["after a kernel", "after a definition", "after the header"])
def test_zero_tail_of_a_killed_writer_redacts_to_a_cut_trace(tmp_path, cut):
    """A SIGKILLed mapped writer leaves zero bytes after its last record (trace-format.md
    section 7): redact takes them as the cut, like the other verbs, instead of crashing."""
    import msgpack

    from npusan.trace_format import records as R

    header = {"format": [1, 1], "writer": "hand", "backend": "cuda", "default_streams": {0: 0}}
    good = [[R.STR, 0, "aten::fill_"], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51],
            [R.ALLOC, 0, 4096, 64, 0, None], [R.KERNEL, 0, 0, None, ~0], [R.KERNEL, 1, 0, None, 0]]
    recs = {"after a kernel": good, "after a definition": good + [[R.STR, 1, "x"]], "after the header": []}[cut]
    data = R.MAGIC + msgpack.packb(header, use_bin_type=True) + b"".join(msgpack.packb(r) for r in recs)
    p = tmp_path / "k9.npusan"
    p.write_bytes(data + bytes(200_000))
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    assert "the trace was cut (no end record); so is the redacted copy" in r.stderr
    assert out.read_bytes().count(0) < 100  # the zeros are not copied
    i = run("info", "--json", out)
    assert i.exit_code == 0 and json.loads(i.stdout)["truncated"] is True
    assert json.loads(i.stdout)["events"] == json.loads(run("info", "--json", p).stdout)["events"]
    assert run("analyze", out).exit_code == run("analyze", p).exit_code


def test_recorded_sigkilled_trace_redacts(tmp_path):
    """The user's repro: a trace recorded from a process that SIGKILLs itself."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = tmp_path / "kill9.py"
    script.write_text("import os, torch\nfrom npusan import sim\nside = sim.Stream(); x = torch.ones(1024)\n"
                      "with sim.stream(side):\n    y = x * 2\nos.kill(os.getpid(), 9)\n")
    p = tmp_path / "k9.npusan"
    rec = subprocess.run([sys.executable, "-m", "npusan", "record", "--backend", "sim", "-o", str(p), "--",
                          sys.executable, str(script)], capture_output=True, timeout=300)
    assert p.exists(), rec.stderr
    assert p.read_bytes().endswith(bytes(64)), "expected the zero tail a killed mapped writer leaves"
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "so is the redacted copy" in r.stderr
    assert json.loads(run("info", "--json", out).stdout)["truncated"] is True


def _trace_with_outside_source(tmp_path):
    """Two races: one whose stacks are the project's own files only, one through a helper
    outside the project and a library, both with a secret in a comment of their recorded line."""
    proj = tmp_path / "home" / SECRET_USER / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    train = proj / "pkg" / "train.py"
    train.write_text("".join(f"y{i} = x.sum()  # step {i}\n" for i in range(1, 40)))
    helper = tmp_path / "elsewhere" / "helper.py"
    helper.parent.mkdir()
    helper.write_text("def run(x):\n    return x * 2  # API_TOKEN=hunter2\n")
    lib = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "vendorlib" / "ops.py"
    lib.parent.mkdir(parents=True)
    lib.write_text("def op(x):\n    return x.add_(1)  # internal: hunter2-lib\n")
    p = tmp_path / "run.npusan"
    with TraceWriter(str(p), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(0x51)
        own = lambda line: [(str(train), 5, "main"), (str(train), line, "step")]  # noqa: E731
        through = lambda line: [(str(train), 6, "main"), (str(helper), 2, "run"), (str(lib), 2, "op")]  # noqa: E731
        for base, stack in ((0x7F0000000000, own), (0x7F0000100000, through)):
            w.memory_allocated(base, 0, 4096, stack=own(10))
            w.kernel(0, "aten::fill_", writes=[base], stack=stack(20))
            w.kernel(0x51, "aten::sum", reads=[base], stack=stack(22))
    return p, proj


def _fingerprints_by_stack(path):
    return {tuple(fr["file"].rsplit("/", 1)[-1] for fr in f["access"]["stack"]): f["fingerprint"]
            for f in findings(path) if f["kind"] == "data-race"}


def test_source_text_of_files_outside_the_root_is_dropped(tmp_path):
    p, proj = _trace_with_outside_source(tmp_path)
    assert b"hunter2" in p.read_bytes() and b"# step 20" in p.read_bytes()
    out = tmp_path / "public.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert f"source root: {proj}" in r.stderr
    assert "2 recorded source lines of files outside the source root dropped" in r.stderr
    data = out.read_bytes()
    assert b"hunter2" not in data and b"API_TOKEN" not in data
    assert b"y20 = x.sum()  # step 20" in data  # the project's own lines are kept
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        sources = reader.symbols.recorded_sources()
    texts = {(f, line): text for (f, line, _), (text, _) in sources.items()}
    assert texts[("/source-root/pkg/train.py", 20)] == "y20 = x.sum()  # step 20"
    assert not any(f.startswith("/redacted/") for (f, _), text in texts.items() if text is not None)
    # Findings are the same; the fingerprint of the project-only one too. The one whose
    # stacks go through files outside the root counts those frames by line number now.
    before, after = _fingerprints_by_stack(p), _fingerprints_by_stack(out)
    assert set(before) == set(after) == {("train.py", "train.py"), ("train.py", "helper.py", "ops.py")}
    assert after[("train.py", "train.py")] == before[("train.py", "train.py")]
    assert after[("train.py", "helper.py", "ops.py")] != before[("train.py", "helper.py", "ops.py")]
    assert shape(findings(out)) == shape(findings(p), lambda n: redact_path(n, str(proj)))


def test_keep_outside_source_keeps_it_and_every_fingerprint(tmp_path):
    p, proj = _trace_with_outside_source(tmp_path)
    out = tmp_path / "public.npusan"
    r = run("redact", p, "-o", out, "--keep-outside-source")
    assert r.exit_code == 0, r.output
    assert "outside the source root dropped" not in r.stderr
    assert b"API_TOKEN=hunter2" in out.read_bytes()
    assert _fingerprints_by_stack(out) == _fingerprints_by_stack(p)
    # --drop-source wins: no recorded line at all
    r = run("redact", p, "-o", out, "--force", "--drop-source", "--keep-outside-source")
    assert r.exit_code == 0 and b"hunter2" not in out.read_bytes() and b"step 20" not in out.read_bytes()


def test_fingerprint_of_a_frame_in_another_recorded_root_changes_as_documented(tmp_path):
    """docs/bug-reports.md: a file outside the chosen root with a source root of its own is
    named by its base name after redaction (not its path inside that root), so a finding
    through it gets another fingerprint even with --keep-outside-source."""
    p, proj = _trace_with_outside_source(tmp_path)
    dep = tmp_path / "dep"
    (dep / "sub").mkdir(parents=True)
    (dep / "pyproject.toml").write_text("[project]\nname = 'dep'\n")
    (dep / "sub" / "m.py").write_text("def f(x):\n    return x.mul_(2)\n")
    q = tmp_path / "dep.npusan"
    train = str(proj / "pkg" / "train.py")
    with TraceWriter(str(q), backend="cuda", header={"default_streams": {0: 0}}) as w:
        w.stream_created(0x51)
        w.memory_allocated(0x1000, 0, 4096, stack=[(train, 10, "main")])
        w.kernel(0, "aten::fill_", writes=[0x1000], stack=[(train, 20, "main"), (str(dep / "sub" / "m.py"), 2, "f")])
        w.kernel(0x51, "aten::sum", reads=[0x1000], stack=[(train, 22, "main")])
    out = tmp_path / "o.npusan"
    assert run("redact", q, "-o", out, "--keep-outside-source", "--source-root", proj).exit_code == 0
    assert [f["fingerprint"] for f in findings(out)] != [f["fingerprint"] for f in findings(q)]


def _hand_made_trace(path, header_extra=None, extra=()):
    """A trace written record by record, so that fields a writer would never write can be planted."""
    from npusan.trace_format import records as R
    from tests.trace_format.conftest import handmade

    header = {"format": [1, 1], "writer": "npusan 0.1.0", "backend": "cuda", "torch": "2.13.0+cpu",
              "device_count": 1, **(header_extra or {})}
    recs = [
        [R.STR, 0, "/srv/a/t.py", "RIDE-str"],
        [R.STR, 1, "f", "RIDE-str2"],
        [R.FRAME, 0, 0, 3, 1, None, None, "RIDE-frame"],
        [R.STACK, 0, [0], "RIDE-stack"],
        [R.STREAM_DEF, 0, 0, 0, "RIDE-sdef"],
        [R.STREAM_DEF, 1, 0, 0x51, "RIDE-sdef2"],
        [R.THREAD, 1, "main", "RIDE-thread"],
        [R.STREAM_CREATED, 1, 0, "RIDE-event"],
        [R.ALLOC, 0, 0x1000, 64, 0, 0, "RIDE-alloc"],
        [R.KERNEL, 0, 1, 0, ~0],
        [R.KERNEL, 1, 1, 0, 0],
        [R.FREE, 0, 0, "RIDE-free"],
        *extra,
    ]
    path.write_bytes(handmade(header, recs))
    return path


def test_nothing_rides_along_in_fields_past_a_known_layout(tmp_path):
    from npusan.trace_format import records as R

    p = _hand_made_trace(tmp_path / "t.npusan", extra=[
        [R.NOTE, "RIDE-level", "text"],
        [R.END, {"events": 13, "counts": {"kernel": 2, "RIDE-key": 1}, "signal": "SIGTERM", "RIDE": "x"}]])
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "unknown fields of known records dropped" in r.stderr
    assert b"RIDE" not in out.read_bytes()
    kinds = [(f["kind"], f["count"], f["fingerprint"]) for f in findings(p)]
    assert kinds and [(f["kind"], f["count"], f["fingerprint"]) for f in findings(out)] == kinds


def test_a_trace_ended_by_a_signal_still_reads_so_after_redaction(tmp_path):
    from npusan.trace_format import records as R

    for end, needle in (({"events": 13, "signal": "SIGTERM"}, "SIGTERM"),
                        ({"events": 13, "signal": "<script>"}, "a signal"),
                        ({"events": 13, "stopped": "disk full at /home/alice/x"}, "recording stopped")):
        p = _hand_made_trace(tmp_path / "t.npusan", extra=[[R.END, end]])
        out = tmp_path / "o.npusan"
        r = run("redact", p, "-o", out, "--force")
        assert r.exit_code == 0, r.output
        before = run("info", p).output
        after = run("info", out).output
        assert "ended cleanly" not in before and "ended cleanly" not in after, after
        assert needle in after and b"alice" not in out.read_bytes() and b"<script>" not in out.read_bytes()


def test_header_strings_keep_only_the_shapes_npusan_writes(tmp_path):
    _hand_made_trace(tmp_path / "ok.npusan")
    p = _hand_made_trace(tmp_path / "t.npusan", header_extra={
        "writer": "npusan 0.1.0 token=s3cr3t", "backend": "cuda; alice", "torch": "2.13 /home/alice"})
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0 and "header values replaced: writer, backend, torch" in r.stderr, r.output
    with TraceReader(str(out)) as reader:
        h = reader.header
    assert (h["writer"], h["backend"], h["torch"]) == ("another writer", "other", "unknown")
    ok_out = tmp_path / "ok_o.npusan"
    assert run("redact", tmp_path / "ok.npusan", "-o", ok_out).exit_code == 0
    with TraceReader(str(ok_out)) as reader:
        assert (reader.header["writer"], reader.header["backend"], reader.header["torch"]) == (
            "npusan 0.1.0", "cuda", "2.13.0+cpu")


@pytest.mark.parametrize("suffix, magic", [(".npusan.zst", b"\x28\xb5\x2f\xfd"), (".npusan.gz", b"\x1f\x8b")])
def test_redact_compresses_when_the_output_name_says_so(tmp_path, suffix, magic):
    p, _ = project_trace(tmp_path)
    out = tmp_path / f"o{suffix}"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    plain = tmp_path / "o.npusan"
    assert run("redact", p, "-o", plain).exit_code == 0
    assert out.read_bytes().startswith(magic)
    assert findings(out) == findings(plain) != []


@pytest.mark.parametrize(
    "raised, kept",
    [
        ("RuntimeError", True),
        ("KeyboardInterrupt", True),
        ("StopIteration", True),  # a builtin exception whose name ends in none of the words
        ("torch.cuda.OutOfMemoryError", True),
        ("OutOfMemoryError", True),  # torch's, as the recorder writes it (its __qualname__)
        ("DistBackendError", True),
        ("CalledProcessError", True),
        ("builtins.ValueError", True),
        ("Loader.ParseFailure", False),  # a program's own (nested) class
        ("TokenAbcError", False),  # shaped like an exception class, but no library's: the user's
        ("AcmeTokenRefreshFailure", False),
        ("mypkg.errors.TokenAbcError", False),
        ("torch.TokenAbcError", False),  # not torch's own, whatever the prefix says
        ("mypkg.OutOfMemoryError", False),  # torch's name in a private package
        ("torch.cuda..OutOfMemoryError", False),
        ("SECRET23", False),  # an identifier alone could be anything
        ("token_s3cr3t", False),
        ("alice.home", False),
        ("/home/alice/x Error", False),
    ],
)
def test_end_raised_keeps_only_exception_type_names(tmp_path, raised, kept):
    from npusan.trace_format import records as R
    from npusan.trace_format.redact import RAISED_PLACEHOLDER, is_exception_name

    assert is_exception_name(raised) is kept
    p = _hand_made_trace(tmp_path / "t.npusan", extra=[[R.END, {"events": 13, "raised": raised}]])
    out = tmp_path / "o.npusan"
    assert run("redact", p, "-o", out).exit_code == 0
    with TraceReader(str(out)) as reader:
        for _ in reader.records():
            pass
        end = reader.end_stats
    assert end["raised"] == (raised if kept else RAISED_PLACEHOLDER)


def test_every_kept_exception_name_is_that_librarys_own():
    """The fixed table names real classes: each entry is the qualified name of an exception
    class the module defines or exports (modules not installed here are skipped)."""
    import importlib
    import warnings

    from npusan.trace_format.known_exceptions import LIBRARY_EXCEPTIONS

    checked = 0
    for module, names in LIBRARY_EXCEPTIONS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        with warnings.catch_warnings():  # (a deprecated attribute warns when looked at)
            warnings.simplefilter("ignore")
            classes = {v.__qualname__ for v in list(vars(mod).values())
                       if isinstance(v, type) and issubclass(v, BaseException)}
        for name in names:
            assert name in classes, (module, name)
            checked += 1
    assert checked >= 60  # torch and the standard library are installed here


def test_strings_that_name_nothing_are_replaced(tmp_path):
    """A STR no field names, or one a frame named before it was defined (so the reader
    ignored the reference), keeps no text: only file, function and op names are read."""
    from npusan.trace_format import records as R

    p = _hand_made_trace(tmp_path / "t.npusan", extra=[
        [R.STR, 7, "SECRET-unused"],
        [R.FRAME, 1, 0, 4, 1, None, 8],
        [R.STR, 8, "/home/alice/SECRET-root"],
        [R.STR, 9, "aten::SECRET-op-name-is-kept"],
        [R.ALLOC, 1, 0x2000, 64, 0, 0],
        [R.KERNEL, 0, 9, 0, 1],
    ])
    out = tmp_path / "o.npusan"
    r = run("redact", p, "-o", out)
    assert r.exit_code == 0, r.output
    assert "2 strings that name nothing replaced" in r.stderr
    data = out.read_bytes()
    assert b"SECRET-unused" not in data and b"SECRET-root" not in data and b"alice" not in data
    assert b"aten::SECRET-op-name-is-kept" in data
    kinds = [(f["kind"], f["count"], f["fingerprint"]) for f in findings(p)]
    assert [(f["kind"], f["count"], f["fingerprint"]) for f in findings(out)] == kinds
