"""The HTML report: one self-contained page, opened in a real (headless) chromium."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from npusan.trace_format.writer import TraceWriter
from tests.cli.npusan_scenarios import (  # noqa: F401 (fixtures)
    DEFAULT,
    FIXED_HEADER,
    SIDE,
    run,
    scenario,
    stack,
    workdir,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed (make test installs it)")

HOSTILE_OP = '<img src=x onerror="document.body.dataset.pwned=1">&"'


def hostile_trace(path: Path) -> Path:
    """A data race whose op name and header carry markup (a trace is untrusted input)."""
    f = "data_race"
    header = {**FIXED_HEADER, "default_streams": {0: DEFAULT}, "argv": ["<script>alert(1)</script>"]}
    with TraceWriter(str(path), backend="cuda", header=header) as w:
        w.memory_allocated(0x1000, DEFAULT, 4096, stack=stack(f, "x = torch.empty"))
        w.stream_created(SIDE, stack=stack(f, "side = torch.cuda.Stream()"))
        for _ in range(8):  # some kernels before, so the picture has context
            w.kernel(DEFAULT, "aten::add_", writes=[0x1000], stack=stack(f, "x.fill_(1.0)"))
        w.kernel(SIDE, HOSTILE_OP, reads=[0x1000], stack=stack(f, "y = x.sum()"))
        for _ in range(3):
            w.kernel(SIDE, "aten::mul", reads=[0x1000], stack=stack(f, "y = x.sum()"))
    return path


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         *args],
        capture_output=True, text=True, timeout=180,
    )


def png_info(path: Path) -> tuple:
    """(width, height, distinct byte values in the decompressed image data)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return width, height, len(set(zlib.decompress(idat)))


def no_network(page: str) -> None:
    for m in re.finditer(r"""\b(src|href|action|data)\s*=\s*["']?([^"'\s>]*)""", page, re.I):
        assert not re.match(r"(?i)(https?:)?//", m.group(2)), m.group(0)
    assert not re.search(r"(?i)@import|url\(", page)


def test_page_is_self_contained_grouped_by_root_cause_and_escaped(scenario, run, workdir):
    hostile_trace(workdir / "hostile.bin")
    seed = scenario("seed_example", steps=2)
    r = run("analyze", "hostile.bin", seed, "--format", "html", "-o", "report.html")
    assert r.exit_code == 1, r.stderr
    page = (workdir / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    no_network(page)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert HOSTILE_OP not in page and "&lt;img src=x onerror=&quot;" in page
    assert page.count('<section class="cause"') >= 2
    assert "Root cause #1:" in page
    assert "y = x.sum()" in page and "x.fill_(1.0)" in page  # both stacks, with source
    assert page.count("<svg") >= 2  # a picture per finding
    assert "<circle" in page and 'stroke="#1e7d32"' in page  # the seed example's wait_stream, drawn
    assert "trace metadata" in page and "npusan-tests" in page and "testhost" in page


@needs_chromium
def test_headless_chromium_renders_it(scenario, run, workdir):
    hostile_trace(workdir / "hostile.bin")
    seed = scenario("seed_example")
    assert run("analyze", "hostile.bin", seed, "--format", "html", "-o", "report.html").exit_code == 1
    url = (workdir / "report.html").as_uri()

    dom = chromium("--dump-dom", url, tmp=workdir)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    causes = len(re.findall(r'<section class="cause"', html))
    assert causes >= 2
    # the page's script ran: it built the table of contents, one entry per root cause
    assert f'data-ready="toc:{causes}"' in html
    assert len(re.findall(r'<li><a href="#cause-\d+">', html)) == causes
    assert "data-pwned" not in html  # the markup in the trace stayed text (its handler never ran)

    shot = workdir / "report.png"
    r = chromium(f"--screenshot={shot}", "--window-size=1200,1400", url, tmp=workdir)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    width, height, distinct = png_info(shot)
    assert (width, height) == (1200, 1400)
    assert shot.stat().st_size > 20_000 and distinct > 50  # text and colors, not a blank page


def test_clean_report_and_unreadable_trace(tmp_path):
    from npusan.analyzer.report import ReportOptions, build_report, get_reporter
    from tests.cli.npusan_scenarios import make_finding, make_result

    page = get_reporter("html").render(build_report(make_result([])), ReportOptions())
    assert "No stream-synchronization problems found." in page
    assert "Root causes" not in page and "toc-list" not in page.split("<script>")[0]  # no empty heading
    # a report over a trace that is not readable here still renders, without pictures
    page = get_reporter("html").render(build_report(make_result([make_finding()])), ReportOptions())
    assert "no timeline: the trace is not readable here" in page and "<svg" not in page
    no_network(page)


def test_a_bug_seen_on_two_streams_names_both():
    from npusan.analyzer.report import ReportOptions, build_report, get_reporter
    from tests.cli.npusan_scenarios import make_finding, make_result

    one = make_finding("missing-record-stream", later_seq=0, earlier_seq=2)
    two = make_finding("missing-record-stream", later_seq=0, earlier_seq=3, side_handle=0x52, side_index=2,
                       side_number=2, address=0x7F0000200000)
    page = get_reporter("html").render(build_report(make_result([one, two])), ReportOptions())
    assert re.search(r"<th>also on</th><td>stream #2 \(cuda:0\)", page)
    page = get_reporter("html").render(build_report(make_result([one])), ReportOptions())
    assert "<th>also on</th>" not in page


def test_kernels_near_keeps_a_window_and_the_syncs_in_it(tmp_path):
    from npusan.analyzer.export.timeline import kernels_near
    from tests.analyzer.export.test_timeline_streaming import long_trace

    path = long_trace(tmp_path / "t.bin", 100, race_at=50)  # kernels 2i+1 (default), 2i+2 (side)
    near = kernels_near(path, [101], radius=2)
    assert sorted(near.kernels) == [99, 100, 101, 102, 103]
    # each step records an event on the default stream after its first kernel, waits on the side
    assert ("record" in {w for _, w, _, _ in near.syncs}) and ("wait" in {w for _, w, _, _ in near.syncs})
    assert all(99 <= after <= 102 for after, _, _, _ in near.syncs)
    assert sorted(near.names.values()) == ["default stream (cuda:0)", "stream #1 (cuda:0)"]


def test_trace_line_counts_in_words_and_start_time_as_a_date(tmp_path):
    from dataclasses import replace

    from npusan.analyzer.report import ReportOptions, build_report, get_reporter
    from tests.cli.npusan_scenarios import make_result

    result = make_result([])
    t = result.traces[0]
    result.traces[0] = replace(t, header={**t.header, "start_time": 1764561600.25}, events=1, kernels=1)
    page = get_reporter("html").render(build_report(result), ReportOptions())
    assert "1 event, 1 kernel, ended cleanly" in page
    assert "<th>start_time</th><td>2025-12-01 04:00:00 UTC</td>" in page and "1764561600.25" not in page


def test_a_free_is_described_in_the_words_of_the_text_report(tmp_path):
    from npusan.analyzer.report import ReportOptions, build_report, get_reporter
    from tests.cli.npusan_scenarios import make_finding, make_result

    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=2)
    report = build_report(make_result([f]))
    words = "returned to the allocator, free for reuse on default stream (cuda:0)"
    assert words in get_reporter("html").render(report, ReportOptions())
    assert words in get_reporter("text").render(report, ReportOptions(color=False))
