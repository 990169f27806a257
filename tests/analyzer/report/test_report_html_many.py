"""The HTML report of many findings: the first of each root cause in full, the rest held in
the page (compressed data, never run) and drawn by the page's own hashed script on a click."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import time

from npusan.analyzer.report import html as H
from npusan.analyzer.runs import pipeline
from npusan.trace_format import TraceWriter
from tests.analyzer.report.test_report_html import CHROMIUM, needs_chromium

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


class _Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    JSON messages ended by a NUL byte, commands on fd 3, answers on fd 4), with the standard
    library only."""

    def __init__(self, chromium: str, profile) -> None:
        """``profile``: an empty folder for chromium's profile and its log (stderr)."""
        cmd_r, self._cmd = os.pipe()
        self._res, res_w = os.pipe()
        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                "--remote-debugging-pipe", "about:blank"]
        # a Python trampoline puts the pipe ends at fds 3 and 4, where chromium looks for them
        place = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
        self.log = profile / "chromium.log"
        with open(self.log, "wb") as log:  # (a pipe nobody reads could fill and stall chromium)
            self.proc = subprocess.Popen([sys.executable, "-c", place, str(cmd_r), str(res_w), *args],
                                         pass_fds=(cmd_r, res_w), stdout=subprocess.DEVNULL, stderr=log)
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.session = None

    def call(self, method: str, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session is not None and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._cmd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._id:  # (events, which have no id, are skipped)
                    assert "error" not in answer, (method, answer["error"])
                    return answer["result"]
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {method} from chromium in {timeout} s"
            if select.select([self._res], [], [], left)[0]:
                chunk = os.read(self._res, 1 << 16)
                assert chunk, f"chromium closed the pipe: {self.log.read_text(errors='replace')[-2000:]}"
                self._buf += chunk

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in out, out["exceptionDetails"]
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60):
        """Polls ``expression`` in the page until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def click(self, x: float, y: float) -> None:
        """A left click as the mouse makes it (pressed, released), at viewport ``x``, ``y``."""
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd)
        os.close(self._res)


@needs_chromium
def test_clicking_show_the_others_draws_them_in_a_real_browser(tmp_path):
    """In headless chromium, a mouse click on the button draws the held findings from the
    page's own data block, with its own script (the page's Content-Security-Policy in force),
    the markup in a trace as text."""
    n = H.SHOWN_PER_CAUSE + 7
    _report, page = _page(tmp_path, n)
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    (tmp_path / "profile").mkdir()
    browser = _Browser(CHROMIUM, tmp_path / "profile")
    try:
        browser.open(path.as_uri())
        assert browser.wait_for("document.body && document.body.dataset.ready") == "toc:1"
        count = "document.querySelectorAll('details.finding').length"
        assert browser.js(count) == H.SHOWN_PER_CAUSE
        x, y = browser.js("""(() => {
            const b = document.querySelector('button[data-more]');
            b.scrollIntoView({block: 'center'});
            const r = b.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        })()""")
        browser.click(x, y)
        assert browser.wait_for(f"{count} === {n} && !document.querySelector('button[data-more]')"), \
            browser.js(count)
        drawn = browser.js(f"""(() => {{
            const d = document.getElementById('finding-{n}');
            return {{summary: d.querySelector('summary').textContent, text: d.textContent,
                     fix: d.querySelectorAll('pre.fix').length, imgs: document.querySelectorAll('img').length,
                     pwned: document.body.dataset.pwned || null,
                     order: [...document.querySelectorAll('details.finding')].map(x => x.id)}};
        }})()""")
    finally:
        browser.close()
    assert f"({n}/{n})" in drawn["summary"] and "data-race" in drawn["summary"]
    assert "<img src=x onerror=alert(1)>" in drawn["text"]  # the op from the trace, as text
    assert drawn["imgs"] == 0 and drawn["pwned"] is None
    assert drawn["fix"] == 1
    assert drawn["order"][H.SHOWN_PER_CAUSE:] == [f"finding-{i}" for i in range(H.SHOWN_PER_CAUSE + 1, n + 1)]
