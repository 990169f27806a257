"""Suppression files: silencing known findings on purpose, each with a reason.

Format (TOML, documented in ``docs/suppressions.md``)::

    [[suppress]]
    kind = "data-race"            # optional: data-race, missing-record-stream, reuse-race
    op = "aten::copy_*"           # optional: fnmatch on the op of either access
    stream = "default"            # optional: fnmatch on either stream's names
    frame = "*/prefetch.py:*"     # optional: fnmatch on "file:line" or the function of any frame
    fingerprint = "29907af2ba9674a8"  # optional: a prefix (16+ hex digits) of the fingerprint
    reason = "known, tracked in #123"   # required

An entry matches a finding when every field it gives matches (fields may also be lists of
patterns: any one matching is enough). Entries that match nothing are reported, so stale
suppressions do not pile up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Iterable, Optional

from .model import Finding, Kind, StreamRef
from .userfiles import read_user_file
from ...typo_hints import typo_hint

MATCH_FIELDS = ("kind", "op", "stream", "frame", "fingerprint")
#: A ``fingerprint`` entry gives at least this many hex digits (the text report shows 16).
MIN_FINGERPRINT_DIGITS = 16
KNOWN_FIELDS = set(MATCH_FIELDS) | {"reason"}
#: Suppression files are small; refuse anything larger than this without reading it.
MAX_FILE_BYTES = 4 << 20


class SuppressionError(ValueError):
    """The suppression file cannot be used; the message is one sentence for the user."""


@dataclass
class Suppression:
    index: int  # 1-based position in the file
    reason: str
    kind: tuple = ()
    op: tuple = ()
    stream: tuple = ()
    frame: tuple = ()
    fingerprint: tuple = ()  # lowercase hex prefixes
    used: int = 0  # findings (groups of the engine) this entry silenced

    def describe(self) -> str:
        parts = [f"{k}={'|'.join(getattr(self, k))}" for k in MATCH_FIELDS if getattr(self, k)]
        return f"entry {self.index} ({', '.join(parts)}; reason: {self.reason})"

    def matches(self, f: Finding) -> bool:
        if self.kind and f.kind.value not in self.kind:
            return False
        if self.op and not _any_match(self.op, (f.access.op, f.previous.op)):
            return False
        if self.stream and not _any_match(
            self.stream, [n for a in (f.access, f.previous) for n in stream_labels(a.stream)]
        ):
            return False
        if self.frame and not _any_match(self.frame, frame_labels(f)):
            return False
        if self.fingerprint and not any(f.fingerprint().startswith(p) for p in self.fingerprint):
            return False
        return True


def _any_match(patterns: Iterable[str], names: Iterable[str]) -> bool:
    names = list(names)
    return any(fnmatchcase(n, p) for p in patterns for n in names)


def stream_labels(s: StreamRef) -> list[str]:
    """Names a suppression's ``stream`` pattern is matched against."""
    out = [f"device {s.device}", f"index {s.index}"]
    if s.is_default:
        out += ["default", "default stream"]
    else:  # the number the report shows: "stream #2"
        n = s.ordinal if s.ordinal is not None else s.index + 1
        out += [f"stream #{n}", f"#{n}"]
    for fr in s.created_stack:
        out += _frame_names(fr)
    return out


def _frame_names(fr) -> list[str]:
    return [f"{fr.filename}:{fr.lineno}", f"{os.path.basename(fr.filename)}:{fr.lineno}", fr.function]


def frame_labels(f: Finding) -> list[str]:
    """Names a ``frame`` pattern is matched against: every frame of both accesses and the block."""
    out: list[str] = []
    for stack in (f.access.stack, f.previous.stack, f.block.stack):
        for fr in stack:
            out += _frame_names(fr)
    return out


@dataclass
class Suppressions:
    path: str
    entries: list = field(default_factory=list)

    def match(self, f: Finding) -> Optional[Suppression]:
        """The first entry that silences ``f`` (and counts the use), or ``None``."""
        for e in self.entries:
            if e.matches(f):
                e.used += 1
                return e
        return None

    def unused(self) -> list[Suppression]:
        return [e for e in self.entries if not e.used]


def _load_toml(data: bytes):
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # pragma: no cover - depends on the interpreter
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise SuppressionError(
                "reading suppression files needs Python 3.11+ or the 'tomli' package"
            ) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SuppressionError("is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise SuppressionError(f"is not valid TOML ({e})") from None
    except RecursionError:
        raise SuppressionError("nests tables or arrays too deeply") from None


def _toml_type(value) -> str:
    """What a TOML value is, in TOML's words, for error messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"


def _patterns(entry: dict, key: str, where: str) -> tuple:
    v = entry.get(key)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(p, str) and p for p in v):
        raise SuppressionError(f"{where}: '{key}' must be a non-empty string or list of strings")
    return tuple(v)


def parse_suppressions(data: bytes, path: str = "<suppressions>") -> Suppressions:
    """Parse a suppression file's bytes; raise :class:`SuppressionError` with the reason."""
    doc = _load_toml(data)
    entries = doc.get("suppress", [])
    extra = sorted(set(doc) - {"suppress"})
    if extra:
        raise SuppressionError(f"unknown top-level key '{extra[0]}' (expected [[suppress]] tables)")
    if not isinstance(entries, list):
        raise SuppressionError("'suppress' must be an array of tables ([[suppress]])")
    out = Suppressions(path)
    kinds = {k.value for k in Kind}
    for i, entry in enumerate(entries, 1):
        where = f"entry {i}"
        if not isinstance(entry, dict):
            raise SuppressionError(f"{where} is not a table")
        unknown = sorted(set(entry) - KNOWN_FIELDS)
        if unknown:
            raise SuppressionError(f"{where}: unknown key '{unknown[0]}'{typo_hint(unknown[0], KNOWN_FIELDS)}")
        reason = entry.get("reason")
        if reason is None:
            raise SuppressionError(f"{where} has no 'reason' (every suppression needs one)")
        if not isinstance(reason, str):
            raise SuppressionError(f"{where}: 'reason' must be a string, got {_toml_type(reason)}")
        if not reason.strip():
            raise SuppressionError(f"{where}: 'reason' is empty (every suppression needs one)")
        fields = {k: _patterns(entry, k, where) for k in MATCH_FIELDS}
        if not any(fields.values()):
            raise SuppressionError(f"{where} matches everything (give kind, op, stream, frame or fingerprint)")
        bad = [k for k in fields["kind"] if k not in kinds]
        if bad:
            raise SuppressionError(
                f"{where}: unknown kind '{bad[0]}'{typo_hint(bad[0], kinds)} (expected one of {', '.join(sorted(kinds))})"
            )
        fps = tuple(p.strip().lower() for p in fields["fingerprint"])
        for p in fps:
            if len(p) < MIN_FINGERPRINT_DIGITS or any(c not in "0123456789abcdef" for c in p):
                raise SuppressionError(
                    f"{where}: 'fingerprint' must be at least {MIN_FINGERPRINT_DIGITS} hex digits "
                    f"of a finding's fingerprint (the report shows the first 16), got '{p}'"
                )
        fields["fingerprint"] = fps
        out.entries.append(Suppression(i, reason.strip(), **fields))
    return out


def load_suppressions(path: str) -> Suppressions:
    """Read and parse ``path``; every problem becomes a :class:`SuppressionError`."""
    data = read_user_file(path, "suppression file", MAX_FILE_BYTES, SuppressionError)
    try:
        return parse_suppressions(data, path)
    except SuppressionError as e:
        if str(e).startswith("suppression file"):
            raise
        raise SuppressionError(f"suppression file {path}: {e}") from None
