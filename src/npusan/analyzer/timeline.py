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

import functools
import os
from bisect import bisect_right
from typing import Optional

from ..trace_format import records as R
from ..trace_format.header import is_default_stream
from ..trace_format.reader import TraceReader
from .findings import Finding, StreamRef, number_streams, stream_numbers
from .reporters import describe as D
from .sources import SourceCache, display_path

#: Source lines let the fix call tensors and streams by their variable names.
_SOURCES = SourceCache()
TICK = 10  # µs per operation slot
KERNEL_DUR = 8
SYNC_DUR = 2
PID = 1
HOST_TID = 0


def _tid(sidx: int) -> int:
    return sidx + 1


def find(path, *, check_leaks: bool = False):
    """Pass 1: replay ``path``; return (findings, {id(finding): record index at first occurrence})."""
    from .engine import Engine

    where: dict[int, int] = {}
    with TraceReader(path) as reader:
        position = [0]

        def counted():
            for rec in reader.records():
                position[0] += 1
                yield rec

        engine = Engine(
            reader.symbols,
            header=reader.header,
            check_leaks=check_leaks,
            on_finding=lambda f: where.setdefault(id(f), position[0]),
        )
        engine.run(counted())
        findings = engine.finish()
        is_default = functools.partial(is_default_stream, reader.header)
        number_streams(findings, stream_numbers(reader.symbols.streams, is_default), is_default)
    return findings, where


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


def _frames_text(stack) -> list[str]:
    return [f"{display_path(fr.filename)}:{fr.lineno} in {fr.function}" for fr in stack]


def _marker_args(f: Finding, role: str, header: dict) -> dict:
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
        "fix": D.fix(f, header, _SOURCES),
    }


def export_chrome(path, *, around_findings: Optional[int] = None, check_leaks: bool = False) -> dict:
    """The Chrome Trace Event document for the trace at ``path``."""
    findings, first_at = find(path, check_leaks=check_leaks)

    # Where each marker goes: kernel markers by seq, host-side ones (frees) by record index.
    by_seq: dict[int, list] = {}
    by_record: dict[int, list] = {}
    at_end: list = []
    centers: list[int] = []
    for f in findings:
        for role, acc in (("later", f.access), ("earlier", f.previous)):
            if acc.seq:
                by_seq.setdefault(acc.seq, []).append((f, role, acc))
                centers.append(acc.seq)
            elif id(f) in first_at:
                by_record.setdefault(first_at[id(f)], []).append((f, role, acc))
                centers.append(f.first_seq)
            else:  # found at the end of the trace (leak check)
                at_end.append((f, role, acc))
                centers.append(f.first_seq)
    window = _Windows(centers, around_findings)

    events: list[dict] = []
    with TraceReader(path) as reader:
        header = reader.header if isinstance(reader.header, dict) else {}
        symbols = reader.symbols
        created: dict[int, Optional[int]] = {}
        used_tids: set[int] = set()
        recorded: dict[int, tuple] = {}  # event -> (ts, tid, kept)
        blocks: dict[int, tuple] = {}  # bid -> (ptr, size)
        seq = 0
        tick = 0
        flow_id = 0
        index = 0

        def stream_ref(sidx: int, numbers: dict) -> StreamRef:
            dev, handle = symbols.streams.get(sidx, (-1, -1))
            default = is_default_stream(header, dev, handle)
            return StreamRef(
                dev, handle, sidx, default,
                tuple(_frame(x) for x in symbols.frames_of(created.get(sidx))),
                ordinal=None if default else numbers.get(sidx),
            )

        def slice_(name, cat, ts, dur, tid, args) -> None:
            used_tids.add(tid)
            events.append({"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur,
                           "pid": PID, "tid": tid, "args": args})

        def instant(name, cat, ts, tid, args, scope="t") -> None:
            used_tids.add(tid)
            events.append({"name": name, "cat": cat, "ph": "i", "s": scope, "ts": ts,
                           "pid": PID, "tid": tid, "args": args})

        def markers(items, ts) -> None:
            for f, role, acc in items:
                tid = _tid(acc.stream.index) if acc.stream is not None else HOST_TID
                instant(f"{f.kind.value}: {acc.op}", "finding", ts, tid, _marker_args(f, role, header))

        def user_frame(stack_id) -> str:
            fr = symbols.frames_of(stack_id)
            return f"{display_path(fr[-1][0])}:{fr[-1][1]}" if fr else ""

        for rec in reader.records():
            index += 1
            t = rec[0]
            if t == R.KERNEL:
                seq += 1
                tick += 1
                if not window.keeps(seq):
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
                slice_(symbols.string(rec[2]), "kernel", ts, KERNEL_DUR, _tid(rec[1]),
                       {"seq": seq, "accesses": acc, "at": user_frame(rec[3])})
                if seq in by_seq:
                    markers(by_seq.pop(seq), ts + KERNEL_DUR // 2)
                continue
            kept = window.keeps(seq) or window.keeps(seq + 1)
            if t == R.STREAM_CREATED:
                created.setdefault(rec[1], rec[2])
            elif t == R.ALLOC:
                blocks[rec[1]] = (rec[2], rec[3])
            elif t == R.EVENT_RECORD:
                tick += 1
                ts = tick * TICK
                recorded[rec[1]] = (ts, _tid(rec[2]), kept)
                if kept:
                    slice_("record event", "sync", ts, SYNC_DUR, _tid(rec[2]), {"event": rec[1], "at": user_frame(rec[3])})
            elif t == R.EVENT_WAIT:
                tick += 1
                ts = tick * TICK
                if kept:
                    tid = _tid(rec[2])
                    slice_("wait event", "sync", ts, SYNC_DUR, tid, {"event": rec[1], "at": user_frame(rec[3])})
                    src = recorded.get(rec[1])
                    if src is not None and src[2]:
                        flow_id += 1
                        events.append({"name": "event", "cat": "sync", "ph": "s", "id": flow_id,
                                       "ts": src[0] + 1, "pid": PID, "tid": src[1]})
                        events.append({"name": "event", "cat": "sync", "ph": "f", "bp": "e", "id": flow_id,
                                       "ts": ts + 1, "pid": PID, "tid": tid})
            elif t == R.EVENT_DELETED or t == R.EVENT_CREATED:
                recorded.pop(rec[1], None)
            elif t == R.EVENT_SYNC:
                tick += 1
                if kept:
                    instant("event synchronize", "sync", tick * TICK, HOST_TID, {"event": rec[1], "at": user_frame(rec[2])})
            elif t == R.STREAM_SYNC:
                tick += 1
                if kept:
                    instant("stream synchronize", "sync", tick * TICK, _tid(rec[1]), {"at": user_frame(rec[2])})
            elif t == R.DEVICE_SYNC:
                tick += 1
                if kept:
                    instant("device synchronize", "sync", tick * TICK, HOST_TID,
                            {"device": rec[1], "at": user_frame(rec[2])}, scope="g")
            elif t in (R.RECORD_STREAM, R.ERASE_STREAM):
                tick += 1
                if kept:
                    name = "record_stream" if t == R.RECORD_STREAM else "erase_stream"
                    ptr = blocks.get(rec[1], (None,))[0]
                    instant(name, "memory", tick * TICK, _tid(rec[2]),
                            {"block": f"{ptr:#x}" if isinstance(ptr, int) else rec[1], "at": user_frame(rec[3])})
            elif t == R.NOTE:
                instant(f"note: {rec[2]}", "note", tick * TICK, HOST_TID, {"level": rec[1]})
            if index in by_record:
                tick += 1
                markers(by_record.pop(index), tick * TICK)
        tick += 1
        markers([m for items in by_seq.values() for m in items] + at_end, tick * TICK)
        truncated = reader.truncated

        meta = [{"name": "process_name", "ph": "M", "pid": PID, "tid": HOST_TID,
                 "args": {"name": f"npusan: {os.path.basename(str(path))}"}},
                {"name": "thread_name", "ph": "M", "pid": PID, "tid": HOST_TID, "args": {"name": "host"}},
                {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": HOST_TID, "args": {"sort_index": 0}}]
        numbers = stream_numbers(symbols.streams, functools.partial(is_default_stream, header))
        for sidx in sorted(symbols.streams):
            tid = _tid(sidx)
            ref = stream_ref(sidx, numbers)
            meta.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                         "args": {"name": D.stream_name(ref, header)}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                         "args": {"sort_index": tid if ref.is_default else 1000 + tid}})
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "npusan": "timeline export",
            "trace": str(path),
            "backend": str(header.get("backend")),
            "kernels": seq,
            "findings": len(findings),
            "truncated": truncated,
            "around_findings": around_findings,
            "timestamps": f"synthetic: one {TICK} us slot per kernel or synchronization, in trace order",
        },
    }


#: Kernels kept per side of each access in :func:`kernels_near` (the HTML report's pictures).
NEAR = 6
#: At most this many kernels are kept in all (a report with thousands of findings).
NEAR_MAX_KERNELS = 20_000


def kernels_near(path, seqs, radius: int = NEAR) -> tuple[dict, dict]:
    """The kernels within ``radius`` of each kernel seq in ``seqs``, read in one streaming pass.

    Returns ``({seq: (stream index, op)}, {stream index: stream name})``; memory is bounded by
    the kernels kept (:data:`NEAR_MAX_KERNELS`), whatever the trace's size.
    """
    window = _Windows([s for s in seqs if s], radius)
    kept: dict[int, tuple] = {}
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
    return kept, names


def _frame(x):
    from .findings import Frame

    return Frame(*x)


__all__ = ["export_chrome", "find", "kernels_near"]
