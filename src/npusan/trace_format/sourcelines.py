"""Source lines for self-contained traces (format 1.1), and finding a file's source root.

A trace attached to a bug report is analyzed on another machine, where the recorded paths
do not exist. The writer therefore stores, once per interned frame, the text of that
frame's source line and the *source root* of its file: the nearest enclosing folder that
holds ``.git`` or ``pyproject.toml``. Reports quote the recorded text, and fingerprints use
the path relative to the root, so both read the same on every machine.

This runs in the recorded process, on the files of its own code, only when a frame is
first interned (a few hundred times per run): one ``linecache`` read per file and a few
``stat`` calls per directory, both cached.
"""

from __future__ import annotations

import linecache
import os
from typing import Optional

#: Files whose presence makes a folder a source root.
ROOT_MARKERS = (".git", "pyproject.toml")
#: Recorded lines are cut to this many characters (the reader enforces the same bound).
MAX_TEXT = 1000


def find_source_root(path: str, cache: Optional[dict] = None) -> Optional[str]:
    """The nearest folder enclosing ``path`` (a file or folder) with ``.git`` or ``pyproject.toml``."""
    if not path or path.startswith("<"):
        return None
    start = os.path.abspath(path)
    d = start if os.path.isdir(start) else os.path.dirname(start)
    seen = []
    root = None
    while True:
        if cache is not None and d in cache:
            root = cache[d]
            break
        seen.append(d)
        if any(os.path.exists(os.path.join(d, m)) for m in ROOT_MARKERS):
            root = d
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if cache is not None:
        for s in seen:
            cache[s] = root
    return root


class SourceLines:
    """``lookup(filename, lineno) -> (text, root)`` for the frames a writer interns."""

    def __init__(self) -> None:
        self._roots: dict = {}  # folder -> its source root (or None)

    def lookup(self, filename: str, lineno: int) -> tuple[Optional[str], Optional[str]]:
        if not filename or filename.startswith("<"):
            return None, None
        try:
            text = linecache.getline(filename, lineno).strip() or None
            root = find_source_root(filename, self._roots) if os.path.isabs(filename) else None
        except (OSError, ValueError, UnicodeError, MemoryError):
            return None, None
        if text is not None and len(text) > MAX_TEXT:
            text = text[: MAX_TEXT - 1] + "…"
        return text, root
