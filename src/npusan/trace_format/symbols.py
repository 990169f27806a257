"""The interned names of one trace: strings, frames, stacks, streams, blocks, threads.

Both the file reader and the live (online) path feed definition records through
:meth:`SymbolTable.define`; the analyzer resolves ids through it only when it builds a
report, so replay never touches strings.
"""

from __future__ import annotations

from typing import Optional

from . import records as R
from .errors import TraceFormatError
from .safe_text import clean

#: Ceiling on entries in any one table, so a hostile trace cannot grow memory without bound
#: faster than its own size (each entry costs a few bytes of file).
MAX_TABLE = 1 << 24
#: Recorded source lines longer than this are cut (a line is quoted, not a file).
MAX_SOURCE_TEXT = 1000


class SymbolTable:
    def __init__(self, *, texts: bool = True) -> None:
        """``texts=False``: a table that checks every definition as usual but keeps no
        string's text (each is ``""``): for a reader that only counts definitions
        (``npusan info``), a hostile trace's million strings then cost their ids only."""
        self._texts = texts
        self.strings: dict[int, str] = {}
        self.frames: dict[int, tuple[int, int, int]] = {}  # fid -> (file sid, lineno, func sid)
        self.stacks: dict[int, tuple[int, ...]] = {}  # kid -> fids, outermost first
        self.streams: dict[int, tuple[int, int]] = {}  # sidx -> (device, handle)
        self.blocks: dict[int, tuple[int, Optional[int]]] = {}  # bid -> (ptr, size) from BLOCK_DEF
        self.threads: dict[int, str] = {}
        #: fid -> (source line text or None, source root sid or None), format 1.1 frames.
        self.frame_sources: dict[int, tuple[Optional[str], Optional[int]]] = {}
        self.stream_labels: dict[int, tuple[str, str]] = {}  # sidx -> (role, label), format 1.1

    def define(self, rec: list) -> None:
        """Absorb one definition record; raise TraceFormatError if it is malformed."""
        t = rec[0]
        try:
            if t == R.STR:
                _, sid, text = rec[:3]
                if self._texts:
                    self._put(self.strings, sid, _text(text, "the text of a STR record"))
                elif text.__class__ is str:
                    self._put(self.strings, sid, "")
                else:
                    _text(text, "the text of a STR record")  # raises, as it would with texts
            elif t == R.FRAME:
                _, fid, f, line, fn = rec[:5]
                if type(line) is not int:
                    raise TraceFormatError(f"frame {_show(fid)} has a line number that is {_a(line)}, not an integer")
                if line < 0:  # Python's are 0 (none known) or more
                    raise TraceFormatError(f"frame {_show(fid)} has a negative line number ({_short_int(line)})")
                if type(f) is not int or type(fn) is not int:
                    bad, what = (f, "file name") if type(f) is not int else (fn, "function name")
                    raise TraceFormatError(f"frame {_show(fid)} is malformed: its {what} id is {_a(bad)}, "
                                           "not an integer")
                if f not in self.strings or fn not in self.strings:
                    raise TraceFormatError(f"frame {_show(fid)} refers to undefined strings")
                self._put(self.frames, fid, (f, line, fn))
                if len(rec) > 5:  # format 1.1: the line's text and the file's source root
                    self._frame_source(fid, rec[5], rec[6] if len(rec) > 6 else None)
            elif t == R.STACK:
                _, kid, fids = rec[:3]
                if not isinstance(fids, (list, tuple)) or any(type(f) is not int or f not in self.frames for f in fids):
                    raise TraceFormatError(f"stack {_show(kid)} refers to undefined frames")
                self._put(self.stacks, kid, tuple(fids))
            elif t == R.STREAM_DEF:
                _, sidx, device, handle = rec[:4]
                if not (type(device) is int and type(handle) is int):
                    raise TraceFormatError(f"stream {_show(sidx)} has a non-integer device or handle")
                self._put(self.streams, sidx, (device, handle))
            elif t == R.BLOCK_DEF:
                _, bid, ptr, size = rec[:4]
                if type(ptr) is not int or not (size is None or type(size) is int):
                    raise TraceFormatError(f"block {_show(bid)} has a malformed pointer or size")
                self._put(self.blocks, bid, (ptr, size), replace=True)
            elif t == R.THREAD:
                _, tid, name = rec[:3]
                self._put(self.threads, tid, _text(name, "a thread name"), replace=True)
            elif t == R.STREAM_LABEL:
                _, sidx, role, label = rec[:4]
                if type(sidx) is not int or sidx not in self.streams:
                    raise TraceFormatError(f"stream label for undefined stream {_show(sidx)}")
                self._put(self.stream_labels, sidx, (_text(role, "a stream role")[:32],
                                                     _text(label, "a stream label")[:200]), replace=True)
        except ValueError as e:  # unpacking a short record
            raise TraceFormatError(f"malformed {R.RECORD_NAMES.get(t, t)} record") from e

    def _frame_source(self, fid: int, text, root) -> None:
        # Informational trailing fields: a value of the wrong type is ignored, not fatal.
        text = _text(text) if text.__class__ is str else None
        if text is not None and len(text) > MAX_SOURCE_TEXT:
            text = text[: MAX_SOURCE_TEXT - 1] + "…"
        root = root if type(root) is int and root in self.strings else None
        if text is not None or root is not None:
            self.frame_sources[fid] = (text, root)

    @staticmethod
    def _put(table: dict, key, value, replace: bool = False) -> None:
        if type(key) is not int:  # a bool is not an id either
            raise TraceFormatError(f"an id is {_a(key)}, not an integer")
        if key < 0 or key >= MAX_TABLE:
            raise TraceFormatError(f"id {key!r} out of range")
        if key in table and not replace:
            raise TraceFormatError(f"id {key} defined twice")
        table[key] = value

    # -- resolution (report time only) ---------------------------------------------------

    # Ids come from records whose fields the reader does not type-check: an id that is
    # not an int (a map, a list) resolves to nothing rather than raising.

    def string(self, sid: Optional[int]) -> str:
        return self.strings.get(sid, "?") if type(sid) is int else "?"

    def recorded_sources(self) -> dict[tuple[str, int, str], tuple[Optional[str], Optional[str]]]:
        """``{(filename, lineno, function): (line text, source root)}`` of format 1.1 frames."""
        out = {}
        for fid, (text, root) in self.frame_sources.items():
            f, line, fn = self.frames[fid]
            out[(self.strings[f], line, self.strings[fn])] = (
                text,
                self.strings.get(root) if root is not None else None,
            )
        return out

    def frames_of(self, kid: Optional[int]) -> tuple[tuple[str, int, str], ...]:
        """The frames ``(filename, lineno, function)`` of a stack id, outermost first."""
        if type(kid) is not int:
            return ()
        out = []
        for fid in self.stacks.get(kid, ()):
            f, line, fn = self.frames[fid]
            out.append((self.strings[f], line, self.strings[fn]))
        return tuple(out)


def _short_int(v: int) -> str:
    text = str(v) if v > -10**20 else "a huge negative number"
    return text


def _text(v, what: str = "a name") -> str:
    """A defined string, sanitized once here so that no output shows its raw control characters.

    Strings in a trace are msgpack ``str`` (docs/trace-format.md, section 3): binary data
    or any other type there makes the trace corrupt.
    """
    if v.__class__ is str:
        return clean(v)
    raise TraceFormatError(f"{what} is {_a(v)}, not a string")


_KINDS = {int: "an integer", str: "a string", bytes: "binary data", dict: "a map", list: "an array",
          float: "a float", bool: "a boolean", type(None): "nil"}


def _a(v) -> str:
    """What a msgpack value is, in words ("a boolean", "binary data", "an extension type")."""
    kind = _KINDS.get(type(v))
    return kind if kind is not None else "an extension type" if type(v).__module__.startswith("msgpack") else "a " + type(v).__name__


def _show(v) -> str:
    """An id for a message: its value if an integer, else what it is."""
    return repr(v) if type(v) is int else f"({_a(v)})"
