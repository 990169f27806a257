"""How much of one stack a report or a timeline shows: bounded, whatever the trace holds.

A stack record costs a byte or two per frame in a trace, and a frame's names up to 4,096
characters each, so a 29 KB trace can hold a stack of 20,000 frames of 8 KiB of names,
which every report would write out several times per finding (gigabytes). Every renderer
therefore shows a stack through :func:`shown`: a run of one frame repeated (recursion, or a
forged stack) is shown once with a count, at most :data:`MAX_FRAMES_SHOWN` entries are
kept (the outermost :data:`HEAD_SHOWN` and the innermost rest, where the user's code and
the failing op are), and names are cut at :data:`MAX_NAME_SHOWN` characters. Stacks of
real programs (a few dozen distinct frames, names of a few hundred characters) are shown
exactly as they are; fingerprints still use the whole stack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

from ...trace_format.safe_text import clean

#: Entries (frames and notes of omitted frames) shown of one stack.
MAX_FRAMES_SHOWN = 64
#: Of those, the outermost frames kept; the rest are the innermost.
HEAD_SHOWN = 16
#: Consecutive copies of one frame shown before the rest of the run becomes a note.
REPEATS_SHOWN = 3
#: Characters shown of a file or function name (longer ones say how many were cut).
MAX_NAME_SHOWN = 512


@dataclass(frozen=True)
class Omitted:
    """Frames a report leaves out of a stack: ``count`` more copies of the frame above
    (``repeated``), or ``count`` frames of the middle of a very deep stack."""

    count: int
    repeated: bool = False

    def __str__(self) -> str:
        if self.repeated:
            return f"… the frame above, {self.count:,} more time{'s' if self.count != 1 else ''}"
        return f"… {self.count:,} more frame{'s' if self.count != 1 else ''}"


def short_name(name: str) -> str:
    """A file or function name cut to :data:`MAX_NAME_SHOWN` characters (unchanged when shorter)."""
    return name if len(name) <= MAX_NAME_SHOWN else clean(name, MAX_NAME_SHOWN)


def _short(fr):
    if len(fr.filename) <= MAX_NAME_SHOWN and len(fr.function) <= MAX_NAME_SHOWN:
        return fr
    return dataclasses.replace(fr, filename=short_name(fr.filename), function=short_name(fr.function))


def shown(stack: Iterable) -> list:
    """The frames of ``stack`` (outermost first) a report shows, with :class:`Omitted`
    notes where it leaves frames out; at most :data:`MAX_FRAMES_SHOWN` entries."""
    runs: list = []  # [frame, copies]
    for fr in stack:
        if runs and runs[-1][0] == fr:
            runs[-1][1] += 1
        else:
            runs.append([fr, 1])
    out: list = []
    for fr, copies in runs:
        if copies > REPEATS_SHOWN:
            out += [fr, Omitted(copies - 1, repeated=True)]
        else:
            out += [fr] * copies
    if len(out) > MAX_FRAMES_SHOWN:
        head, tail = HEAD_SHOWN, MAX_FRAMES_SHOWN - HEAD_SHOWN - 1
        middle = out[head:len(out) - tail]
        left_out = sum(x.count if isinstance(x, Omitted) else 1 for x in middle)
        out = out[:head] + [Omitted(left_out)] + out[len(out) - tail:]
    # Names are cut only in the entries kept: a stack of 2^18 distinct frames of 4 KiB
    # names must not make 2^18 cut copies of them first.
    return [x if isinstance(x, Omitted) else _short(x) for x in out]
