"""Grouping findings by what a person fixes: one kind at one pair of code locations.

The engine already merges repeats within one trace, but it keeps findings apart when they
differ in streams or come from different traces. A report wants one entry per bug: the
same kind with the same later and earlier code locations (``Finding.fingerprint()``),
wherever and however often it happened, with a count, the first and last occurrence and
the traces it came from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .model import Finding, Kind

#: Distinct block addresses kept per group (a leak in a loop touches thousands).
MAX_ADDRESSES = 16


@dataclass(frozen=True, order=True)
class Occurrence:
    """Where in the analyzed traces something happened: trace index, then kernel seq."""

    trace: int
    seq: int


@dataclass
class Group:
    """One reported finding: every occurrence of one bug across all traces."""

    fingerprint: str
    findings: list  # list[Finding], ordered by first occurrence; findings[0] represents the group
    #: Occurrences the engine counted but did not keep individually (``--no-group`` only).
    omitted: int = 0
    _count: Optional[int] = field(default=None, repr=False)
    #: "new" or "persisting" against a baseline or the previous run of a history; None
    #: when the run was not compared with anything.
    status: Optional[str] = None

    @property
    def finding(self) -> Finding:
        return self.findings[0]

    @property
    def kind(self) -> Kind:
        return self.findings[0].kind

    @property
    def count(self) -> int:
        if self._count is not None:
            return self._count
        return sum(max(1, f.count) for f in self.findings)

    @property
    def traces(self) -> list[int]:
        out: set[int] = set()
        for f in self.findings:
            out.update(f.traces or [f.trace])
        return sorted(out)

    @property
    def addresses(self) -> list[int]:
        seen: dict[int, None] = {}
        for f in self.findings:
            for a in f.addresses or [f.block.address]:
                seen.setdefault(a, None)
        return list(seen)[:MAX_ADDRESSES]

    @property
    def first(self) -> Occurrence:
        return min(Occurrence(f.trace, _first_seq(f)) for f in self.findings)

    @property
    def last(self) -> Occurrence:
        return max(Occurrence(f.trace, _last_seq(f)) for f in self.findings)


def _first_seq(f: Finding) -> int:
    return f.first_seq or f.access.seq


def _last_seq(f: Finding) -> int:
    return f.last_seq or f.first_seq or f.access.seq


def _order(f: Finding) -> tuple:
    return (f.trace, _first_seq(f), f.kind.value, f.access.op, f.previous.op)


def group_findings(findings: Iterable[Finding]) -> list[Group]:
    """Merge findings with equal fingerprints; groups in order of their first occurrence."""
    by_fp: dict[str, Group] = {}
    for f in sorted(findings, key=_order):
        fp = f.fingerprint()
        g = by_fp.get(fp)
        if g is None:
            by_fp[fp] = Group(fp, [f])
        else:
            g.findings.append(f)
    return sorted(by_fp.values(), key=lambda g: (g.first, g.kind.value, g.fingerprint))


def ungrouped(findings: Iterable[Finding]) -> list[Group]:
    """Every occurrence as its own entry (``--no-group``), from ``Finding.occurrences``.

    The engine keeps a capped list of occurrences (``Finding.occurrences``: the two seqs,
    the block, the byte ranges of both accesses); the ones it only counted are reported as
    ``omitted`` on the last entry of that finding.
    """
    out: list[Group] = []
    for f in sorted(findings, key=_order):
        fp = f.fingerprint()
        occ = list(f.occurrences or [])
        if not occ:
            out.append(Group(fp, [f], _count=1, omitted=max(0, f.count - 1)))
            continue
        entries = []
        for item in occ:
            seq, prev_seq, address, *ranges = (list(item) + [None] * 7)[:7]
            # A free is a host-side event (seq 0); its occurrence seq is where it happened.
            access = f.access if not f.access.seq or seq is None else dataclasses.replace(f.access, seq=seq)
            previous = dataclasses.replace(f.previous, seq=prev_seq if prev_seq is not None else f.previous.seq)
            if len(item) >= 7:  # the occurrence's own byte ranges: its kernels may touch other bytes
                access = dataclasses.replace(access, offset=ranges[0], nbytes=ranges[1])
                previous = dataclasses.replace(previous, offset=ranges[2], nbytes=ranges[3])
            g = dataclasses.replace(
                f,
                access=access,
                previous=previous,
                block=f.block if address is None else dataclasses.replace(f.block, address=address),
                count=1,
                addresses=[address if address is not None else f.block.address],
                first_seq=seq or 0,
                last_seq=seq or 0,
                occurrences=[],
            )
            entries.append(Group(fp, [g], _count=1))
        entries[-1].omitted = max(0, f.count - len(occ))
        out.extend(entries)
    out.sort(key=lambda g: (g.first, g.kind.value, g.fingerprint))
    return out
