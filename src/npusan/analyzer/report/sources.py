"""Quoting source lines for reports, and telling the user's frames from library internals.

Traces are untrusted: a trace attached to a bug report can name any path and line, and a
report quotes what it names. So a source line is quoted only

* from the text the trace itself recorded for that frame (format 1.1), or
* from a local file that lies under a *source root* the user named (``--source-root``,
  the NEW side of ``--map-path OLD=NEW``) or, when none is named, the one detected from
  the working directory (the nearest enclosing folder with ``.git`` or ``pyproject.toml``).

Paths with ``..`` components, anything under ``/proc``, ``/dev`` or ``/sys``, files whose
real path (symlinks resolved) leaves every root, and anything that is not a regular file
are refused. Quoting is best effort: a file that is missing, refused, too large or not text
is simply not quoted, and nothing here ever raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

from ...trace_format.sourcelines import find_source_root
from ..findings.model import Frame, map_frames
from .shown_frames import Omitted

#: Files larger than this are not read for quoting (a trace names them; it may be hostile).
MAX_SOURCE_BYTES = 8 << 20
#: Quoted lines are cut to this many characters.
MAX_LINE_CHARS = 160
#: Never read below these, whatever the roots are.
_SYSTEM_DIRS = ("/proc", "/dev", "/sys")


@dataclass(frozen=True)
class SourceSettings:
    """Where local source may be read from, and how recorded paths map to local ones."""

    roots: tuple = ()  # folders, in order of preference
    maps: tuple = ()  # (recorded prefix, local prefix) pairs, first match wins
    #: The project folder reports name files relative to (SARIF, JUnit): --source-root, or
    #: the one detected from the working directory; None when there is none.
    report_root: Optional[str] = None

    @classmethod
    def from_options(
        cls, source_root: Optional[str] = None, map_path: Sequence[str] = (), cwd: Optional[str] = None
    ) -> "SourceSettings":
        """From ``--source-root`` and ``--map-path OLD=NEW`` values; raises ValueError on a bad one.

        Without ``--source-root`` the root detected from ``cwd`` (the working directory) is
        used, if there is one.
        """
        maps = []
        for m in map_path:
            old, sep, new = m.partition("=")
            if not sep or not old or not new:
                raise ValueError(f"--map-path expects OLD=NEW, got '{m}'")
            maps.append((old.rstrip("/\\") or old, os.path.abspath(new)))
        roots = []
        if source_root is not None:
            if not os.path.isdir(source_root):
                raise ValueError(f"--source-root {source_root}: not a directory")
            roots.append(os.path.abspath(source_root))
        roots += [new for _, new in maps]
        report_root = roots[0] if source_root is not None else None
        if source_root is None:
            report_root = find_source_root(cwd or os.getcwd())
            if report_root is not None:
                roots.append(report_root)
        return cls(tuple(dict.fromkeys(roots)), tuple(maps), report_root)

    def mapped(self, filename: str) -> str:
        """``filename`` with the first matching ``--map-path`` prefix replaced."""
        for old, new in self.maps:
            if filename == old or filename.startswith(old + "/") or filename.startswith(old + "\\"):
                return new + filename[len(old):]
        return filename

    def root_of(self, filename: str) -> Optional[str]:
        """The root (of these settings) that the mapped ``filename`` lies under, lexically."""
        name = self.mapped(filename)
        if not os.path.isabs(name):
            return None
        for root in self.roots:
            if name.startswith(root.rstrip(os.sep) + os.sep):
                return root
        return None


class SourceCache:
    """Reads each allowed source file at most once; ``line()`` returns ``None`` when it cannot quote."""

    def __init__(self, roots: Union[Sequence[str], SourceSettings] = (), maps: Sequence = ()) -> None:
        self.settings = roots if isinstance(roots, SourceSettings) else SourceSettings(tuple(roots), tuple(maps))
        self._real_roots = []
        for r in self.settings.roots:
            try:
                self._real_roots.append(os.path.realpath(r))
            except (OSError, ValueError):
                pass
        self._files: dict[str, Optional[list[str]]] = {}
        #: (filename, lineno, recorded text) -> :meth:`locate`'s answer (files are read once,
        #: so it cannot change; a report locates each frame several times).
        self._located: dict[tuple, Optional[int]] = {}

    def allowed_path(self, filename: str) -> Optional[str]:
        """The real local path to read for a recorded ``filename``, or None if refused.

        Refused: ``..`` components, paths outside every root (after ``--map-path`` and
        symlink resolution), ``/proc``, ``/dev``, ``/sys``.
        """
        if not filename or filename.startswith("<") or "\0" in filename:
            return None
        if ".." in filename.replace("\\", "/").split("/"):
            return None
        name = self.settings.mapped(filename)
        candidates = [name] if os.path.isabs(name) else [os.path.join(r, name) for r in self._real_roots]
        for cand in candidates:
            try:
                real = os.path.realpath(cand)
            except (OSError, ValueError):
                continue
            if any(real == d or real.startswith(d + os.sep) for d in _SYSTEM_DIRS):
                continue
            if any(real.startswith(r.rstrip(os.sep) + os.sep) for r in self._real_roots):
                return real
        return None

    def why_unreadable(self, filename: str) -> tuple:
        """``(why, what to do)``: why ``filename`` is not read, in words that follow its name."""
        if not self._real_roots:
            return ("was not read (no source root: no folder above the working directory has .git or pyproject.toml)",
                    "--source-root DIR (the folder of your code) lets npusan read it")
        if os.path.isfile(self.settings.mapped(filename)) and self.allowed_path(filename) is None:
            return "is outside the source root", "--source-root DIR lets npusan read it"
        return ("was not found under the source root",
                "--map-path OLD=NEW says where files recorded under OLD lie here")

    def _load(self, filename: str) -> Optional[list[str]]:
        if filename in self._files:
            return self._files[filename]
        path = self.allowed_path(filename)
        lines = _read_text_lines(path) if path is not None else None
        self._files[filename] = lines
        return lines

    def lines(self, filename: str) -> Optional[list[str]]:
        """Every line of ``filename`` (unstripped), or ``None`` when it cannot be read."""
        return self._load(filename)

    def line(self, filename: str, lineno: int) -> Optional[str]:
        """The stripped source line ``lineno`` (1-based) of an allowed local file, or ``None``."""
        lines = self._load(filename)
        if lines is None or not isinstance(lineno, int) or not 1 <= lineno <= len(lines):
            return None
        return _cut(lines[lineno - 1].strip())

    def locate(self, fr: Frame) -> Optional[int]:
        """Where ``fr``'s line is in the local file now, or None.

        ``fr.lineno`` when the local line there reads as the text the trace recorded for it
        (whitespace runs collapsed), or when the trace recorded none; if the file was edited
        after recording, the line with that text nearest to ``fr.lineno`` (None when none
        has it or two are equally near). None too when the file cannot be read.
        """
        key = (fr.filename, fr.lineno, fr.text)
        if key not in self._located:
            self._located[key] = self._locate(fr)
        return self._located[key]

    def _locate(self, fr: Frame) -> Optional[int]:
        lines = self._load(fr.filename)
        if lines is None or not isinstance(fr.lineno, int):
            return None
        if not fr.text:
            return fr.lineno
        want = _normalized(fr.text)
        cut = want.endswith("…")  # recorded text of a very long line, cut

        def same(line: str) -> bool:
            have = _normalized(line)
            return have == want or (cut and have.startswith(want[:-1]))

        if 1 <= fr.lineno <= len(lines) and same(lines[fr.lineno - 1]):
            return fr.lineno
        hits = [i for i, line in enumerate(lines, 1) if same(line)]
        if not hits:
            return None
        best = min(abs(i - fr.lineno) for i in hits)
        nearest = [i for i in hits if abs(i - fr.lineno) == best]
        return nearest[0] if len(nearest) == 1 else None

    def frame_line(self, fr: Frame) -> Optional[str]:
        """The line of ``fr``: the text the trace recorded, else an allowed local file's line."""
        if fr.text:
            return _cut(fr.text.strip())
        return self.line(fr.filename, fr.lineno)


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str) -> Optional[str]:
    if not text:
        return None
    if len(text) > MAX_LINE_CHARS:
        text = text[: MAX_LINE_CHARS - 1] + "…"
    return text


def _read_text_lines(path: str) -> Optional[list[str]]:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SOURCE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES or b"\0" in data:  # grown meanwhile, or binary: not source
        return None
    return data.decode("utf-8", "replace").splitlines()


def attach_local_sources(findings: Iterable, settings: SourceSettings, cache: Optional[SourceCache] = None) -> None:
    """Complete frames the trace did not describe: source text from allowed local files, root.

    Run where the report is made (never on a remote worker), so that fingerprints and
    quotes read the same however the traces were analyzed.
    """
    cache = cache or SourceCache(settings)

    def change(fr: Frame) -> Frame:
        text = fr.text if fr.text else cache.line(fr.filename, fr.lineno)
        root = fr.root or settings.root_of(fr.filename)
        if text == fr.text and root == fr.root:
            return fr
        # A local root applies to the mapped name: keep the recorded name, relative to it.
        if root is not None and root != fr.root:
            root = _recorded_prefix(fr.filename, settings, root)
        return dataclasses.replace(fr, text=text, root=root)

    map_frames(findings, change)


def _recorded_prefix(filename: str, settings: SourceSettings, root: str) -> Optional[str]:
    """The prefix of the *recorded* ``filename`` that corresponds to local ``root``."""
    local = settings.mapped(filename)
    rel = local[len(root.rstrip(os.sep)) + 1:]
    if filename.endswith(rel):
        return filename[: len(filename) - len(rel)].rstrip("/\\") or None
    return None


# -- user code versus internals ---------------------------------------------------------

_NPUSAN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


def fold(stack: Iterable, full: bool = False) -> list:
    """The frames of ``stack`` with runs of library frames folded, unless ``full``.

    A stack made only of library frames (a tensor freed by pytest after the test
    returned) keeps its innermost :data:`LIBRARY_ONLY_SHOWN` frames: folding all of it
    would hide the only locations there are. Notes of frames a report leaves out
    (:class:`~.shown_frames.Omitted`) pass through as they are.
    """
    stack = list(stack)
    keep_from = len(stack)
    if not full and all(isinstance(fr, Omitted) or internal_category(fr) is not None for fr in stack):
        keep_from = len(stack) - LIBRARY_ONLY_SHOWN
    out: list[Union[Frame, Folded]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            cats = tuple(dict.fromkeys(run))
            out.append(Folded(len(run), cats))
            run.clear()

    for i, fr in enumerate(stack):
        if isinstance(fr, Omitted):  # (a note of :func:`~.shown_frames.shown`)
            flush()
            out.append(fr)
            continue
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
        return _relative(filename, cwd or os.getcwd())
    return filename


@functools.lru_cache(maxsize=4096)
def _relative(filename: str, base: str) -> str:
    """``filename`` relative to ``base`` when inside it, else as it is (a report names the
    same few files thousands of times: computed once per pair)."""
    try:
        rel = os.path.relpath(filename, base)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
