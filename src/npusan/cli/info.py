"""`npusan info TRACE`: what a trace holds (metadata, counts, streams, memory), no analysis.

Exit 0 for a readable trace, truncated ones included (the truncation is reported); exit 2
with one line for unusable input.
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import shlex
import sys
from typing import Any

import click

from ..analyzer.findings.model import stream_numbers
from ..analyzer.report.describe import device_label
from ..trace_format.header import is_default_stream
from ..trace_format.errors import TraceFormatError
from ..trace_format.safe_text import clean, clean_tree
from .errors import EXIT_UNUSABLE, one_line_errors, refuse_like_analyze


@click.command()
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables (an array for several traces).")
@click.option("--no-color", is_flag=True, help="Plain text output.")
@one_line_errors
def info(traces: tuple, as_json: bool, no_color: bool) -> None:
    """Describe traces: header, event counts by type, streams, memory, clean end or cut.

    TRACE may be a file, a directory (searched recursively), a glob pattern, or - (standard input).
    """
    from ..trace_format.info import info_dict, no_device_work, summarize
    from ..trace_format.inputs import find_traces

    found = find_traces(traces)
    if len(found.paths) == 1 and not found.problems:
        summary = _summary(found.paths[0], summarize)
        empty = no_device_work(summary.kernels, summary.header)
        if empty:
            click.echo(f"npusan: warning: {empty}", err=True)
        if as_json:
            click.echo(json.dumps(clean_tree(info_dict(summary)), indent=2, sort_keys=False))
            return
        _render(summary, no_color)
        return
    docs, failed = [], False
    for where, why in found.problems:
        click.echo(f"npusan: error: {clean(str(where))}: {clean(str(why))}", err=True)
        failed = True
    for path in found.paths:
        try:
            summary = _summary(path, summarize)
        except TraceFormatError as e:
            click.echo(f"npusan: error: {clean(str(e))}", err=True)
            failed = True
            continue
        if as_json:
            docs.append(clean_tree(info_dict(summary)))
        else:
            _render(summary, no_color)
    if as_json:
        click.echo(json.dumps(docs, indent=2, sort_keys=False))
    if failed:
        sys.exit(EXIT_UNUSABLE)


def _summary(path: str, summarize: Any) -> Any:
    """Refuse ``path`` as analyze would, then describe it; every failure is a
    :class:`TraceFormatError` worded as ``npusan analyze`` words it: the file's name first,
    ``cannot read the trace: ...`` for a file that cannot be opened (a device, a silent
    FIFO, a missing file), the reader's message for an unusable trace."""
    refuse_like_analyze(path)  # its errors name the file already (analyze's own)
    try:
        return summarize(path)
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read the trace: {e.strerror or e}") from None
    except TraceFormatError as e:
        raise TraceFormatError(f"{path}: {e}") from None


def _render(s, no_color: bool) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from ..trace_format.info import display_path

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """Rich would exit 1 itself; info ends as every verb does (errors.reader_gone)."""
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    console = _Console(no_color=no_color, highlight=False, soft_wrap=False)
    h = s.header

    title = f"[bold]{_escape(display_path(s.path))}[/bold]"
    if s.size is not None:
        title += f"  ({_bytes(s.size)})"
    console.print(title)

    meta = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0))
    meta.add_column(style="dim")
    meta.add_column()
    meta.add_row("format", f"{s.version[0]}.{s.version[1]}")
    for key, label in (("writer", "writer"), ("backend", "backend"), ("torch", "torch")):
        if h.get(key) is not None:
            meta.add_row(label, _text(h[key]))
    if h.get("device_count") is not None:
        meta.add_row("devices", _text(h["device_count"]))
    if h.get("host") is not None or h.get("pid") is not None:
        meta.add_row("process", f"pid {_text(h.get('pid', '?'))} on {_text(h.get('host', '?'))}")
    if h.get("rank") is not None:
        meta.add_row("rank", _text(h["rank"]))
    if isinstance(h.get("argv"), list) and h["argv"]:
        meta.add_row("command", _escape(shlex.join(str(a) for a in h["argv"])))
    started = _time(h.get("start_time"))
    if started:
        meta.add_row("started", started)
    ended = _time((s.end_stats or {}).get("end_time"))
    if ended:
        meta.add_row("ended", ended)
    if isinstance(h.get("metadata"), dict) and h["metadata"]:
        for k, v in h["metadata"].items():
            meta.add_row(f"metadata.{_text(k)}", _text(v))
    console.print(meta)
    console.print()

    from ..trace_format.reader import _end_reason

    reason = _end_reason(s.end_stats)
    if s.ended_cleanly and s.truncated:
        console.print("[bold yellow]cut after its end record[/bold yellow]: every record is there, but the compressed "
                      "file's last frame has lost its checksum (see the warning)")
    elif s.ended_cleanly and reason:
        console.print(f"[bold yellow]ended early[/bold yellow]: {_text(reason)}; everything before is usable")
    elif s.ended_cleanly:
        console.print("[green]ended cleanly[/green] (the trace has its end record)")
    else:
        console.print(
            "[bold yellow]truncated[/bold yellow]: no end record, the recording was cut "
            "(the process was killed or crashed before it could finish the trace, or is still writing it); "
            "everything up to the last complete record is usable"
        )
    console.print()

    from ..trace_format import records as R

    definition_names = {R.RECORD_NAMES[t] for t in R.DEFINITIONS}
    counts = Table(title="Records", box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    counts.add_column("type")
    counts.add_column("count", justify="right")
    for name, n in s.counts.items():
        if name not in definition_names:
            counts.add_row(name, f"{n:,}")
    for t, n in s.unknown_types.items():
        counts.add_row(f"unknown type {t} (skipped)", f"{n:,}")
    if s.unknown_types_more:
        counts.add_row(f"{s.unknown_types_more:,} more unknown types (skipped)", f"{s.unknown_records_more:,}")
    counts.add_row("[bold]events[/bold]", f"[bold]{s.events:,}[/bold]", end_section=True)
    for name, n in s.counts.items():
        if name in definition_names:
            counts.add_row(f"[dim]{name} (definitions)[/dim]", f"[dim]{n:,}[/dim]")
    console.print(counts)

    if s.streams:
        st = Table(title="Streams", box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
        # Named as `npusan analyze` names them; the raw index is what the trace uses.
        numbers = stream_numbers({x.index: (x.device, x.handle) for x in s.streams},
                                 lambda d, h: is_default_stream(s.header, d, h))
        st.add_column("stream", no_wrap=True)
        st.add_column("index", justify="right")
        st.add_column("handle")
        st.add_column("created in trace")
        st.add_column("kernels", justify="right")
        for x in s.streams:
            name = "default stream" if x.default else f"stream #{numbers[x.index]}"
            st.add_row(
                f"{name} ({device_label(s.header, x.device)})",
                str(x.index),
                hex(x.handle) if x.handle >= 0 else str(x.handle),
                "yes" if x.created else "no (a default stream)" if x.default else "no (first seen in use)",
                f"{x.kernels:,}",
            )
        console.print(st)

    m = s.memory
    mem = Table(title="Memory blocks", box=box.SIMPLE_HEAD, title_justify="left", title_style="bold",
                show_header=False)
    mem.add_column()
    mem.add_column(justify="right")
    mem.add_row("allocations", f"{m.allocations:,}")
    mem.add_row("frees", f"{m.frees:,}")
    mem.add_row("allocated", _bytes(m.allocated_bytes)
                + (f" (+{m.unknown_size_allocations:,} of unknown size)" if m.unknown_size_allocations else ""))
    mem.add_row("peak live blocks", f"{m.peak_live_blocks:,}")
    mem.add_row("peak live bytes", _bytes(m.peak_live_bytes))
    mem.add_row("live at end", f"{m.live_at_end:,}")
    mem.add_row("used without allocation", f"{m.unallocated_blocks:,}")
    if m.pinned_host_blocks:
        mem.add_row("pinned host memory", f"{m.pinned_host_blocks:,}")
    console.print(mem)

    v = s.views
    if v.exact or v.hull_fallbacks:
        line = f"[bold]Strided views[/bold]: {v.exact:,} exact"
        if v.hull_fallbacks:
            line += (f", [yellow]{v.hull_fallbacks:,} recorded as their hull[/yellow] (too irregular to "
                     "describe exactly: a race between them and a neighbouring view may be a false report)")
        else:
            line += ", none recorded as their hull"
        console.print(line)

    for level, text, n in s.notes:
        style = {"warning": "yellow", "error": "red"}.get(level, "dim")
        times = f" ({n:,} times)" if n > 1 else ""
        console.print(f"[{style}]note ({_escape(str(level))})[/{style}]: {_escape(text)}{times}")
    if s.threads:
        console.print("[bold]Threads[/bold]: " + ", ".join(f"{_escape(n)} ({t})" for t, n in sorted(s.threads.items())))
    for w in s.warnings:
        console.print(f"[yellow]warning[/yellow]: {_escape(w)}")


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return _escape(v if isinstance(v, str) else repr(v))


def _escape(text: str) -> str:
    """Sanitized (a trace is untrusted) and with rich markup escaped."""
    from rich.markup import escape

    return escape(clean(text))


def _time(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return ""
    try:
        return datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return ""


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    return str(n)  # pragma: no cover


