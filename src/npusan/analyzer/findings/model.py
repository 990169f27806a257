"""The findings model: what the analyzer hands to every reporter.

Everything here is resolved (strings, frames, streams), plain data, and free of trace
internals such as interned ids, so that reporters, baselines and suppressions never need
the trace again. The engine keeps its own cheap occurrence keys while replaying and turns
them into these objects once, at the end.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Mapping, Optional

from .fingerprints import fingerprint_of


class Kind(str, Enum):
    DATA_RACE = "data-race"
    MISSING_RECORD_STREAM = "missing-record-stream"
    REUSE_RACE = "reuse-race"


@dataclass(frozen=True)
class Frame:
    filename: str
    lineno: int
    function: str
    #: The source line as recorded in the trace (format 1.1) or read from a local file
    #: under a source root; None when unknown. Not part of equality.
    text: Optional[str] = field(default=None, compare=False)
    #: The source root the file lies under (recorded, or a local one); None when unknown.
    root: Optional[str] = field(default=None, compare=False)

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
class ReplayInfo:
    """The graph launch (``g.replay()``) a kernel ran in: a captured kernel runs there, not at
    the line inside the capture that its stack names, so a wait for it or before it goes at
    the launch, on the launching stream."""

    stream: StreamRef  # the stream the graph was launched on
    stack: Stack = ()  # where it was launched
    captured: Stack = ()  # where its capture began (``with torch.cuda.graph(g):``)


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
    #: The graph launch the kernel ran in (its stack is the captured line); None when the
    #: program ran it itself. Not part of equality: the access is the captured code's.
    replay: Optional[ReplayInfo] = field(default=None, compare=False)


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
    #: Individual occurrences ``(seq, previous_seq, address, offset, nbytes, previous_offset,
    #: previous_nbytes)`` (offsets and sizes None for a whole-block access), capped (see the
    #: engine); ``--no-group`` lists them one by one.
    occurrences: list = field(default_factory=list)
    #: A data race found on a block whose byte ranges had been merged past the cap on
    #: segments (in any occurrence): its earlier access may be a neighbouring range's, and
    #: the race may be false.
    merged_ranges: bool = False

    def fingerprint(self) -> str:
        """A stable identity from code only: never pointers, seqs, handles or line numbers.

        The same bug in two runs gets the same fingerprint, which baselines, history and
        SARIF rely on (see :mod:`npusan.analyzer.findings.fingerprints`).
        """
        return fingerprint_of(self.kind.value, (self.access, self.previous))


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

    def replay(r: Optional[ReplayInfo]) -> Optional[ReplayInfo]:
        return None if r is None else dataclasses.replace(r, stream=ref(r.stream))

    for f in findings:
        f.access = dataclasses.replace(f.access, stream=ref(f.access.stream), replay=replay(f.access.replay))
        f.previous = dataclasses.replace(f.previous, stream=ref(f.previous.stream), replay=replay(f.previous.replay))
        f.block = dataclasses.replace(f.block, stream=ref(f.block.stream))


def map_frames(findings: Iterable["Finding"], change: Callable[[Frame], Frame]) -> None:
    """Replace every frame the findings hold (stacks, stream creation stacks) by ``change(frame)``.

    ``change`` is called once per distinct frame; findings are updated in place.
    """
    done: dict = {}
    stacks: dict = {}  # id of a stack -> (that stack, its new frames): findings share stacks

    def frame(fr: Frame) -> Frame:
        key = (fr.filename, fr.lineno, fr.function, fr.text, fr.root)
        new = done.get(key)
        if new is None:
            new = done[key] = change(fr)
        return new

    def stack(st: Stack) -> Stack:
        got = stacks.get(id(st))
        if got is None:
            got = stacks[id(st)] = (st, tuple(frame(fr) for fr in st))
        return got[1]

    def stream(s: Optional[StreamRef]) -> Optional[StreamRef]:
        if s is None or not s.created_stack:
            return s
        return dataclasses.replace(s, created_stack=stack(s.created_stack))

    def access(a: AccessInfo) -> AccessInfo:
        r = a.replay
        if r is not None:
            r = dataclasses.replace(r, stream=stream(r.stream), stack=stack(r.stack), captured=stack(r.captured))
        return dataclasses.replace(a, stream=stream(a.stream), stack=stack(a.stack), replay=r)

    for f in findings:
        f.access = access(f.access)
        f.previous = access(f.previous)
        f.block = dataclasses.replace(f.block, stream=stream(f.block.stream), stack=stack(f.block.stack))


def attach_recorded_sources(findings: Iterable["Finding"], recorded: Mapping) -> None:
    """Give frames the source text and root the trace recorded for them (format 1.1)."""
    if not recorded:
        return

    def change(fr: Frame) -> Frame:
        text, root = recorded.get((fr.filename, fr.lineno, fr.function), (None, None))
        if text is None and root is None:
            return fr
        return dataclasses.replace(fr, text=fr.text or text, root=fr.root or root)

    map_frames(findings, change)


@dataclass
class TraceSummary:
    """What a report says about one analyzed trace file."""

    path: str
    header: dict
    events: int = 0  # records replayed (definitions excluded)
    kernels: int = 0
    truncated: bool = False  # ended without an END record (crashed or killed writer)
    warnings: list = field(default_factory=list)
    #: Why the trace could not be analyzed (unreadable, corrupt); None when it was.
    error: Optional[str] = None
    end_reason: Optional[str] = None  # an END record that says the recording stopped early
    #: ``(level, text)`` of the trace's distinct NOTE records (what the writer said about
    #: the recording: e.g. that compiled code was recorded coarsely).
    notes: list = field(default_factory=list)


@dataclass
class AnalysisResult:
    """All findings of one ``npusan analyze`` run over one or more traces."""

    findings: list  # list[Finding]
    traces: list  # list[TraceSummary], unreadable ones included (with ``error`` set)
    suppressed: int = 0
    #: Arguments that named no trace at all: ``(argument, reason)``.
    input_problems: list = field(default_factory=list)

    @property
    def errors(self) -> list:
        """``(trace or argument, reason)`` for everything that could not be analyzed."""
        return [(t.path, t.error) for t in self.traces if t.error is not None] + list(self.input_problems)
