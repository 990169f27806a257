"""The terminal report: each finding reads like a good compiler error.

Rendered through rich so that a TTY gets colors; with ``color=False`` the output is plain
text that never wraps and carries nothing machine- or time-dependent beyond what the trace
itself says, so golden tests can compare it byte for byte.
"""

from __future__ import annotations

import datetime
import io
from typing import Optional

from ...trace_format.safe_text import clean
from ..findings.model import AccessInfo, Kind
from ..findings.grouping import Group
from ..findings.rootcause import RootCause
from .shown_frames import Omitted, shown
from .sources import Folded, SourceCache, display_path, fold, user_site
from . import describe as D
from .base import Report, Reporter, ReportOptions, register, trace_rows
from .run_notes import run_notes

INDENT = "  "
LABEL_WIDTH = 10  # "allocated:" fits


@register
class TextReporter(Reporter):
    name = "text"
    extension = ".txt"

    def render(self, report: Report, options: ReportOptions) -> str:
        w = _Writer(options.source_cache(), options)
        if len(report.traces) > 1 or report.errors:
            _trace_table(w, report)
            w.line()
        n = len(report.groups)
        numbers = {id(g): i for i, g in enumerate(_display_order(report), 1)}
        for c in report.causes:
            if len(c.groups) == 1:
                w.group(report, c.groups[0], numbers[id(c.groups[0])], n)
                w.line()
                continue
            w.root_cause(report, c, numbers)
            w.line()
            for g in c.groups if options.expand else c.groups[:1]:
                w.group(report, g, numbers[id(g)], n)
                w.line()
        _summary(w, report, options)
        return w.render()


def _display_order(report: Report) -> list:
    """Findings in the order the text report shows them: root cause by root cause."""
    return [g for c in report.causes for g in c.groups]


@register
class ShortReporter(Reporter):
    """``--format short``: one compiler-style line per finding (``file:line: kind: summary``)."""

    name = "short"
    extension = ".txt"

    def render(self, report: Report, options: ReportOptions) -> str:
        out = []
        for c in report.causes:
            for g in c.groups:
                line = D.short_line(g.finding, report.header(g.finding.trace))
                if g.status:  # against a baseline or a history: new or persisting
                    line += f" [{g.status}]"
                if len(c.groups) > 1:
                    line += f" [root cause #{c.number}]"
                out.append(clean(line, 1 << 16) + "\n")
        return "".join(out)


def group_text(report: Report, g: Group, options: ReportOptions, index: int = 1, total: int = 1,
               sources: Optional[SourceCache] = None) -> str:
    """One finding as the terminal report shows it (plain unless ``options.color``).

    ``sources``: the cache to quote from; pass one when rendering many findings, so that
    each file is read and parsed once, not once per finding."""
    w = _Writer(sources if sources is not None else options.source_cache(), options)
    w.group(report, g, index, total)
    return w.render()


class _Writer:
    """Collects lines of (text, style) parts; renders them plain or, with color, via rich.

    Plain output is joined directly: it is what CI logs, files and golden tests get, and
    reports with thousands of findings must not pay for rich's layout engine.
    """

    def __init__(self, sources: SourceCache, options: ReportOptions) -> None:
        self.lines: list[list] = []
        self.sources = sources
        self.options = options

    def line(self, *parts, indent: int = 0) -> None:
        """Append one line; parts are strings or (string, style) pairs.

        Control characters are replaced: a trace is untrusted, and an op name must not be
        able to move the cursor or recolor the terminal.
        """
        out: list = [(INDENT * indent, "")] if indent else []
        for p in parts:
            text, style = p if isinstance(p, tuple) else (p, "")
            out.append((clean(text, 1 << 16), style))
        self.lines.append(out)

    def render(self) -> str:
        if not self.options.color:
            return "".join("".join(t for t, _ in line) + "\n" for line in self.lines)
        from rich.console import Console  # only colored output needs rich (imported here: start-up)
        from rich.text import Text

        buf = io.StringIO()
        console = Console(
            file=buf,
            force_terminal=True,
            color_system="standard",
            width=max(40, self.options.width),
            soft_wrap=True,
            highlight=False,
            markup=False,
            emoji=False,
        )
        for line in self.lines:
            text = Text()
            for t, style in line:
                text.append(t, style=style or None)
            console.print(text)
        return buf.getvalue()

    def labelled(self, label: str, *parts, style: str = "bold") -> None:
        self.line((f"{label}:".ljust(LABEL_WIDTH), style), " ", *parts, indent=1)

    def stack(self, stack) -> None:
        pad = " " * (LABEL_WIDTH + 1)
        if not stack:
            self.line(pad, ("(no stack recorded)", "dim"), indent=1)
            return
        for item in fold(shown(stack), full=self.options.full_stacks):
            if isinstance(item, Omitted):
                self.line(pad, (str(item), "dim"), indent=1)
                continue
            if isinstance(item, Folded):
                hint = "" if self.options.full_stacks else self.options.folded_hint
                self.line(pad, (f"{item}{hint}", "dim"), indent=1)
                continue
            self.line(
                pad,
                (f"{display_path(item.filename)}:{item.lineno}", "cyan"),
                f" in {item.function}",
                indent=1,
            )
            src = self.sources.frame_line(item)
            if src is not None:
                self.line(pad, (f"{item.lineno:>6} | ", "dim"), (src, "bold"), indent=1)

    def access(self, label: str, a: AccessInfo, kind: Kind, later: bool, header: dict) -> None:
        verb = D.access_verb(a, kind, later)
        if verb == "free":
            # A free's stream is the block's allocation stream: where the allocator hands the
            # memory out again, which is what makes the unsynchronized use dangerous.
            what, where = D.freed_words(a)
            parts = [(what, "bold magenta"), where, D.stream_name(a.stream, header)]
        elif D.is_host(a.stream):  # "host write by aten::copy_"
            parts = [(f"host {verb}", "bold magenta" if verb != "read" else "bold blue"), " by ", (a.op, "bold")]
        else:
            parts = [(verb, "bold magenta" if verb != "read" else "bold blue"), " by ", (a.op, "bold")]
            parts += [" on ", D.stream_name(a.stream, header)]
        if a.seq:
            parts.append((f"  [kernel {a.seq}]", "dim"))
        if a.offset is not None and a.nbytes is not None:
            parts.append((f"  bytes {a.offset}..{a.offset + a.nbytes}", "dim"))
        self.labelled(label, *parts)
        leaked = verb == "free" and a.op != "free"
        if a.stack or not leaked:  # a block never freed has no stack to show for it
            self.stack(a.stack)
        replayed = D.replay_words(a, header)
        if replayed is not None:  # the stack above is the captured line; it ran here
            self.labelled("replayed", replayed)
            self.stack(a.replay.stack)

    def root_cause(self, report: Report, c: RootCause, numbers: dict) -> None:
        """A root cause several findings share: the one fix first, then the findings, compactly."""
        f = c.anchor
        header = report.header(f.trace)
        self.line((f"root cause #{c.number}", "bold red"), ": ", (D.root_cause_title(c, header), "bold"))
        site = user_site(f.access.stack)
        if site is not None:
            self.line(("--> ", "blue"), f"{display_path(site.filename)}:{site.lineno}", indent=1)
        advice = D.root_cause_fix(c, header, self.sources)
        self.labelled("fix", (advice[0], "green"))
        for extra in advice[1:]:
            self.line(" " * (LABEL_WIDTH + 1), (extra, "green"), indent=1)
        labels = [D.tensor_label(t) for t in D.tensors(c, self.sources)]
        self.labelled("tensors", "; ".join(labels))
        pad = " " * (LABEL_WIDTH + 1)
        for k, g in enumerate(c.groups):
            times = "" if g.count == 1 else f" ({g.count} times)"
            text = f"({numbers[id(g)]}/{len(report.groups)}) {D.compact_line(g.finding)}{times}"
            if k == 0:
                self.labelled("findings", text)
            else:
                self.line(pad, text, indent=1)
        if not self.options.expand:
            self.line(pad, ("the first of them in full below (--expand shows each one)", "dim"), indent=1)

    def group(self, report: Report, g: Group, i: int, n: int) -> None:
        f = g.finding
        header = report.header(f.trace)
        self.line(
            (f"error[{f.kind.value}]", "bold red"),
            (f" ({i}/{n})", "dim"),
            *([(f" [{g.status}]", "bold yellow" if g.status == "new" else "dim")] if g.status else []),
            ": ",
            (D.title(f, header), "bold"),
        )
        site = D.arrow_site(f)
        if site is not None:
            self.line(("--> ", "blue"), f"{display_path(site.filename)}:{site.lineno}", indent=1)
        later, earlier = ("later", "earlier")
        if f.kind is Kind.MISSING_RECORD_STREAM:
            later, earlier = ("not freed" if D.is_leak(f) else "freed", "used")
        elif f.kind is Kind.REUSE_RACE:
            later, earlier = ("reused", "old use")
        self.access(later, f.access, f.kind, True, header)
        self.access(earlier, f.previous, f.kind, False, header)
        alloc = [f"block {f.block.address:#x} ({D.human_size(f.block.size)})"]
        if f.block.stream is not None:
            alloc.append(f" on {D.stream_name(f.block.stream, header)}")
        elif D.pinned_host_block(f):
            alloc.append(" of pinned host memory (the host allocator reports no allocation stack)")
        self.labelled("allocated", *alloc)
        if f.block.stack or f.block.stream is not None:
            self.stack(f.block.stack)
        note = D.merged_ranges_note(g)
        if note is not None:
            self.labelled("note", (note, "yellow"))
        advice = D.fix(f, header, self.sources)
        self.labelled("fix", (advice[0], "green"))
        for extra in advice[1:]:
            self.line(" " * (LABEL_WIDTH + 1), (extra, "green"), indent=1)
        self.labelled("seen", _seen(report, g), style="dim")


def _seen(report: Report, g: Group) -> str:
    times = "once" if g.count == 1 else f"{g.count} times"
    traces = ", ".join(report.trace_path(t) for t in g.traces)
    first, last = g.first, g.last
    if (first.trace, first.seq) == (last.trace, last.seq):
        at = "after" if g.finding.access.seq == 0 else "at"
        where = f"{at} kernel {first.seq}" if first.seq else ""
    elif first.trace == last.trace:
        where = f"kernels {first.seq} … {last.seq}"
    else:
        where = (
            f"first at kernel {first.seq} of {report.trace_path(first.trace)}, "
            f"last at kernel {last.seq} of {report.trace_path(last.trace)}"
        )
    text = f"{times} in {traces}"
    if where:
        text += f", {where}"
    addrs = g.addresses
    if len(addrs) > 1:
        text += f"; blocks {', '.join(f'{a:#x}' for a in addrs[:4])}"
        if len(addrs) > 4:
            text += ", …"
    if g.omitted:
        text += f"; {g.omitted} further occurrences counted but not kept"
    others = [D.stream_label(s, h) for s, h in D.other_streams(report, g)]
    if others:
        text += f"; also on {', '.join(others)}"
    text += f"; fingerprint {g.fingerprint[:16]}"
    return text


def _summary(w: _Writer, report: Report, options: ReportOptions) -> None:
    unreadable = len(report.unreadable_traces)
    n_traces = D.count(len(report.traces) - unreadable, "trace")  # the ones analyzed
    if unreadable:
        n_traces += f" ({unreadable} more could not be read)"
    if not report.groups:
        w.line(("npusan: no stream-synchronization problems found", "bold green"), f" in {n_traces}")
    else:
        counts = report.counts_by_kind()
        kinds = ", ".join(
            D.count(c[0], D.KIND_TITLES[Kind(k)], D.KIND_PLURALS[Kind(k)])
            for k, c in counts.items()
            if c[0]
        )
        if report.grouped:
            head = D.count(len(report.groups), "finding")
            tail = f" ({kinds}; {D.count(report.occurrences, 'occurrence')}) in {n_traces}"
        else:
            distinct = len({g.fingerprint for g in report.groups})
            head = D.count(len(report.groups), "occurrence")
            tail = f" ({kinds}) of {D.count(distinct, 'finding')} in {n_traces}"
        w.line(("npusan: ", "bold"), (head, "bold red"), tail)
    for note in run_notes(report, options):
        w.line(*([(note.label + ": ", "bold red")] if note.label else []), note.text, indent=1)
        for item in note.items:
            w.line((item.marker + " ", "green" if item.marker == "-" else "yellow"), f"[{item.kind}] {item.title} ",
                   (f"({item.fingerprint[:16]})", "dim"), *([" " + item.remark] if item.remark else []), indent=2)
        if note.caveat:
            w.line(note.caveat, indent=2)
    for i, t in enumerate(report.traces):
        if t.error is None:
            _trace_lines(w, t)
    if report.check_leaks:
        w.line(("blocks still alive at the end were checked (--check-leaks)", "dim"), indent=1)


def _trace_table(w: _Writer, report: Report) -> None:
    """One line per trace: a batch run's overview before its findings."""
    rows = trace_rows(report)
    kinds = [k.value for k in Kind]
    head = ["trace", "rank", "kernels", *kinds, "status"]
    cells = [
        [r["trace"], "-" if r["rank"] is None else str(r["rank"]), str(r["kernels"]),
         *(str(r["findings"][k]) for k in kinds),
         f"left out ({r['left_out']})" if r["status"] == "left-out" else r["status"]]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]

    def fmt(c: list) -> str:
        left = c[0].ljust(widths[0])
        return "  ".join([left, *(x.rjust(widths[i + 1]) for i, x in enumerate(c[1:-1])), c[-1]])

    w.line((fmt(head), "bold"))
    for r, c in zip(rows, cells):
        style = {"unreadable": "bold red", "findings": "red", "truncated": "yellow", "left-out": "dim"}.get(
            r["status"], "green")
        w.line((fmt(c), style))


def _trace_lines(w: _Writer, t) -> None:
    h = t.header if isinstance(t.header, dict) else {}
    bits = [str(h.get("backend") or "unknown backend")]
    if isinstance(h.get("device_count"), int):
        bits.append(D.count(h["device_count"], "device"))
    if h.get("torch"):
        bits.append(f"torch {h['torch']}")
    if h.get("rank") is not None:
        bits.append(f"rank {h['rank']}")
    bits.append(D.count(t.events, "event"))
    bits.append(D.count(t.kernels, "kernel"))
    early = D.trace_state(t)
    state = (early, "bold yellow") if early else ("ended cleanly", "green")
    w.line(f"trace {t.path}: {', '.join(bits)}, ", state, indent=1)
    rec: list[str] = []
    if h.get("writer"):
        rec.append(f"by {h['writer']}")
    if h.get("pid") is not None:
        rec.append(f"pid {h['pid']}")
    if h.get("host"):
        rec.append(f"on {h['host']}")
    start = h.get("start_time")
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        try:
            when = datetime.datetime.fromtimestamp(start, datetime.timezone.utc)
            rec.append(f"at {when:%Y-%m-%d %H:%M:%S} UTC")
        except (OverflowError, OSError, ValueError):
            pass
    argv = h.get("argv")
    if isinstance(argv, list) and argv:
        rec.append("argv: " + " ".join(str(a) for a in argv))
    if rec:
        w.line(("recorded " + ", ".join(rec), "dim"), indent=2)
    for warning in t.warnings:
        w.line(("warning: ", "yellow"), str(warning), indent=2)
