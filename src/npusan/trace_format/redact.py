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

Relative names and names such as ``<string>`` are kept. With ``drop_source`` the source
line text recorded in frames (format 1.1) is dropped too (fingerprints then fall back to
line numbers, so they change).

The trace is read twice (once to learn which strings are file names, once to copy), so
the input must be a regular file.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import BinaryIO, Optional

import msgpack

from . import records as R
from .reader import TraceReader
from .writer import FileSink

#: Header keys a redacted trace keeps: what the analysis and the report's wording use.
KEPT_HEADER_KEYS = ("format", "backend", "writer", "torch", "device_count", "default_streams", "rank")
#: What a file under the source root is renamed to (followed by its path inside the root).
ROOT_PLACEHOLDER = "/source-root"
OTHER_PLACEHOLDER = "/redacted"
_LIBRARY = re.compile(r"^.*/((?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/.*)$")
_ABSOLUTE = re.compile(r"^(/|[A-Za-z]:[\\/])")
_PATH_IN_TEXT = re.compile(r"(?<![\w.])(/[^\s'\"]+|[A-Za-z]:\\[^\s'\"]+)")
_ROOT_MARKERS = (".git", "pyproject.toml")


@dataclass
class RedactionSummary:
    """What :func:`redact` changed, for the command's closing message."""

    source_root: Optional[str]
    paths: int = 0  # file-name strings rewritten
    header_keys: list = field(default_factory=list)  # header keys dropped
    threads: int = 0  # thread names replaced
    source_lines: int = 0  # recorded source lines dropped (drop_source)
    unknown_records: int = 0  # records of unknown types dropped
    truncated: bool = False


def redact(source: str, out: BinaryIO, *, source_root: Optional[str] = None,
           drop_source: bool = False) -> RedactionSummary:
    """Write the redacted copy of the trace at ``source`` to ``out``; see the module docstring."""
    files, roots = _file_names(source)
    root = _normalize_root(source_root) if source_root else _choose_root(files, roots)
    summary = RedactionSummary(source_root=root)
    renamed = {sid: redact_path(name, root) for sid, name in files.items() | roots.items()}
    summary.paths = sum(1 for sid, new in renamed.items() if new != (files.get(sid) or roots.get(sid)))

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
            t = rec[0] if rec.__class__ is list and rec else None
            if kept is None and t not in R.DEFINITIONS:  # an unknown record type: its content is unknown
                summary.unknown_records += 1
                continue
            sink(_redact_record(rec, renamed, drop_source, summary))
            if kept is False:  # END
                break
        reader.direct_sync(kernels)
        if not reader.ended_cleanly:
            reader.direct_exhausted()
        summary.truncated = reader.truncated
        sink.flush()
    return summary


def redact_path(name: str, root: Optional[str]) -> str:
    """A recorded file name without the directories that say where it was (see the module)."""
    if not _ABSOLUTE.match(name):
        return name
    unix = name.replace("\\", "/")
    if root is not None and (unix == root or unix.startswith(root.rstrip("/") + "/")):
        return ROOT_PLACEHOLDER + unix[len(root.rstrip("/")):]
    m = _LIBRARY.match(unix)
    if m:
        return f"{OTHER_PLACEHOLDER}/{m.group(1)}"
    return f"{OTHER_PLACEHOLDER}/{unix.rsplit('/', 1)[-1]}"


def _redact_header(header: dict, summary: RedactionSummary) -> dict:
    out = {k: header[k] for k in KEPT_HEADER_KEYS if k in header}
    summary.header_keys = sorted(k for k in header if k not in out)
    out["redacted"] = True
    return out


def _redact_record(rec: list, renamed: dict, drop_source: bool, summary: RedactionSummary) -> list:
    t = rec[0]
    if t == R.STR and rec[1] in renamed:
        return [R.STR, rec[1], renamed[rec[1]], *rec[3:]]
    if t == R.THREAD:
        summary.threads += 1
        return [R.THREAD, rec[1], f"thread {rec[1]}", *rec[3:]]
    if t == R.FRAME and drop_source and len(rec) > 5 and rec[5] is not None:
        summary.source_lines += 1
        return [*rec[:5], None, *rec[6:]]
    if t == R.NOTE:
        root = summary.source_root
        return [R.NOTE, rec[1], _PATH_IN_TEXT.sub(lambda m: redact_path(m.group(1), root), str(rec[2])), *rec[3:]]
    if t == R.END:
        stats = rec[1] if isinstance(rec[1], dict) else {}
        return [R.END, {k: stats[k] for k in ("events", "counts") if k in stats}]
    return rec


def _file_names(source: str) -> tuple[dict, dict]:
    """``({sid: file name}, {sid: source root})`` of every frame (first pass)."""
    with TraceReader(source) as reader:
        for _ in reader.records():
            pass
        sym = reader.symbols
        files = {f: sym.strings[f] for f, _, _ in sym.frames.values()}
        roots = {}
        for _, root in getattr(sym, "frame_sources", {}).values():  # format 1.1 traces
            if root is not None:
                roots[root] = sym.strings[root]
    return files, roots


def _normalize_root(root: str) -> str:
    return os.path.abspath(os.path.expanduser(root)).replace("\\", "/").rstrip("/") or "/"


def _choose_root(files: dict, roots: dict) -> Optional[str]:
    """The source root: recorded ones first, then a project folder, then a common prefix.

    A project folder is the nearest ancestor with ``.git`` or ``pyproject.toml`` of a
    recorded file that exists here; the common prefix is that of the absolute file names
    outside any Python installation (when there is more than one folder).
    """
    if roots:
        return Counter(roots.values()).most_common(1)[0][0].rstrip("/") or "/"
    own = [n.replace("\\", "/") for n in files.values() if _ABSOLUTE.match(n) and not _LIBRARY.match(n)]
    found = Counter(r for r in map(_project_of, own) if r is not None)
    if found:
        return found.most_common(1)[0][0]
    dirs = {os.path.dirname(n) for n in own}
    if len(dirs) > 1:
        common = os.path.commonpath(sorted(dirs))
        return common if common not in ("/", "") else None
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


__all__ = ["RedactionSummary", "redact", "redact_path", "KEPT_HEADER_KEYS"]
