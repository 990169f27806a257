"""One wording for "did you mean" hints, wherever a name the user typed is unknown.

click words its own hints two ways ("Did you mean '--format'?" for one close match,
"(Did you mean one of: ...?)" for several); npusan's own checks (report formats, finding
kinds, suppression keys) gave none. Every hint now reads as click's single-match form,
extended to several matches: ``Did you mean 'json'?``, ``Did you mean '--emulate' or
'--emulate-devices'?``. This module imports nothing of npusan, so every layer may use it.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Iterable


def close_matches(word: str, choices: Iterable[str]) -> list[str]:
    """The choices ``word`` was probably a typo of, best first (difflib's, as click uses)."""
    return get_close_matches(word, sorted(set(choices)))


def did_you_mean(matches: Iterable[str]) -> str:
    """``"Did you mean 'a'?"`` / ``"Did you mean 'a' or 'b'?"``, or ``""`` for no matches."""
    quoted = [f"'{m}'" for m in matches]
    if not quoted:
        return ""
    if len(quoted) == 1:
        return f"Did you mean {quoted[0]}?"
    return f"Did you mean {', '.join(quoted[:-1])} or {quoted[-1]}?"


def typo_hint(word: str, choices: Iterable[str]) -> str:
    """``". Did you mean 'json'?"`` to append to a message naming ``word``, or ``""``."""
    hint = did_you_mean(close_matches(word, choices))
    return f". {hint}" if hint else ""
