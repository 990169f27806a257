"""Baselines for nightly runs: report only what is new since a known JSON report.

A baseline is any JSON report written by ``npusan analyze --format json``. Findings are
matched by fingerprint (kind plus the code locations of both accesses), so the same bug
keeps its identity across runs even though pointers, stream handles and seqs change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .userfiles import read_user_file

#: Baseline files are reports; refuse absurd sizes without reading them.
MAX_FILE_BYTES = 256 << 20


class BaselineError(ValueError):
    """The baseline file cannot be used; the message is one sentence for the user."""


@dataclass(frozen=True)
class KnownFinding:
    fingerprint: str
    kind: str
    title: str


@dataclass
class Baseline:
    path: str
    known: dict = field(default_factory=dict)  # fingerprint -> KnownFinding, in file order
    #: fingerprint -> the traces (paths as reported) it was seen in; a history's previous
    #: run knows them, a JSON baseline does not (empty).
    traces: dict = field(default_factory=dict)
    #: (fingerprint, trace) -> the kernel seq at which that trace first showed the finding:
    #: a history knows it (for runs recorded since it keeps it), a JSON baseline does not.
    #: A trace cut before that kernel cannot say the finding is fixed.
    first_kernel: dict = field(default_factory=dict)
    #: trace path -> its rank (from its header), as a history last recorded it: a rank's
    #: trace renamed tonight (rank0.npusan -> rank0.npusan.zst) is still that rank's, and a
    #: rank with no trace tonight checked nothing.
    ranks: dict = field(default_factory=dict)

    def __contains__(self, fingerprint: str) -> bool:
        return fingerprint in self.known

    def gone(self, present: set) -> list[KnownFinding]:
        """Known findings whose fingerprints are not in ``present`` (fixed, or not reached)."""
        return [k for fp, k in self.known.items() if fp not in present]


def parse_baseline(doc, path: str = "<baseline>") -> Baseline:
    """Build a :class:`Baseline` from a decoded JSON report; raise :class:`BaselineError`."""
    from ..report.json_report import SCHEMA_MAJOR  # local: reporters import this module

    if not isinstance(doc, dict) or "findings" not in doc:
        raise BaselineError("is not an npusan JSON report (no 'findings')")
    version = doc.get("schema_version")
    if not isinstance(version, str) or not version.split(".")[0].isdigit():
        raise BaselineError("has no valid 'schema_version' (write it with --format json)")
    if int(version.split(".")[0]) != SCHEMA_MAJOR:
        raise BaselineError(
            f"has report schema {version}; this npusan reads schema {SCHEMA_MAJOR}.x"
        )
    findings = doc["findings"]
    if not isinstance(findings, list):
        raise BaselineError("'findings' is not a list")
    out = Baseline(path)
    for i, f in enumerate(findings, 1):
        fp = f.get("fingerprint") if isinstance(f, dict) else None
        if not isinstance(fp, str) or not fp:
            raise BaselineError(f"finding {i} has no 'fingerprint'")
        kind = f.get("kind")
        title = f.get("title")
        out.known.setdefault(
            fp,
            KnownFinding(fp, kind if isinstance(kind, str) else "?", title if isinstance(title, str) else ""),
        )
    return out


#: The keys a baseline needs: of the report, of each finding.
_REPORT_KEYS = ("schema_version", "findings")
_FINDING_KEYS = ("fingerprint", "kind", "title")


def _slim(obj: dict):
    """Keep, of each decoded JSON object, only what a baseline uses.

    ``json`` builds objects innermost first and hands each to this hook: a finding's
    stacks, streams and the traces' headers are dropped as soon as they are decoded, so
    parsing needs little more memory than the file's text, whatever the report holds.
    """
    if "fingerprint" in obj:
        return {k: obj[k] for k in _FINDING_KEYS if k in obj}
    if "findings" in obj:
        return {k: obj[k] for k in _REPORT_KEYS if k in obj}
    return None


def _decode(data: bytes, path: str):
    """Decode a baseline's bytes as UTF-8 JSON, with errors in the user's words.

    ``json.loads`` on bytes guesses UTF-16/32 from the first bytes, so a file starting
    with ``\\xff\\xfe`` would fail with a codec's message; reports are UTF-8, so decode
    that way first. Python's own messages (recursion depth, codec names) say nothing
    to a user, so each failure becomes one plain sentence.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BaselineError(
            f"baseline {path}: not valid JSON (not UTF-8 text: byte {e.start} is 0x{data[e.start]:02x})"
        ) from None
    try:
        return json.loads(text, object_hook=_slim)
    except RecursionError:
        raise BaselineError(f"baseline {path}: not valid JSON (nests arrays or objects too deeply)") from None
    except json.JSONDecodeError as e:
        raise BaselineError(
            f"baseline {path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except ValueError as e:  # pragma: no cover - json raises JSONDecodeError for bad text
        raise BaselineError(f"baseline {path}: not valid JSON ({e})") from None


def load_baseline(path: str) -> Baseline:
    """Read and parse ``path``; every problem becomes a :class:`BaselineError`."""
    data = read_user_file(path, "baseline", MAX_FILE_BYTES, BaselineError)
    doc = _decode(data, path)
    try:
        return parse_baseline(doc, path)
    except BaselineError as e:
        raise BaselineError(f"baseline {path}: {e}") from None
