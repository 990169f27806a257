"""SARIF 2.1.0 for code-scanning dashboards (GitHub, GitLab, Azure DevOps).

One rule per finding kind; the later access is the primary location, the earlier access
and the allocation are related locations, and ``partialFingerprints`` come from code
locations only (``Finding.fingerprint()``), so a bug keeps its identity across runs.
"""

from __future__ import annotations

import functools
import ntpath
import os
import posixpath
import re
from pathlib import PureWindowsPath
from typing import Optional
from urllib.parse import quote

from ..._version import __version__
from ..findings.model import Frame, Kind
from ..findings.grouping import Group
from .shown_frames import Omitted, shown
from .sources import SourceCache, paths_shown_as, user_site
from . import describe as D
from .base import Report, Reporter, ReportOptions, register
from .json_report import dump_json

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "npusanFingerprint/v1"
RULES = list(Kind)


#: The ``uriBaseId`` of files under the source root (``--source-root``, or the detected one).
SRCROOT = "SRCROOT"


def _quote(name: str, safe: str = "/") -> str:
    """``name`` percent-encoded for a URI. A file name that is not UTF-8 reaches Python with
    its bad bytes as lone surrogates: they are encoded as those bytes (``r\\xff`` → ``r%FF``)."""
    try:
        return quote(name, safe=safe, errors="surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte stands for
        return quote(name, safe=safe, errors="replace")


@functools.lru_cache(maxsize=8192)
def artifact_uri(filename: str) -> str:
    """A URI reference for a file name (relative names stay relative)."""
    name = filename.replace("\\", "/")
    if PureWindowsPath(filename).drive:  # ``..`` removed as a URI resolver would (RFC 3986 5.2.4)
        return "file:///" + _quote(ntpath.normpath(filename).replace("\\", "/"), safe="/:")
    if name.startswith("/"):
        return "file://" + _quote(posixpath.normpath(name) if _climbs(name) else name)
    return _quote(name)


def _climbs(name: str) -> bool:
    """Whether a '/'-separated relative name leaves its base (a ``..`` component)."""
    return ".." in name.split("/")


@functools.lru_cache(maxsize=8192)
def relative_to_root(filename: str, root: Optional[str]) -> Optional[str]:
    """``filename`` relative to ``root`` ('/'-separated), or None if it is not under it.

    Relative names are taken as relative to the root already (how stacks name files of the
    program's own folder, and how a checkout names them). Cached: a report names the same
    few files in thousands of frames.
    """
    if not filename or filename.startswith("<"):
        return None
    if not (os.path.isabs(filename) or PureWindowsPath(filename).drive):
        name = filename.replace("\\", "/")
        return None if _climbs(name) else name
    if root is None:
        return None
    base = root.rstrip("/\\")
    if filename.startswith(base + os.sep) or filename.startswith(base + "/"):
        rel = filename[len(base) + 1:].replace("\\", "/")
        return None if _climbs(rel) else rel  # ``<root>/../../etc/passwd`` is not under the root
    return None


def ci_path(filename: str, root: Optional[str]) -> str:
    """A file as CI reports (SARIF and JUnit) name it: relative to the source root when under
    it, else as the trace names it (absolute for files outside the root)."""
    rel = relative_to_root(filename, root)
    return rel if rel is not None else filename


def artifact_location(filename: str, root: Optional[str]) -> dict:
    """``{"uri", "uriBaseId"}`` relative to the source root when the file is under it (code
    scanning places such results on the checkout), else an absolute ``file://`` URI."""
    uri, base = _artifact(filename, root)
    return {"uri": uri, "uriBaseId": base} if base is not None else {"uri": uri}


@functools.lru_cache(maxsize=8192)
def _artifact(filename: str, root: Optional[str]) -> tuple:
    """``(uri, uriBaseId or None)`` of :func:`artifact_location` (a fresh dict each call)."""
    rel = relative_to_root(filename, root)
    if rel is not None:
        return _quote(rel), SRCROOT
    if filename and not filename.startswith("<") and _is_relative(filename):
        # A relative name that climbs (``../../etc/passwd``): a relative URI would leave the
        # root for any consumer that resolves it against the checkout. Resolved against the
        # root here, it is either under it after all (``pkg/../x.py``) or an absolute URI.
        full = _resolved(filename, root)
        rel = relative_to_root(full, os.path.abspath(root)) if root is not None else None
        if rel is not None:
            return _quote(rel), SRCROOT
        return artifact_uri(full), None
    return artifact_uri(filename), None


def _is_relative(filename: str) -> bool:
    return not (os.path.isabs(filename) or filename.startswith(("/", "\\")) or PureWindowsPath(filename).drive)


def _resolved(filename: str, root: Optional[str]) -> str:
    """A relative name made absolute against ``root`` (the working directory without one),
    ``..`` components removed lexically: the file the name stands for, as a path."""
    base = os.path.abspath(root) if root is not None else os.getcwd()
    return os.path.normpath(os.path.join(base, filename.replace("\\", "/")))


def target_uri(path: str) -> str:
    """A trace's URI as an analysis target: as given, unless a relative path climbs (``../t.npusan``):
    then absolute, for the reason :func:`_artifact` gives."""
    if _is_relative(path) and _climbs(path.replace("\\", "/")):
        return artifact_uri(_resolved(path, None))
    return artifact_uri(path)


def root_uri(root: str) -> str:
    """``file:///abs/root/`` (SARIF wants the trailing slash on a base URI)."""
    return artifact_uri(os.path.abspath(root)).rstrip("/") + "/"


def physical_location(fr: Optional[Frame], root: Optional[str] = None) -> Optional[dict]:
    if fr is None or not fr.filename:
        return None
    loc: dict = {"artifactLocation": artifact_location(fr.filename, root)}
    if isinstance(fr.lineno, int) and fr.lineno >= 1:
        loc["region"] = {"startLine": fr.lineno}
    return loc


def location(fr: Optional[Frame], message: str, id_: Optional[int] = None, logical: str = "",
             root: Optional[str] = None) -> dict:
    out: dict = {}
    if id_ is not None:
        out["id"] = id_
    phys = physical_location(fr, root)
    if phys is not None:
        out["physicalLocation"] = phys
    elif logical:
        out["logicalLocations"] = [{"name": logical}]
    out["message"] = {"text": message}
    return out


def sarif_stack(stack, message: str, root: Optional[str] = None) -> dict:
    """A SARIF stack: frames innermost first (SARIF's order; the trace stores outermost first)."""
    frames = []
    for fr in reversed(shown(stack)):
        if isinstance(fr, Omitted):  # frames left out: a frame with only a message
            frames.append({"location": {"message": {"text": str(fr)}}})
            continue
        frames.append({"location": location(fr, fr.function, root=root)})
    return {"message": {"text": message}, "frames": frames}


def rule(kind: Kind) -> dict:
    return {
        "id": kind.value,
        "name": "".join(w.capitalize() for w in kind.value.split("-")),
        "shortDescription": {"text": D.KIND_TITLES[kind]},
        "fullDescription": {"text": D.KIND_HELP[kind]},
        "help": {"text": D.KIND_HELP[kind]},
        "defaultConfiguration": {"level": "error"},
    }


def result(report: Report, g: Group, sources: Optional[SourceCache] = None, root: Optional[str] = None) -> dict:
    f = g.finding
    header = report.header(f.trace)
    later_label = "free" if f.kind is Kind.MISSING_RECORD_STREAM else f"{f.access.type} by {f.access.op}"
    later = f"{later_label} on {D.stream_name(f.access.stream, header)}"
    earlier = f"{f.previous.type} by {f.previous.op} on {D.stream_name(f.previous.stream, header)}"
    alloc = f"allocation of the {D.human_size(f.block.size)} block"
    if f.block.stream is not None:
        alloc += f" on {D.stream_name(f.block.stream, header)}"
    fix = D.fix(f, header, sources)
    text = f"{D.title(f, header)}. {later[0].upper() + later[1:]}; earlier: {earlier}. Fix: " + " ".join(
        line.strip() for line in fix
    )
    note = D.merged_ranges_note(g)
    if note is not None:
        text += f" Note: {note}."
    related = [location(user_site(f.previous.stack), "earlier access: " + earlier, 1, f.previous.op, root)]
    site = user_site(f.block.stack)
    if site is not None or f.block.stream is not None:
        related.append(location(site, alloc, 2, "allocation", root))
    stacks = [sarif_stack(f.access.stack, "later access: " + later, root)]
    if f.previous.stack:
        stacks.append(sarif_stack(f.previous.stack, "earlier access: " + earlier, root))
    if f.block.stack:
        stacks.append(sarif_stack(f.block.stack, alloc, root))
    out = {
        "ruleId": f.kind.value,
        "ruleIndex": RULES.index(f.kind),
        "level": "error",
        "message": {"text": text},
        "locations": [location(user_site(f.access.stack), later, logical=f.access.op, root=root)],
        "relatedLocations": related,
        "stacks": stacks,
        "partialFingerprints": {FINGERPRINT_KEY: g.fingerprint},
        "properties": {
            "count": g.count,
            "traces": [report.trace_path(t) for t in g.traces],
            "laterStream": D.stream_name(f.access.stream, header),
            "earlierStream": D.stream_name(f.previous.stream, header),
            "rootCause": report.cause_of(g).number,
        },
    }
    if g.status is not None:  # compared with --history / --baseline
        out["baselineState"] = "new" if g.status == "new" else "unchanged"
    return out


def sarif_doc(report: Report, sources: Optional[SourceCache] = None, root: Optional[str] = None) -> dict:
    """The SARIF log; file locations are relative to ``root`` (``uriBaseId`` SRCROOT) when under it,
    and the messages name files the same way."""
    with paths_shown_as(lambda filename: ci_path(filename, root)):
        results = [result(report, g, sources, root) for g in report.groups]
    run = {
        "tool": {
            "driver": {
                "name": "npusan",
                "version": __version__,
                "rules": [rule(k) for k in RULES],
            }
        },
        "invocations": [
            {
                # False when a trace (or an argument) could not be analyzed: the run is incomplete.
                "executionSuccessful": not report.errors,
                "toolExecutionNotifications": [
                    {"level": "error", "message": {"text": f"{where}: could not be analyzed: {why}"}}
                    for where, why in report.errors
                ] + [
                    {"level": "warning", "message": {"text": f"{t.path}: {w}"}}
                    for t in report.traces
                    for w in t.warnings
                ],
            }
        ],
        "artifacts": [
            {"location": {"uri": target_uri(str(t.path))}, "roles": ["analysisTarget"]}
            for t in report.traces
        ],
        "results": results,
        "properties": {
            "suppressed": len(report.suppressed),
            "truncatedTraces": [str(t.path) for t in report.traces if t.truncated],
        },
    }
    if root is not None:
        run["originalUriBaseIds"] = {SRCROOT: {"uri": root_uri(root)}}
    _escape_messages(run)
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


_BRACKET = re.compile(r"(\\*)([\[\]])")


def message_text(text: str) -> str:
    """Plain text as a SARIF message's ``text``: SARIF reads ``[words](target)`` in it as an
    embedded link (SARIF 2.1.0, 3.11.6), so every bracket is escaped with a backslash (and
    backslashes just before one doubled): a trace cannot put a link in a CI page."""
    return _BRACKET.sub(lambda m: m.group(1) * 2 + "\\" + m.group(2), text)


def _escape_messages(value) -> None:
    """Escape, in place, the ``text`` of every ``message`` object of a SARIF document (a walk
    of the containers only: a document of thousands of results has a million leaves; not
    into the physical locations, which :func:`physical_location` makes without a message)."""
    todo = [value]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            for key, v in node.items():
                if key == "message" and isinstance(v, dict) and isinstance(v.get("text"), str):
                    v["text"] = message_text(v["text"])
                elif isinstance(v, (dict, list)) and key != "physicalLocation":
                    todo.append(v)
        else:
            todo.extend(v for v in node if isinstance(v, (dict, list)))


@register
class SarifReporter(Reporter):
    name = "sarif"
    extension = ".sarif"

    def render(self, report: Report, options: ReportOptions) -> str:
        doc = sarif_doc(report, options.source_cache(), options.source_root)
        return dump_json(doc, len(report.groups))


__all__ = ["SarifReporter", "sarif_doc", "artifact_uri", "artifact_location", "ci_path", "relative_to_root",
           "FINGERPRINT_KEY"]
