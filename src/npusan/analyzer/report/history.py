"""What ``npusan history DB`` prints: runs, and each fingerprint across them (text, JSON, HTML).

Each run shows what it changed against the run before it: new, persisting and fixed
findings. A count of distinct findings per run hides a regression (four fixed and one new
is a fall from four to one), so a run with a new finding is marked as a regression in
every format, and the new and fixed findings are listed by short fingerprint (titles
repeat: two races on one tensor share one).

The HTML page is self-contained (inline CSS and SVG, no script, no network) so a CI job can
publish it as an artifact. A history database may come from anyone (attached to a bug
report, like a trace) and SQLite keeps any value in any column: every value on the page,
numbers included, is escaped, and a Content-Security-Policy forbids scripts outright.
"""

from __future__ import annotations

import datetime
import html
import json

from ...trace_format.safe_text import clean, clean_tree
from ..findings.model import Kind
from ..runs.history import History

HISTORY_VERSION = 1
#: No script, no network: only the page's own inline style (the chart is inline SVG).
CSP = "default-src 'none'; style-src 'unsafe-inline'"
#: Colors of the chart's lines, one per kind (in Kind order).
_COLORS = ("#c0392b", "#2471a3", "#b9770e")
#: Colors of the new / fixed bars.
_CHANGE_COLORS = {"new": "#c0392b", "fixed": "#1e8449"}
#: Characters of a fingerprint shown to tell findings apart.
SHORT = 16


def history_doc(history: History) -> dict:
    """The JSON document: ``runs`` and ``fingerprints`` (first/last run, occurrences per run)."""
    runs = history.runs()
    changes = history.changes()
    label = {r.id: r.label for r in runs}
    # A findings row may name a run the database no longer has.
    name = lambda rid: label.get(rid, f"(run {rid}, missing)")  # noqa: E731
    return clean_tree({
        "history_version": HISTORY_VERSION,
        "database": history.path,
        "runs": [
            {
                "label": r.label,
                "created": _when(r.created),
                "traces": r.traces,
                "unreadable": r.errors,
                "findings": sum(n for n in r.by_kind.values() if isinstance(n, int)),
                "unchecked": r.unchecked,
                "by_kind": {k.value: r.by_kind.get(k.value, 0) for k in Kind},
                **_changes(changes[r.id]),
            }
            for r in runs
        ],
        "fingerprints": [
            {
                "fingerprint": t.fingerprint,
                "kind": t.kind,
                "title": t.title,
                "first_run": name(min(t.counts)),
                "last_run": name(max(t.counts)),
                "occurrences": [{"run": name(rid), "count": n} for rid, n in sorted(t.counts.items())],
            }
            for t in history.tracks()
        ],
    })


def _changes(c) -> dict:
    """A run's changes against the run before it, as JSON fields (the counts, whether it
    regressed, and the fingerprints that came and went)."""
    return {
        "new": len(c.new),
        "persisting": len(c.persisting),
        "fixed": len(c.fixed),
        "regression": c.regression,
        "new_fingerprints": list(c.new),
        "fixed_fingerprints": list(c.fixed),
    }


def _when(created) -> str:
    if created is None:
        return "?"
    return datetime.datetime.fromtimestamp(created, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clean(value) -> str:
    """A value as one safe line (None, a value the database does not hold as its column's type: ``?``)."""
    return "?" if value is None else clean(value)


def render_json(history: History) -> str:
    return json.dumps(history_doc(history), indent=2, ensure_ascii=False) + "\n"


def render_text(history: History) -> str:
    doc = history_doc(history)
    kinds = [k.value for k in Kind]
    out = [f"history {_clean(doc['database'])}: {len(doc['runs'])} runs, {len(doc['fingerprints'])} distinct findings", ""]
    head = ["run", "created", "traces", "unreadable", *kinds, "unchecked", "new", "persisting", "fixed", ""]
    rows = [[_clean(r["label"]), r["created"], _clean(r["traces"]), _clean(r["unreadable"]),
             *(_clean(r["by_kind"][k]) for k in kinds), _clean(r["unchecked"]),
             str(r["new"]), str(r["persisting"]), str(r["fixed"]), "<- regression" if r["regression"] else ""]
            for r in doc["runs"]]
    out += _table(head, rows)
    out += _changes_text(doc)
    if doc["fingerprints"]:
        out.append("")
        head = ["fingerprint", "kind", "first run", "last run", "runs seen", "title"]
        rows = [[f["fingerprint"][:16], f["kind"], _clean(f["first_run"]), _clean(f["last_run"]),
                 _clean(len(f["occurrences"])), _clean(f["title"])] for f in doc["fingerprints"]]
        out += _table(head, rows)
    return "\n".join(out) + "\n"


def _changes_text(doc: dict) -> list:
    """Per run with changes: its new findings (``+``, the regression) and fixed ones (``-``),
    each by short fingerprint, kind and title."""
    about = {f["fingerprint"]: f for f in doc["fingerprints"]}
    out: list = []
    for i, r in enumerate(doc["runs"]):
        if i == 0 or not (r["new_fingerprints"] or r["fixed_fingerprints"]):
            continue  # (the first run's findings are all new: the table below lists them)
        tag = "REGRESSION: " if r["regression"] else ""
        out += ["", f"{_clean(r['label'])}: {tag}{r['new']} new, {r['persisting']} persisting, {r['fixed']} fixed"]
        for sign, fps in (("+", r["new_fingerprints"]), ("-", r["fixed_fingerprints"])):
            rows = [[sign, fp[:SHORT], *_kind_title(about.get(fp))] for fp in fps]
            out += ["  " + line for line in _table(["", "fingerprint", "kind", "title"], rows)[1:]] if rows else []
    return out


def _kind_title(f) -> list:
    return [_clean(f["kind"]), _clean(f["title"])] if f else ["?", "?"]


def _table(head: list, rows: list) -> list:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]


def render_html(history: History) -> str:
    doc = history_doc(history)
    e = lambda v: html.escape(_clean(v), quote=True)  # noqa: E731
    kinds = [k.value for k in Kind]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>npusan history {e(doc['database'])}</title>",
        "<style>body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#f4f4f4}"
        "code{font-size:90%}.legend span{margin-right:1.5em}"
        "tr.regression td{background:#fdecea}.regression strong,.new{color:#c0392b}.fixed{color:#1e8449}</style>",
        "</head><body>",
        f"<h1>npusan history</h1><p>{e(doc['database'])}: {len(doc['runs'])} runs, "
        f"{len(doc['fingerprints'])} distinct findings</p>",
        "<h2>Findings per kind across runs</h2>",
        _chart(doc, kinds),
        '<p class="legend">' + "".join(
            f'<span style="color:{c}">&#9632; {e(k)}</span>' for k, c in zip(kinds, _COLORS)
        ) + "</p>",
        "<h2>New and fixed per run</h2>",
        _changes_chart(doc),
        '<p class="legend">' + "".join(
            f'<span style="color:{c}">&#9632; {k}</span>' for k, c in _CHANGE_COLORS.items()
        ) + "</p>",
        "<h2>Runs</h2><table><tr><th>run</th><th>created</th><th>traces</th><th>unreadable</th>"
        + "".join(f"<th>{e(k)}</th>" for k in kinds)
        + "<th>unchecked</th><th>new</th><th>persisting</th><th>fixed</th><th></th></tr>",
    ]
    for r in doc["runs"]:
        mark = ' class="regression"' if r["regression"] else ""
        parts.append(
            f"<tr{mark}><td>{e(r['label'])}</td><td>{e(r['created'])}</td><td>{e(r['traces'])}</td><td>{e(r['unreadable'])}</td>"
            + "".join(f"<td>{e(r['by_kind'][k])}</td>" for k in kinds)
            + f"<td>{e(r['unchecked'])}</td><td>{e(r['new'])}</td><td>{e(r['persisting'])}</td><td>{e(r['fixed'])}</td>"
            + ("<td><strong>regression</strong></td>" if r["regression"] else "<td></td>") + "</tr>"
        )
    parts.append("</table>")
    parts += _changes_html(doc, e)
    parts.append("<h2>Findings</h2><table><tr><th>fingerprint</th><th>kind</th><th>title</th>"
                 "<th>first run</th><th>last run</th><th>occurrences per run</th></tr>")
    for f in doc["fingerprints"]:
        occ = ", ".join(f"{e(o['run'])}: {e(o['count'])}" for o in f["occurrences"])
        parts.append(
            f"<tr><td><code>{e(f['fingerprint'][:16])}</code></td><td>{e(f['kind'])}</td><td>{e(f['title'])}</td>"
            f"<td>{e(f['first_run'])}</td><td>{e(f['last_run'])}</td><td>{occ}</td></tr>"
        )
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


def _changes_html(doc: dict, e) -> list:
    """Per compared run with changes: its new findings (the regression) and fixed ones."""
    about = {f["fingerprint"]: f for f in doc["fingerprints"]}
    out: list = []
    for i, r in enumerate(doc["runs"]):
        if i == 0 or not (r["new_fingerprints"] or r["fixed_fingerprints"]):
            continue
        tag = "<strong>regression</strong>: " if r["regression"] else ""
        cls = ' class="regression"' if r["regression"] else ""
        out.append(f"<h3{cls}>{e(r['label'])}: {tag}{e(r['new'])} new, {e(r['persisting'])} persisting, "
                   f"{e(r['fixed'])} fixed</h3><table><tr><th></th><th>fingerprint</th><th>kind</th><th>title</th></tr>")
        for what, fps in (("new", r["new_fingerprints"]), ("fixed", r["fixed_fingerprints"])):
            for fp in fps:
                kind, title = _kind_title(about.get(fp))
                out.append(f'<tr><td class="{what}">{what}</td><td><code>{e(fp[:SHORT])}</code></td>'
                           f"<td>{e(kind)}</td><td>{e(title)}</td></tr>")
        out.append("</table>")
    return out


def y_ticks(highest: int, most: int = 6) -> list:
    """Integer y-axis ticks from 0 covering ``highest``: steps of 1, 2 or 5 times a power of
    ten, at most ``most`` ticks (``[0, 1]`` for an empty chart)."""
    highest = max(1, int(highest))
    step = 1
    while True:
        for m in (1, 2, 5):
            s = step * m
            if -(-highest // s) + 1 <= most:
                return list(range(0, -(-highest // s) * s + 1, s))
        step *= 10


def _chart(doc: dict, kinds: list) -> str:
    """An inline SVG line chart: distinct findings of each kind per run."""
    runs = doc["runs"]
    width, height, pad = 640, 240, 40
    ticks = y_ticks(max([0] + [r["by_kind"][k] for r in runs for k in kinds if isinstance(r["by_kind"][k], int)]))
    top = ticks[-1]
    n = max(1, len(runs) - 1)

    def x(i: int) -> float:
        return pad + (width - 2 * pad) * (i / n if len(runs) > 1 else 0.5)

    def y(v: int) -> float:
        return height - pad - (height - 2 * pad) * v / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="findings per kind across runs">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>']
    for v in ticks:
        if v:
            out.append(f'<line class="grid" x1="{pad}" y1="{y(v):.1f}" x2="{width - pad}" y2="{y(v):.1f}" stroke="#eee"/>')
        out.append(f'<line x1="{pad - 4}" y1="{y(v):.1f}" x2="{pad}" y2="{y(v):.1f}" stroke="#888"/>')
        out.append(f'<text class="ytick" x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{v}</text>')
    for i, r in enumerate(runs):
        out.append(f'<text x="{x(i):.1f}" y="{height - pad + 16}" text-anchor="middle" font-size="11">'
                   f"{html.escape(_clean(r['label'])[:24])}</text>")
    for k, color in zip(kinds, _COLORS):
        pts = " ".join(f"{x(i):.1f},{y(r['by_kind'][k]):.1f}" for i, r in enumerate(runs))
        if pts:
            out.append(f'<polyline class="kind" data-kind="{k}" fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
            for i, r in enumerate(runs):
                out.append(f'<circle cx="{x(i):.1f}" cy="{y(r["by_kind"][k]):.1f}" r="3" fill="{color}">'
                           f"<title>{html.escape(k)}: {r['by_kind'][k]}</title></circle>")
    out.append("</svg>")
    return "\n".join(out)


def _changes_chart(doc: dict) -> str:
    """An inline SVG bar chart: new and fixed findings per run, side by side (the first
    run, compared with nothing, has no bars)."""
    runs = doc["runs"]
    width, height, pad = 640, 200, 40
    ticks = y_ticks(max([0] + [r[k] for r in runs[1:] for k in _CHANGE_COLORS]))
    top = ticks[-1]
    slot = (width - 2 * pad) / max(1, len(runs))
    bar = max(1.0, min(18.0, slot / 3))

    def y(v: int) -> float:
        return height - pad - (height - 2 * pad) * v / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="new and fixed findings per run">',
           f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#888"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#888"/>']
    for v in ticks:
        out.append(f'<text class="ytick-changes" x="{pad - 6}" y="{y(v) + 4:.1f}" text-anchor="end" '
                   f'font-size="11">{v}</text>')
    for i, r in enumerate(runs):
        mid = pad + slot * (i + 0.5)
        out.append(f'<text x="{mid:.1f}" y="{height - pad + 16}" text-anchor="middle" font-size="11">'
                   f"{html.escape(_clean(r['label'])[:24])}</text>")
        if i == 0:
            continue
        for j, (k, color) in enumerate(_CHANGE_COLORS.items()):
            left = mid - bar + j * bar
            out.append(f'<rect class="change" data-change="{k}" x="{left:.1f}" y="{y(r[k]):.1f}" width="{bar:.1f}" '
                       f'height="{y(0) - y(r[k]):.1f}" fill="{color}"><title>{k}: {r[k]}</title></rect>')
    out.append("</svg>")
    return "\n".join(out)


RENDERERS = {"text": render_text, "json": render_json, "html": render_html}
