"""Timeline export: a trace as Chrome Trace Event JSON (Perfetto, chrome://tracing).

One track per stream (plus one for the host), kernels as complete slices in launch order,
event record -> wait as flow arrows between streams, stream/device synchronizations as
instants, and every finding as instant markers on both of its accesses with its details.

Timestamps are synthetic: a trace records order, not time. Each kernel or synchronization
operation takes the next slot of :data:`TICK` microseconds, so slices appear in launch
order and arrows point forward. The trace is read twice: once through the engine for the
findings, once to draw, so memory stays bounded by what is drawn.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import IO, Callable, Iterator, Optional

from ...trace_format import records as R
from ...trace_format.errors import TraceFormatError
from ...trace_format.header import is_default_stream
from ...trace_format.reader import TraceReader
from ...trace_format.safe_text import clean_json, clean_tree
from ..replay.engine import FREE_OP
from ..findings.model import Finding, StreamRef, stream_numbers
from ..replay.traces import replay_reader
from ..report import describe as D
from ..report.shown_frames import Omitted, shown
from ..report.sources import SourceCache, SourceSettings, attach_local_sources, display_path
TICK = 10  # µs per operation slot
KERNEL_DUR = 8
SYNC_DUR = 2
PID = 1
HOST_TID = 0


def _tid(sidx: int) -> int:
    return sidx + 1


@dataclass
class Found:
    """What the first pass saw: the findings, and how far the trace went then. The draw pass
    stops where it stopped (a trace still being written is longer the second time it is
    read, and what lies past that holds no findings yet), and the export warns as it did."""

    findings: list
    kernels: int  # which also sizes the windows: one near the trace's end holds fewer kernels
    truncated: bool
    warnings: list


def find(path, *, check_leaks: bool = False, progress: Optional[Callable] = None,
         sources: Optional[SourceSettings] = None) -> Found:
    """Pass 1: replay ``path`` as ``npusan analyze`` does (the compiled core when it is
    built); return its findings and how far it read.

    Frames get their source text as ``npusan analyze`` gives it (recorded in the trace, else
    from an allowed file under ``sources``), so fingerprints and fixes match its report.
    """
    report = None if progress is None else (lambda _index, done, total: progress("finding", done, total))
    with TraceReader(path) as reader:
        engine, findings = replay_reader(reader, check_leaks=check_leaks, report=report)
        found = Found(findings, engine.kernels, reader.truncated, list(reader.warnings))
    if sources is not None:
        attach_local_sources(findings, sources)
    return found


class _Windows:
    """Kernel seqs kept by ``--around-findings N``: the union of [s - N, s + N] intervals."""

    def __init__(self, centers, n: Optional[int]) -> None:
        self.all = n is None
        spans = sorted((max(0, c - (n or 0)), c + (n or 0)) for c in centers)
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.lo = [m[0] for m in merged]
        self.hi = [m[1] for m in merged]

    def keeps(self, seq: int) -> bool:
        if self.all:
            return True
        i = bisect_right(self.lo, seq) - 1
        return i >= 0 and seq <= self.hi[i]

    def kernels(self, total: int) -> int:
        """How many of kernels 1..``total`` the windows keep."""
        if self.all:
            return total
        return sum(max(0, min(hi, total) - max(lo, 1) + 1) for lo, hi in zip(self.lo, self.hi))


def _fitting_radius(centers: list, most: int, total: int, cap: int) -> int:
    """The largest radius up to ``most`` whose windows keep at most ``cap`` of ``total``
    kernels (0 when none does): the widest windows that still draw every finding's kernels
    under the cap. The kept count only grows with the radius, so a bisection finds it."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _Windows(centers, mid).kernels(total) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _frames_text(stack) -> list[str]:
    return [str(fr) if isinstance(fr, Omitted) else f"{display_path(fr.filename)}:{fr.lineno} in {fr.function}"
            for fr in shown(stack)]


def _marker_args(f: Finding, role: str, header: dict, cache: SourceCache) -> dict:
    mine, other = (f.access, f.previous) if role == "later" else (f.previous, f.access)
    return {
        "kind": f.kind.value,
        "title": D.title(f, header),
        "role": f"{role} access",
        "op": mine.op,
        "type": mine.type,
        "seq": mine.seq,
        "stream": D.stream_name(mine.stream, header),
        "stack": _frames_text(mine.stack),
        "other access": f"{other.type} by {other.op} on {D.stream_name(other.stream, header)}"
        + (f" (kernel {other.seq})" if other.seq else ""),
        "block": f"{f.block.address:#x} ({D.human_size(f.block.size)})",
        "count": f.count,
        "fingerprint": f.fingerprint(),
        "fix": D.fix(f, header, cache),
    }


@dataclass
class ExportLimits:
    """What an export keeps. The default keeps a timeline a viewer can open.

    ``around``: only the kernels within N of a finding's accesses (None: no window; by
    default a window of :data:`DEFAULT_AROUND` when the trace has findings). When the
    windows hold more than ``max_kernels``, they are narrowed to fit, so that every
    finding's kernels are still drawn.
    ``max_kernels``: at most this many kernel slices (the first ones kept), None for no cap.
    ``auto_window``: with ``around`` None, use a window of :data:`DEFAULT_AROUND` if the
    trace has findings (the default export).
    """

    around: Optional[int] = None
    max_kernels: Optional[int] = None
    auto_window: bool = False

    @classmethod
    def default(cls) -> "ExportLimits":
        return cls(None, DEFAULT_MAX_KERNELS, auto_window=True)


#: Default window (kernels on each side of a finding's accesses) and cap of a default export:
#: Perfetto and chrome://tracing open a few hundred MB of JSON at most; a kernel slice with
#: its arguments is about 200 bytes.
DEFAULT_AROUND = 1000
DEFAULT_MAX_KERNELS = 500_000


@dataclass
class ExportStats:
    """What an export drew and what it left out (filled in while the events stream out)."""

    kernels: int = 0  # kernels in the trace
    drawn: int = 0  # kernel slices written
    findings: int = 0
    truncated: bool = False
    #: What the reader warned about (a cut trace, data after the end record...), as analyze shows.
    warnings: list = field(default_factory=list)
    backend: Optional[str] = None
    limits: ExportLimits = field(default_factory=ExportLimits)  # as applied
    #: The window asked for, when it was narrowed to ``limits.around`` to fit the cap.
    narrowed_from: Optional[int] = None
    #: Finding markers not written because their kernel was past the cap (a marker is
    #: never drawn off its kernel), and the findings (counted as analyze does) they belong to.
    markers_left_out: int = 0
    findings_left_out: int = 0
    #: The ``--max-kernels`` that would draw every marker, when some were left out.
    markers_need: int = 0

    @property
    def left_out(self) -> int:
        return self.kernels - self.drawn

    def describe(self) -> str:
        """One line for stderr: what was kept, what was left out, how to get everything."""
        if not self.left_out:
            return {0: "exported the timeline (the trace has no kernels)",
                    1: "exported the trace's 1 kernel"}.get(self.kernels, f"exported all {self.kernels:,} kernels")
        cap = self.limits.max_kernels
        why = []
        if self.limits.around is not None:
            why.append(self._window())
        if self.narrowed_from is not None:
            why[-1] += f", narrowed from {self.narrowed_from:,} by the cap of {_count(cap, 'kernel')}"
        elif cap is not None and self.drawn >= cap:
            why.append(f"at most {_count(cap, 'kernel')}")
        line = f"kept {self.drawn:,} of {_count(self.kernels, 'kernel')} ({'; '.join(why)}); left out {self.left_out:,}"
        if not self.markers_left_out:
            return line + "; --all exports everything"
        on = "a kernel" if self.markers_left_out == 1 else "kernels"
        return (f"{line}, and {_count(self.markers_left_out, 'finding marker')} "
                f"(of {_count(self.findings_left_out, 'finding')}) on {on} past the cap: "
                f"--max-kernels {self.markers_need} draws every marker, --all everything")

    def _window(self) -> str:
        """The window as applied: "the 1,000 kernels before and after each of the 3 findings'
        accesses", in the singular for one finding or one kernel."""
        n, around = self.findings, self.limits.around
        if n == 0:
            return f"the {_count(around, 'kernel')} before and after each finding's accesses, and there are none"
        whose = "the finding's" if n == 1 else f"the {n:,} findings'"
        if around == 0:
            return f"only the kernels of {whose} accesses"
        return f"the {_count(around, 'kernel')} before and after {whose if n == 1 else 'each of ' + whose} accesses"


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 kernel", "1,000 kernels"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def export_chrome(path, *, around_findings: Optional[int] = None, check_leaks: bool = False,
                  max_kernels: Optional[int] = None, sources: Optional[SourceSettings] = None) -> dict:
    """The Chrome Trace Event document for the trace at ``path``, in memory (small traces, API).

    :func:`write_chrome` writes the same document with flat memory.
    """
    limits = ExportLimits(around_findings, max_kernels)
    stats = ExportStats(limits=limits)
    events = list(chrome_events(path, limits, stats, check_leaks=check_leaks, sources=sources))
    return clean_tree({"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other_data(path, stats)})


def write_chrome(path, out: IO[str], limits: ExportLimits, *, check_leaks: bool = False,
                 progress: Optional[Callable[[str, int, Optional[int]], None]] = None,
                 sources: Optional[SourceSettings] = None) -> ExportStats:
    """Write the Chrome Trace Event JSON for ``path`` to ``out`` one event at a time.

    Memory stays flat in the trace's size: nothing is kept per drawn event. ``sources``:
    where local source may be read (``--source-root``, ``--map-path``), as for a report.
    """
    stats = ExportStats(limits=limits)
    out.write('{"traceEvents":[\n')
    first = True
    for ev in chrome_events(path, limits, stats, check_leaks=check_leaks, progress=progress, sources=sources):
        if not first:
            out.write(",\n")
        out.write(clean_json(ev))  # trace strings, sanitized on the way out
        first = False
    out.write('\n],"displayTimeUnit":"ms","otherData":')
    out.write(clean_json(_other_data(path, stats)))
    out.write("}\n")
    return stats


def _other_data(path, stats: ExportStats) -> dict:
    return {
        "npusan": "timeline export",
        "trace": str(path),
        "backend": stats.backend,
        "kernels": stats.kernels,
        "kernels_drawn": stats.drawn,
        "kernels_left_out": stats.left_out,
        "findings": stats.findings,
        "truncated": stats.truncated,
        "around_findings": stats.limits.around,
        "around_findings_narrowed_from": stats.narrowed_from,
        "findings_left_out": stats.findings_left_out,
        "markers_left_out": stats.markers_left_out,
        "max_kernels": stats.limits.max_kernels,
        "timestamps": f"synthetic: one {TICK} us slot per kernel or synchronization, in trace order",
    }


#: Progress is reported every this many records.
PROGRESS_EVERY = 1 << 14


def chrome_events(path, limits: ExportLimits, stats: ExportStats, *, check_leaks: bool = False,
                  progress: Optional[Callable[[str, int, Optional[int]], None]] = None,
                  sources: Optional[SourceSettings] = None) -> Iterator[dict]:
    """The timeline's events in order, track names last; ``stats`` is filled in as they go."""
    found = find(path, check_leaks=check_leaks, progress=progress, sources=sources)
    findings = found.findings
    cache = SourceCache(sources or SourceSettings())
    stats.findings = len({f.fingerprint() for f in findings})  # as `npusan analyze` counts them (grouped)
    if limits.auto_window and limits.around is None and findings:
        limits = dataclasses.replace(limits, around=DEFAULT_AROUND)

    # Where each marker goes: a kernel's access on that kernel (by seq); a free (seq 0: host
    # side) at its FREE record, the first free of the block's address after kernel
    # ``first_seq`` (the last kernel before it); the leak check's "end of trace" at the end.
    by_seq: dict[int, list] = {}
    by_free: dict[tuple, list] = {}
    at_end: list = []
    centers: list[int] = []
    for f in findings:
        for role, acc in (("later", f.access), ("earlier", f.previous)):
            if acc.seq:
                by_seq.setdefault(acc.seq, []).append((f, role, acc))
                centers.append(acc.seq)
            elif acc.op == FREE_OP:
                by_free.setdefault((f.first_seq, f.block.address), []).append((f, role, acc))
                centers.append(f.first_seq)
            else:
                at_end.append((f, role, acc))
                centers.append(f.first_seq)
    window = _Windows(centers, limits.around)
    cap = limits.max_kernels
    if limits.around is not None and cap is not None and window.kernels(found.kernels) > cap:
        # Narrower windows rather than the cap cutting off the findings past it: every
        # finding's kernels are drawn while the radius-0 windows fit.
        stats.narrowed_from = limits.around
        limits = dataclasses.replace(limits, around=_fitting_radius(centers, limits.around, found.kernels, cap))
        window = _Windows(centers, limits.around)
    stats.limits = limits

    with TraceReader(path) as reader:
        header = reader.header if isinstance(reader.header, dict) else {}
        stats.backend = str(header.get("backend"))
        symbols = reader.symbols
        created: dict[int, Optional[int]] = {}
        recorded: dict[int, tuple] = {}  # event -> (ts, tid, kept)
        blocks: dict[int, tuple] = {}  # bid -> (ptr, size), live blocks only
        total = reader.size if progress is not None else None
        seq = tick = flow_id = index = 0
        full = False  # the kernel cap is reached: nothing more is drawn

        def stream_ref(sidx: int, numbers: dict) -> StreamRef:
            dev, handle = symbols.streams.get(sidx, (-1, -1))
            default = is_default_stream(header, dev, handle)
            return StreamRef(
                dev, handle, sidx, default,
                tuple(_frame(x) for x in symbols.frames_of(created.get(sidx))),
                ordinal=None if default else numbers.get(sidx),
            )

        def slice_(name, cat, ts, dur, tid, args) -> dict:
            return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": PID, "tid": tid, "args": args}

        def instant(name, cat, ts, tid, args, scope="t") -> dict:
            return {"name": name, "cat": cat, "ph": "i", "s": scope, "ts": ts, "pid": PID, "tid": tid, "args": args}

        def markers(items, ts) -> Iterator[dict]:
            for f, role, acc in items:
                tid = _tid(acc.stream.index) if acc.stream is not None else HOST_TID
                yield instant(f"{f.kind.value}: {acc.op}", "finding", ts, tid, _marker_args(f, role, header, cache))

        def user_frame(stack_id) -> str:
            fr = symbols.frames_of(stack_id)
            return f"{display_path(fr[-1][0])}:{fr[-1][1]}" if fr else ""

        # The reader does not type-check fields (a stack id may be a map): a field of the
        # wrong type is a corrupt trace, reported with the record's position.
        try:
            for rec in reader.records():
                index += 1
                if progress is not None and not index % PROGRESS_EVERY:
                    progress("writing", reader.position, total)
                t = rec[0]
                if t == R.KERNEL:
                    seq += 1
                    if seq > found.kernels:  # written since the first pass read the trace
                        break
                    tick += 1
                    if full or not window.keeps(seq):
                        continue
                    if cap is not None and stats.drawn >= cap:
                        full = True
                        continue
                    ts = tick * TICK
                    acc = []
                    for a in rec[4:]:
                        bid, write, off, n = R.decode_access(a)
                        ptr, size = blocks.get(bid, symbols.blocks.get(bid, (None, None)))
                        where = f"{ptr:#x}" if isinstance(ptr, int) else f"block {bid}"
                        if off is not None:
                            where += f"+{off}:{n}"
                        acc.append(("W " if write else "R ") + where)
                    stats.drawn += 1
                    yield slice_(symbols.string(rec[2]), "kernel", ts, KERNEL_DUR, _tid(rec[1]),
                                 {"seq": seq, "accesses": acc, "at": user_frame(rec[3])})
                    if seq in by_seq:
                        yield from markers(by_seq.pop(seq), ts + KERNEL_DUR // 2)
                    continue
                kept = not full and (window.keeps(seq) or window.keeps(seq + 1))
                if t == R.STREAM_CREATED:
                    created.setdefault(rec[1], rec[2])
                elif t == R.ALLOC:
                    blocks[rec[1]] = (rec[2], rec[3])
                elif t == R.FREE:
                    ptr = blocks.pop(rec[1], symbols.blocks.get(rec[1], (None,)))[0]
                    if (seq, ptr) in by_free and kept:
                        tick += 1
                        yield from markers(by_free.pop((seq, ptr)), tick * TICK)
                elif t == R.EVENT_RECORD:
                    tick += 1
                    ts = tick * TICK
                    recorded[rec[1]] = (ts, _tid(rec[2]), kept)
                    if kept:
                        yield slice_("record event", "sync", ts, SYNC_DUR, _tid(rec[2]), {"event": rec[1], "at": user_frame(rec[3])})
                elif t == R.EVENT_WAIT:
                    tick += 1
                    ts = tick * TICK
                    if kept:
                        tid = _tid(rec[2])
                        yield slice_("wait event", "sync", ts, SYNC_DUR, tid, {"event": rec[1], "at": user_frame(rec[3])})
                        src = recorded.get(rec[1])
                        if src is not None and src[2]:
                            flow_id += 1
                            yield {"name": "event", "cat": "sync", "ph": "s", "id": flow_id,
                                   "ts": src[0] + 1, "pid": PID, "tid": src[1]}
                            yield {"name": "event", "cat": "sync", "ph": "f", "bp": "e", "id": flow_id,
                                   "ts": ts + 1, "pid": PID, "tid": tid}
                elif t == R.EVENT_DELETED or t == R.EVENT_CREATED:
                    recorded.pop(rec[1], None)
                elif t == R.EVENT_SYNC:
                    tick += 1
                    if kept:
                        yield instant("event synchronize", "sync", tick * TICK, HOST_TID, {"event": rec[1], "at": user_frame(rec[2])})
                elif t == R.STREAM_SYNC:
                    tick += 1
                    if kept:
                        yield instant("stream synchronize", "sync", tick * TICK, _tid(rec[1]), {"at": user_frame(rec[2])})
                elif t == R.DEVICE_SYNC:
                    tick += 1
                    if kept:
                        yield instant("device synchronize", "sync", tick * TICK, HOST_TID,
                                      {"device": rec[1], "at": user_frame(rec[2])}, scope="g")
                elif t in (R.RECORD_STREAM, R.ERASE_STREAM):
                    tick += 1
                    if kept:
                        name = "record_stream" if t == R.RECORD_STREAM else "erase_stream"
                        ptr = blocks.get(rec[1], (None,))[0]
                        yield instant(name, "memory", tick * TICK, _tid(rec[2]),
                                      {"block": f"{ptr:#x}" if isinstance(ptr, int) else rec[1], "at": user_frame(rec[3])})
                elif t == R.NOTE:
                    yield instant(f"note: {rec[2]}", "note", tick * TICK, HOST_TID, {"level": rec[1]})
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            raise TraceFormatError(f"{reader.where()}: malformed record (a field has the wrong type)") from None
        tick += 1
        yield from markers(at_end, tick * TICK)
        # What is left in by_seq is on kernels past the cap: left out and counted, never
        # stacked at the end where they would mark no kernel.
        left = [m for items in (*by_seq.values(), *by_free.values()) for m in items]
        stats.markers_left_out = len(left)
        stats.findings_left_out = len({f.fingerprint() for f, _, _ in left})
        if left:
            last = max([*by_seq, *(k for k, _ in by_free)])  # (a free after kernel k: drawn with the first k)
            stats.markers_need = window.kernels(seq) if limits.around is not None else last
        stats.kernels = min(seq, found.kernels)
        stats.truncated = found.truncated
        stats.warnings = found.warnings

        yield {"name": "process_name", "ph": "M", "pid": PID, "tid": HOST_TID,
               "args": {"name": f"npusan: {os.path.basename(str(path))}"}}
        yield {"name": "thread_name", "ph": "M", "pid": PID, "tid": HOST_TID, "args": {"name": "host"}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": HOST_TID, "args": {"sort_index": 0}}
        numbers = stream_numbers(symbols.streams, functools.partial(is_default_stream, header))
        for sidx in sorted(symbols.streams):
            tid = _tid(sidx)
            ref = stream_ref(sidx, numbers)
            yield {"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                   "args": {"name": D.stream_name(ref, header)}}
            yield {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                   "args": {"sort_index": tid if ref.is_default else 1000 + tid}}


#: Kernels kept per side of each access in :func:`kernels_near` (the HTML report's pictures).
NEAR = 6
#: At most this many kernels are kept in all (a report with thousands of findings).
NEAR_MAX_KERNELS = 20_000


@dataclass
class Nearby:
    """What :func:`kernels_near` kept: kernels, event records and waits, stream names."""

    kernels: dict  # {seq: (stream index, op)}
    #: ``(after seq, "record" or "wait", stream index, event)`` in trace order: an event
    #: record or wait that came after kernel ``after seq`` (0: before the first kernel).
    syncs: list
    names: dict  # {stream index: stream name}
    #: The ``after seq`` of each of ``syncs`` (ascending): a picture finds its own by bisection.
    sync_after: list = field(default_factory=list)


def kernels_near(path, seqs, radius: int = NEAR) -> Nearby:
    """The kernels within ``radius`` of each kernel seq in ``seqs``, and the event records and
    waits between them, read in one streaming pass.

    Memory is bounded by what is kept (:data:`NEAR_MAX_KERNELS`), whatever the trace's size.
    """
    window = _Windows([s for s in seqs if s], radius)
    kept: dict[int, tuple] = {}
    syncs: list = []
    with TraceReader(path) as reader:
        header = reader.header if isinstance(reader.header, dict) else {}
        symbols = reader.symbols
        created: dict[int, Optional[int]] = {}
        seq = 0
        for rec in reader.records():
            t = rec[0]
            if t == R.KERNEL:
                seq += 1
                if window.keeps(seq) and len(kept) < NEAR_MAX_KERNELS:
                    kept[seq] = (rec[1], symbols.string(rec[2]))
            elif t == R.EVENT_RECORD or t == R.EVENT_WAIT:
                if window.keeps(seq) and window.keeps(seq + 1) and len(syncs) < NEAR_MAX_KERNELS:
                    syncs.append((seq, "record" if t == R.EVENT_RECORD else "wait", rec[2], rec[1]))
            elif t == R.STREAM_CREATED:
                created.setdefault(rec[1], rec[2])
        is_default = functools.partial(is_default_stream, header)
        numbers = stream_numbers(symbols.streams, is_default)
        names = {}
        for sidx, (dev, handle) in symbols.streams.items():
            default = is_default(dev, handle)
            ref = StreamRef(dev, handle, sidx, default,
                            tuple(_frame(x) for x in symbols.frames_of(created.get(sidx))),
                            ordinal=None if default else numbers.get(sidx))
            names[sidx] = D.stream_label(ref, header)
    return Nearby(kept, syncs, names, [x[0] for x in syncs])


def _frame(x):
    from ..findings.model import Frame

    return Frame(*x)


__all__ = ["ExportLimits", "ExportStats", "Nearby", "export_chrome", "find", "kernels_near", "write_chrome"]
