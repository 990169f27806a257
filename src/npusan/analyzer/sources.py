"""Quoting source lines for reports, and telling the user's frames from library internals.

Stacks in a trace name files on the machine that recorded it; the machine that analyzes it
may not have them. Quoting is therefore best effort: a file that is missing, unreadable,
too large or not text is simply not quoted, and nothing here ever raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

from .findings import Frame

#: Files larger than this are not read for quoting (a trace names them; it may be hostile).
MAX_SOURCE_BYTES = 8 << 20
#: Quoted lines are cut to this many characters.
MAX_LINE_CHARS = 160


class SourceCache:
    """Reads each source file at most once; ``line()`` returns ``None`` when it cannot quote."""

    def __init__(self, roots: Sequence[str] = ()) -> None:
        self.roots = list(roots)
        self._files: dict[str, Optional[list[str]]] = {}

    def _load(self, filename: str) -> Optional[list[str]]:
        if filename in self._files:
            return self._files[filename]
        lines = None
        if filename and not filename.startswith("<"):
            candidates = [filename]
            if not os.path.isabs(filename):
                candidates += [os.path.join(r, filename) for r in self.roots]
            for path in candidates:
                lines = _read_text_lines(path)
                if lines is not None:
                    break
        self._files[filename] = lines
        return lines

    def lines(self, filename: str) -> Optional[list[str]]:
        """Every line of ``filename`` (unstripped), or ``None`` when it cannot be read."""
        return self._load(filename)

    def line(self, filename: str, lineno: int) -> Optional[str]:
        """The stripped source line ``lineno`` (1-based) of ``filename``, or ``None``."""
        lines = self._load(filename)
        if lines is None or not isinstance(lineno, int) or not 1 <= lineno <= len(lines):
            return None
        text = lines[lineno - 1].strip()
        if not text:
            return None
        if len(text) > MAX_LINE_CHARS:
            text = text[: MAX_LINE_CHARS - 1] + "…"
        return text


def _read_text_lines(path: str) -> Optional[list[str]]:
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except (OSError, ValueError):
        return None
    if b"\0" in data:  # binary, not source
        return None
    return data.decode("utf-8", "replace").splitlines()


# -- user code versus internals ---------------------------------------------------------

_NPUSAN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (category, pattern on the '/'-normalized filename). The first match wins.
_INTERNAL = [
    ("torch", re.compile(r"(^|/)(site|dist)-packages/(torch|torch_npu|functorch|triton)/")),
    ("torch", re.compile(r"(^|/)torch/(nn|autograd|_tensor|_ops|overrides|utils|cuda|npu|amp|optim|"
                         r"distributed|_dynamo|_inductor|_functorch|_subclasses|_refs|_prims|_decomp|"
                         r"fx|functional|_compile|_jit_internal|storage|random|serialization)\b")),
    ("torch", re.compile(r"(^|/)torch_npu/")),
    ("npusan", re.compile(r"(^|/)(site|dist)-packages/npusan/")),
    # torch's deprecated collectives are wrapped by typing_extensions.deprecated
    ("python", re.compile(r"(^|/)(site|dist)-packages/typing_extensions\.py$")),
    ("pytest", re.compile(r"(^|/)(site|dist)-packages/(_pytest|pytest|pluggy)/")),
    # The console script that starts pytest (.venv/bin/pytest, .../Scripts/py.test).
    ("pytest", re.compile(r"(^|/)(bin|Scripts)/(pytest|py\.test)(-[0-9.]+)?(\.exe)?$")),
    ("python", re.compile(r"(^|/)lib/python3\.\d+/(?!site-packages/|dist-packages/)")),
    ("python", re.compile(r"^<")),  # <frozen runpy>, <string>, ...
]


def internal_category(frame: Frame) -> Optional[str]:
    """``"torch"``, ``"npusan"``, ``"pytest"`` or ``"python"`` for library frames; ``None``
    for user code."""
    return _file_category(frame.filename)


@functools.lru_cache(maxsize=8192)
def _file_category(filename: str) -> Optional[str]:
    name = filename.replace("\\", "/")
    own = _NPUSAN_DIR.replace("\\", "/") + "/"
    if name.startswith(own):
        # npusan's examples are user programs that happen to ship inside the package.
        return None if name.startswith(own + "examples/") else "npusan"
    for category, pattern in _INTERNAL:
        if pattern.search(name):
            return category
    return None


@dataclass(frozen=True)
class Folded:
    """A run of consecutive library frames shown as one line ("… 7 torch frames")."""

    count: int
    categories: tuple  # category names, in order of first appearance

    def __str__(self) -> str:
        what = "/".join(self.categories)
        return f"… {self.count} {what} frame{'s' if self.count != 1 else ''}"


#: Innermost frames shown of a stack that has no frame of user code.
LIBRARY_ONLY_SHOWN = 3


def fold(stack: Iterable[Frame], full: bool = False) -> list[Union[Frame, Folded]]:
    """The frames of ``stack`` with runs of library frames folded, unless ``full``.

    A stack made only of library frames (a tensor freed by pytest after the test
    returned) keeps its innermost :data:`LIBRARY_ONLY_SHOWN` frames: folding all of it
    would hide the only locations there are.
    """
    stack = list(stack)
    keep_from = len(stack)
    if not full and all(internal_category(fr) is not None for fr in stack):
        keep_from = len(stack) - LIBRARY_ONLY_SHOWN
    out: list[Union[Frame, Folded]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            cats = tuple(dict.fromkeys(run))
            out.append(Folded(len(run), cats))
            run.clear()

    for i, fr in enumerate(stack):
        cat = None if full or i >= keep_from else internal_category(fr)
        if cat is None:
            flush()
            out.append(fr)
        else:
            run.append(cat)
    flush()
    return out


def user_site(stack: Sequence[Frame]) -> Optional[Frame]:
    """The innermost frame of user code (the line a person would change), else the innermost."""
    for fr in reversed(stack):
        if internal_category(fr) is None:
            return fr
    return stack[-1] if stack else None


#: How the report being rendered writes file names (see :func:`paths_shown_as`).
_PATH_FORM: "contextvars.ContextVar[Optional[Callable[[str], str]]]" = contextvars.ContextVar(
    "npusan_path_form", default=None)


@contextlib.contextmanager
def paths_shown_as(form: Callable[[str], str]) -> Iterator[None]:
    """While rendering a report meant for a CI server (SARIF, JUnit), write every file name
    in its text as ``form`` does, the way its file locations name them, instead of
    relative to the working directory of whoever ran the analysis."""
    token = _PATH_FORM.set(form)
    try:
        yield
    finally:
        _PATH_FORM.reset(token)


def display_path(filename: str, cwd: Optional[str] = None) -> str:
    """A file name as reports show it: relative to the working directory when inside it
    (or as :func:`paths_shown_as` says, while it is in force)."""
    form = _PATH_FORM.get()
    if form is not None and cwd is None:
        return form(filename)
    if os.path.isabs(filename):
        base = cwd or os.getcwd()
        try:
            rel = os.path.relpath(filename, base)
        except ValueError:
            return filename
        if not rel.startswith(".."):
            return rel
    return filename
