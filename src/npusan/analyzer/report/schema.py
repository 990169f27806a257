"""JSON Schema (draft 2020-12) of the JSON report, schema version 1.x.

Kept as Python data so it ships with the package without package-data plumbing;
``docs/report-schema.json`` is the same document written out (a test keeps them equal).
Fields may be added in minor versions, so objects allow additional properties.
"""

from __future__ import annotations

import json

_frame = {
    "type": "object",
    "required": ["file", "line", "function"],
    "properties": {
        "file": {"type": "string"},
        "line": {"type": "integer"},
        "function": {"type": "string"},
    },
}
_stack = {"type": "array", "items": {"$ref": "#/$defs/frame"}}
_stream = {
    "type": ["object", "null"],
    "required": ["index", "device", "handle", "default", "name", "created_at"],
    "properties": {
        "index": {"type": "integer", "minimum": 0},
        "number": {"type": ["integer", "null"], "minimum": 1},
        "device": {"type": "integer"},
        "handle": {"type": "integer"},
        "default": {"type": "boolean"},
        "name": {"type": "string"},
        "created_at": {"$ref": "#/$defs/stack"},
        "role": {"type": ["string", "null"]},
    },
}
_access = {
    "type": "object",
    "required": ["stream", "op", "type", "stack", "seq"],
    "properties": {
        "stream": {"$ref": "#/$defs/stream"},
        "op": {"type": "string"},
        "type": {"enum": ["read", "write"]},
        "seq": {"type": "integer", "minimum": 0},
        "stack": {"$ref": "#/$defs/stack"},
        "offset": {"type": ["integer", "null"]},
        "nbytes": {"type": ["integer", "null"]},
        "replay": {
            "type": ["object", "null"],
            "required": ["stream", "stack", "captured_at"],
            "properties": {
                "stream": {"$ref": "#/$defs/stream"},
                "stack": {"$ref": "#/$defs/stack"},
                "captured_at": {"$ref": "#/$defs/stack"},
            },
        },
    },
}
_occurrence = {
    "type": "object",
    "required": ["trace", "seq"],
    "properties": {"trace": {"type": "integer", "minimum": 0}, "seq": {"type": "integer"}},
}
_kind = {"enum": ["data-race", "missing-record-stream", "reuse-race"]}
_count_pair = {
    "type": "object",
    "required": ["findings", "occurrences"],
    "properties": {
        "findings": {"type": "integer", "minimum": 0},
        "occurrences": {"type": "integer", "minimum": 0},
    },
}

REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://npusan.invalid/schemas/report-1.json",
    "title": "npusan analyze --format json report",
    "type": "object",
    "required": ["schema_version", "tool", "findings", "summary", "traces", "baseline"],
    "properties": {
        "schema_version": {"type": "string", "pattern": r"^1\.[0-9]+$"},
        "tool": {
            "type": "object",
            "required": ["name", "version"],
            "properties": {"name": {"const": "npusan"}, "version": {"type": "string"}},
        },
        "grouped": {"type": "boolean"},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "kind", "title", "fingerprint", "count", "addresses", "access", "previous",
                    "block", "traces", "first", "last",
                ],
                "properties": {
                    "kind": _kind,
                    "title": {"type": "string"},
                    "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{16,64}$"},
                    "count": {"type": "integer", "minimum": 1},
                    "addresses": {"type": "array", "items": {"type": "integer"}},
                    "access": {"$ref": "#/$defs/access"},
                    "previous": {"$ref": "#/$defs/access"},
                    "other_streams": {"type": "array", "items": {"$ref": "#/$defs/stream"}},
                    "merged_ranges": {"type": "boolean"},
                    "block": {
                        "type": "object",
                        "required": ["address", "size", "stream", "stack"],
                        "properties": {
                            "address": {"type": "integer"},
                            "size": {"type": ["integer", "null"]},
                            "stream": {"$ref": "#/$defs/stream"},
                            "stack": {"$ref": "#/$defs/stack"},
                        },
                    },
                    "traces": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                    "first": {"$ref": "#/$defs/occurrence"},
                    "last": {"$ref": "#/$defs/occurrence"},
                    "omitted": {"type": "integer", "minimum": 0},
                    "fix": {"type": "array", "items": {"type": "string"}},
                    "root_cause": {"type": ["integer", "null"], "minimum": 1},
                    "status": {"enum": ["new", "persisting", None]},
                },
            },
        },
        "root_causes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "title", "waiter", "waited", "at", "fix", "findings", "kinds", "occurrences", "tensors"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "title": {"type": "string"},
                    "waiter": {"$ref": "#/$defs/stream"},
                    "waited": {"$ref": "#/$defs/stream"},
                    "at": {"oneOf": [{"$ref": "#/$defs/frame"}, {"type": "null"}]},
                    "fix": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "findings": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^[0-9a-f]{16,64}$"},
                        "minItems": 1,
                    },
                    "kinds": {"type": "object", "propertyNames": _kind,
                              "additionalProperties": {"type": "integer", "minimum": 1}},
                    "occurrences": {"type": "integer", "minimum": 1},
                    "tensors": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "size", "allocated_at", "findings"],
                            "properties": {
                                "name": {"type": ["string", "null"]},
                                "size": {"type": ["integer", "null"]},
                                "allocated_at": {"oneOf": [{"$ref": "#/$defs/frame"}, {"type": "null"}]},
                                "findings": {"type": "integer", "minimum": 1},
                            },
                        },
                    },
                },
            },
        },
        "summary": {
            "type": "object",
            "required": [
                "findings", "occurrences", "by_kind", "suppressed", "suppressed_occurrences",
                "below_min_count", "truncated",
            ],
            "properties": {
                "findings": {"type": "integer", "minimum": 0},
                "occurrences": {"type": "integer", "minimum": 0},
                "by_kind": {
                    "type": "object",
                    "propertyNames": _kind,
                    "additionalProperties": _count_pair,
                },
                "suppressed": {"type": "integer", "minimum": 0},
                "suppressed_occurrences": {"type": "integer", "minimum": 0},
                "below_min_count": {"type": "integer", "minimum": 0},
                "min_count": {"type": "integer"},
                "check_leaks": {"type": "boolean"},
                "truncated": {"type": "boolean"},
            },
        },
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["trace", "error"],
                "properties": {"trace": {"type": "string"}, "error": {"type": "string"}},
            },
        },
        "fixed": {"type": ["array", "null"], "items": {"$ref": "#/$defs/known"}},
        "unchecked": {
            "type": ["array", "null"],
            "items": {
                "allOf": [{"$ref": "#/$defs/known"}],
                "required": ["traces"],
                "properties": {"traces": {"type": "array", "items": {"type": "string"}},
                               "why": {"type": "array", "items": {"type": "string"}}},
            },
        },
        "comparison": {
            "type": ["object", "null"],
            "required": ["against", "new", "persisting", "fixed", "unchecked", "unreadable_traces",
                         "hidden_by_baseline", "below_min_count"],
            "properties": {
                "against": {"type": "string"},
                "new": {"type": "integer", "minimum": 0},
                "persisting": {"type": "integer", "minimum": 0},
                "fixed": {"type": "integer", "minimum": 0},
                "unchecked": {"type": "integer", "minimum": 0},
                "unreadable_traces": {"type": "integer", "minimum": 0},
                "hidden_by_baseline": {"$ref": "#/$defs/statuses"},
                "below_min_count": {"$ref": "#/$defs/statuses"},
            },
        },
        "baseline": {
            "type": ["object", "null"],
            "required": ["path", "known", "gone"],
            "properties": {
                "path": {"type": "string"},
                "known": {"type": "array", "items": {"type": "string"}},
                "gone": {"type": "array", "items": {"$ref": "#/$defs/known"}},
            },
        },
        "traces": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "header", "events", "kernels", "truncated", "warnings"],
                "properties": {
                    "path": {"type": "string"},
                    "header": {"type": "object"},
                    "events": {"type": "integer", "minimum": 0},
                    "kernels": {"type": "integer", "minimum": 0},
                    "truncated": {"type": "boolean"},
                    "warnings": {"type": "array", "items": {"type": "string"}},
                    "rank": {"type": ["integer", "null"]},
                    "findings": {"type": "object", "propertyNames": _kind, "additionalProperties": {"type": "integer"}},
                    "left_out": {"type": "integer", "minimum": 0},
                    "status": {"enum": ["clean", "findings", "left-out", "truncated", "unreadable"]},
                    "error": {"type": ["string", "null"]},
                },
            },
        },
    },
    "$defs": {
        "frame": _frame,
        "stack": _stack,
        "stream": _stream,
        "access": _access,
        "occurrence": _occurrence,
        "statuses": {
            "type": "object",
            "required": ["new", "persisting"],
            "properties": {
                "new": {"type": "integer", "minimum": 0},
                "persisting": {"type": "integer", "minimum": 0},
            },
        },
        "known": {
            "type": "object",
            "required": ["fingerprint", "kind", "title"],
            "properties": {
                "fingerprint": {"type": "string"},
                "kind": {"type": "string"},
                "title": {"type": "string"},
            },
        },
    },
}


def schema_text() -> str:
    """The schema as written to ``docs/report-schema.json``."""
    return json.dumps(REPORT_SCHEMA, indent=2) + "\n"
