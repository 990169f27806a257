"""Words shared by every reporter: stream names, titles, sizes and the suggested fix.

Kept apart from the renderers so that the terminal, JUnit and SARIF outputs say the same
thing in the same words.
"""

from __future__ import annotations

import keyword
import re
from typing import Optional, Sequence

from ..findings import AccessInfo, Finding, Frame, Kind, StreamRef
from ..sources import SourceCache, display_path, user_site

KIND_TITLES = {
    Kind.DATA_RACE: "data race",
    Kind.MISSING_RECORD_STREAM: "missing record_stream",
    Kind.REUSE_RACE: "allocator reuse race",
}

KIND_PLURALS = {
    Kind.DATA_RACE: "data races",
    Kind.MISSING_RECORD_STREAM: "missing record_stream",
    Kind.REUSE_RACE: "allocator reuse races",
}

KIND_HELP = {
    Kind.DATA_RACE: (
        "Two kernels on different streams access overlapping memory, at least one writes, "
        "and no event or stream wait orders them."
    ),
    Kind.MISSING_RECORD_STREAM: (
        "A tensor was used on a stream other than its allocation stream and then freed "
        "while the allocation stream had not waited for that use, without record_stream: "
        "the caching allocator may hand the memory out again while the use still runs."
    ),
    Kind.REUSE_RACE: (
        "A freed block was re-allocated and touched by a kernel that is not ordered after "
        "an unsynchronized, unrecorded use of the old tensor on another stream."
    ),
}


def device_label(header: dict, device: int) -> str:
    """``cuda:0``, ``npu:1``, ``sim:0`` — the backend named in the trace header."""
    backend = header.get("backend") if isinstance(header, dict) else None
    if not isinstance(backend, str) or not backend:
        backend = "device"
    return f"{backend}:{device}"


def torch_module(header: dict) -> str:
    """The Python module a user calls for streams on this backend."""
    backend = header.get("backend") if isinstance(header, dict) else None
    return _MODULES.get(backend, "torch.cuda")


_MODULES = {"npu": "torch.npu", "sim": "npusan.sim", "cuda": "torch.cuda"}


def frame_label(fr: Optional[Frame]) -> str:
    if fr is None:
        return "an unknown location"
    return f"{display_path(fr.filename)}:{fr.lineno}"


def stream_number(s: StreamRef) -> int:
    """The number a report shows for a non-default stream ("stream #2").

    Replay assigns it (:func:`~npusan.analyzer.findings.number_streams`); a hand-made
    StreamRef without one falls back to its trace index counted from 1.
    """
    return s.ordinal if s.ordinal is not None else s.index + 1


def stream_name(s: Optional[StreamRef], header: dict) -> str:
    """"default stream (cuda:0)" or "stream #2 (cuda:0), created at train.py:41"."""
    if s is None:
        return "an unknown stream"
    name = stream_label(s, header)
    site = user_site(s.created_stack)
    if not s.is_default and site is not None:
        name += f", created at {frame_label(site)}"
    return name


def stream_label(s: StreamRef, header: dict) -> str:
    """"default stream (cuda:0)" or "stream #2 (cuda:0)": the name without the site."""
    dev = device_label(header, s.device)
    return f"default stream ({dev})" if s.is_default else f"stream #{stream_number(s)} ({dev})"


def stream_short(s: Optional[StreamRef], header: dict) -> str:
    if s is None:
        return "an unknown stream"
    return ("the " if s.is_default else "") + stream_label(s, header)


def stream_code(s: Optional[StreamRef], header: dict, sources: Optional[SourceCache] = None) -> str:
    """How the fix refers to a stream in Python: the default stream by its API call, others
    by the variable their creation line assigned (``side = torch.cuda.Stream()``) when the
    source can be read, else a placeholder (``s2`` for stream #2); :func:`fix` explains it."""
    if s is None:
        return "<stream>"
    if s.is_default:
        return f"{torch_module(header)}.default_stream({s.device})"
    name = assigned_name(user_site(s.created_stack), sources)
    if name is not None:
        return name
    n = stream_number(s)
    return f"s{n}" if s.device == 0 else f"s{n}_dev{s.device}"


#: ``name = ...``, ``self.name = ...`` or ``name: T = ...`` (not ``==``, ``+=``, ``a[i] =``).
_ASSIGNED = re.compile(r"((?:self\.)?[A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


def assigned_name(fr: Optional[Frame], sources: Optional[SourceCache]) -> Optional[str]:
    """The variable the source line at ``fr`` assigns, if it is a plain assignment."""
    if fr is None or sources is None:
        return None
    src = sources.line(fr.filename, fr.lineno)
    m = _ASSIGNED.match(src) if src else None
    if m is None or keyword.iskeyword(m.group(1)):
        return None
    return m.group(1)


def human_size(n: Optional[int]) -> str:
    if n is None:
        return "unknown-size"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def allocation_site(f: Finding) -> str:
    site = user_site(f.block.stack)
    if site is not None:
        return f"allocated at {frame_label(site)}"
    if f.block.stream is None:
        return "allocated before recording began"
    return "allocated at an unknown location"


def title(f: Finding, header: dict) -> str:
    """One line: the kind, the tensor size and where it was allocated."""
    size = human_size(f.block.size)
    tensor = f"{size} tensor {allocation_site(f)}"
    kind = KIND_TITLES[f.kind]
    if f.kind is Kind.DATA_RACE:
        return (
            f"{kind} on a {tensor}: {f.access.type} on {stream_short(f.access.stream, header)} "
            f"not ordered after a {f.previous.type} on {stream_short(f.previous.stream, header)}"
        )
    if f.kind is Kind.MISSING_RECORD_STREAM:
        freed = "freed" if not is_leak(f) else "still alive at the end of the trace"
        return (
            f"{kind}: {tensor} {freed} while {stream_short(f.previous.stream, header)} "
            f"may still use it"
        )
    site = user_site(f.block.stack)
    where = f" at {frame_label(site)}" if site is not None else ""
    return (
        f"{kind}: {size} block re-allocated{where} and touched while "
        f"{stream_short(f.previous.stream, header)} may still use the freed tensor"
    )


def is_leak(f: Finding) -> bool:
    """A missing record_stream found by ``--check-leaks``: the block was never freed."""
    return f.kind is Kind.MISSING_RECORD_STREAM and f.access.op != "free"


def access_verb(a: AccessInfo, kind: Kind, later: bool) -> str:
    if kind is Kind.MISSING_RECORD_STREAM and later:
        return "free"
    return a.type


def fix(f: Finding, header: dict, sources: Optional[SourceCache] = None) -> list[str]:
    """A concrete suggestion naming the line to change; the first line is the summary.

    The code uses the stream API of the trace's backend (``torch.cuda``, ``torch.npu``
    that torch_npu registers, or ``npusan.sim``), and relies on one fact: right before or
    after an access's line, the current stream is the stream that access ran on. With
    ``sources``, tensors and streams are called by the variable their allocation or
    creation line assigned; otherwise by placeholders the fix explains.
    """
    mod = torch_module(header)
    later, earlier = f.access, f.previous
    at_later = user_site(later.stack)
    at_earlier = user_site(earlier.stack)
    codes = _stream_codes((earlier.stream, f.block.stream), header, sources)

    def code(s: Optional[StreamRef]) -> str:
        return codes.get(s, "<stream>") if s is not None else "<stream>"

    if f.kind is Kind.DATA_RACE:
        waited = code(earlier.stream)
        lines = [
            f"make the {later.type} at {frame_label(at_later)} wait for the {earlier.type} "
            f"at {frame_label(at_earlier)}; right before line {_line(at_later)} add",
            f"    {mod}.current_stream().wait_stream({waited})",
            f"or, with an event: after line {_line(at_earlier)} add "
            f"`event = {mod}.current_stream().record_event()`, and before line "
            f"{_line(at_later)} add `{mod}.current_stream().wait_event(event)`",
        ]
        used = [earlier.stream]
    else:
        use_stream = code(earlier.stream)
        alloc_stream = code(f.block.stream)
        var = "x"
        if f.kind is Kind.MISSING_RECORD_STREAM:
            tensor = f"the {human_size(f.block.size)} tensor {allocation_site(f)}"
            var = assigned_name(user_site(f.block.stack), sources) or var
        else:  # the block describes the new allocation; x is the old tensor
            tensor = f"the tensor used at {frame_label(at_earlier)}, freed before the reuse"
        lines = [
            f"tell the allocator about the use at {frame_label(at_earlier)}; right after "
            f"line {_line(at_earlier)} add",
            f"    {var}.record_stream({mod}.current_stream())    # {var}: {tensor}",
        ]
        if f.kind is Kind.MISSING_RECORD_STREAM:
            before = f"the free at {frame_label(at_later)}" if not is_leak(f) else f"{var} is freed"
            lines.append(
                f"or, before {before}, make the allocating stream "
                f"wait for the use: `{alloc_stream}.wait_stream({use_stream})`"
            )
        else:
            lines.append(
                f"or, before the old tensor is freed, make the allocating stream wait for the "
                f"use: `{alloc_stream}.wait_stream({use_stream})` (the memory was reused by "
                f"{later.op} at {frame_label(at_later)})"
            )
        used = [earlier.stream, f.block.stream]
    return lines + _stream_notes(used, codes, header)


def _line(fr: Optional[Frame]) -> str:
    return str(fr.lineno) if fr is not None else "?"


def _stream_codes(
    streams: Sequence[Optional[StreamRef]], header: dict, sources: Optional[SourceCache]
) -> dict:
    """``{stream: how the fix writes it}``; placeholders if two streams share a variable name."""
    refs = list(dict.fromkeys(s for s in streams if s is not None))
    codes = {s: stream_code(s, header, sources) for s in refs}
    if len(set(codes.values())) < len(codes):
        codes = {s: stream_code(s, header) for s in refs}
    return codes


def _stream_notes(streams: Sequence[Optional[StreamRef]], codes: dict, header: dict) -> list[str]:
    """Say which stream each variable or placeholder in the fix stands for."""
    seen: dict[str, StreamRef] = {}
    for s in streams:
        if s is not None and not s.is_default:
            seen.setdefault(codes[s], s)
    return [f"where {code} is {stream_name(s, header)}" for code, s in seen.items()]
