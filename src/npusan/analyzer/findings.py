"""The findings model: what the analyzer hands to every reporter.

Everything here is resolved (strings, frames, streams), plain data, and free of trace
internals such as interned ids, so that reporters, baselines and suppressions never need
the trace again. The engine keeps its own cheap occurrence keys while replaying and turns
them into these objects once, at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Mapping, Optional


class Kind(str, Enum):
    DATA_RACE = "data-race"
    MISSING_RECORD_STREAM = "missing-record-stream"
    REUSE_RACE = "reuse-race"


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"


Stack = tuple  # tuple[Frame, ...], outermost first


@dataclass(frozen=True)
class StreamRef:
    """A stream as the report names it: per device, with where it was created."""

    device: int
    handle: int
    index: int  # the stream's index in its trace (stable within one trace only)
    is_default: bool = False
    created_stack: Stack = ()
    trace: int = 0  # index into AnalysisResult.traces
    #: The number reports show ("stream #2"): non-default streams of one device in one
    #: trace, counted from 1 in the order they first appear in the trace (creation, or
    #: first use for streams that existed before recording). None for a default stream,
    #: or when not assigned (see :func:`number_streams`).
    ordinal: Optional[int] = None
    #: What the trace says the stream is for (format 1.1 STREAM_LABEL): ``role`` ``"comm"``
    #: and ``label`` ``"comm stream of process group 0"`` for a process group's
    #: communication stream; None for ordinary streams.
    role: Optional[str] = None
    label: Optional[str] = None


@dataclass(frozen=True)
class AccessInfo:
    """One side of a finding: a kernel's access, a free, or a use of a block."""

    stream: StreamRef
    op: str
    type: str  # "read" or "write" (a free counts as a write)
    seq: int  # global sequence number of the kernel (0 for host-side events such as a free)
    stack: Stack = ()
    offset: Optional[int] = None  # byte range within the block; None = the whole block
    nbytes: Optional[int] = None


@dataclass(frozen=True)
class BlockInfo:
    """The memory block (caching-allocator block) that the two accesses share."""

    address: int
    size: Optional[int]
    stream: Optional[StreamRef]  # allocation stream; None when allocated before recording
    stack: Stack = ()


@dataclass
class Finding:
    """One bug: a kind, a block, the later and the earlier access, and how often it happened.

    ``access`` is the later access (for a missing record_stream: the free); ``previous``
    the earlier one (the unsynchronized use). Occurrences with the same kind, ops, streams,
    stacks and allocation stack are merged into one finding whose ``count`` says how many there were;
    ``addresses`` lists the distinct block base pointers seen (capped).
    """

    kind: Kind
    access: AccessInfo
    previous: AccessInfo
    block: BlockInfo
    count: int = 1
    addresses: list = field(default_factory=list)
    first_seq: int = 0
    last_seq: int = 0
    trace: int = 0
    traces: list = field(default_factory=list)  # every trace index it occurred in
    #: Individual occurrences ``(seq, previous_seq, address)``, capped (see the engine);
    #: ``--no-group`` lists them one by one.
    occurrences: list = field(default_factory=list)

    def fingerprint(self) -> str:
        """A stable identity from code locations only: never pointers, seqs or handles.

        The same bug in two runs (different addresses, different stream handles) gets the
        same fingerprint, which baselines and SARIF rely on.
        """
        h = hashlib.sha256()
        h.update(self.kind.value.encode())
        for acc in (self.access, self.previous):
            h.update(b"\0" + acc.op.encode() + b"\0" + acc.type.encode())
            for fr in acc.stack:
                h.update(f"\0{fr.filename}:{fr.lineno}:{fr.function}".encode())
        return h.hexdigest()[:32]


def stream_numbers(
    streams: Mapping[int, tuple], is_default: Callable[[int, int], bool]
) -> dict[int, int]:
    """``{stream index: number}`` for the non-default streams of one trace.

    Stream indexes are handed out in the order a trace first mentions each stream (its
    creation record, or its first use for a stream created before recording began), so
    counting the non-default streams of each device in index order numbers them in
    creation order, deterministically from the trace alone.
    """
    out: dict[int, int] = {}
    per_device: dict[int, int] = {}
    for sidx in sorted(streams):
        device, handle = streams[sidx]
        if is_default(device, handle):
            continue
        per_device[device] = per_device.get(device, 0) + 1
        out[sidx] = per_device[device]
    return out


def number_streams(
    findings: Iterable["Finding"],
    numbers: Mapping[int, int],
    is_default: Callable[[int, int], bool],
    labels: Optional[Mapping[int, tuple]] = None,
) -> None:
    """Set ``ordinal`` (and ``is_default``, and the ``role``/``label`` of the trace's
    stream labels) on every stream the findings of one trace name.

    Findings are updated in place (their identity matters to callers that keyed them);
    their frozen parts are replaced.
    """

    def ref(s: Optional[StreamRef]) -> Optional[StreamRef]:
        if s is None:
            return None
        default = s.is_default or is_default(s.device, s.handle)
        ordinal = None if default else numbers.get(s.index, s.ordinal)
        role, label = (labels or {}).get(s.index, (s.role, s.label))
        if ordinal == s.ordinal and default == s.is_default and (role, label) == (s.role, s.label):
            return s
        return dataclasses.replace(s, ordinal=ordinal, is_default=default, role=role, label=label)

    for f in findings:
        f.access = dataclasses.replace(f.access, stream=ref(f.access.stream))
        f.previous = dataclasses.replace(f.previous, stream=ref(f.previous.stream))
        f.block = dataclasses.replace(f.block, stream=ref(f.block.stream))


@dataclass
class TraceSummary:
    """What a report says about one analyzed trace file."""

    path: str
    header: dict
    events: int = 0  # records replayed (definitions excluded)
    kernels: int = 0
    truncated: bool = False  # ended without an END record (crashed or killed writer)
    warnings: list = field(default_factory=list)
    end_reason: Optional[str] = None  # an END record that says the recording stopped early


@dataclass
class AnalysisResult:
    """All findings of one ``npusan analyze`` run over one or more traces."""

    findings: list  # list[Finding]
    traces: list  # list[TraceSummary]
    suppressed: int = 0
