"""Cheap Python stack capture with interning.

Capturing a stack per op with ``traceback.StackSummary.extract`` costs ~30 us; walking
``sys._getframe()`` and keeping ``(f_code, f_lasti)`` costs a few. :func:`StackCapture.key`
does only the walk and returns a flat tuple ``(id(code), lasti, ...)`` (innermost
first) that callers look up in a dict; file names, exact line numbers (from the
instruction offset via ``co_positions``/``co_lines``) and function names are resolved only
the first time a key is seen, by :meth:`StackCapture.resolve`.

Frames of torch itself and of npusan are "folded away" (skipped) by default so that stacks
show the user's code; ``keep_internal=True`` keeps them. ``depth`` counts kept frames.

The walk itself is compiled code where the ``_stackkey`` extension is built (the same
keys; ``NPUSAN_RECORDER=python`` turns it off, as it does the compiled encoder).

An op that a tensor subclass (or a program's own dispatch mode) runs from its
``__torch_dispatch__`` is the work of the call that reached that ``__torch_dispatch__``: by
default a stack starts at the frame that called the outermost ``__torch_dispatch__``
(the frames inside it -- the subclass's unwrapping, which may be the user's own code --
are folded away too).
"""

from __future__ import annotations

import os
import sys
import threading
from types import CodeType
from typing import Dict, List, Optional, Sequence, Tuple

import torch

try:
    from ._stackkey import walk as _walk
except ImportError:  # not built: the Python loop below
    _walk = None
if os.environ.get("NPUSAN_RECORDER") == "python":
    _walk = None

DEFAULT_DEPTH = 32

_HERE = os.path.dirname(os.path.abspath(__file__))  # .../npusan/recorder
_PKG = os.path.dirname(_HERE)  # .../npusan
#: Path prefixes of frames folded away by default: torch, the recorder, the simulated
#: device and the CLI (not npusan/examples: those are user code).
_INTERNAL_DIRS = (
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
    _HERE + os.sep,
    os.path.join(_PKG, "sim.py"),
    os.path.join(_PKG, "cli") + os.sep,
    os.path.join(_PKG, "auto.py"),
    os.path.join(_PKG, "__init__.py"),
    os.path.join(_PKG, "pytest_plugin.py"),  # the frees of a test's fixture values it drops
    os.path.abspath(threading.__file__),  # Thread._bootstrap / run plumbing
)

#: :meth:`StackCapture._keep` value of a ``__torch_dispatch__`` frame.
_DISPATCH = 2

_lines_cache: Dict[CodeType, List[Optional[int]]] = {}


def line_of(code: CodeType, lasti: int) -> int:
    """Exact source line of the instruction at byte offset ``lasti`` in ``code``."""
    table = _lines_cache.get(code)
    if table is None:
        table = _line_table(code)
        _lines_cache[code] = table
    i = lasti // 2
    if 0 <= i < len(table) and table[i] is not None:
        return table[i]  # type: ignore[return-value]
    return code.co_firstlineno


def _line_table(code: CodeType) -> List[Optional[int]]:
    """Line per 2-byte code unit."""
    n = len(code.co_code) // 2
    table: List[Optional[int]] = [None] * n
    positions = getattr(code, "co_positions", None)
    if positions is not None:  # 3.11+: one entry per code unit
        for i, pos in enumerate(positions()):
            if i < n:
                table[i] = pos[0]
        return table
    co_lines = getattr(code, "co_lines", None)
    if co_lines is not None:  # 3.10
        for start, end, line in co_lines():
            for i in range(start // 2, min(end // 2, n)):
                table[i] = line
        return table
    import dis  # 3.9

    starts = sorted(dis.findlinestarts(code))
    for j, (off, line) in enumerate(starts):
        end = starts[j + 1][0] if j + 1 < len(starts) else n * 2
        for i in range(off // 2, min(end // 2, n)):
            table[i] = line
    return table


class StackCapture:
    """Walks the calling thread's frames into a hashable key; resolves keys to frames."""

    def __init__(self, depth: int = DEFAULT_DEPTH, keep_internal: bool = False) -> None:
        self.depth = max(0, int(depth))
        self.keep_internal = keep_internal
        # Keyed by id(code): code objects hash by value (slow); the code object is kept
        # alive in _codes so that its id is never reused by another one. 0: folded away,
        # 1: kept, _DISPATCH: a ``__torch_dispatch__`` (it and every frame inside it folded).
        self._keep: Dict[int, int] = {}
        self._codes: Dict[int, CodeType] = {}
        self._walk = _walk
        self._classify_code = self._classify  # (one bound method, not one per walk)

    def _classify(self, code: CodeType) -> int:
        path = os.path.abspath(code.co_filename)
        keep = self.keep_internal or not path.startswith(_INTERNAL_DIRS)
        if code.co_filename.startswith("<frozen"):  # runpy/importlib plumbing
            keep = self.keep_internal
        k = int(keep)
        if code.co_name == "__torch_dispatch__" and not self.keep_internal and not path.startswith(_HERE + os.sep):
            # (the recorder's own mode: always innermost, nothing of the user's inside it)
            k = _DISPATCH
        self._codes[id(code)] = code
        self._keep[id(code)] = k
        return k

    def key(self, skip: int = 1) -> Optional[tuple]:
        """The current stack as ``(id(code), lasti, ...)``, innermost first; None if depth is 0."""
        depth = self.depth
        if depth == 0:
            return None
        try:
            f = sys._getframe(skip + 1)
        except ValueError:
            return ()
        if self._walk is not None:
            return self._walk(f, depth, self._keep, self._classify_code)
        keep = self._keep
        out: list = []
        n = 0
        while f is not None:
            c = f.f_code
            k = keep.get(id(c))
            if k is None:
                k = self._classify(c)
            if k:
                if k == _DISPATCH:  # what ran inside it is the work of its caller
                    out.clear()
                    n = 0
                elif n < depth:  # full: walked on, a __torch_dispatch__ further out folds it all
                    out.append(id(c))
                    out.append(f.f_lasti)
                    n += 1
            f = f.f_back
        return tuple(out)

    def resolve(self, key: Sequence) -> List[Tuple[str, int, str]]:
        """``(filename, lineno, function)`` frames of a key of this capture, outermost first."""
        codes = self._codes
        return _resolve([(codes[key[i]], key[i + 1]) for i in range(0, len(key), 2)])


def _resolve(pairs) -> List[Tuple[str, int, str]]:
    frames = []
    for code, lasti in reversed(pairs):
        func = getattr(code, "co_qualname", code.co_name)
        frames.append((code.co_filename, line_of(code, lasti), func))
    return frames
