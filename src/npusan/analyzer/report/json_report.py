"""The JSON report: a public contract, versioned (``docs/report-schema.md``).

Minor versions only add optional fields; a change that removes or redefines a field bumps
the major version, and baselines from another major version are refused.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ..._version import __version__
from ...trace_format.safe_text import clean_json, clean_tree
from ..findings.model import AccessInfo, BlockInfo, StreamRef
from ..findings.grouping import Group
from ..findings.rootcause import RootCause
from .shown_frames import Omitted, shown
from .sources import SourceCache
from . import describe as D
from .base import Report, Reporter, ReportOptions, register, trace_rows

SCHEMA_MAJOR = 1
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.9"


def frames_json(stack) -> list:
    """A stack as report frames; frames left out (a forged or very deep stack) are one
    entry of the same shape whose function says how many, with ``omitted`` the count."""
    return [{"file": "", "line": 0, "function": str(fr), "omitted": fr.count} if isinstance(fr, Omitted)
            else {"file": fr.filename, "line": fr.lineno, "function": fr.function} for fr in shown(stack)]


def stream_json(s: Optional[StreamRef], header: dict) -> Optional[dict]:
    if s is None:
        return None
    return {
        "index": s.index,
        "number": None if s.is_default else D.stream_number(s),
        "device": s.device,
        "handle": s.handle,
        "default": bool(s.is_default),
        "name": D.stream_name(s, header),
        "created_at": frames_json(s.created_stack),
        "role": s.role,
    }


def access_json(a: AccessInfo, header: dict) -> dict:
    return {
        "stream": stream_json(a.stream, header),
        "op": a.op,
        "type": a.type,
        "seq": a.seq,
        "stack": frames_json(a.stack),
        "offset": a.offset,
        "nbytes": a.nbytes,
        "replay": None if a.replay is None else {
            "stream": stream_json(a.replay.stream, header),
            "stack": frames_json(a.replay.stack),
            "captured_at": frames_json(a.replay.captured),
        },
    }


def block_json(b: BlockInfo, header: dict) -> dict:
    return {
        "address": b.address,
        "size": b.size,
        "stream": stream_json(b.stream, header),
        "stack": frames_json(b.stack),
    }


def group_json(report: Report, g: Group, sources: Optional[SourceCache] = None) -> dict:
    f = g.finding
    header = report.header(f.trace)
    cause = report.cause_of(g)
    return {
        "kind": f.kind.value,
        "title": D.title(f, header),
        "fingerprint": g.fingerprint,
        "count": g.count,
        "addresses": g.addresses,
        "access": access_json(f.access, header),
        "previous": access_json(f.previous, header),
        "other_streams": [stream_json(s, h) for s, h in D.other_streams(report, g)],
        "merged_ranges": any(x.merged_ranges for x in g.findings),
        "block": block_json(f.block, header),
        "traces": g.traces,
        "first": {"trace": g.first.trace, "seq": g.first.seq},
        "last": {"trace": g.last.trace, "seq": g.last.seq},
        "omitted": g.omitted,
        "fix": D.fix(f, header, sources),
        "root_cause": cause.number if cause is not None else None,
        "status": g.status,
    }


def root_cause_json(report: Report, c: RootCause, sources: Optional[SourceCache] = None) -> dict:
    f = c.anchor
    header = report.header(f.trace)
    site = D.fix_site(c, header, sources)
    return {
        "id": c.number,
        "title": D.root_cause_title(c, header),
        "waiter": stream_json(f.access.stream, header),
        "waited": stream_json(f.previous.stream, header),
        "at": frames_json([site])[0] if site is not None else None,
        "fix": D.root_cause_fix(c, header, sources),
        "findings": c.fingerprints,
        "kinds": c.kinds(),
        "occurrences": c.occurrences,
        "tensors": [
            {
                "name": t["name"],
                "size": t["size"],
                "allocated_at": frames_json([t["allocated_at"]])[0] if t["allocated_at"] else None,
                "findings": t["findings"],
            }
            for t in D.tensors(c, sources)
        ],
    }


def jsonable(v: Any, depth: int = 0) -> Any:
    """Header values as JSON: bytes decoded, map keys as strings, nesting bounded."""
    if depth > 20:
        return None
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {str(jsonable(k, depth + 1)): jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x, depth + 1) for x in v]
    return str(v)


def report_json(report: Report, options: ReportOptions) -> dict:
    counts = report.counts_by_kind()
    sources = options.source_cache()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "npusan", "version": __version__},
        "grouped": report.grouped,
        "findings": [group_json(report, g, sources) for g in report.groups],
        "root_causes": [root_cause_json(report, c, sources) for c in report.causes],
        "summary": {
            "findings": len(report.groups),
            "occurrences": report.occurrences,
            "by_kind": {k: {"findings": c[0], "occurrences": c[1]} for k, c in counts.items()},
            "suppressed": len(report.suppressed),
            "suppressed_occurrences": sum(g.count for g in report.suppressed),
            "below_min_count": len(report.below_min_count),
            "min_count": options.min_count,
            "check_leaks": report.check_leaks,
            "truncated": report.truncated,
        },
        "baseline": None,
        "traces": [
            {
                "path": str(t.path),
                "header": jsonable(t.header),
                "events": t.events,
                "kernels": t.kernels,
                "truncated": bool(t.truncated),
                "warnings": [str(w) for w in t.warnings],
                "rank": row["rank"],
                "findings": row["findings"],
                "left_out": row["left_out"],
                "status": row["status"],
                "error": row["error"],
            }
            for t, row in zip(report.traces, trace_rows(report))
        ],
        "errors": [{"trace": str(where), "error": str(why)} for where, why in report.errors],
        "fixed": None,
        "unchecked": None,
        "comparison": report.comparison(),
    }
    if report.compared_with is not None:
        doc["fixed"] = [{"fingerprint": k.fingerprint, "kind": k.kind, "title": k.title} for k in report.fixed]
        doc["unchecked"] = [
            {"fingerprint": k.fingerprint, "kind": k.kind, "title": k.title,
             "traces": list(report.unchecked_traces.get(k.fingerprint, ())),
             "why": list(report.unchecked_why.get(k.fingerprint, ()))}
            for k in report.unchecked
        ]
    if report.baseline is not None:
        doc["baseline"] = {
            "path": report.baseline.path,
            "known": [g.fingerprint for g in report.known],
            "gone": [
                {"fingerprint": k.fingerprint, "kind": k.kind, "title": k.title} for k in report.gone
            ],
        }
    return doc


#: Reports with more findings than this are written compact: json's indenting encoder is
#: pure Python and several times slower than the compact C encoder.
PRETTY_MAX_FINDINGS = 500


def dump_json(doc: dict, findings: int) -> str:
    """Pretty-printed for reports people read, compact (and fast) for huge ones.

    Every string is sanitized on the way out (JSON escapes C0 controls, not C1 or bidi).
    """
    if findings <= PRETTY_MAX_FINDINGS:
        return json.dumps(clean_tree(doc), indent=2, ensure_ascii=False) + "\n"
    return clean_json(doc) + "\n"


@register
class JsonReporter(Reporter):
    name = "json"
    extension = ".json"

    def render(self, report: Report, options: ReportOptions) -> str:
        return dump_json(report_json(report, options), len(report.groups))
