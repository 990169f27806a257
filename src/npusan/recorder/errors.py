"""The exception online mode raises, and how a finding reads in one message.

Importing this module never imports torch (``npusan.RaceError`` is public).
"""

from __future__ import annotations

from typing import Any


class RaceError(RuntimeError):
    """Online mode (``mode="raise"``) found a synchronization bug at the op that caused it.

    ``finding`` is the :class:`npusan.analyzer.findings.Finding`; the message names both
    accesses with their streams and stacks.
    """

    def __init__(self, message: str, finding: Any = None) -> None:
        super().__init__(message)
        self.finding = finding


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


def format_finding(f: Any) -> str:
    """A multi-line description of a finding, innermost frame first under each access."""
    kind = getattr(f.kind, "value", str(f.kind))
    title = _TITLES.get(kind, kind)
    head = f"{title} on block {f.block.address:#x}"
    if kind == "missing-record-stream":
        later, earlier = "free", "unsynchronized use"
    else:
        later, earlier = "access", "previous access"
    return "\n".join([head, _side(later, f.access), _side(earlier, f.previous)])
