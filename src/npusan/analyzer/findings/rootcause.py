"""Root causes: the reported findings that one synchronization would fix, put together.

A single missing ``wait_stream`` in a prefetch loop makes every tensor the consumer reads
race with its producer: a dozen findings with one fix. Two findings share a root cause
when one wait, inserted once, orders both:

* the same stream must wait (the later access's stream; for a missing record_stream, the
  stream the block was allocated on, where the free happens) for the same other stream
  (the earlier access's), in the same trace;
* a wait issued on the waiting stream right before the earliest of their later accesses
  (a kernel, or a free) already covers every earlier access of the set: each earlier
  access was launched before that point.

The second rule is exact for the first occurrence of each finding (kernel sequence numbers
are launch order), so findings of two different bugs between the same streams stay
apart: the second bug's producer runs after the first bug's consumer. A reuse race is not
fixed by a wait before the unrelated code that received the memory but by ``record_stream``
at the old use: it joins the root cause of the missing record_stream reported for that same
use (the same kernel's access, freed unrecorded; :func:`_behind`), and is a root cause of
its own when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from .model import Finding, Kind, StreamRef
from .grouping import Group


@dataclass
class RootCause:
    """Findings (report groups) one synchronization would fix; ``groups[0]`` is where it goes."""

    groups: list  # list[Group], ordered by the point where the wait goes
    #: Kernels launched before the wait must be issued (for groups[0]).
    point: int = 0
    number: int = 0  # 1-based, in report order (set by :func:`root_causes`)

    @property
    def anchor(self) -> Finding:
        return self.groups[0].finding

    @property
    def waiter(self) -> Optional[StreamRef]:
        """The stream that has to wait."""
        return self.anchor.access.stream

    @property
    def waited(self) -> Optional[StreamRef]:
        """The stream it has to wait for."""
        return self.anchor.previous.stream

    @property
    def fingerprints(self) -> list[str]:
        return list(dict.fromkeys(g.fingerprint for g in self.groups))

    @property
    def occurrences(self) -> int:
        return sum(g.count for g in self.groups)

    def kinds(self) -> dict:
        """``{kind value: number of findings}`` in Kind order, kinds present only."""
        out = {k.value: 0 for k in Kind}
        for g in self.groups:
            out[g.kind.value] += 1
        return {k: n for k, n in out.items() if n}


def wait_point(f: Finding) -> Optional[int]:
    """How many kernels were launched when the missing wait had to be issued, or None.

    A kernel access with sequence number ``a`` needs the wait before it (``a - 1``); a
    free is a host event and ``first_seq`` is the last kernel launched before it.
    """
    if f.access.stream is None or f.previous.stream is None or not f.previous.seq:
        return None
    if f.access.seq:
        return f.access.seq - 1
    return f.first_seq or None


def _stream_key(s: StreamRef) -> tuple:
    return (s.trace, s.device, s.handle, s.index)


def root_causes(groups: Iterable[Group]) -> list[RootCause]:
    """The report's groups partitioned into root causes, in the order of the report.

    Every group belongs to exactly one root cause; a group nothing else shares a wait with
    is a root cause of its own.
    """
    groups = list(groups)
    order = {id(g): i for i, g in enumerate(groups)}
    buckets: dict[tuple, list] = {}
    causes: list[RootCause] = []
    reuses: list = []
    for g in groups:
        f = g.finding
        point = wait_point(f)
        if f.kind is Kind.REUSE_RACE:
            reuses.append(g)
            continue
        if point is None:
            causes.append(RootCause([g], point=0))
            continue
        key = (f.trace, _stream_key(f.access.stream), _stream_key(f.previous.stream))
        buckets.setdefault(key, []).append((point, order[id(g)], g))
    for items in buckets.values():
        open_: list[RootCause] = []
        for point, _, g in sorted(items, key=lambda x: (x[0], x[1])):
            earlier = g.finding.previous.seq
            home = next((c for c in open_ if earlier <= c.point), None)
            if home is None:
                home = RootCause([], point=point)
                open_.append(home)
                causes.append(home)
            home.groups.append(g)
    for g in reuses:
        home = next((c for c in causes for m in c.groups if _behind(g, m)), None)
        if home is None:
            causes.append(RootCause([g], point=0))
        else:
            home.groups.append(g)
    causes.sort(key=lambda c: min(order[id(g)] for g in c.groups))
    for i, c in enumerate(causes, 1):
        c.number = i
    return causes


def _uses(g: Group) -> set:
    """The kernels (sequence numbers) of a group's earlier accesses, every occurrence kept."""
    return {f.previous.seq for f in g.findings} | {o[1] for f in g.findings for o in f.occurrences if len(o) > 1}


def _behind(reuse: Group, g: Group) -> bool:
    """Whether ``g`` is the missing record_stream behind reuse race ``reuse``: the same use
    (stream, op, stack, and one kernel in common) of a tensor freed unrecorded."""
    r, m = reuse.finding, g.finding
    if m.kind is not Kind.MISSING_RECORD_STREAM or r.trace != m.trace:
        return False
    a, b = r.previous, m.previous
    if a.stream is None or b.stream is None or _stream_key(a.stream) != _stream_key(b.stream):
        return False
    return a.op == b.op and a.stack == b.stack and bool(_uses(reuse) & _uses(g) - {0})


def root_cause_of(causes: Iterable[RootCause]) -> dict[int, RootCause]:
    """``{id(group): its root cause}``."""
    return {id(g): c for c in causes for g in c.groups}


__all__ = ["RootCause", "root_causes", "root_cause_of", "wait_point"]
