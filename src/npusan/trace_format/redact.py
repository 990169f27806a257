"""Redaction: a copy of a trace that can be attached to a public bug report.

What a trace says about the machine that recorded it, beyond the bug: the host name, the
command line, the pid, the start time, the header's metadata, thread names, and the
directories files live in. :func:`redact` copies a trace record by record and drops or
rewrites exactly those, keeping everything the analysis uses (streams, events, blocks,
kernels, ops, functions, line numbers) byte for byte, so the redacted trace yields the
same findings. File names are rewritten so that the part a finding's fingerprint uses
stays as it was:

* under the source root: ``/source-root/`` + the path inside the root;
* inside a Python installation (``site-packages``, ``dist-packages``, ``lib/pythonX.Y``):
  ``/redacted/`` + the path from that folder on;
* anywhere else: ``/redacted/`` + the file's base name.

The source root is ``source_root`` if given, else the header's ``source_root`` key (a
third-party writer may record one), else the roots recorded in frames (format 1.1), else
a project folder or common prefix of the recorded files (:func:`_choose_root`).

Names are normalized first, so ``root/pkg/../../x`` is outside the root. Relative names
and names such as ``<string>`` are kept, except relative names that climb out of their
folder with ``..`` (reduced to their base name). The text of notes (NOTE records) is
dropped, their level kept: notes are free text and can hold anything. Stream labels
(STREAM_LABEL, format 1.1) are free text as well: npusan's own (``comm stream of process
group N``, role ``comm``) are kept, so that reports and suppressions name those streams as
before; any other label becomes ``<role> stream`` (a role that is not a plain word becomes
``other``).

Nothing else rides along: fields past a known record's layout (which a later format
version may add, so their content is unknown) are dropped; the END statistics keep the
event count, the counts of this format's record names, ``signal`` (a signal's name) and
``stopped`` (its reason replaced by a fixed phrase), so a trace that ended early still
reads so, and ``raised`` only when it names an exception class of Python, torch or a
well-known library (:func:`is_exception_name`; a program's own class names are redacted); a STR that names no file, function or op (one nothing
refers to, or one a frame referred to before it was defined) loses its text; a note's level is kept when it is ``info``, ``warning`` or ``error``; the
header's ``writer``, ``backend`` and ``torch`` strings are kept only in the shapes npusan
writes them.

The source line text recorded in frames (format 1.1) is dropped for the frames of files
outside the source root (those renamed to ``/redacted/...``, libraries included): it is
code, or a comment, from a file that is not the project's, and can hold anything (a token
in a comment, a path). Fingerprints use that text (``analyzer/fingerprints.py``): the
frame then counts by its line number, so a finding with such a frame in its stacks gets
another fingerprint; findings whose frames are the project's own (or carry no text) keep
theirs. ``keep_outside_source`` keeps that text. With ``drop_source`` the text of every
frame is dropped (every fingerprint with recorded text then changes).

The trace is read twice (once to learn which strings are file names, once to copy), so
the input must be a regular file.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import BinaryIO, Optional

import msgpack

from . import records as R
from .known_exceptions import is_known_exception
from .reader import TraceReader
from .writer import FileSink

#: Header keys a redacted trace keeps: what the analysis and the report's wording use.
KEPT_HEADER_KEYS = ("format", "backend", "writer", "torch", "device_count", "default_streams", "rank")
#: What a file under the source root is renamed to (followed by its path inside the root).
ROOT_PLACEHOLDER = "/source-root"
OTHER_PLACEHOLDER = "/redacted"
_LIBRARY = re.compile(r"^.*/((?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/.*)$")
_ABSOLUTE = re.compile(r"^(/|[A-Za-z]:[\\/])")
#: What a note's text becomes: notes are free text (error messages, paths, anything).
NOTE_PLACEHOLDER = "(note text redacted)"
_ROOT_MARKERS = (".git", "pyproject.toml")
#: Levels a NOTE may have; any other becomes "warning".
NOTE_LEVELS = ("info", "warning", "error")
#: What the END statistics' ``stopped`` reason (free text) becomes.
STOP_PLACEHOLDER = "(reason redacted)"
_SIGNAL = re.compile(r"SIG[A-Z0-9]{1,12}")
#: What the END statistics' ``raised`` becomes when it is not an exception type's name.
RAISED_PLACEHOLDER = "an exception"
#: What a string no field the analysis reads names becomes (see :func:`_string_uses`).
STRING_PLACEHOLDER = "(string redacted)"
#: Header strings kept only in the shape npusan writes them: (key, shape, replacement).
_HEADER_TEXT = (
    ("writer", re.compile(r"npusan \d{1,4}\.\d{1,4}\.\d{1,4}[a-z0-9.+-]{0,24}"), "another writer"),
    ("backend", re.compile(r"[a-z][a-z0-9_-]{0,15}"), "other"),
    ("torch", re.compile(r"\d{1,4}\.\d{1,4}(\.\d{1,4})?[a-z0-9.+-]{0,32}"), "unknown"),
)
#: Stream labels npusan's recorder writes (no free text in them): kept as they are.
_OWN_LABEL = re.compile(r"comm stream of process group \d{1,9}")
_ROLE = re.compile(r"[a-z][a-z0-9_-]{0,31}")


@dataclass
class RedactionSummary:
    """What :func:`redact` changed, for the command's closing message."""

    source_root: Optional[str]
    paths: int = 0  # file-name strings rewritten
    header_keys: list = field(default_factory=list)  # header keys dropped
    threads: int = 0  # thread names replaced
    source_lines: int = 0  # recorded source lines dropped (drop_source)
    outside_source_lines: int = 0  # recorded source lines of files outside the root dropped
    unknown_records: int = 0  # records of unknown types dropped
    extra_fields: int = 0  # fields past a known record's layout dropped
    header_values: list = field(default_factory=list)  # header strings replaced (writer, backend, torch)
    strings: int = 0  # strings that no field the analysis reads names, replaced
    notes: int = 0  # notes whose text was dropped
    stream_labels: int = 0  # stream labels replaced
    truncated: bool = False


def redact(source: str, out: BinaryIO, *, source_root: Optional[str] = None,
           drop_source: bool = False, keep_outside_source: bool = False) -> RedactionSummary:
    """Write the redacted copy of the trace at ``source`` to ``out``; see the module docstring."""
    files, roots, header_root, names = _file_names(source)
    if source_root:
        root = _normalize_root(source_root)
    elif header_root is not None:
        root = header_root
    else:
        root = _choose_root(files, roots)
    summary = RedactionSummary(source_root=root)
    renamed = {sid: redact_path(name, root) for sid, name in files.items() | roots.items()}
    summary.paths = sum(1 for sid, new in renamed.items() if new != (files.get(sid) or roots.get(sid)))
    # Files outside the source root: their frames lose their recorded source text.
    outside = frozenset() if keep_outside_source else frozenset(
        sid for sid in files if renamed[sid].startswith(OTHER_PLACEHOLDER + "/"))

    with TraceReader(source) as reader:
        packer = msgpack.Packer(use_bin_type=True)
        sink = FileSink(out)
        sink.write_bytes(R.MAGIC + packer.pack(_redact_header(reader.header, summary)))
        unpacker = reader.direct_begin(0)
        kernels = 0
        for rec in unpacker if unpacker is not None else ():
            if rec.__class__ is list and len(rec) >= 4 and rec[0] == R.KERNEL:
                kernels += 1
                sink(rec)
                continue
            kept = reader.direct_absorb(rec, kernels)
            if kept is False and not reader.ended_cleanly:
                # The zero bytes a killed mapped writer leaves where the next record would
                # start: the reader took them as the cut (``truncated``, warned); nothing to copy.
                break
            t = rec[0] if rec.__class__ is list and rec else None
            if kept is None and t not in R.DEFINITIONS:  # an unknown record type: its content is unknown
                summary.unknown_records += 1
                continue
            sink(_redact_record(rec, renamed, names, drop_source, outside, summary))
            if kept is False:  # END
                break
        reader.direct_sync(kernels)
        if not reader.ended_cleanly:
            reader.direct_exhausted()
            if reader.end_record is not None:  # an END record whose last bytes are zeros
                sink(_redact_record(reader.end_record, renamed, names, drop_source, outside, summary))
        summary.truncated = reader.truncated
        sink.flush()
    return summary


def redact_path(name: str, root: Optional[str]) -> str:
    """A recorded file name without the directories that say where it was (see the module).

    Names are normalized first (``a/../b`` is ``b``): a name that climbs out of the source
    root with ``..`` is outside it, and a relative name that climbs above its folder is
    reduced to its base name like any other name outside the root.
    """
    if not _ABSOLUTE.match(name):
        if "/" not in name and "\\" not in name:
            return name
        rel = posixpath.normpath(name.replace("\\", "/"))
        if rel == ".." or rel.startswith("../"):
            return f"{OTHER_PLACEHOLDER}/{rel.rsplit('/', 1)[-1]}"
        return name
    unix = _normpath(name)
    if root is not None:
        r = _normpath(root).rstrip("/")
        if unix == r or unix.startswith(r + "/") or (r == "" and unix.startswith("/")):
            return ROOT_PLACEHOLDER + unix[len(r):]
    m = _LIBRARY.match(unix)
    if m:
        return f"{OTHER_PLACEHOLDER}/{m.group(1)}"
    return f"{OTHER_PLACEHOLDER}/{unix.rsplit('/', 1)[-1]}"


def _normpath(name: str) -> str:
    """``name`` with forward slashes, ``.`` and ``..`` resolved (never above ``/`` or ``C:/``)."""
    unix = name.replace("\\", "/")
    m = re.match(r"^([A-Za-z]:)(/.*)$", unix)
    if m:
        return m.group(1) + posixpath.normpath(m.group(2))
    out = posixpath.normpath(unix)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def _redact_header(header: dict, summary: RedactionSummary) -> dict:
    out = {k: header[k] for k in KEPT_HEADER_KEYS if k in header}
    summary.header_keys = sorted(k for k in header if k not in out)
    for key, pattern, otherwise in _HEADER_TEXT:
        value = out.get(key)
        if isinstance(value, str) and not pattern.fullmatch(value):
            out[key] = otherwise
            summary.header_values.append(key)
    out["redacted"] = True
    return out


def _redact_end(stats: object) -> dict:
    """The END statistics a report uses, as numbers and fixed words only.

    ``signal`` and ``stopped`` are kept (a trace that ended early must still read so), the
    signal's name only if it is one, the reason of a stop replaced by a fixed phrase;
    ``counts`` keeps the record names of this format with integer counts.
    """
    stats = stats if isinstance(stats, dict) else {}
    out: dict = {}
    if isinstance(stats.get("events"), int):
        out["events"] = stats["events"]
    counts = stats.get("counts")
    if isinstance(counts, dict):
        names = set(R.RECORD_NAMES.values())
        out["counts"] = {k: v for k, v in counts.items() if k in names and isinstance(v, int)}
    sig = stats.get("signal")
    if isinstance(sig, str) and sig:
        out["signal"] = sig if _SIGNAL.fullmatch(sig) else "a signal"
    stopped = stats.get("stopped")
    if isinstance(stopped, str) and stopped:
        out["stopped"] = STOP_PLACEHOLDER
    raised = stats.get("raised")
    if isinstance(raised, str) and raised:
        out["raised"] = raised if is_exception_name(raised) else RAISED_PLACEHOLDER
    return out


def is_exception_name(text: str) -> bool:
    """Whether ``text`` is kept as the END record's ``raised``: the name of an exception
    class of Python, torch or a well-known library (:mod:`.known_exceptions`). A name only
    shaped like one (``TokenAbcError``) may be the program's own class: it is redacted."""
    return is_known_exception(text)


def _redact_record(rec: list, renamed: dict, names: frozenset, drop_source: bool, outside: frozenset,
                   summary: RedactionSummary) -> list:
    t = rec[0]
    length = R.LAYOUT_LENGTH.get(t)
    if length is not None and len(rec) > length:  # fields a later version may add: content unknown
        summary.extra_fields += len(rec) - length
        rec = rec[:length]
    if t == R.STR:
        if rec[1] in renamed:
            return [R.STR, rec[1], renamed[rec[1]], *rec[3:]]
        if rec[1] not in names:  # named by nothing the analysis reads: its text is unknown
            summary.strings += 1
            return [R.STR, rec[1], STRING_PLACEHOLDER, *rec[3:]]
    if t == R.THREAD:
        summary.threads += 1
        return [R.THREAD, rec[1], f"thread {rec[1]}", *rec[3:]]
    if t == R.FRAME and len(rec) > 5 and rec[5] is not None:
        if drop_source:
            summary.source_lines += 1
            return [*rec[:5], None, *rec[6:]]
        if rec[2] in outside:
            summary.outside_source_lines += 1
            return [*rec[:5], None, *rec[6:]]
    if t == R.STREAM_LABEL:
        role, label = redact_stream_label(rec[2], rec[3])
        if (role, label) != (rec[2], rec[3]):
            summary.stream_labels += 1
        return [R.STREAM_LABEL, rec[1], role, label, *rec[4:]]
    if t == R.NOTE:  # a note's text can say anything: only its level is kept, if it is one
        summary.notes += 1
        level = rec[1] if rec[1] in NOTE_LEVELS else "warning"
        return [R.NOTE, level, NOTE_PLACEHOLDER]
    if t == R.END:
        return [R.END, _redact_end(rec[1])]
    return rec


def redact_stream_label(role: str, label: str) -> tuple[str, str]:
    """A stream label's ``(role, label)`` without free text (see the module docstring)."""
    if not (isinstance(role, str) and _ROLE.fullmatch(role)):
        role = "other"
    if isinstance(label, str) and role == "comm" and _OWN_LABEL.fullmatch(label):
        return role, label
    return role, f"{role} stream"


def _file_names(source: str) -> tuple[dict, dict, Optional[str], frozenset]:
    """``({sid: file name}, {sid: source root}, header root, names)`` (the first pass).

    ``names``: the sids of the strings kept as they are, the function names of frames and
    the op names of kernels and host accesses (findings are identified by them). Every
    other string (one that a field names before its STR comes, or that nothing names) is
    replaced: its text could be anything.
    """
    with TraceReader(source) as reader:
        header_root = reader.header.get("source_root") if isinstance(reader.header, dict) else None
        if not (isinstance(header_root, str) and _ABSOLUTE.match(header_root)):
            header_root = None
        else:
            header_root = _normpath(header_root).rstrip("/") or "/"
        ops = set()
        for rec in reader.records():
            if rec[0] in _OP_RECORDS and len(rec) > 2 and type(rec[2]) is int:
                ops.add(rec[2])
        sym = reader.symbols
        files = {f: sym.strings[f] for f, _, _ in sym.frames.values()}
        names = frozenset(ops | {fn for _, _, fn in sym.frames.values()})
        roots = {}
        for _, root in getattr(sym, "frame_sources", {}).values():  # format 1.1 traces
            if root is not None:
                roots[root] = sym.strings[root]
    return files, roots, header_root, names


_OP_RECORDS = (R.KERNEL, R.HOST_ACCESS)


def _normalize_root(root: str) -> str:
    return _normpath(os.path.abspath(os.path.expanduser(root))).rstrip("/") or "/"


def _choose_root(files: dict, roots: dict) -> Optional[str]:
    """The source root: recorded ones first, then a project folder, then a common prefix.

    A project folder is the nearest ancestor with ``.git`` or ``pyproject.toml`` of a
    recorded file that exists here; the common prefix is that of the absolute file names
    outside any Python installation (when there is more than one folder).
    """
    if roots:
        return Counter(roots.values()).most_common(1)[0][0].rstrip("/") or "/"
    own = [_normpath(n) for n in files.values() if _ABSOLUTE.match(n) and not _LIBRARY.match(_normpath(n))]
    found = Counter(r for r in map(_project_of, own) if r is not None)
    if found:
        return found.most_common(1)[0][0]
    dirs = {posixpath.dirname(n) for n in own}
    if len(dirs) > 1:
        try:  # POSIX and Windows names together have no common folder
            common = posixpath.commonpath(sorted(dirs))
        except ValueError:
            return None
        if any(not (d == common or d.startswith(common.rstrip("/") + "/")) for d in dirs):
            return None
        return common if common not in ("/", "", ".") and not re.fullmatch(r"[A-Za-z]:/?", common) else None
    return dirs.pop() if dirs else None


def _project_of(name: str) -> Optional[str]:
    d = os.path.dirname(name)
    while True:
        if any(os.path.exists(os.path.join(d, m)) for m in _ROOT_MARKERS):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


__all__ = ["RedactionSummary", "redact", "redact_path", "redact_stream_label", "KEPT_HEADER_KEYS"]
