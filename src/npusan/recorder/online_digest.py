"""What online warn mode (``NPUSAN_ONLINE=warn``, ``npusan record --online``) prints.

A program with one bug in a loop warns at each distinct finding; printed in full each time,
eight findings are two hundred lines. The first is printed in full, each later one as its
headline and location, and the recording's end says how many there were.
"""

from __future__ import annotations

from typing import Optional


def hint_once(text: str, hint: str) -> str:
    """``text`` with ``hint`` after its first folded-frames line only: every stack of a
    finding folds the same kind of frames, and the same sentence three times is noise."""
    first = text.find(hint)
    if first < 0:
        return text
    end = first + len(hint)
    return text[:end] + text[end:].replace(hint, "")


class OnlineDigest:
    """The warnings of one recording: which one this is decides how much of it is printed."""

    def __init__(self) -> None:
        self.count = 0

    def message(self, full: str, hint: str = "") -> str:
        """The warning for a finding whose full text (as ``format_finding`` gives it) is ``full``."""
        self.count += 1
        if self.count == 1:
            return hint_once(full, hint) if hint else full
        lines = full.splitlines()
        keep = lines[:2] if len(lines) > 1 and lines[1].lstrip().startswith("-->") else lines[:1]
        return "\n".join(keep + ["  (reported in full by npusan analyze on a recorded trace)"])

    def summary(self) -> Optional[str]:
        """The line for the end of the recording, or None when nothing was warned about."""
        if not self.count:
            return None
        n = self.count
        return (f"npusan: online check: {n} stream-synchronization bug{'s' if n != 1 else ''} "
                f"warned about above; record a trace and run `npusan analyze` on it for the full report")
