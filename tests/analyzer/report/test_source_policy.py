"""Untrusted traces never read the analyzing machine's files: source is quoted only from
the trace's recorded text or from files under a source root (issue: local file leaks)."""

from __future__ import annotations

import json
import os

import pytest

from npusan.analyzer.report.sources import SourceCache, SourceSettings
from npusan.trace_format import TraceWriter
from tests.cli.npusan_scenarios import run, workdir  # noqa: F401  (fixtures)

SECRET = "TOPSECRET-do-not-quote"


def race_trace(path, frame, *, source_text=False, text=None):
    """A data race whose both accesses have the one-frame stack ``frame``."""
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}, source_text=source_text) as w:
        if text is not None:  # a writer that recorded this text for the frame (format 1.1)
            from npusan.trace_format.sourcelines import SourceLines

            w.encoder.source_lines = type("Fixed", (SourceLines,), {"lookup": lambda self, f, n: (text, None)})()
        w.memory_allocated(0x1000, 0, 64, stack=[frame])
        w.kernel(0, "aten::fill_", writes=[0x1000], stack=[frame])
        w.kernel(0x51, "aten::sum", reads=[0x1000], stack=[frame])
    return str(path)


def outputs(run, trace, *args):
    out = []
    for fmt in ("text", "json", "sarif", "junit"):
        r = run("analyze", trace, "--format", fmt, "--no-color", *args)
        assert r.exit_code == 1, r.stderr
        out.append(r.stdout)
    return "\n".join(out)


@pytest.fixture
def project(workdir):
    """The working directory is a project (pyproject.toml): its detected source root."""
    (workdir / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (workdir / "train.py").write_text("import torch\nx = torch.ones(4)  # quoted\n")
    outside = workdir.parent / f"{workdir.name}-outside"
    outside.mkdir()
    (outside / "secret.py").write_text(f"{SECRET} = 1\n")
    return workdir, outside


def test_a_file_under_the_detected_root_is_quoted(project, run):
    root, _ = project
    trace = race_trace(root / "t.bin", (str(root / "train.py"), 2, "main"))
    assert "x = torch.ones(4)  # quoted" in outputs(run, trace)


@pytest.mark.parametrize("name", ["/etc/passwd", "/proc/self/environ", "/dev/zero", "/proc/self/cmdline"])
def test_system_files_are_never_quoted(project, run, name):
    root, _ = project
    trace = race_trace(root / "t.bin", (name, 1, "main"))
    text = outputs(run, trace)
    if name.startswith(("/proc", "/dev")):  # refused even under a root that contains them
        text += outputs(run, trace, "--source-root", "/")
    assert "root:" not in text and "PATH=" not in text and "bin/bash" not in text


def test_absolute_paths_outside_the_roots_are_refused(project, run):
    root, outside = project
    trace = race_trace(root / "t.bin", (str(outside / "secret.py"), 1, "main"))
    assert SECRET not in outputs(run, trace)
    # Naming the folder as a source root is what allows it.
    assert SECRET in outputs(run, trace, "--source-root", str(outside))


@pytest.mark.parametrize("name", ["../{o}/secret.py", "{r}/../{o}/secret.py", "sub/../../{o}/secret.py"])
def test_dotdot_escapes_are_refused(project, run, name):
    root, outside = project
    (root / "sub").mkdir()
    name = name.format(o=outside.name, r=str(root))
    trace = race_trace(root / "t.bin", (name, 1, "main"))
    assert SECRET not in outputs(run, trace)


def test_symlinks_leaving_the_root_are_refused(project, run):
    root, outside = project
    (root / "link.py").symlink_to(outside / "secret.py")
    (root / "linkdir").symlink_to(outside)
    for name in (str(root / "link.py"), "link.py", str(root / "linkdir" / "secret.py")):
        trace = race_trace(root / "t.bin", (name, 1, "main"))
        assert SECRET not in outputs(run, trace), name


def test_recorded_text_is_quoted_without_reading_any_file(project, run):
    root, outside = project
    trace = race_trace(root / "t.bin", ("/etc/passwd", 1, "main"), text="y = x.sum()  # as recorded")
    text = outputs(run, trace)
    assert "y = x.sum()  # as recorded" in text and "root:" not in text


def test_map_path_reads_recorded_paths_from_a_local_checkout(project, run):
    root, outside = project
    (outside / "pkg").mkdir()
    (outside / "pkg" / "model.py").write_text("a = 1\nz = w @ v  # mapped\n")
    trace = race_trace(root / "t.bin", ("/home/ci/build/pkg/model.py", 2, "forward"))
    assert "z = w @ v  # mapped" not in outputs(run, trace)
    text = outputs(run, trace, "--map-path", f"/home/ci/build={outside}")
    assert "z = w @ v  # mapped" in text
    doc = json.loads(run("analyze", trace, "--format", "json", "--map-path", f"/home/ci/build={outside}").stdout)
    # Fingerprints use the path relative to the mapped root, so they match the recording machine's.
    plain = json.loads(run("analyze", trace, "--format", "json").stdout)
    assert doc["findings"][0]["fingerprint"] != plain["findings"][0]["fingerprint"]  # text now known
    assert run("analyze", trace, "--map-path", "nonsense").exit_code == 2


def test_source_cache_refusals_directly(tmp_path):
    (tmp_path / "ok.py").write_text("fine = 1\n")
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    cache = SourceCache(SourceSettings(roots=(str(tmp_path),)))
    assert cache.line(str(tmp_path / "ok.py"), 1) == "fine = 1"
    assert cache.line("ok.py", 1) == "fine = 1"  # relative: under a root
    assert cache.line(str(fifo), 1) is None  # never blocks on a FIFO
    assert cache.allowed_path("/etc/passwd") is None
    assert cache.allowed_path(str(tmp_path / ".." / tmp_path.name / "ok.py")) is None
    assert SourceCache(SourceSettings(roots=("/",))).allowed_path("/proc/self/status") is None
