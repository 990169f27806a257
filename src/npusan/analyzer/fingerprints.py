"""Fingerprints that last: a finding's identity from what a person would call "the same bug".

A nightly job compares tonight's findings with last night's by fingerprint. Whatever
changes between two nights without touching the bug must not change it: line numbers
(an edit elsewhere in the file), the checkout location and the machine, the rank, the pid,
pointers and stream handles. So a frame is identified by

* its file's path **relative to its source root** (the nearest enclosing folder with
  ``.git`` or ``pyproject.toml``, as the recorder found it, or a root the analysis was
  given); library files by their path inside ``site-packages`` or the Python library;
  anything else by its base name;
* its function;
* the **normalized text of its source line** (whitespace runs collapsed), not its number.
  Only when no text is known (an old trace, a file that cannot be read) does the line
  number stand in.

Editing the racing line itself changes the text, and so the fingerprint: it is a new bug
(or a fixed one) as far as history is concerned.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

#: Library locations: the part after the match is the same on every machine.
_LIBRARY = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")


def normalize_text(text: str) -> str:
    """A source line as fingerprints compare it: whitespace runs collapsed, ends stripped."""
    return " ".join(text.split())


def stable_path(filename: str, root: Optional[str]) -> str:
    """``filename`` as it reads on any machine (see the module docstring)."""
    name = filename.replace("\\", "/")
    if name.startswith("<"):  # <frozen runpy>, <string>
        return name
    m = _LIBRARY.match(name)  # first: a virtualenv inside the project is still a library
    if m:
        return name[m.end():]
    if root:
        base = root.replace("\\", "/").rstrip("/") + "/"
        if name.startswith(base):
            return name[len(base):]
    return name.rsplit("/", 1)[-1]


def frame_identity(frame) -> str:
    """One frame's part of a fingerprint: stable path, function, normalized source text."""
    text = getattr(frame, "text", None)
    where = "=" + normalize_text(text) if text else f"#{frame.lineno}"
    return f"{stable_path(frame.filename, getattr(frame, 'root', None))}:{frame.function}:{where}"


def fingerprint_of(kind: str, sides) -> str:
    """The fingerprint of a finding of ``kind`` from its (later, earlier) accesses."""
    h = hashlib.sha256()
    h.update(kind.encode())
    for acc in sides:
        h.update(b"\0" + acc.op.encode() + b"\0" + acc.type.encode())
        for fr in acc.stack:
            h.update(b"\0" + frame_identity(fr).encode("utf-8", "replace"))
    return h.hexdigest()[:32]
