"""The record vocabulary of trace format v1 (version 1.3), in code.

``docs/trace-format.md`` is the normative description; this module is its single source
of truth inside the package. A trace is the 8-byte :data:`MAGIC`, one msgpack map (the
header), then a stream of msgpack arrays (records) whose first element is the record type.

Records are plain lists so that the writer, the reader and the live (online) path all
share one representation and the analyzer's hot loop touches no objects.

Layouts (``stack`` is a stack id or nil; ``sidx`` a stream index; ``bid`` a block id)::

    [STR, sid, text]                      intern a string
    [FRAME, fid, file_sid, lineno, func_sid, text|nil, root_sid|nil]   (1.1: the last two)
    [STACK, kid, [fid, ...]]              frames outermost first
    [STREAM_DEF, sidx, device, handle]    intern a stream (device, raw handle)
    [BLOCK_DEF, bid, ptr, size|nil]       intern a block seen without an allocation
    [STREAM_CREATED, sidx, stack]
    [EVENT_CREATED, event, stack]
    [EVENT_DELETED, event, stack]
    [EVENT_RECORD, event, sidx, stack]
    [EVENT_WAIT, event, sidx, stack]
    [EVENT_SYNC, event, stack]
    [STREAM_SYNC, sidx, stack]
    [DEVICE_SYNC, device|nil, stack]      nil: every device
    [ALLOC, bid, ptr, size|nil, sidx, stack]
    [FREE, bid, stack]
    [RECORD_STREAM, bid, sidx, stack]
    [ERASE_STREAM, bid, sidx, stack]
    [KERNEL, sidx, op_sid, stack, access, ...]
    [THREAD, tid, name]                   name of a host thread (informational)
    [STREAM_LABEL, sidx, role, label]     what a stream is for (1.1): role "comm", label text
    [NOTE, level, text]                   a message from the writer (e.g. recording stopped)
    [END, stats_map]                      clean end of the trace
    [HOST_ACCESS, sidx, op_sid, stack, access, ...]   (1.2) accesses of pinned host memory
                                          by the host, on the host stream sidx (a
                                          STREAM_DEF of device HOST_DEVICE)
    [VIEWS, entry, ...]                   (1.1) the exact bytes of strided accesses of the
                                          next KERNEL: entry = [a, offset, nbytes, run,
                                          n1, s1, ...], or [a, offset, nbytes] for a view
                                          recorded as its hull (see strided.py)
    [GRAPH_BEGIN, gid, sidx, stack]       (1.3) capture of graph gid begins on stream sidx:
                                          the KERNEL, VIEWS, EVENT_RECORD and EVENT_WAIT
                                          records up to its GRAPH_END are its program,
                                          not run now (docs/semantics.md "Graphs")
    [GRAPH_END, gid]                      (1.3) the capture of graph gid ends
    [GRAPH_LAUNCH, gid, sidx, stack]      (1.3) graph gid is replayed on stream sidx

An access is an int ``a`` (the whole block) or a list ``[a, offset, nbytes]`` (a byte
range of the block); ``a >= 0`` reads block ``a``, ``a < 0`` writes block ``~a`` (``-a-1``).
"""

from __future__ import annotations

from typing import Final

MAGIC: Final = b"NPUSANv\x01"
FORMAT_MAJOR: Final = 1
FORMAT_MINOR: Final = 3

STR: Final = 0
FRAME: Final = 1
STACK: Final = 2
STREAM_DEF: Final = 3
BLOCK_DEF: Final = 4
STREAM_CREATED: Final = 5
EVENT_CREATED: Final = 6
EVENT_DELETED: Final = 7
EVENT_RECORD: Final = 8
EVENT_WAIT: Final = 9
EVENT_SYNC: Final = 10
STREAM_SYNC: Final = 11
DEVICE_SYNC: Final = 12
ALLOC: Final = 13
FREE: Final = 14
RECORD_STREAM: Final = 15
ERASE_STREAM: Final = 16
KERNEL: Final = 17
THREAD: Final = 18
NOTE: Final = 19
#: How a NOTE's text starts when it says part of the program was recorded coarsely (e.g.
#: a compiled region as one access); the report says so once (a convention between
#: npusan's recorder and its report, not a format rule: the text stays free).
COARSE_NOTE_PREFIX: Final = "coarse: "
END: Final = 20
STREAM_LABEL: Final = 22
VIEWS: Final = 21  # format 1.1
HOST_ACCESS: Final = 23  # format 1.2
GRAPH_BEGIN: Final = 24  # format 1.3
GRAPH_END: Final = 25  # format 1.3
GRAPH_LAUNCH: Final = 26  # format 1.3
#: The graph records (format 1.3), replayed by :mod:`npusan.analyzer.replay.graphs`.
GRAPH_RECORDS: Final = frozenset({GRAPH_BEGIN, GRAPH_END, GRAPH_LAUNCH})

#: The device of the host stream (format 1.2): the pseudo-stream of the host's own accesses.
HOST_DEVICE: Final = -1

#: Human-readable names, used by ``npusan info`` and error messages.
RECORD_NAMES: Final = {
    STR: "string",
    FRAME: "frame",
    STACK: "stack",
    STREAM_DEF: "stream-def",
    BLOCK_DEF: "block-def",
    STREAM_CREATED: "stream-created",
    EVENT_CREATED: "event-created",
    EVENT_DELETED: "event-deleted",
    EVENT_RECORD: "event-record",
    EVENT_WAIT: "event-wait",
    EVENT_SYNC: "event-synchronize",
    STREAM_SYNC: "stream-synchronize",
    DEVICE_SYNC: "device-synchronize",
    ALLOC: "allocation",
    FREE: "free",
    RECORD_STREAM: "record-stream",
    ERASE_STREAM: "erase-stream",
    KERNEL: "kernel",
    THREAD: "thread",
    NOTE: "note",
    END: "end",
    STREAM_LABEL: "stream-label",
    VIEWS: "views",
    HOST_ACCESS: "host-access",
    GRAPH_BEGIN: "graph-begin",
    GRAPH_END: "graph-end",
    GRAPH_LAUNCH: "graph-launch",
}

#: Minimum array length of each known record type (the reader rejects shorter ones).
MIN_LENGTH: Final = {
    STR: 3,
    FRAME: 5,
    STACK: 3,
    STREAM_DEF: 4,
    BLOCK_DEF: 4,
    STREAM_CREATED: 3,
    EVENT_CREATED: 3,
    EVENT_DELETED: 3,
    EVENT_RECORD: 4,
    EVENT_WAIT: 4,
    EVENT_SYNC: 3,
    STREAM_SYNC: 3,
    DEVICE_SYNC: 3,
    ALLOC: 6,
    FREE: 3,
    RECORD_STREAM: 4,
    ERASE_STREAM: 4,
    KERNEL: 4,
    THREAD: 3,
    NOTE: 3,
    END: 2,
    STREAM_LABEL: 4,
    VIEWS: 2,
    HOST_ACCESS: 4,
    GRAPH_BEGIN: 4,
    GRAPH_END: 2,
    GRAPH_LAUNCH: 4,
}

#: Length of each fixed layout in this format version (KERNEL and VIEWS are open-ended).
#: Readers ignore fields past it (a later minor version may add some); ``redact`` drops them.
LAYOUT_LENGTH: Final = {
    STR: 3,
    FRAME: 7,
    STACK: 3,
    STREAM_DEF: 4,
    BLOCK_DEF: 4,
    STREAM_CREATED: 3,
    EVENT_CREATED: 3,
    EVENT_DELETED: 3,
    EVENT_RECORD: 4,
    EVENT_WAIT: 4,
    EVENT_SYNC: 3,
    STREAM_SYNC: 3,
    DEVICE_SYNC: 3,
    ALLOC: 6,
    FREE: 3,
    RECORD_STREAM: 4,
    ERASE_STREAM: 4,
    THREAD: 3,
    NOTE: 3,
    END: 2,
    STREAM_LABEL: 4,
    GRAPH_BEGIN: 4,
    GRAPH_END: 2,
    GRAPH_LAUNCH: 4,
}

#: Where each event record holds its stack (an int or nil; anything else is corrupt).
STACK_FIELD: Final = {STREAM_CREATED: 2, EVENT_CREATED: 2, EVENT_DELETED: 2, EVENT_RECORD: 3, EVENT_WAIT: 3,
                      EVENT_SYNC: 2, STREAM_SYNC: 2, DEVICE_SYNC: 2, ALLOC: 5, FREE: 2, RECORD_STREAM: 3,
                      ERASE_STREAM: 3, KERNEL: 3, HOST_ACCESS: 3}

#: Record types that only define interned names; the reader absorbs them into its symbol table.
DEFINITIONS: Final = frozenset({STR, FRAME, STACK, STREAM_DEF, BLOCK_DEF, THREAD, STREAM_LABEL})

#: The role of a STREAM_LABEL naming a process group's communication stream.
ROLE_COMM: Final = "comm"
#: The role of the STREAM_LABEL of the host stream (format 1.2).
ROLE_HOST: Final = "host"

#: Header keys (all present in files written by npusan; readers must tolerate missing ones
#: except ``format``).
HEADER_KEYS: Final = (
    "format",  # [major, minor]
    "writer",  # "npusan 0.1.0" or a third-party writer's name
    "backend",  # "cuda", "npu", "sim", ...
    "torch",  # torch version string or nil
    "device_count",
    "default_streams",  # {device: raw handle of the default stream}
    "pid",
    "rank",  # int or nil
    "host",
    "argv",  # list of str
    "start_time",  # seconds since the epoch (float)
    "metadata",  # free-form map from the writer's caller
)
#: (1.2) Written by the recorder, not by every writer: which host accesses of pinned
#: memory were watched (HOST_WATCH_*).
HOST_ACCESSES_KEY: Final = "host_accesses"

#: Values of the ``host_accesses`` header key (format 1.2): the host's accesses of pinned
#: memory were recorded from torch ops only (writes through numpy views or raw pointers
#: were not seen), or from torch ops and from page faults on protected pages as well.
HOST_WATCH_TORCH: Final = "torch ops"
HOST_WATCH_FAULTS: Final = "torch ops and page faults"

#: The NOTE text npusan's recorder writes once, at the first pinned host storage a stream
#: touched (from then on the host's accesses of it are watched); a report then says what
#: the header's ``host_accesses`` leaves unseen. A convention, not a format rule.
HOST_WATCH_NOTE: Final = "host: pinned memory watched"
#: The NOTE text's start, written with it where the header's ``host_accesses`` is
#: ``"torch ops"``: why page faults were not watched (the rest of the text).
HOST_FAULTS_OFF_NOTE: Final = "host: page faults not watched: "
#: The NOTE text's start where the page-fault watch is on but left a buffer to torch ops
#: (the rest of the text says which, once per recording).
HOST_FAULTS_PART_NOTE: Final = "host: page faults not watched for some pinned memory: "


def encode_access(bid: int, write: bool, offset: int | None = None, nbytes: int | None = None):
    """Encode one access of a kernel record (see the module docstring)."""
    a = ~bid if write else bid
    if offset is None:
        return a
    return [a, offset, nbytes]


def decode_access(a) -> tuple[int, bool, int | None, int | None]:
    """Inverse of :func:`encode_access`: ``(bid, is_write, offset, nbytes)``."""
    if isinstance(a, int):
        return (~a, True, None, None) if a < 0 else (a, False, None, None)
    x, off, n = a
    return (~x, True, off, n) if x < 0 else (x, False, off, n)
