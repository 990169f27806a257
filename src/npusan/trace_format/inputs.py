"""Which files a command line names: files, directories of traces, glob patterns.

A nightly job leaves one trace per rank in dated folders; ``npusan analyze nightly/`` must
find them all. A directory (or a glob pattern) is searched recursively for *traces*:

* regular files that start with the trace magic bytes, plain or compressed (``.zst``/``.gz``
  are recognized by their content, and their first bytes decompressed to check the
  magic), whatever their names;
* files whose names say they are traces (:data:`TRACE_SUFFIXES`: ``*.npusan``,
  ``*.npusan.gz``, ``*.npusan.zst``, ``*.npusan.zstd``), whatever they hold: a rank that
  crashed before writing anything leaves an empty or cut file, and a nightly job must
  hear about it (the reader then says why it is unreadable);
* files with a compressed-trace ending (``.zst``, ``.zstd``, ``.gz``: what ``npusan record
  -o`` compresses) whose content ends, or breaks, before the magic could be checked (an
  empty file, a compressed stream cut in its first frame). A complete compressed file that
  holds something else is not a trace.

A file named explicitly is always taken, so that a file that is not a trace is reported
as such instead of silently skipped. ``-`` names standard input (read as a pipe, as it comes).
"""

from __future__ import annotations

import glob
import os
import stat
from dataclasses import dataclass, field
from typing import Iterable

from . import records as R
from .compression import WRITE_SUFFIXES, DecompressingReader, sniff
from .input_files import StandardInput
from .reader import _read_exactly

#: What ``-`` names: standard input, read as any other file (a pipe: as it comes).
STDIN = StandardInput()

_GLOB_CHARS = frozenset("*?[")

#: Name endings that say a file is a trace, whatever its content (see the module docstring).
TRACE_SUFFIXES = (".npusan", ".npusan.gz", ".npusan.zst", ".npusan.zstd")


@dataclass
class Inputs:
    """The traces a command line names, in order, and the arguments that named none."""

    #: ``str`` paths, each once, in command-line order; ``-`` as :data:`STDIN`.
    paths: list = field(default_factory=list)
    #: ``(argument, reason)`` for arguments that name no trace (missing file, empty folder).
    problems: list = field(default_factory=list)


def find_traces(arguments: Iterable[str]) -> Inputs:
    """Expand files, directories and glob patterns into trace paths (see the module docstring).

    Directory contents and glob matches are taken sorted by path, so runs are reproducible. A path named
    twice (directly, or by overlapping patterns) is taken once.
    """
    out = Inputs()
    seen: set = set()

    def take(path: "str | StandardInput") -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            out.paths.append(path)

    for arg in arguments:
        arg = os.fspath(arg)
        if not arg:  # ('' names no file; opening it fails with a message that names nothing)
            out.problems.append(("''", "an empty path names no trace"))
        elif arg == "-":
            take(STDIN)
        elif os.path.isdir(arg):
            known = len(out.problems)
            found = _walk(arg, out.problems)
            if not found and len(out.problems) == known:
                out.problems.append((arg, "no npusan traces in this directory (searched recursively)"))
            for p in found:
                take(p)
        elif os.path.lexists(arg) or not (_GLOB_CHARS & set(arg)):
            take(arg)  # a file (a missing one is reported when it is read)
        else:
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                out.problems.append((arg, "no file matches this pattern"))
            for m in matches:
                if os.path.isdir(m):
                    for p in _walk(m, out.problems):
                        take(p)
                elif _is_trace_candidate(m):
                    take(m)
    return out


def _walk(top: str, problems: list) -> list:
    """The traces under ``top``, sorted by path (as glob matches are). A folder that cannot
    be listed is added to ``problems``; a file that cannot be read is taken (its content
    unknown, it may be a rank's trace), so that the reader says why it is unreadable."""
    found = []

    def unlistable(e: OSError) -> None:
        problems.append((e.filename or top, f"cannot list this folder ({e.strerror or e})"))

    for root, _dirs, files in os.walk(top, onerror=unlistable):
        for name in files:
            path = os.path.join(root, name)
            if _is_trace_candidate(path):
                found.append(path)
    return sorted(found)


def is_trace_file(path: str) -> bool:
    """Whether ``path`` is a regular file whose (decompressed) content starts with the magic.

    Never blocks: FIFOs, devices and sockets are not traces here.
    """
    return _content(path) == "trace"


def _is_trace_candidate(path: str) -> bool:
    """Whether a directory search or a pattern takes ``path`` (see the module docstring)."""
    content = _content(path)
    if content in ("trace", "unreadable", None):
        return content in ("trace", "unreadable")
    name = os.path.basename(path).lower()
    if name.endswith(TRACE_SUFFIXES):
        return True
    return content == "unknown" and os.path.splitext(name)[1] in WRITE_SUFFIXES


def _content(path: str):
    """``"trace"`` (starts with the magic), ``"other"`` (does not), ``"unknown"`` (the data,
    plain or decompressed, ends or breaks before the magic's length), ``"unreadable"`` (a
    regular file that cannot be opened or read), or None (not a regular file)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except (OSError, ValueError):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(len(R.MAGIC))
            kind = sniff(head)
            if kind is not None:
                f.seek(0)
                reader = DecompressingReader(f, kind)
                head = _read_exactly(reader, len(R.MAGIC))
    except OSError:
        return "unreadable"
    except ValueError:
        return None
    if head == R.MAGIC:
        return "trace"
    if len(head) < len(R.MAGIC) and R.MAGIC.startswith(head):
        return "unknown"
    return "other"
