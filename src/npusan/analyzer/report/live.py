"""One finding as online mode shows it: the text of a ``RaceError``, an online warning, a
pytest failure -- ``npusan analyze``'s text for that finding, read live.

Live, there is no trace to count occurrences in and the frames are this process's own
code, so the text drops the numbering and the "seen:" line and quotes the source directly.
"""

from __future__ import annotations

import re
from typing import Any, Optional

_TITLES = {
    "data-race": "data race",
    "missing-record-stream": "missing record_stream",
    "reuse-race": "allocator-reuse race",
}


def _stream(s) -> str:
    name = "default stream" if getattr(s, "is_default", False) else f"stream {s.handle:#x}"
    return f"{name} (device {s.device})"


def _side(label: str, acc) -> str:
    rng = "" if acc.offset is None else f" bytes [{acc.offset}, {acc.offset + (acc.nbytes or 0)})"
    lines = [f"  {label}: {acc.type} by {acc.op} on {_stream(acc.stream)}{rng}"]
    if acc.stack:
        lines += [f"      {fr.filename}:{fr.lineno} in {fr.function}" for fr in reversed(acc.stack)]
    else:
        lines.append("      (no stack)")
    return "\n".join(lines)


def format_finding(f: Any, header: Optional[dict] = None, folded_hint: Optional[str] = None) -> str:
    """The finding as ``npusan analyze`` would print it (streams named, source quoted, a fix).

    Falls back to a plain description if the report cannot be built: online mode runs
    inside the user's program and must not fail there.
    """
    try:
        from ..findings.model import AnalysisResult, TraceSummary
        from . import ReportOptions, build_report
        from .text import group_text

        f = _with_own_source(f)
        report = build_report(AnalysisResult(findings=[f], traces=[TraceSummary("<live>", dict(header or {}))]))
        options = ReportOptions(sources=_own_folders(f))
        if folded_hint is not None:
            options.folded_hint = folded_hint
        text = group_text(report, report.groups[0], options).rstrip("\n")
        # Live, there is no "(1/1)" numbering and no trace to count occurrences in.
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("seen:")]
        lines[0] = re.sub(r"^error\[[a-z-]+\] \(\d+/\d+\): ", "", lines[0])
        return "\n".join(lines)
    except Exception:
        return _plain(f)


def _with_own_source(f: Any) -> Any:
    """A copy of ``f`` whose frames carry their source lines, read as the trace writer does.

    Live, the frames are this process's own code (no untrusted trace is involved), so
    they are read directly rather than through the analyzer's source-root rule.
    """
    import dataclasses

    from ..findings.model import map_frames
    from ...trace_format.sourcelines import SourceLines

    lines = SourceLines()
    f = dataclasses.replace(f)
    map_frames([f], lambda fr: fr if fr.text else dataclasses.replace(fr, text=lines.lookup(fr.filename, fr.lineno)[0]))
    return f


def _own_folders(f: Any):
    """Source settings that let the fix read the program's own files (the folders of the
    finding's frames that exist here): live, no untrusted trace names them, so the names in
    a fix are checked against the real code instead of left as placeholders."""
    import os

    from .sources import SourceSettings, user_site

    folders = []
    for stack in (f.access.stack, f.previous.stack, f.block.stack):
        site = user_site(stack)
        path = os.path.abspath(site.filename) if site is not None else None  # relative: to this process's cwd
        if path is not None and os.path.isfile(path):
            folders.append(os.path.dirname(path))
    return SourceSettings(tuple(dict.fromkeys(folders)))


def _plain(f: Any) -> str:
    """A multi-line description of a finding, innermost frame first under each access."""
    kind = getattr(f.kind, "value", str(f.kind))
    title = _TITLES.get(kind, kind)
    head = f"{title} on block {f.block.address:#x}"
    if kind == "missing-record-stream":
        later, earlier = "free", "unsynchronized use"
    else:
        later, earlier = "access", "previous access"
    return "\n".join([head, _side(later, f.access), _side(earlier, f.previous)])
