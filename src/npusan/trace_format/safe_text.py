"""Text from a trace made safe to show: one sanitizer for every output of every command.

A trace is untrusted input (it arrives attached to a bug report, and CI bots analyze and
post what they find). Any string in it (an op name, a file name, the host name, argv, the
header's metadata, a thread name, a note) could carry terminal escape sequences (an OSC 52
clipboard write, a title change, line erasure), bidirectional-override characters that
make a line read differently from what it holds, or newlines that forge extra lines in a
log. :func:`clean` replaces every such character with U+FFFD and caps the length; readers
apply it when strings enter the symbol table and the header, and the renderers apply it
again on the way out, so a string that reaches output by another road is caught too.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Replaced characters: C0 controls (tab and newline included: every field is one line),
#: DEL and C1 controls (0x9b is a one-byte CSI on some terminals), the bidirectional
#: marks, embeddings, overrides and isolates, line/paragraph separators, the byte-order
#: mark, lone surrogates and the two non-characters XML cannot carry.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ufeff\ud800-\udfff\ufffe\uffff]"
)
REPLACEMENT = "\ufffd"
#: Default cap on one shown string, in characters.
MAX_TEXT = 4096


def clean(text: Any, limit: int = MAX_TEXT) -> str:
    """``text`` (a str, bytes, or anything else via ``str``) as one safe line of at most ``limit`` characters.

    A longer string keeps its first ``limit`` characters and says how many were cut.
    """
    if not isinstance(text, str):
        text = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else str(text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    return UNSAFE.sub(REPLACEMENT, text)


def clean_lines(text: str, limit: int = 1 << 20) -> str:
    """A multi-line text (a rendered report) with every line cleaned; newlines kept."""
    if len(text) <= limit and not _UNSAFE_BUT_NEWLINE.search(text):
        return text  # (what the line by line cleaning gives: no line to cut, nothing to replace)
    return "\n".join(clean(line, limit) for line in text.split("\n"))


#: :data:`UNSAFE` without the newline (which :func:`clean_lines` keeps).
_UNSAFE_BUT_NEWLINE = re.compile(UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))
assert _UNSAFE_BUT_NEWLINE.pattern != UNSAFE.pattern


def clean_tree(value: Any, limit: int = MAX_TEXT) -> Any:
    """A JSON-ready document with every string (map keys included) cleaned.

    The last line of defence for JSON, SARIF and timeline output: json escapes C0
    controls but writes C1 controls and bidi overrides as they are.
    """
    if isinstance(value, str):
        return clean(value, limit) if UNSAFE.search(value) or len(value) > limit else value
    if isinstance(value, dict):
        return {clean_tree(k, limit) if isinstance(k, str) else k: clean_tree(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v, limit) for v in value]
    return value


#: What, in compact JSON written with ``ensure_ascii=False``, may stand for a character
#: :data:`UNSAFE` matches: the character itself (json writes C1 controls, bidi marks and
#: the like as they are) or an escape (json escapes the C0 controls; its only other
#: escapes, of a quote and of a backslash, may match too, which only costs the full walk).
#: Searched for apart: one character class scans several times faster than an alternation.
_ESCAPE_IN_JSON = re.compile(r"\\[bfnrtu]")
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def clean_json(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as compact JSON, exactly ``json.dumps(clean_tree(value))``, faster.

    The walk of :func:`clean_tree` costs more than encoding; when the encoded text holds
    no character or escape that cleaning would change, and is too short to hold a string
    over ``limit``, it is the answer as it is (the timeline writes hundreds of thousands
    of small events this way, and a JSON report of thousands of findings, one large one).
    """
    text = _compact(value)
    if not _needs_cleaning(text, limit):
        return text
    return _compact(clean_tree(value, limit))


def _needs_cleaning(text: str, limit: int) -> bool:
    """Whether compact JSON ``text`` may hold a string :func:`clean_tree` would change: one
    with an unsafe character, or one over ``limit`` characters. Without a backslash, every
    string is its characters between two quotes, so a longer one is a longer quote-free run
    (a long run of numbers between strings only costs the full walk)."""
    backslash = "\\" in text
    if UNSAFE.search(text) or (backslash and _ESCAPE_IN_JSON.search(text)):
        return True
    if len(text) <= limit:
        return False
    if backslash:
        return True
    # Any run of more than ``limit`` characters holds a multiple of ``limit``: look at the
    # quote-free run around each (a few thousand finds, not a split into millions of strings).
    for at in range(0, len(text), max(limit, 1)):
        if text[at] != '"':
            end = text.find('"', at)
            if (len(text) if end < 0 else end) - text.rfind('"', 0, at) - 1 > limit:
                return True
    return False
