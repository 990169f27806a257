"""Words shared by every reporter: stream names, titles, sizes and the suggested fix.

Kept apart from the renderers so that the terminal, JUnit and SARIF outputs say the same
thing in the same words.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import re
import weakref
from typing import Optional, Sequence

from ...trace_format.records import HOST_DEVICE
from ..findings.model import AccessInfo, Finding, Frame, Kind, StreamRef, TraceSummary
from .pynames import OTHER, Scope, ScopeIndex, ends_here
from .sources import SourceCache, display_path, internal_category, user_site

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


def _backend(header: dict) -> str:
    backend = header.get("backend") if isinstance(header, dict) else None
    return backend if backend in _MODULES else "cuda"


#: Per backend: the full names that reach its stream API, and the import that binds the first.
_MODULES = {
    "npu": ("torch.npu", "torch_npu.npu"),
    "sim": ("npusan.sim",),
    "cuda": ("torch.cuda",),
}
_IMPORTS = {"npu": "import torch", "sim": "import npusan.sim", "cuda": "import torch"}


def frame_label(fr: Optional[Frame]) -> str:
    if fr is None:
        return "an unknown location"
    return f"{display_path(fr.filename)}:{fr.lineno}"


def stream_number(s: StreamRef) -> int:
    """The number a report shows for a non-default stream ("stream #2").

    Replay assigns it (:func:`~npusan.analyzer.findings.model.number_streams`); a hand-made
    StreamRef without one falls back to its trace index counted from 1.
    """
    return s.ordinal if s.ordinal is not None else s.index + 1


def stream_name(s: Optional[StreamRef], header: dict) -> str:
    """"default stream (cuda:0)" or "stream #2 (cuda:0), created at train.py:41"."""
    if s is None:
        return "an unknown stream"
    if is_host(s):
        return "the host"
    if s.label is not None:  # "the comm stream of process group 0 (cuda:0)"
        return _the(s) + stream_label(s, header)
    name = stream_label(s, header)
    site = user_site(s.created_stack)
    if not s.is_default and site is not None:
        name += f", created at {frame_label(site)}"
    return name


def replay_words(a: AccessInfo, header: dict) -> Optional[str]:
    """"by the graph launch at prog.py:31 on default stream (cuda:0); captured at prog.py:18"
    for an access a graph replay made (None for one the program made itself): the line the
    access's stack names is inside the capture, which ran nothing there."""
    r = a.replay
    if r is None:
        return None
    text = f"by the graph launch at {frame_label(user_site(r.stack))} on {stream_label(r.stream, header)}"
    captured = user_site(r.captured)
    if captured is not None:
        text += f"; captured at {frame_label(captured)}"
    return text


def stream_label(s: StreamRef, header: dict) -> str:
    """"default stream (cuda:0)" or "stream #2 (cuda:0)": the name without the site."""
    if is_host(s):
        return "host"
    dev = device_label(header, s.device)
    if s.label is not None:
        return f"{s.label} ({dev})" if _names_a_stream(s.label) else f'stream "{s.label}" ({dev})'
    return f"default stream ({dev})" if s.is_default else f"stream #{stream_number(s)} ({dev})"


def merged_ranges_note(group) -> Optional[str]:
    """What to say of a group found on a block whose byte ranges were merged (None: not)."""
    if not any(f.merged_ranges for f in group.findings):
        return None
    from ..replay.engine import MAX_SEGMENTS  # (the caps in force: tests change them)
    from ..replay.strided import MAX_VIEWS

    return (f"the block had more than {MAX_SEGMENTS} separately accessed byte ranges, or more than "
            f"{MAX_VIEWS} strided views in use at once, and some were merged: the earlier access may be a "
            "neighbouring range's or a view's whole span, and the race may be false")


def other_streams(report, group) -> list:
    """``(stream, header)`` for each stream of a group's other findings that its entry does
    not name (its first finding's two streams), once per label: one bug at one pair of
    lines can happen on several streams (two side streams made in one loop), and an entry
    shows only its first finding's. ``report``: the Report, for each trace's header."""
    f0 = group.finding
    h0 = report.header(f0.trace)
    named = {stream_label(s, h0) for s in (f0.access.stream, f0.previous.stream) if s is not None}
    out = []
    for f in group.findings[1:]:
        h = report.header(f.trace)
        for s in (f.access.stream, f.previous.stream):
            if s is None:
                continue
            label = stream_label(s, h)
            if label not in named:
                named.add(label)
                out.append((s, h))
    return out


def _names_a_stream(label: str) -> bool:
    """Whether a label reads as a stream's name ("comm stream of process group 0"); others
    (a trace from another writer may say anything) are quoted: stream "my label"."""
    return "stream" in label.split()


def _the(s: StreamRef) -> str:
    return "the " if s.is_default or (s.label is not None and _names_a_stream(s.label)) else ""


def stream_short(s: Optional[StreamRef], header: dict) -> str:
    if s is None:
        return "an unknown stream"
    if is_host(s):
        return "the host"
    return _the(s) + stream_label(s, header)


#: The kernel name suffix of a collective torch waited for at once (the recorder's
#: ``collectives.SYNC_SUFFIX``; the analyzer does not import the recorder).
_SYNC_SUFFIX = " (async_op=False)"


def is_host(s: Optional[StreamRef]) -> bool:
    """The host's own accesses of pinned memory (format 1.2: the stream of device -1)."""
    return s is not None and s.device == HOST_DEVICE


def is_comm(s: Optional[StreamRef]) -> bool:
    """A process group's communication stream (the recorder labelled it so)."""
    return s is not None and s.role == "comm"


#: ``name = ...``, ``self.name = ...`` or ``name: T = ...`` (not ``==``, ``+=``, ``a[i] =``).
_ASSIGNED = re.compile(r"((?:self\.)?[A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


def assigned_name(fr: Optional[Frame], sources: Optional[SourceCache]) -> Optional[str]:
    """The variable the source line at ``fr`` assigns, if it is a plain assignment of one
    value: not of a list, tuple, set or dict display or comprehension, whose variable holds
    many (``streams = [torch.cuda.Stream() for _ in range(2)]``: a fix that passed
    ``streams`` where a stream goes would fail when pasted)."""
    if fr is None or sources is None:
        return None
    src = sources.frame_line(fr)
    m = _ASSIGNED.match(src) if src else None
    if m is None or keyword.iskeyword(m.group(1)) or src[m.end():].lstrip()[:1] in ("[", "(", "{"):
        return None
    return m.group(1)


def human_size(n: Optional[int]) -> str:
    if n is None:
        return "unknown-size"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def article(words: str) -> str:
    """"a" or "an" before ``words`` as they are read aloud ("an 8.0 KiB", "an 11 B", "a 4.0 KiB")."""
    whole = words.split(".")[0].split(" ")[0]
    spoken_vowel = words[:1] in "aeiou" or whole.startswith("8") or whole in ("11", "18")
    return "an" if words and spoken_vowel else "a"


def pinned_host_block(f: Finding) -> bool:
    """Whether the finding's memory is pinned host memory: a block without an allocation
    that the host itself accessed (only pinned memory has the host's own accesses; the host
    allocator reports no allocation, so the block may well be allocated while recording)."""
    return f.block.stream is None and (is_host(f.access.stream) or is_host(f.previous.stream))


def allocation_site(f: Finding) -> str:
    site = user_site(f.block.stack)
    if site is not None:
        return f"allocated at {frame_label(site)}"
    if pinned_host_block(f):
        return "in pinned host memory"
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
            f"{kind} on {article(tensor)} {tensor}: {f.access.type} on {stream_short(f.access.stream, header)} "
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


def freed_words(a: AccessInfo) -> tuple:
    """What happened to a freed block and where it goes, for the free of a missing
    record_stream: ``("returned to the allocator", ", free for reuse on ")``, or for a block
    ``--check-leaks`` found never freed ``("still allocated when the trace ended", ", on ")``;
    the allocation stream's name follows."""
    if a.op == "free":
        return "returned to the allocator", ", free for reuse on "
    return "still allocated when the trace ended", ", on "


def access_verb(a: AccessInfo, kind: Kind, later: bool) -> str:
    if kind is Kind.MISSING_RECORD_STREAM and later:
        return "free"
    return a.type


_SCOPE_INDEXES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Unread(str):
    """A fix's note that a file was not read: in full the first time a report's fixes need
    it (per :class:`SourceCache`, which each report makes one of), in :attr:`short` after,
    so a report says why a file was not read and how to have it read once, not per fix."""

    def __new__(cls, text: str, filename: str, short: str) -> "_Unread":
        self = super().__new__(cls, text)
        self.filename, self.short = filename, short
        return self


#: SourceCache -> the files whose unread note a fix of its report already gave in full.
_EXPLAINED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _explain_once(lines: list, sources: Optional[SourceCache]) -> list[str]:
    """``lines`` as plain strings, each :class:`_Unread` note in full only the first time."""
    said = _EXPLAINED.setdefault(sources, set()) if sources is not None else set()
    out = []
    for x in lines:
        if isinstance(x, _Unread):
            text = x.short if x.filename in said else str(x)
            said.add(x.filename)
            x = text
        out.append(str(x))
    return out


def _scope_index(sources: Optional[SourceCache]) -> Optional[ScopeIndex]:
    """One parse cache per SourceCache (a report's sources live as long as the report)."""
    if sources is None:
        return None
    idx = _SCOPE_INDEXES.get(sources)
    if idx is None:
        idx = _SCOPE_INDEXES[sources] = ScopeIndex(sources)
    return idx


class Names:
    """How code pasted at one line calls the stream API, streams and tensors.

    Only names the program itself binds there are used: the module under the name its
    imports give it (``from npusan import sim`` -> ``sim``), a stream or tensor under the
    variable that created it when that variable is visible at the line (or the fixture
    or the alias that holds it there). Anything else is a placeholder in angle brackets,
    ``<s1>``, ``<x>`` (visibly not a program name, and a pasted fix fails loudly instead
    of silently using another object), and :attr:`notes` says what each stands for.
    Without the source, a note also says nothing was checked.
    """

    def __init__(self, header: dict, sources: Optional[SourceCache], site: Optional[Frame]) -> None:
        self.header = header
        self.sources = sources
        #: The line as the trace names it; :attr:`site` is where that line is in the local
        #: file now (the same frame unless the file was edited after recording).
        self.recorded = site
        self.site = site
        self.index = _scope_index(sources)
        self.scope: Optional[Scope] = None
        self.notes: list[str] = []
        self._changed = False  # the local file no longer has the recorded line
        if self.index is not None and site is not None:
            local = _relocated(site, sources)
            if local is None:
                self._changed = sources.lines(site.filename) is not None
            else:
                self.site = local
                self.scope = self.index.scope_at(local.filename, local.lineno)
                if local.lineno != site.lineno:
                    self._note(
                        f"({_file(site)} changed since the trace was recorded: its line {site.lineno} "
                        f"`{sources.frame_line(site)}` is line {local.lineno} now, and line numbers "
                        "in this fix are those of the file as it is now)"
                    )
        self._streams: dict = {}  # StreamRef -> code
        self.placeholders: set = set()  # the stream codes that are placeholders
        self._module: Optional[str] = None
        #: Set by :func:`wait_site` when this line is before the one that needs the wait,
        #: in a loop (:func:`_next_work_line`): that line.
        self.next_work_of: Optional[Frame] = None

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def module(self) -> str:
        if self._module is not None:
            return self._module
        backend = _backend(self.header)
        full = _MODULES[backend]
        expr = self.scope.expression(full) if self.scope is not None else None
        if expr is None:
            expr = full[0]
            if self.scope is None and self._changed:
                self._note(
                    f"({_file(self.site)} changed since the trace was recorded, so the names and line "
                    f"numbers in this fix are not checked against it: line {self.site.lineno} "
                    f"`{self.sources.frame_line(self.site)}` is no longer in it; look for that line)"
                )
            elif self.scope is None:
                why, hint = (self.sources.why_unreadable(self.site.filename) if self.sources and self.site
                             else ("was not read", "--source-root DIR lets npusan read it"))
                self._note(_Unread(
                    f"({_file(self.site)} {why}, so the names in this fix are not checked against it: {hint})",
                    self.site.filename if self.site is not None else "",
                    f"(the names in this fix are not checked against {_file(self.site)} either)"))
            elif internal_category(self.site) is None:  # (a library's file is not the user's to change)
                self._note(
                    f"({display_path(self.site.filename)} does not import {full[0]} under a "
                    f"name visible at line {self.site.lineno}: add `{_IMPORTS[backend]}`)"
                )
        self._module = expr
        return expr

    def stream(self, s: Optional[StreamRef]) -> str:
        if s is None:
            return "<stream>"
        if s.is_default:
            return f"{self.module()}.default_stream({s.device})"
        if s in self._streams:
            return self._streams[s]
        name = self._stream_variable(s)
        if name is None or name in self._streams.values():
            n = stream_number(s)
            base = f"s{n}" if s.device == 0 else f"s{n}_dev{s.device}"
            name = self._placeholder(base)
            self.placeholders.add(name)
        self._streams[s] = name
        self._note(f"where {name} is {stream_name(s, self.header)}")
        return name

    def named_stream(self, s: Optional[StreamRef]) -> Optional[str]:
        """``s`` under a name that means it wherever code at this line goes (its variable,
        visible here, or ``default_stream(n)``), or None; unlike :meth:`stream`, no
        placeholder and no note."""
        if s is None:
            return None
        if s.is_default:
            return self.stream(s)
        if s in self._streams:
            return None if self._streams[s] in self.placeholders else self._streams[s]
        return self._stream_variable(s)

    def _stream_variable(self, s: StreamRef) -> Optional[str]:
        """The variable that holds stream ``s`` at this line: the one its creation line
        assigns, or, for a stream a ``@pytest.fixture`` creates and returns or yields, the
        fixture's name when this line's function takes it as a parameter. Without the
        source, :meth:`_recorded_name` decides from the recorded lines."""
        creation = user_site(s.created_stack)
        variable = assigned_name(creation, self.sources)
        if self.scope is None:
            return self._recorded_name(variable, creation, same_function=True)
        name = self._visible(variable, creation, local_only=False)
        if name is not None or self.scope is None or creation is None or self.index is None:
            return name
        origin = _relocated(creation, self.sources)
        if origin is None:
            return None
        fixture = self.index.fixture_name(origin.filename, origin.lineno, variable)
        if fixture is None or fixture not in self.scope.params or self.scope.names.get(fixture) != OTHER:
            return None
        rebound = self._rebound(self.scope.function, fixture, self.scope.function, self.site.lineno)
        return None if rebound else fixture

    def stream_block(self) -> Optional[str]:
        """The header of the innermost ``with ...stream(...):`` block this line is in
        (``with sim.stream(side):``), or None."""
        if self.scope is None or self.index is None:
            return None
        node = self.index.stream_block_at(self.site.filename, self.site.lineno)
        if node is None:
            return None
        text = self.sources.lines(self.site.filename)[node.lineno - 1].strip()
        return text if text.endswith(":") else None

    def tensor(self, stack: Sequence[Frame]) -> str:
        """The variable a tensor allocated with ``stack`` has here, else a placeholder.

        The frames of the allocation stack are followed from the allocation outwards while
        each function returns what its line made (``x = torch.empty(n); return x``, called
        as ``nxt = load(i)``). First, a name this line itself reads that holds it through
        plain assignments in this function (``cur = nxt``; ``acc += cur @ w``: ``cur``);
        then a variable one of those frames assigns, in this function, still bound to it
        here (not in a loop with this line unless this line reads it).
        """
        site = user_site(stack)
        frames = [fr for fr in [site] + [fr for fr in reversed(stack) if fr is not site and internal_category(fr) is None]
                  if fr is not None]
        if self.scope is None and frames:  # unread: the name the recorded use line reads
            return self._recorded_name(assigned_name(frames[0], self.sources), frames[0],
                                       same_function=False) or self._placeholder("x")
        if self.scope is None or self.index is None or not frames:
            return self._placeholder("x")
        chain = []
        for fr in frames:
            chain.append(fr)
            local = _relocated(fr, self.sources)
            if local is None or self.index.returns_value_of(local.filename, local.lineno,
                                                            assigned_name(fr, self.sources)) is False:
                break  # its function does not hand this tensor to its caller (as far as is known)
        read = self.index.names_read(self.site.filename, self.site.lineno)
        seeds: dict = {}
        producers = set()
        for i, fr in enumerate(chain):
            local = _relocated(fr, self.sources)
            if local is None or local.filename != self.site.filename:
                continue
            there = self.index.scope_at(local.filename, local.lineno)
            if there is None or there.function != self.scope.function:
                continue
            name = assigned_name(fr, self.sources)
            if name is not None and not name.startswith("self."):
                seeds[name] = local.lineno
            if i > 0:
                producers.add(chain[i - 1].function)
        if seeds:
            held = self.index.aliases(self.site.filename, self.scope.function, seeds, frozenset(producers))
            found = sorted(n for n, only in held.items()
                           if only and n in read and self.scope.names.get(n) == OTHER and n in self.scope.local)
            if len(found) == 1:
                return found[0]
        for fr in chain:
            name = self._visible(assigned_name(fr, self.sources), fr, local_only=True)
            if name is None:
                continue
            local = _relocated(fr, self.sources)
            if name.startswith("self.") or name in read or not self.index.in_one_loop(
                    self.site.filename, local.lineno, self.site.lineno):
                return name
        return self._placeholder("x")

    def _recorded_name(self, name: Optional[str], origin: Optional[Frame], same_function: bool) -> Optional[str]:
        """``name`` (assigned at ``origin``, as the trace recorded that line) when the file
        cannot be read, if the recorded line of this site reads it, or (``same_function``)
        this site is in the function that assigned it. Unchecked (a note says so), but a
        program's own name where the trace shows one beats a placeholder: the ``tensors:``
        line of a root cause names the same variable from the same recorded line."""
        if name is None or origin is None or self.recorded is None or self.sources is None or self._changed:
            return None
        text = self.sources.frame_line(self.recorded) or ""
        if re.search(r"(?<![\w.])" + re.escape(name) + r"(?!\w)", text):
            return name
        if same_function and not name.startswith("self.") and origin.filename == self.recorded.filename \
                and origin.function == self.recorded.function:
            return name
        return None

    def event(self, *others: "Names") -> str:
        """The variable a fix records its new event in: ``event``, or ``event_2``... where
        this line's scope binds that name already. Without the scope (the source was not
        read) it is the same real identifier, so a pasted fix is valid Python as it is when
        the source was read; it is unchecked, like every name of such a fix (a note says
        so), but it is none that the recorded lines of this site and ``others`` (where the
        event is recorded) use."""
        if self.scope is not None:
            return self.scope.fresh("event")
        used: set = set()
        for names in (self, *others):
            if names.sources is not None and names.recorded is not None:
                used.update(re.findall(r"[A-Za-z_]\w*", names.sources.frame_line(names.recorded) or ""))
        name, n = "event", 1
        while name in used:
            n += 1
            name = f"event_{n}"
        return name

    def _placeholder(self, base: str) -> str:
        """``<base>``: visibly not a name of the program (and a syntax error if pasted as is)."""
        return f"<{base}>"

    def _visible(self, name: Optional[str], origin: Optional[Frame], local_only: bool) -> Optional[str]:
        """``name`` (assigned at ``origin``) if at this line it still names that object."""
        if name is None or self.scope is None or origin is None or self.index is None:
            return None
        origin = _relocated(origin, self.sources)
        if origin is None:
            return None  # edited since the trace was recorded: that line is gone
        there = self.index.scope_at(origin.filename, origin.lineno)
        if there is None:
            return None
        same_file = origin.filename == self.site.filename
        if name.startswith("self."):
            ok = same_file and self.scope.cls is not None and self.scope.cls == there.cls
            return name if ok and "self" in self.scope.names else None
        if self.scope.names.get(name) != OTHER:
            return None  # not a variable here (unbound, or an import)
        site = self.site.lineno
        if same_file and self.scope.function == there.function:
            # the same function's variable, unless something else is assigned to it on the way
            return None if self._rebound(self.scope.function, name, origin.lineno, site) else name
        if local_only:
            return None
        if name in self.scope.params:
            # passed in under the name it was created with, and not reassigned before the line
            return None if self._rebound(self.scope.function, name, self.scope.function, site) else name
        if same_file and there.function is None and name not in self.scope.local:
            # a module-level variable of this file, not shadowed here nor assigned twice
            return None if self._rebound(None, name, origin.lineno, 0) else name  # 0: any other binding
        return None

    def _rebound(self, function: Optional[int], name: str, origin: int, site: int) -> bool:
        return self.index.rebound(self.site.filename, function, name, origin, site)


def _relocated(fr: Frame, sources: Optional[SourceCache]) -> Optional[Frame]:
    """``fr`` at its line in the local file now (itself when unchanged), or None when the
    file cannot be read or no longer has that line (:meth:`SourceCache.locate`)."""
    if sources is None:
        return None
    line = sources.locate(fr)
    if line is None:
        return None
    return fr if line == fr.lineno else dataclasses.replace(fr, lineno=line)


def _after(names: "Names") -> str:
    """Where code goes that must run after the line ``names`` is at: ``right after line N``,
    after the statement's last line when it spans several, or right before it when nothing
    after it runs (``return``, ``raise``; ``yield``: maybe never resumed). ``record_stream``
    may come before the use it declares: it only has to be called before the free."""
    site = names.site
    if site is None:
        return "right after line ?"
    stmt = None
    if names.scope is not None and names.index is not None:
        stmt = names.index.statement_at(site.filename, site.lineno)
        if ends_here(stmt):
            what = _ENDS.get(type(stmt), "yields")
            return f"right before line {stmt.lineno} (it {what}, so a line after it would not run)"
        if stmt is not None and (stmt.end_lineno or stmt.lineno) > site.lineno:
            return f"right after line {stmt.end_lineno} (where the statement at line {site.lineno} ends)"
        return f"right after line {site.lineno}"
    text = names.sources.frame_line(names.recorded) if names.sources is not None and names.recorded else None
    m = _ENDING.match(text or "")
    if m:  # unchecked source, but the recorded line says it
        return f"right before line {site.lineno} (it {m.group(1)}s, so a line after it would not run)"
    return f"right after line {site.lineno}"


_ENDS = {ast.Return: "returns", ast.Raise: "raises"}
_ENDING = re.compile(r"(?:\w+\s*=\s*)?(return|raise|yield)\b")


def fix(f: Finding, header: dict, sources: Optional[SourceCache] = None) -> list[str]:
    """A concrete suggestion naming the line to change; the first line is the summary.

    Within one report (one ``sources``), why a file was not read is said once.
    """
    return _explain_once(_fix(at_launch(f), header, sources) + _replay_note(f), sources)


def at_launch(f: Finding) -> Finding:
    """``f`` with each access a graph replay made placed at its launch (``g.replay()``).

    A captured kernel runs at the launch, not at its line inside the capture, and on the
    launching stream: a wait added inside the capture would be captured into the graph and
    order nothing outside it, so every fix is made as if the launch line made the access.
    The launching stream is current at the launch line, as at any access's line; a side
    stream the capture forked to is ordered after it there too, so a wait before the launch
    orders the whole replay. ``f`` itself is left alone (its stacks stay the captured ones).
    """
    later, earlier = _launched(f.access), _launched(f.previous)
    if later is f.access and earlier is f.previous:
        return f
    return dataclasses.replace(f, access=later, previous=earlier)


def _launched(a: AccessInfo) -> AccessInfo:
    r = a.replay
    if r is None or not r.stack:
        return a
    return dataclasses.replace(a, stream=r.stream, stack=r.stack)


def _replay_note(f: Finding) -> list[str]:
    """Why a fix names the launch line of a graph replay and not the captured line."""
    notes = []
    for a, later in ((f.access, True), (f.previous, False)):
        if a.replay is None or not a.replay.stack:
            continue
        launch = frame_label(user_site(a.replay.stack))
        what = f"the {a.type} by {a.op} at {frame_label(user_site(a.stack))} is captured in a graph"
        notes.append(
            f"({what}: it runs when the graph is launched at {launch}, so the fix goes there; a wait inside "
            "the capture would be captured into the graph and order nothing outside it)" if later else
            f"({what}: it ran when the graph was launched at {launch}, which is the work to wait for)"
        )
    return notes


def _fix(f: Finding, header: dict, sources: Optional[SourceCache] = None) -> list[str]:
    """:func:`fix`, its notes not yet made plain (see :func:`_explain_once`).

    The code uses the stream API of the trace's backend (``torch.cuda``, ``torch.npu``
    that torch_npu registers, or ``npusan.sim``) under the name the program imports it as,
    and relies on one fact: right before or after an access's line, the current stream is
    the stream that access ran on. See :class:`Names` for how streams and tensors are named.
    """
    later, earlier = f.access, f.previous
    at_later = user_site(later.stack)
    at_earlier = user_site(earlier.stack)

    if f.kind is Kind.DATA_RACE and is_comm(earlier.stream):
        # The program synchronizes with a process group through its Work, not its stream.
        if earlier.op.endswith(_SYNC_SUFFIX):
            coll = earlier.op[: -len(_SYNC_SUFFIX)]
            mod = Names(header, sources, at_later).module()
            return [
                f"make the {later.type} at {frame_label(at_later)} wait for the {coll} at "
                f"{frame_label(at_earlier)}: it ran with async_op=False, so torch waited for it on the "
                f"stream that was current at line {_line(at_earlier)}; right before line {_line(at_later)} add",
                f"    {mod}.current_stream().wait_stream(<s>)",
                f"where <s> is the stream that was current at line {_line(at_earlier)} "
                f"(the one a `with {mod}.stream(...):` around it made current)",
            ]
        work = assigned_name(at_earlier, sources) or "<work>"
        return [
            f"wait for the {earlier.op} launched at {frame_label(at_earlier)} before the {later.type} "
            f"at {frame_label(at_later)}; right before line {_line(at_later)} add",
            f"    {work}.wait()",
            f"where {work} is what {earlier.op}(..., async_op=True) at line {_line(at_earlier)} returned "
            "(a functional collective: wait_tensor(result), or use the result, which waits)",
        ]
    if f.kind is Kind.DATA_RACE and is_host(later.stream):
        # The host waits only by synchronizing: an event recorded after the stream's access.
        names = Names(header, sources, at_later)
        mod, event = names.module(), names.event(Names(header, sources, at_earlier))
        return [
            f"make the host wait for the {earlier.type} at {frame_label(at_earlier)} (on "
            f"{stream_short(earlier.stream, header)}) before its {later.type} at {frame_label(at_later)}; "
            f"after line {_line(at_earlier)} add `{event} = {mod}.current_stream().record_event()`, "
            f"and right before line {_line(at_later)} add",
            f"    {event}.synchronize()",
            "(or synchronize that stream there: `<stream>.synchronize()`, or the device)",
        ]
    if f.kind is Kind.DATA_RACE:
        here = wait_site(f, header, sources)
        mod = here.module()
        lines = [
            f"make the {later.type} at {frame_label(at_later)} wait for the {earlier.type} "
            f"at {frame_label(at_earlier)}; right before {_before(here, at_later)} add",
            f"    {mod}.current_stream().wait_stream({here.stream(earlier.stream)})",
        ]
        there = Names(header, sources, at_earlier)
        if here.recorded is at_later and _same_function(here, there):
            event = here.event(there)
            lines.append(
                f"or, with an event: after line {_line(there.site)} add "
                f"`{event} = {mod}.current_stream().record_event()`, and before line "
                f"{_line(here.site)} add `{mod}.current_stream().wait_event({event})`"
            )
        return lines + here.notes

    if is_comm(earlier.stream):
        return [
            f"wait for the {earlier.op} launched at {frame_label(at_earlier)} before its tensor is "
            f"freed: call `<work>.wait()` (<work>: what {earlier.op}(..., async_op=True) returned) "
            f"before the free at {frame_label(at_later)}",
        ]
    use = Names(header, sources, at_earlier)
    mod = use.module()
    if f.kind is Kind.MISSING_RECORD_STREAM:
        what = f"the {human_size(f.block.size)} tensor {allocation_site(f)}"
        var = use.tensor(f.block.stack)
    else:  # the block describes the new allocation; the tensor is the old one
        what = f"the tensor used at {frame_label(at_earlier)}, freed before the reuse"
        var = use.tensor(())
    using = use.named_stream(earlier.stream)
    where = _after(use)
    if using is None:  # the stream has no name here: the current one, which it is only in its block
        using = f"{mod}.current_stream()"
        block = use.stream_block()
        where += (f", inside the `{block}` block (after it, the current stream is another one)" if block else
                  f", while {stream_short(earlier.stream, header)} is the current stream (as at line {_line(use.site)})")
    lines = [
        f"tell the allocator about the use at {frame_label(at_earlier)}; {where} add",
        f"    {var}.record_stream({using})    # {var}: {what}",
    ]
    if f.kind is Kind.MISSING_RECORD_STREAM and not is_leak(f) and _user_frame(later.stack) is None:
        return lines + use.notes  # freed by library code only (pytest dropping a fixture's value): no line to wait at
    if f.kind is Kind.MISSING_RECORD_STREAM and not is_leak(f):
        free, where = free_site(f, header, sources, (f.block.stream, earlier.stream))
        lines.append(
            f"or, {where}, make the allocating stream wait "
            f"for the use: `{free.stream(f.block.stream)}.wait_stream({free.stream(earlier.stream)})`"
        )
        return lines + use.notes + [n for n in free.notes if n not in use.notes]
    before = f"{var} is freed" if f.kind is Kind.MISSING_RECORD_STREAM else "the old tensor is freed"
    lines.append(
        f"or, before {before}, make the allocating stream wait for the use: "
        f"`{use.stream(f.block.stream)}.wait_stream({use.stream(earlier.stream)})`"
        + (f" (the memory was reused by {later.op} at {frame_label(at_later)})"
           if f.kind is Kind.REUSE_RACE else "")
    )
    return lines + use.notes


def wait_fix(f: Finding, header: dict, sources: Optional[SourceCache] = None) -> list[str]:
    """The one wait that fixes a root cause whose earliest finding is ``f`` (see :func:`_wait_fix`)."""
    return _explain_once(_wait_fix(at_launch(f), header, sources) + _replay_note(f), sources)


def _wait_fix(f: Finding, header: dict, sources: Optional[SourceCache] = None,
              peers: Sequence[Finding] = ()) -> list[str]:
    """The one wait that fixes a root cause whose earliest finding is ``f``.

    Before a kernel, the current stream is the waiting stream; before a free it need not
    be, so the allocating stream is named explicitly. A process group's stream is waited
    through its Work: that fix is the finding's own.
    """
    if is_comm(f.previous.stream) or is_host(f.access.stream):
        return _fix(f, header, sources)
    if f.access.seq:
        here = wait_site(f, header, sources, peers)
        first = "the first access that needs it" if here.recorded is user_site(f.access.stack) else (
            f"the call that leads to the first access that needs it, at {frame_label(user_site(f.access.stack))}")
        if here.next_work_of is not None:
            first = (f"where the loop queues more work on {stream_short(f.previous.stream, header)}, after the work "
                     f"line {here.next_work_of.lineno} needs: a wait at line {here.next_work_of.lineno} would wait "
                     "for it too, and serialize what the loop overlaps")
        return [
            f"make {stream_short(f.access.stream, header)} wait for "
            f"{stream_short(f.previous.stream, header)} once; right before line {_line(here.site)} of "
            f"{_file(here.site)} ({first}) add",
            f"    {here.module()}.current_stream().wait_stream({here.stream(f.previous.stream)})",
        ] + here.notes
    here, where = free_site(f, header, sources, (f.access.stream, f.previous.stream))
    return [
        f"make {stream_short(f.access.stream, header)} wait for "
        f"{stream_short(f.previous.stream, header)} once; {where} add",
        f"    {here.stream(f.access.stream)}.wait_stream({here.stream(f.previous.stream)})",
    ] + here.notes


def free_site(f: Finding, header: dict, sources: Optional[SourceCache], streams) -> tuple:
    """Where a wait before ``f``'s free goes, with the names there, and those words.

    Before the free's line, unless the free is of a function's local variables, made when
    it returned to that line: the free's innermost user frame is the call line and the
    use's stack goes on into that call (``stage(side, outs)`` in ``main()``, which used
    ``tmp`` and freed it by returning; or ``main()`` at module level). Right before the
    call line, the use has not happened yet, so the wait goes at the end of the called
    function, under its names (placeholders when its source cannot be read). When that
    function is a library's, right after the call line: the earliest line the program
    can change (npusan still reports that free, which came first, but nothing else runs
    on the allocating stream before the wait).
    """
    site = user_site(f.access.stack)
    label = f"before the free at {frame_label(site)}"
    free, use = list(f.access.stack), list(f.previous.stack)
    if not (len(use) > len(free) and use[: len(free)] == free and free and free[-1] is site):
        return Names(header, sources, site), label
    callee = use[len(free)]  # the frame of the function called at the free's line
    if internal_category(callee) is None:
        return Names(header, sources, callee), (
            f"before {callee.function}() returns (the free at {frame_label(site)} is of its "
            f"local variables: at the end of it, and before each of its returns)")
    return Names(header, sources, site), (
        f"right after line {_line(site)} of {_file(site)} (the free is of the local variables of "
        f"{callee.function}(), called there, when it returns: before that line, the use has not happened yet; "
        "npusan still reports the free, but nothing else runs on the allocating stream before the wait)")


def wait_site(f: Finding, header: dict, sources: Optional[SourceCache] = None, peers: Sequence[Finding] = ()) -> Names:
    """Where a wait before ``f``'s later access goes, with the names there.

    Right before the later access's line, unless the stream to wait for has no name
    there: then before an enclosing call on the later access's stack where it has one
    (``copy`` in ``main()``, which calls ``step()``, which reads). Only calls the earlier
    access did not happen inside qualify, so the wait still comes after it.

    In a loop that queues the next work on the waited stream before the line that needs
    the previous work (a prefetch), right before the line that queues it instead (see
    :func:`_next_work_line`; ``peers``: the other findings the same wait must fix).
    """
    later, earlier = list(f.access.stack), list(f.previous.stack)
    innermost = user_site(later)
    shared = 0
    while shared < min(len(later), len(earlier)) and later[shared] == earlier[shared]:
        shared += 1
    first = Names(header, sources, innermost)
    line = _next_work_line(f, peers, first)
    if line is not None:
        names = Names(header, sources, Frame(first.site.filename, line, first.site.function))
        names.next_work_of = first.site
        return names
    first.stream(f.previous.stream)
    if not first.placeholders or first.scope is None:
        return Names(header, sources, innermost)
    for fr in reversed(later[shared:]):
        if fr is innermost or internal_category(fr) is not None:
            continue
        names = Names(header, sources, fr)
        names.stream(f.previous.stream)
        if names.scope is not None and not names.placeholders:
            return Names(header, sources, fr)
    return Names(header, sources, innermost)


def _next_work_line(f: Finding, peers: Sequence[Finding], here: Names) -> Optional[int]:
    """The line before which a wait for ``f``'s earlier stream goes when a wait right before
    its later access would serialize the work a loop means to overlap, or None.

    A prefetch loop queues the next copy on the other stream (``nxt = prefetch(i + 1)``)
    before it uses the previous one (``acc += cur @ w``): a wait right before the use also
    waits for the copy just queued. Chosen, of the two forms that avoid that: the wait
    right before the line that queues the next work, where the other stream holds only
    what the use needs. (An event recorded after the copy and waited for before the use
    would have to be carried from one iteration to the next along with the tensor: not a
    fix one can paste at one line.) Only when it is sure to be right: the source is read;
    every finding the wait fixes has its earlier access issued, in the later access's
    function, either before the loop or at one line of that loop before the later line,
    and at that line the trace shows it came from an earlier iteration (an occurrence's
    earlier access is followed by another from the same line before its later one); the
    line is then outside any ``with ...stream(...)`` block the later line is not in.
    """
    at = here.recorded
    if here.scope is None or here.index is None or at is None or here.site is None:
        return None
    later = list(f.access.stack)
    k = next((i for i in range(len(later) - 1, -1, -1) if later[i] is at), None)
    if k is None:
        return None
    file, L = here.site.filename, here.site.lineno
    loop = here.index.loop_at(file, L)
    if loop is None:
        return None
    found = set()
    for h in [f, *peers]:
        if user_site(h.access.stack) != at or list(h.access.stack[: k + 1]) != later[: k + 1]:
            continue
        e = list(h.previous.stack)
        if len(e) <= k or e[:k] != later[:k] or e[k].filename != at.filename or e[k].function != at.function:
            return None
        p = _relocated(e[k], here.sources)
        if p is None:
            return None
        there = here.index.scope_at(file, p.lineno)
        if there is None or there.function != here.scope.function:
            return None
        if p.lineno < loop[0]:
            continue  # issued before the loop began
        stmt = here.index.statement_at(file, p.lineno)
        if not (loop[1] <= p.lineno and stmt is not None and (stmt.end_lineno or stmt.lineno) < L
                and _earlier_iteration(h)):
            return None
        found.add(stmt.lineno)
    if len(found) != 1:
        return None
    line = found.pop()
    mine = here.index.stream_block_at(file, L)
    block = here.index.stream_block_at(file, line)
    while block is not None and block is not mine:
        line = block.lineno  # before the ``with`` whose block makes another stream current
        block = here.index.stream_block_at(file, line)
    if block is not mine or here.index.loop_at(file, line) != loop:
        return None
    return line


def _earlier_iteration(h: Finding) -> bool:
    """Whether an occurrence of ``h`` had, between its earlier and its later access, another
    earlier access of ``h`` (the same line queued work again before the use: a loop's next
    iteration)."""
    prev = sorted((o[1], o[0]) for o in h.occurrences if o[1])
    return any(a < b < later for (a, later), (b, _) in zip(prev, prev[1:]))


def _user_frame(stack: Sequence[Frame]) -> Optional[Frame]:
    """The innermost frame of user code, or None (unlike :func:`user_site`, no library frame)."""
    site = user_site(stack)
    return site if site is not None and internal_category(site) is None else None


def arrow_site(f: Finding) -> Optional[Frame]:
    """Where a report's ``-->`` points for ``f``: the later access's user frame; for a free
    only library code made (pytest dropping a fixture's value after its teardown), the use."""
    site = user_site(f.access.stack)
    if f.kind is Kind.MISSING_RECORD_STREAM and _user_frame(f.access.stack) is None:
        return _user_frame(f.previous.stack) or site
    return site


def _before(here: Names, access: Optional[Frame]) -> str:
    if here.next_work_of is not None:
        return (f"line {here.site.lineno} (the loop queues more work on that stream there, after the work line "
                f"{here.next_work_of.lineno} needs: a wait at line {here.next_work_of.lineno} would wait for it too, "
                "and serialize what the loop overlaps)")
    if here.recorded is access or here.site is None:
        return f"line {_line(here.site if here.site is not None else access)}"
    return f"line {here.site.lineno} of {_file(here.site)} (the call that leads to it)"


def _same_function(a: Names, b: Names) -> bool:
    """Whether both lines run in one function (so one local variable can carry an event)."""
    if a.site is None or b.site is None or a.site.filename != b.site.filename:
        return False
    if a.scope is not None and b.scope is not None:
        return a.scope.function == b.scope.function
    return a.site.function == b.site.function  # unchecked (a note says the names in the fix are)


def _file(fr: Optional[Frame]) -> str:
    return display_path(fr.filename) if fr is not None else "an unknown file"


def _line(fr: Optional[Frame]) -> str:
    return str(fr.lineno) if fr is not None else "?"


def root_cause_title(rc, header: dict) -> str:
    """"the default stream (cuda:0) does not wait for stream #1 (cuda:0), created at x.py:3"."""
    f = rc.anchor
    n = len(rc.groups)
    kinds = ", ".join(count(c, KIND_TITLES[Kind(k)], KIND_PLURALS[Kind(k)]) for k, c in rc.kinds().items())
    return (
        f"{stream_short(f.access.stream, header)} does not wait for "
        f"{'the ' if f.previous.stream is not None and f.previous.stream.is_default else ''}"
        f"{stream_name(f.previous.stream, header)}"
        f": one missing synchronization, {count(n, 'finding')} ({kinds}; "
        f"{count(rc.occurrences, 'occurrence')})"
    )


def root_cause_fix(rc, header: dict, sources: Optional[SourceCache] = None) -> list[str]:
    """The one fix of a root cause: the wait for several findings, a finding's own fix for one
    (or for a missing record_stream with the reuse races it allowed: its record_stream)."""
    if _own_fix(rc):
        return fix(rc.anchor, header, sources)
    peers = [at_launch(p) for p in _peers(rc)]
    return _explain_once(_wait_fix(at_launch(rc.anchor), header, sources, peers) + _replay_note(rc.anchor), sources)


def _own_fix(rc) -> bool:
    """Whether a root cause's fix is its anchor's own: one finding, or a missing record_stream
    and only reuse races of the memory it freed (its ``record_stream`` fixes them all)."""
    return len(rc.groups) == 1 or (rc.anchor.kind is Kind.MISSING_RECORD_STREAM
                                   and all(g.finding.kind is Kind.REUSE_RACE for g in rc.groups[1:]))


def _peers(rc) -> list:
    """The findings of a root cause besides its anchor: the one wait must fix them too."""
    return [f for g in rc.groups for f in g.findings if f is not rc.anchor]


def fix_site(rc, header: dict, sources: Optional[SourceCache] = None) -> Optional[Frame]:
    """The line :func:`root_cause_fix` tells the user to change (its first code line)."""
    f = at_launch(rc.anchor)
    if _own_fix(rc) and f.kind is not Kind.DATA_RACE:
        return user_site(f.previous.stack)  # record_stream right after the use
    if f.access.seq:
        peers = [at_launch(p) for p in _peers(rc)] if len(rc.groups) > 1 else ()
        return wait_site(f, header, sources, peers).recorded
    return user_site(f.access.stack)


def tensors(rc, sources: Optional[SourceCache] = None) -> list[dict]:
    """The memory a root cause's findings touch: one entry per allocation site and size.

    ``{"name": variable or None, "size": bytes or None, "allocated_at": Frame or None,
    "findings": n}``, in the order the findings come.
    """
    out: dict = {}
    for g in rc.groups:
        counted = set()
        for f in g.findings:  # one per tensor (allocation site) the group's code touches
            b = f.block
            site = user_site(b.stack)
            key = (site, b.size)
            if key not in out:
                out[key] = {"name": assigned_name(site, sources), "size": b.size, "allocated_at": site, "findings": 0}
            if key not in counted:
                counted.add(key)
                out[key]["findings"] += 1
    return list(out.values())


def tensor_label(t: dict) -> str:
    """"out (256 B, allocated at x.py:16)" or "1.0 KiB allocated at x.py:9 (2 findings)"."""
    where = f"allocated at {frame_label(t['allocated_at'])}" if t["allocated_at"] else "allocated before recording"
    size = human_size(t["size"])
    text = f"{t['name']} ({size}, {where})" if t["name"] else f"{size} {where}"
    return text + (f" ({t['findings']} findings)" if t["findings"] > 1 else "")


def compact_line(f: Finding) -> str:
    """A finding in one line under its root cause (whose title already names the streams)."""
    site, earlier = user_site(f.access.stack), user_site(f.previous.stack)
    loc = frame_label(site) if site is not None else f.access.op
    size = human_size(f.block.size)
    if f.kind is Kind.DATA_RACE:
        what = (f"{f.access.type} by {f.access.op} of the {size} tensor {allocation_site(f)}; "
                f"earlier {f.previous.type} by {f.previous.op} at {frame_label(earlier)}")
    elif f.kind is Kind.MISSING_RECORD_STREAM:
        what = f"the {size} tensor {allocation_site(f)} freed; used by {f.previous.op} at {frame_label(earlier)}"
    else:
        what = f"{size} block re-allocated and touched by {f.access.op}; old use by {f.previous.op} at {frame_label(earlier)}"
    return f"{loc}: {f.kind.value}: {what}"


def trace_state(t: TraceSummary) -> Optional[str]:
    """How a report says an analyzed trace ends when it did not end cleanly (None: it did):
    cut (a crashed or killed writer), or stopped early by its END record."""
    if t.truncated:
        return "TRUNCATED: analyzed up to its last complete record"
    if t.end_reason:
        return "ENDED EARLY: analyzed up to where recording stopped"
    return None


def count(n: int, word: str, plural: Optional[str] = None) -> str:
    """"1 kernel", "2 kernels"."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def short_line(f: Finding, header: dict) -> str:
    """One compiler-style line: ``file:line: kind: summary``."""
    site = user_site(f.access.stack)
    loc = frame_label(site) if site is not None else f.access.op
    earlier = user_site(f.previous.stack)
    tail = f"; earlier {f.previous.type} at {frame_label(earlier)}" if earlier is not None else ""
    return f"{loc}: {f.kind.value}: {title(f, header)}{tail}"
