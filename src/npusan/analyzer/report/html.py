"""The HTML report: one self-contained file to open in a browser or attach to a bug report.

Everything is inline (CSS, a few lines of script, SVG pictures): the page fetches nothing,
so it opens offline and leaks nothing. Findings are grouped by root cause, each with both
stacks and their source lines, its fix, and a small picture of the streams around it (the
traces are read again for those, in one bounded streaming pass each). Every string that
comes from a trace is HTML-escaped.

A root cause with more than :data:`SHOWN_PER_CAUSE` findings shows the first ones in full;
the others travel in the same file, gzip-compressed JSON in one ``<script
type="application/gzip+base64">`` data block (never run), and the page's own script
(allowed by its hash, as ever) draws them on a click, as text nodes only, without their
timelines. A racy trace of 10,000 findings then makes a page of a few MB, not 50.
"""

from __future__ import annotations

import base64
import bisect
import datetime
import gzip
import hashlib
import html
import json
from typing import Optional

from ..._version import __version__
from ...trace_format.safe_text import clean, clean_lines
from ..findings.model import AccessInfo, Kind
from ..findings.grouping import Group
from ..findings.rootcause import RootCause
from .shown_frames import Omitted, shown
from .sources import Folded, SourceCache, display_path, fold
from . import describe as D
from .base import Report, Reporter, ReportOptions, register
from .json_report import jsonable
from .run_notes import run_notes


def e(text) -> str:
    """Escaped for HTML, and sanitized first (control and bidi characters from a trace)."""
    return html.escape(clean(str(text), 1 << 16), quote=True)


def e_lines(lines) -> str:
    """Lines (a fix) escaped for a ``<pre>``, each sanitized as :func:`e` does; newlines kept."""
    return "\n".join(e(line) for line in lines)


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2127;background:#f6f7f9}
header,main{max-width:1100px;margin:0 auto;padding:12px 20px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:0 0 6px}h3{font-size:15px;margin:0}
.summary{font-size:15px}.bad{color:#b3261e}.good{color:#1e7d32}.dim{color:#667}
section.cause{background:#fff;border:1px solid #d8dce2;border-left:5px solid #b3261e;
border-radius:6px;margin:16px 0;padding:12px 16px}
details.finding{border-top:1px solid #e3e6ea;padding:8px 0}
details.finding>summary{cursor:pointer;font-weight:600}
pre{background:#f1f3f5;padding:8px 10px;border-radius:4px;white-space:pre-wrap;margin:6px 0}
pre.fix{background:#eaf6ec;border-left:3px solid #1e7d32}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;vertical-align:top;text-align:left}
.stack{font-family:ui-monospace,monospace;font-size:12.5px}
.stack .src{color:#114;font-weight:600;padding-left:3em;white-space:pre}
.status{font-weight:bold;color:#8a5a00}ul.run{margin:4px 0 8px;padding-left:20px}.tag{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;background:#fde7e5;color:#b3261e}
nav ol{margin:4px 0 0 0}svg{background:#fbfcfd;border:1px solid #e3e6ea;border-radius:4px}
"""

#: Builds the table of contents from the sections (the page is complete without it).
SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var list = document.getElementById('toc-list');
  if (!list) { document.body.dataset.ready = 'toc:0'; return; }
  document.querySelectorAll('section.cause').forEach(function (s) {
    var li = document.createElement('li'), a = document.createElement('a');
    a.href = '#' + s.id; a.textContent = s.dataset.title; li.appendChild(a); list.appendChild(li);
  });
  document.body.dataset.ready = 'toc:' + list.children.length;
});
"""

#: Added to :data:`SCRIPT` on pages with findings held back (see the module docstring): on
#: a click, decompresses the data block once and draws that root cause's other findings.
MORE_SCRIPT = """
(function () {
  var data = null;
  function load() {
    if (!data) {
      var b = atob(document.getElementById('more-findings').textContent.trim());
      var bytes = new Uint8Array(b.length);
      for (var i = 0; i < b.length; i++) bytes[i] = b.charCodeAt(i);
      var s = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
      data = new Response(s).text().then(JSON.parse);
    }
    return data;
  }
  function el(tag, cls, text) {
    var x = document.createElement(tag);
    if (cls) x.className = cls;
    if (text !== undefined) x.textContent = text;
    return x;
  }
  function finding(f) {
    var d = el('details', 'finding'), sum = el('summary'), t = el('table');
    d.id = 'finding-' + f.n;
    sum.appendChild(el('span', 'tag', f.kind));
    sum.appendChild(document.createTextNode(' (' + f.n + '/' + f.of + ') '));
    if (f.status) { sum.appendChild(el('span', 'status', '[' + f.status + ']')); sum.appendChild(document.createTextNode(' ')); }
    sum.appendChild(document.createTextNode(f.title));
    d.appendChild(sum);
    f.rows.forEach(function (r) {
      var tr = el('tr'), td = el('td');
      tr.appendChild(el('th', '', r[0]));
      if (r[2] === 'fix') td.appendChild(el('pre', 'fix', r[1]));
      else td.appendChild(document.createTextNode(r[1]));
      if (r[2] && r[2] !== 'fix') {
        var st = el('div', r[2].length ? 'stack' : 'stack dim', r[2].length ? undefined : '(no stack recorded)');
        r[2].forEach(function (l) { st.appendChild(el('div', l[0], l[1])); });
        td.appendChild(st);
      }
      tr.appendChild(td); t.appendChild(tr);
    });
    d.appendChild(t);
    return d;
  }
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest && ev.target.closest('button[data-more]');
    if (!b) return;
    b.disabled = true;
    load().then(function (all) {
      var box = b.parentNode;
      (all[b.dataset.more] || []).forEach(function (f) { box.parentNode.insertBefore(finding(f), box); });
      box.remove();
    });
  });
})();
"""


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


#: The Content-Security-Policy source that allows exactly :data:`SCRIPT`.
SCRIPT_HASH = _script_hash(SCRIPT)
#: Findings of one root cause drawn in full; the others are drawn on demand.
SHOWN_PER_CAUSE = 20

LANE_H = 22
SLOT_W = 22
LABEL_W = 190


@register
class HtmlReporter(Reporter):
    name = "html"
    extension = ".html"

    def render(self, report: Report, options: ReportOptions) -> str:
        sources = options.source_cache()
        held = any(len(c.groups) > SHOWN_PER_CAUSE for c in report.causes)
        shown_groups = [g for c in report.causes for g in c.groups[:SHOWN_PER_CAUSE]]
        near = _nearby_kernels(report, shown_groups if held else report.groups)
        script = SCRIPT + MORE_SCRIPT if held else SCRIPT
        out = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            # No network, ever: styles only from this page, images only inline, and no
            # script but this page's own (by its hash: a script a trace smuggled in never runs).
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            f"style-src 'unsafe-inline'; script-src '{_script_hash(script)}'; img-src data:\">",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>npusan report</title>",
            f"<style>{CSS}</style><script>{script}</script></head><body>",
            "<header>",
            f'<h1>npusan report <span class="dim">({e(__version__)})</span></h1>',
            _summary(report),
            _run_notes(report, options),
        ]
        if report.causes:  # a clean report has nothing to list
            out.append('<nav><strong>Root causes</strong><ol id="toc-list"></ol></nav>')
        out.append("</header><main>")
        numbers = {id(g): i for i, g in enumerate((g for c in report.causes for g in c.groups), 1)}
        more: dict = {}
        for c in report.causes:
            out.append(_cause(report, c, numbers, sources, near))
            if len(c.groups) > SHOWN_PER_CAUSE:
                more[str(c.number)] = [_finding_data(report, g, numbers[id(g)], sources)
                                       for g in c.groups[SHOWN_PER_CAUSE:]]
        out.append(_traces(report))
        if more:
            # gzip with no time or name in it: the same report makes the same page
            packed = gzip.compress(json.dumps(more, separators=(",", ":"), ensure_ascii=True).encode(), mtime=0)
            out.append(f'<script type="application/gzip+base64" id="more-findings">'
                       f"{base64.b64encode(packed).decode()}</script>")
        out.append("</main></body></html>\n")
        return "\n".join(out)


def _summary(report: Report) -> str:
    n = len(report.groups)
    if not n:
        return '<p class="summary good" id="summary">No stream-synchronization problems found.</p>'
    kinds = ", ".join(
        f"{c[0]} {D.KIND_TITLES[Kind(k)] if c[0] == 1 else D.KIND_PLURALS[Kind(k)]}"
        for k, c in report.counts_by_kind().items() if c[0]
    )
    causes = len(report.causes)
    return (
        f'<p class="summary bad" id="summary">{n} finding{"s" if n != 1 else ""} ({e(kinds)}; '
        f'{report.occurrences} occurrence{"s" if report.occurrences != 1 else ""}) from {causes} root cause{"s" if causes != 1 else ""}.</p>'
    )


def _run_notes(report: Report, options: ReportOptions) -> str:
    """What was left out, the comparison with history or baseline, unreadable inputs."""
    lines = []
    for note in run_notes(report, options):
        label = f'<strong class="bad">{e(note.label)}:</strong> ' if note.label else ""
        items = "".join(
            f'<li><span class="{"good" if i.marker == "-" else "status"}">{e(i.marker)}</span> '
            f'[{e(i.kind)}] {e(i.title)} <code class="dim">{e(i.fingerprint[:16])}</code>'
            f'{" " + e(i.remark) if i.remark else ""}</li>'
            for i in note.items)
        caveat = f'<p class="status">{e(note.caveat)}</p>' if note.caveat else ""
        lines.append(f"<li>{label}{e(note.text)}{'<ul>' + items + '</ul>' if items else ''}{caveat}</li>")
    return f'<ul class="run" id="run">{"".join(lines)}</ul>' if lines else ""


def _cause(report: Report, c: RootCause, numbers: dict, sources: SourceCache, near: dict) -> str:
    f = c.anchor
    header = report.header(f.trace)
    title = D.root_cause_title(c, header)
    parts = [f'<section class="cause" id="cause-{c.number}" data-title="{e(title)}">',
             f"<h2>Root cause #{c.number}: {e(title)}</h2>",
             f'<pre class="fix">{e_lines(D.root_cause_fix(c, header, sources))}</pre>']
    if len(c.groups) > 1:
        tensors = "".join(f"<li>{e(D.tensor_label(t))}</li>" for t in D.tensors(c, sources))
        parts.append(f"<p>Tensors:</p><ul>{tensors}</ul>")
    for k, g in enumerate(c.groups[:SHOWN_PER_CAUSE]):
        parts.append(_finding(report, g, numbers[id(g)], sources, near, open_=k == 0))
    rest = len(c.groups) - SHOWN_PER_CAUSE
    if rest > 0:
        parts.append(f'<p class="more"><button type="button" data-more="{c.number}">Show the other {rest} '
                     f"finding{'s' if rest != 1 else ''} of this root cause</button> "
                     '<span class="dim">(held in this file, drawn without timelines)</span></p>')
    parts.append("</section>")
    return "\n".join(parts)


def _finding(report: Report, g: Group, i: int, sources: SourceCache, near: dict, open_: bool) -> str:
    f = g.finding
    header = report.header(f.trace)
    later, earlier = ("later", "earlier")
    if f.kind is Kind.MISSING_RECORD_STREAM:
        later, earlier = ("not freed" if D.is_leak(f) else "freed", "used")
    elif f.kind is Kind.REUSE_RACE:
        later, earlier = ("reused", "old use")
    rows = [_access_row(later, f.access, f.kind, True, header, sources),
            _access_row(earlier, f.previous, f.kind, False, header, sources)]
    for a in (f.access, f.previous):  # the graph launch that ran a captured kernel
        replayed = D.replay_words(a, header)
        if replayed is not None:
            rows.insert(len(rows) - (1 if a is f.access else 0),
                        f"<tr><th>replayed</th><td>{e(replayed)}{_stack(a.replay.stack, sources)}</td></tr>")
    alloc = f"block {f.block.address:#x} ({D.human_size(f.block.size)})"
    if f.block.stream is not None:
        alloc += f" on {D.stream_name(f.block.stream, header)}"
    rows.append(f"<tr><th>allocated</th><td>{e(alloc)}{_stack(f.block.stack, sources)}</td></tr>")
    note = D.merged_ranges_note(g)
    if note is not None:
        rows.append(f"<tr><th>note</th><td>{e(note)}</td></tr>")
    rows.append(f'<tr><th>fix</th><td><pre class="fix">{e_lines(D.fix(f, header, sources))}</pre></td></tr>')
    others = [D.stream_name(s, h) for s, h in D.other_streams(report, g)]
    if others:
        rows.append(f"<tr><th>also on</th><td>{e('; '.join(others))}</td></tr>")
    seen = f"{g.count} occurrence{'s' if g.count != 1 else ''} in " + ", ".join(
        report.trace_path(t) for t in g.traces)
    rows.append(f"<tr><th>seen</th><td>{e(seen)}; fingerprint <code>{e(g.fingerprint)}</code></td></tr>")
    picture = _timeline(f, near.get(f.trace))
    status = f'<span class="status">[{e(g.status)}]</span> ' if g.status else ""  # against history or baseline
    return (
        f'<details class="finding" id="finding-{i}"{" open" if open_ else ""}>'
        f'<summary><span class="tag">{e(f.kind.value)}</span> ({i}/{len(report.groups)}) '
        f"{status}"
        f"{e(D.title(f, header))}</summary>"
        f"{picture}<table>{''.join(rows)}</table></details>"
    )


def _finding_data(report: Report, g: Group, i: int, sources: SourceCache) -> dict:
    """What :func:`_finding` shows, as data for the page's script (text, never markup; no timeline)."""
    f = g.finding
    header = report.header(f.trace)
    later, earlier = ("later", "earlier")
    if f.kind is Kind.MISSING_RECORD_STREAM:
        later, earlier = ("not freed" if D.is_leak(f) else "freed", "used")
    elif f.kind is Kind.REUSE_RACE:
        later, earlier = ("reused", "old use")
    rows = [[later, _access_text(f.access, f.kind, True, header), _stack_data(f.access.stack, sources)],
            [earlier, _access_text(f.previous, f.kind, False, header), _stack_data(f.previous.stack, sources)]]
    for a in (f.access, f.previous):  # the graph launch that ran a captured kernel
        replayed = D.replay_words(a, header)
        if replayed is not None:
            rows.insert(len(rows) - (1 if a is f.access else 0),
                        ["replayed", replayed, _stack_data(a.replay.stack, sources)])
    alloc = f"block {f.block.address:#x} ({D.human_size(f.block.size)})"
    if f.block.stream is not None:
        alloc += f" on {D.stream_name(f.block.stream, header)}"
    rows.append(["allocated", alloc, _stack_data(f.block.stack, sources)])
    note = D.merged_ranges_note(g)
    if note is not None:
        rows.append(["note", note])
    rows.append(["fix", "\n".join(D.fix(f, header, sources)), "fix"])
    others = [D.stream_name(s, h) for s, h in D.other_streams(report, g)]
    if others:
        rows.append(["also on", "; ".join(others)])
    seen = f"{g.count} occurrence{'s' if g.count != 1 else ''} in " + ", ".join(
        report.trace_path(t) for t in g.traces)
    rows.append(["seen", f"{seen}; fingerprint {g.fingerprint}"])
    out = {"n": i, "of": len(report.groups), "kind": f.kind.value, "status": g.status or "",
           "title": D.title(f, header), "rows": rows}
    return _clean_data(out)


def _clean_data(value):
    """Strings sanitized as :func:`e` does before escaping (the script sets them as text)."""
    if isinstance(value, str):
        return clean_lines(value, 1 << 16)
    if isinstance(value, dict):
        return {k: _clean_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_data(v) for v in value]
    return value


def _access_text(a: AccessInfo, kind: Kind, is_later: bool, header: dict) -> str:
    verb = D.access_verb(a, kind, is_later)
    if verb == "free":
        what = "".join(D.freed_words(a)) + D.stream_name(a.stream, header)
    else:
        what = f"{verb} by {a.op} on {D.stream_name(a.stream, header)}"
    if a.seq:
        what += f" [kernel {a.seq}]"
    return what


def _stack_data(stack, sources: SourceCache) -> list:
    """:func:`_stack` as ``[[css class, line], ...]`` (empty: no stack recorded)."""
    lines: list = []
    for item in fold(shown(stack or [])):
        if isinstance(item, (Folded, Omitted)):
            lines.append(["dim", str(item)])
            continue
        lines.append(["", f"{display_path(item.filename)}:{item.lineno} in {item.function}"])
        src = sources.frame_line(item)
        if src is not None:
            lines.append(["src", f"{item.lineno:>6} | {src}"])
    return lines


def _access_row(label: str, a: AccessInfo, kind: Kind, is_later: bool, header: dict, sources: SourceCache) -> str:
    verb = D.access_verb(a, kind, is_later)
    if verb == "free":
        what = "".join(D.freed_words(a)) + D.stream_name(a.stream, header)
    else:
        what = f"{verb} by {a.op} on {D.stream_name(a.stream, header)}"
    if a.seq:
        what += f" [kernel {a.seq}]"
    return f"<tr><th>{e(label)}</th><td>{e(what)}{_stack(a.stack, sources)}</td></tr>"


def _stack(stack, sources: SourceCache) -> str:
    if not stack:
        return '<div class="stack dim">(no stack recorded)</div>'
    lines = []
    for item in fold(shown(stack)):
        if isinstance(item, (Folded, Omitted)):
            lines.append(f'<div class="dim">{e(item)}</div>')
            continue
        lines.append(f"<div>{e(display_path(item.filename))}:{item.lineno} in {e(item.function)}</div>")
        src = sources.frame_line(item)
        if src is not None:
            lines.append(f'<div class="src">{item.lineno:>6} | {e(src)}</div>')
    return f'<div class="stack">{"".join(lines)}</div>'


def _nearby_kernels(report: Report, groups: list) -> dict:
    """``{trace index: Nearby}`` around ``groups`` (the findings drawn with a timeline);
    absent for unreadable traces."""
    from ..export.timeline import kernels_near
    from ...trace_format.errors import TraceFormatError

    seqs: dict[int, list] = {}
    for g in groups:
        f = g.finding
        seqs.setdefault(f.trace, []).extend(s for s in (f.access.seq, f.previous.seq, f.first_seq) if s)
    out = {}
    for trace, centers in seqs.items():
        try:
            out[trace] = kernels_near(report.trace_path(trace), centers)
        except (OSError, TraceFormatError, ValueError, TypeError, KeyError, IndexError):
            continue  # not readable here (or not a file): the report goes without pictures
    return out


def _timeline(f, near) -> str:
    """An SVG of the streams around a finding: kernels in launch order with both accesses
    marked, and the event records and waits between them as arrows (the synchronization
    that is there; the missing one shows as its absence)."""
    if near is None:
        return '<p class="dim">(no timeline: the trace is not readable here)</p>'
    from ..export.timeline import NEAR

    marks = {a.seq: role for a, role in ((f.previous, "earlier"), (f.access, "later")) if a.seq}
    centers = [s for s in (f.access.seq, f.previous.seq, f.first_seq) if s]
    # (from the centers, not by scanning what was kept: a report draws thousands of these)
    shown = sorted({s for c in centers for s in range(c - NEAR, c + NEAR + 1) if s in near.kernels})
    if not shown:
        return ""
    lanes: list[int] = []
    for s in (f.previous.stream, f.access.stream):
        if s is not None and s.index not in lanes:
            lanes.append(s.index)
    for s in shown:
        if near.kernels[s][0] not in lanes:
            lanes.append(near.kernels[s][0])
    x_of = {s: LABEL_W + i * SLOT_W for i, s in enumerate(shown)}
    width = max(620, LABEL_W + len(shown) * SLOT_W + 10)
    height = len(lanes) * LANE_H + 22

    def lane_y(sidx: int) -> int:
        return lanes.index(sidx) * LANE_H + 4

    def gap_x(after: int) -> Optional[int]:
        """x between kernel ``after`` and the next shown one, if that gap is drawn."""
        if after in x_of:
            return x_of[after] + SLOT_W - 3
        if after + 1 in x_of:
            return x_of[after + 1] - 3
        return None

    parts = [f'<svg class="timeline" width="{width}" height="{height}" role="img" '
             f'aria-label="streams around the finding">']
    for sidx in lanes:
        y = lane_y(sidx)
        parts.append(f'<text x="4" y="{y + 15}" font-size="12">{e(near.names.get(sidx, f"stream {sidx}"))}</text>')
        parts.append(f'<line x1="{LABEL_W - 4}" y1="{y + 10}" x2="{width}" y2="{y + 10}" stroke="#dde"/>')
    for s in shown:
        sidx, op = near.kernels[s]
        role = marks.get(s)
        color = {"earlier": "#e8a33d", "later": "#b3261e"}.get(role, "#8da2bf")
        parts.append(f'<rect x="{x_of[s]}" y="{lane_y(sidx) + 2}" width="{SLOT_W - 4}" height="16" rx="2" '
                     f'fill="{color}"><title>kernel {s}: {e(op)}{" (" + role + " access)" if role else ""}'
                     f"</title></rect>")
    recorded: dict = {}
    first = bisect.bisect_left(near.sync_after, shown[0] - 1)  # (only these can have a gap drawn)
    last = bisect.bisect_right(near.sync_after, shown[-1])
    for after, what, sidx, event in near.syncs[first:last]:
        x = gap_x(after)
        if x is None or sidx not in lanes:
            continue
        y = lane_y(sidx) + 10
        if what == "record":
            recorded[event] = (x, y)
            parts.append(f'<circle cx="{x}" cy="{y}" r="3" fill="#1e7d32"><title>event recorded</title></circle>')
        elif event in recorded:
            x0, y0 = recorded[event]
            parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x}" y2="{y}" stroke="#1e7d32" stroke-width="2">'
                         f"<title>wait for an event recorded on another stream</title></line>")
    if not f.access.seq and f.first_seq in x_of and f.access.stream is not None and f.access.stream.index in lanes:
        x, y = x_of[f.first_seq] + SLOT_W - 2, lane_y(f.access.stream.index)
        parts.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 20}" stroke="#b3261e" stroke-width="3">'
                     "<title>free</title></line>")
    parts.append(f'<text x="{LABEL_W}" y="{height - 4}" font-size="11" fill="#667">kernels in launch order; '
                 f"orange: earlier access, red: later, green: waits</text></svg>")
    return "".join(parts)


def _traces(report: Report) -> str:
    rows = []
    for t in report.traces:
        h = t.header if isinstance(t.header, dict) else {}
        meta = jsonable({k: v for k, v in h.items() if k not in ("strings",)})
        start = h.get("start_time")
        when = ""
        if isinstance(start, (int, float)) and not isinstance(start, bool):
            try:
                when = f"{datetime.datetime.fromtimestamp(start, datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
            except (OverflowError, OSError, ValueError):
                when = ""
        if t.error is not None:
            rows.append(f'<div class="trace"><h3>{e(t.path)}</h3><p class="bad">unreadable: {e(t.error)}</p></div>')
            continue
        state = "TRUNCATED: analyzed up to its last complete record" if t.truncated else "ended cleanly"
        if when:
            meta["start_time"] = when
        items = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in sorted(meta.items()))
        warnings = "".join(f'<li class="bad">{e(w)}</li>' for w in t.warnings)
        rows.append(
            f'<div class="trace"><h3>{e(t.path)}</h3><p>{D.count(t.events, "event")}, {D.count(t.kernels, "kernel")}, {e(state)}'
            f'{", recorded " + e(when) if when else ""}</p>'
            f"{'<ul>' + warnings + '</ul>' if warnings else ''}"
            f"<details><summary>trace metadata</summary><table>{items}</table></details></div>"
        )
    return '<section id="traces"><h2>Traces</h2>' + "".join(rows) + "</section>"


__all__ = ["HtmlReporter"]
