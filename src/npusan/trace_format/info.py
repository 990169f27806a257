"""What is in a trace, without analyzing it: the data behind ``npusan info``.

One streaming pass over the records (constant memory apart from the live-block table)
collects the header, record counts by type, the streams, memory statistics, and whether
the trace ended cleanly. :func:`jsonable` turns the result into plain JSON types.
"""

from __future__ import annotations

import base64
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from . import records as R
from .errors import TraceFormatError
from .header import is_default_stream
from .reader import Source, TraceReader, named_unknown_types, unnamed_unknown_types
from .strided import parse_entry


@dataclass
class StreamSummary:
    index: int
    device: int
    handle: int
    default: bool
    created: bool  # a stream-created record was seen (False: first seen in use)
    kernels: int = 0


@dataclass
class MemorySummary:
    allocations: int = 0
    frees: int = 0
    #: Blocks referenced without an allocation in the trace (allocated before recording),
    #: pinned host memory not included.
    unallocated_blocks: int = 0
    #: Blocks of pinned host memory (the host accessed them; the host allocator reports no
    #: allocation, so they have none in the trace).
    pinned_host_blocks: int = 0
    allocated_bytes: int = 0  # sum of the sizes the allocations gave
    unknown_size_allocations: int = 0
    peak_live_blocks: int = 0
    peak_live_bytes: int = 0  # of blocks whose size is known
    live_at_end: int = 0


@dataclass
class ViewsSummary:
    """Strided accesses (VIEWS entries, format 1.1)."""

    exact: int = 0  # described by their exact bytes
    hull_fallbacks: int = 0  # recorded as their hull (too irregular, or ambiguous in their kernel)


@dataclass
class TraceInfo:
    path: Optional[str]
    size: Optional[int]
    header: dict
    version: tuple
    ended_cleanly: bool
    truncated: bool
    warnings: list
    end_stats: Optional[dict]
    events: int
    kernels: int
    counts: dict  # record name -> count (events, then definitions)
    streams: list  # StreamSummary
    memory: MemorySummary
    threads: dict  # tid -> name
    #: record type -> records skipped, for the first reader.MAX_NAMED_UNKNOWN_TYPES types
    unknown_types: dict = field(default_factory=dict)
    unknown_types_more: int = 0  # the unknown types past those (not named)
    unknown_records_more: int = 0  # and their records
    views: ViewsSummary = field(default_factory=ViewsSummary)
    #: The trace's distinct NOTE messages, in order, as [level, text, times seen] (the
    #: first :data:`MAX_NOTES`; the writer's "recording stopped: disk full" is one).
    notes: list = field(default_factory=list)


#: Distinct NOTE messages kept by :func:`summarize` (a trace is untrusted: a million
#: different notes must not make ``npusan info`` print a million lines).
MAX_NOTES = 20


def summarize(source: Source, *, on_warning: Optional[Callable[[str], None]] = None) -> TraceInfo:
    """Read ``source`` once and describe it; raises TraceFormatError on unusable input.

    Strings are counted, not kept: nothing here shows one (threads have their own table)."""
    with TraceReader(source, on_warning=on_warning, string_texts=False) as reader:
        counts: dict[int, int] = {}
        per_stream: dict[Any, int] = {}
        created: set = set()
        live: dict[Any, Optional[int]] = {}  # bid -> size
        mem = MemorySummary()
        views = ViewsSummary()
        notes: dict = {}
        try:
            _scan(reader, counts, per_stream, created, live, mem, views, notes)
        except ValueError as e:  # a malformed VIEWS entry (parse_entry's reason is ours)
            raise TraceFormatError(f"{reader.where()}: malformed record ({e})") from None
        except (TypeError, KeyError, IndexError, AttributeError):
            raise TraceFormatError(f"{reader.where()}: malformed record (a field has the wrong type)") from None
        mem.live_at_end = len(live)
        sym = reader.symbols
        mem.unallocated_blocks = max(0, _count_block_defs(reader) - mem.pinned_host_blocks)
        streams = [
            StreamSummary(
                index=sidx,
                device=dev,
                handle=handle,
                default=is_default_stream(reader.header, dev, handle),
                created=sidx in created,
                kernels=per_stream.get(sidx, 0),
            )
            for sidx, (dev, handle) in sorted(sym.streams.items())
        ]
        named = {R.RECORD_NAMES[t]: n for t, n in sorted(counts.items())}
        defs = {
            R.RECORD_NAMES[R.STR]: len(sym.strings),
            R.RECORD_NAMES[R.FRAME]: len(sym.frames),
            R.RECORD_NAMES[R.STACK]: len(sym.stacks),
            R.RECORD_NAMES[R.STREAM_DEF]: len(sym.streams),
            R.RECORD_NAMES[R.BLOCK_DEF]: mem.unallocated_blocks + mem.pinned_host_blocks,
            R.RECORD_NAMES[R.THREAD]: len(sym.threads),
        }
        named.update({k: v for k, v in defs.items() if v})
        unknown = reader.unknown_types
        more_types, more_records = unnamed_unknown_types(unknown)
        return TraceInfo(
            path=reader.name,
            size=reader.size,
            header=reader.header,
            version=tuple(reader.version),
            ended_cleanly=reader.ended_cleanly,
            truncated=reader.truncated,
            warnings=list(reader.warnings),
            end_stats=reader.end_stats,
            events=reader.events,
            kernels=counts.get(R.KERNEL, 0),
            counts=named,
            streams=streams,
            memory=mem,
            threads=dict(sym.threads),
            unknown_types=named_unknown_types(unknown),
            unknown_types_more=more_types,
            unknown_records_more=more_records,
            views=views,
            notes=[[level, text, n] for (level, text), n in notes.items()],
        )


def _scan(
    reader: TraceReader, counts: dict, per_stream: dict, created: set, live: dict, mem: MemorySummary,
    views: ViewsSummary, notes: dict,
) -> None:
    """The one pass over the records.

    The reader does not type-check fields: an id that is not an integer is left out of the
    statistics here (``npusan info`` refuses such a trace beforehand exactly when
    ``npusan analyze`` does, see ``cli/info.py``).
    """
    live_bytes = 0
    pinned: set = set()  # bids the host accessed
    for rec in reader.records():
        t = rec[0]
        counts[t] = counts.get(t, 0) + 1
        if t == R.KERNEL:
            s = rec[1]
            if s.__class__ is int:
                per_stream[s] = per_stream.get(s, 0) + 1
        elif t == R.HOST_ACCESS:
            for a in rec[4:]:
                a = a[0] if a.__class__ is list and a else a
                if a.__class__ is int:
                    pinned.add(~a if a < 0 else a)
        elif t == R.ALLOC:
            bid, size = rec[1], rec[3]
            if bid.__class__ is not int:
                continue
            if bid in live:  # an allocation over a live block: its free was not recorded
                live_bytes -= live.pop(bid) or 0
            size = size if type(size) is int and size >= 0 else None
            live[bid] = size
            mem.allocations += 1
            if size is None:
                mem.unknown_size_allocations += 1
            else:
                mem.allocated_bytes += size
                live_bytes += size
            mem.peak_live_blocks = max(mem.peak_live_blocks, len(live))
            mem.peak_live_bytes = max(mem.peak_live_bytes, live_bytes)
        elif t == R.FREE:
            mem.frees += 1
            if rec[1].__class__ is int and rec[1] in live:
                live_bytes -= live.pop(rec[1]) or 0
        elif t == R.STREAM_CREATED:
            if rec[1].__class__ is int:
                created.add(rec[1])
        elif t == R.NOTE:
            key = (rec[1], rec[2])  # (both strings: the reader checked them and capped the text)
            if key in notes or len(notes) < MAX_NOTES:
                notes[key] = notes.get(key, 0) + 1
        elif t == R.VIEWS:
            for e in rec[1:]:
                if parse_entry(e)[1] is None:
                    views.hull_fallbacks += 1
                else:
                    views.exact += 1
    mem.pinned_host_blocks = len(pinned)


def _count_block_defs(reader: TraceReader) -> int:
    # BLOCK_DEF ids may be reused after a free (the symbol table keeps the latest), so
    # the table size is a lower bound; the reader counts the records themselves.
    return reader.definition_counts.get(R.BLOCK_DEF, len(reader.symbols.blocks))


def jsonable(value: Any) -> Any:
    """Plain JSON types: map keys as strings, bytes as base64, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    return str(value)


def info_dict(info: TraceInfo) -> dict:
    """The ``npusan info --json`` object (documented in docs/trace-format.md)."""
    return jsonable(
        {
            "info_version": 1,
            "path": info.path,
            "size": info.size,
            "format": list(info.version),
            "header": info.header,
            "ended_cleanly": info.ended_cleanly,
            "truncated": info.truncated,
            "warnings": info.warnings,
            "end_stats": info.end_stats,
            "events": info.events,
            "kernels": info.kernels,
            "counts": info.counts,
            "streams": [asdict(s) for s in info.streams],
            "memory": asdict(info.memory),
            "threads": info.threads,
            "unknown_record_types": info.unknown_types,
            "unknown_record_types_not_named": {"types": info.unknown_types_more, "records": info.unknown_records_more},
            "views": asdict(info.views),
            "notes": info.notes,
        }
    )


def display_path(path: Optional[str]) -> str:
    if path is None:
        return "<stream>"
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


def no_device_work(kernels: int, header: Any) -> Optional[str]:
    """The warning for a trace without a single kernel (None when it has some).

    Such a trace analyzes clean whatever the program did: typically the program never
    reached the device the recorder watched (``--backend cuda`` on a machine without CUDA,
    tensors left on the CPU), so "no findings" would say nothing.
    """
    if kernels:
        return None
    backend = header.get("backend") if isinstance(header, dict) else None
    where = f"the {backend} device" if isinstance(backend, str) and backend else "the device"
    return (f"the trace has no kernels: no work on {where} was recorded, so a clean result "
            "says nothing about the program (did it run its tensors on that device?)")
