"""The HTML report of many findings: the first of each root cause in full, the rest held in
the page (compressed data, never run) and drawn by the page's own hashed script on a click."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re

from npusan.analyzer.report import html as H
from npusan.analyzer.runs import pipeline
from npusan.trace_format import TraceWriter

SIDE = 0x5A5A00


def _racy(path, n: int) -> None:
    """``n`` distinct races of one root cause: n blocks written on the default stream, then
    read on a side stream without a wait; each op on its own line, one carries markup."""
    with TraceWriter(str(path), backend="cuda", header={"default_streams": {0: 0}}, source_text=False) as w:
        w.stream_created(SIDE)
        for i in range(n):
            w.memory_allocated(0x10000 + i * 4096, 0, 4096, stack=[("model.py", 1000 + i, "alloc")])
            op = "<img src=x onerror=alert(1)>" if i == n - 1 else f"bench::w{i}"
            w.kernel(0, op, writes=[0x10000 + i * 4096], stack=[("model.py", 10 + i, "produce")])
        for i in range(n):
            w.kernel(SIDE, f"bench::r{i}", reads=[0x10000 + i * 4096], stack=[("model.py", 500 + i, "consume")])


def _page(tmp_path, n: int) -> tuple:
    _racy(tmp_path / "t.npusan", n)
    options = pipeline.AnalysisOptions()
    report = pipeline.make_report(pipeline.replay_inputs([tmp_path / "t.npusan"], options), options)
    return report, H.HtmlReporter().render(report, pipeline.render_options(options))


def test_a_root_cause_of_many_findings_holds_the_rest_back(tmp_path):
    n = H.SHOWN_PER_CAUSE + 7
    report, page = _page(tmp_path, n)
    assert len(report.groups) == n and len(report.causes) == 1
    assert len(re.findall(r'<details class="finding"', page)) == H.SHOWN_PER_CAUSE
    assert '<button type="button" data-more="1">Show the other 7 findings of this root cause</button>' in page
    # one executable script, allowed by its hash; the data block is not one
    (policy,) = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy and "unsafe-inline" not in policy.split("script-src")[1]
    assert "DecompressionStream" in script and "innerHTML" not in script and "fetch(" not in script
    (data,) = re.findall(r'<script type="application/gzip\+base64" id="more-findings">([A-Za-z0-9+/=]*)</script>',
                         page)
    held = json.loads(gzip.decompress(base64.b64decode(data)))
    assert list(held) == ["1"]
    assert [f["n"] for f in held["1"]] == list(range(H.SHOWN_PER_CAUSE + 1, n + 1))
    last = held["1"][-1]
    assert last["of"] == n and last["kind"] == "data-race"
    rows = {r[0]: r for r in last["rows"]}
    assert "<img src=x onerror=alert(1)>" in rows["earlier"][1]  # text for textContent, not markup
    assert rows["fix"][2] == "fix" and rows["seen"][1].endswith(report.causes[0].groups[-1].fingerprint)
    assert "<img" not in page  # the markup shown in full elsewhere is escaped, held data is compressed


def test_a_page_with_nothing_held_is_as_before(tmp_path):
    _, page = _page(tmp_path, 3)
    assert "more-findings" not in page and "data-more" not in page
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert script == H.SCRIPT and f"script-src '{H.SCRIPT_HASH}'" in page
