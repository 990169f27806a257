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
* the **normalized text of its source line**, not its number: the line's Python tokens
  without comments, one space between tokens (so ``x.sum()  # racy`` and ``x.sum( )`` read
  as ``x . sum ( )``; a string literal keeps its text). A line that does not tokenize on its
  own (an unterminated string, a stray character) falls back to its text with whitespace
  runs collapsed; a line that opens a bracket is tokenized up to its end. Only when no
  text is known (an old trace, a file that cannot be read) does the line number stand in.

So a formatter run or a comment changes no fingerprint, while editing the racing line's
code changes the text, and so the fingerprint: it is a new bug (or a fixed one) as far as
history is concerned.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from typing import Optional

#: Library locations: the part after the match is the same on every machine.
_LIBRARY = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")


#: Tokens that are layout or commentary, not code.
_SKIP = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                   tokenize.ENDMARKER})
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+: f-strings in parts
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


def normalize_text(text: str) -> str:
    """A source line as fingerprints compare it (see the module docstring): its code tokens
    joined by one space, comments dropped; whitespace runs collapsed when it does not tokenize."""
    tokens = _code_tokens(text.strip())
    if tokens is None:
        return " ".join(text.split())
    return " ".join(tokens)


def _code_tokens(line: str):
    """The code tokens of one line, or None when the line cannot be tokenized on its own.

    An f-string is one token whatever the Python version (3.12 splits it into parts), so a
    fingerprint does not depend on the analyzing interpreter. A line cut inside a bracket
    (``f(a,  # first``) yields its tokens when they cover the whole line.
    """
    if not line or "\n" in line:
        return None if line else []
    out: list = []
    end = 0  # column just past the last token or comment seen
    depth = 0  # f-string nesting (3.12+)
    fstart = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if tok.type == tokenize.ERRORTOKEN:
                return None
            if tok.start[0] != 1:  # the single line only
                break
            if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            end = max(end, tok.end[1])
            if tok.type == _FSTRING_START:
                if depth == 0:
                    fstart = tok.start[1]
                depth += 1
                continue
            if tok.type == _FSTRING_END:
                depth -= 1
                if depth == 0:
                    out.append(line[fstart:tok.end[1]])
                continue
            if depth or tok.type in _SKIP:
                continue
            out.append(tok.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Raised at the end of the line: a bracket left open (fine when every character
        # was a token), or an unterminated string (not fine: part of the line is unread).
        if depth or end < len(line):
            return None
    return out


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
        h.update(_stack_part(acc.stack))
    return h.hexdigest()[:32]


#: A stack whose frames' parts come to more than this is hashed once, and enters each
#: fingerprint as its digest. No program's stack comes near it (a thousand frames of
#: recursion take about 110 KB); a forged one (2^15 frames of 8 KiB of names, named by
#: thousands of findings) would otherwise be hashed again for every finding.
HUGE_STACK_BYTES = 256 << 10
#: Stacks of more frames than this have their part kept (by identity: findings of one
#: trace share their stacks' tuples), the last _KEEP_STACKS of them, _KEEP_BYTES at most.
_KEEP_FRAMES = 64
_KEEP_STACKS = 4096
_KEEP_BYTES = 64 << 20
_kept: dict = {}  # id(stack) -> (stack, part), oldest first
_kept_bytes = [0]


def _stack_part(stack) -> bytes:
    """What ``stack`` adds to a fingerprint: each frame's identity after a NUL byte, or
    for a huge stack (:data:`HUGE_STACK_BYTES`) two NUL bytes and the SHA-256 of that."""
    long = len(stack) > _KEEP_FRAMES
    if long:
        got = _kept.get(id(stack))
        if got is not None and got[0] is stack:
            return got[1]
    # A stack may repeat one frame thousands of times (recursion, or a forged trace whose
    # stack record repeats a frame of 4 KiB names): a frame is worked out once here.
    known: dict = {}
    parts: list = []
    size = 0
    huge = None  # the digest of a huge stack's parts, fed as they come past the limit
    for fr in stack:
        key = (fr, getattr(fr, "text", None), getattr(fr, "root", None))
        part = known.get(key)
        if part is None:
            part = b"\0" + frame_identity(fr).encode("utf-8", "replace")
            if len(known) < 4096:
                known[key] = part
        if huge is not None:
            huge.update(part)
            continue
        parts.append(part)
        size += len(part)
        if size > HUGE_STACK_BYTES:
            huge = hashlib.sha256(b"".join(parts))
            parts = []
    out = b"\0\0" + huge.digest() if huge is not None else b"".join(parts)
    if long:
        while _kept and (len(_kept) >= _KEEP_STACKS or _kept_bytes[0] + len(out) > _KEEP_BYTES):
            _kept_bytes[0] -= len(_kept.pop(next(iter(_kept)))[1])
        if len(out) <= _KEEP_BYTES:
            old = _kept.pop(id(stack), None)  # (a stack since collected, its id reused)
            if old is not None:
                _kept_bytes[0] -= len(old[1])
            _kept[id(stack)] = (stack, out)
            _kept_bytes[0] += len(out)
    return out
