"""JUnit XML for CI dashboards: one test case per finding group, a passing case when clean.

Test case names are derived from the kind and the code location of the later access plus
the fingerprint, so a dashboard tracks the same bug across nightly runs.

What the text report says about the run besides its findings (a truncated trace, the
analyzer's warnings, the run notes) goes to the suite's ``<system-err>``, to the passing
case's when the run is clean, and to ``warning``/``note`` properties: a nightly job over a
crashed run's trace must not read as a plain pass.

Every string comes from an untrusted trace: each is cleaned of what XML 1.0 cannot carry
(and of terminal controls), attributes are one line of bounded length, and a ``file``
attribute never climbs (``..``) out of the checkout a consumer resolves it against.
"""

from __future__ import annotations

import ntpath
import os
import xml.etree.ElementTree as ET
from pathlib import PureWindowsPath
from typing import Optional

from ...trace_format.safe_text import clean, clean_lines
from ..findings.grouping import Group
from .run_notes import run_notes
from .sources import paths_shown_as, user_site
from . import describe as D
from .base import Report, Reporter, ReportOptions, register
from .sarif import ci_path, relative_to_root
from .text import group_text

#: The longest attribute value written, in characters (a name, a path, a message).
ATTRIBUTE_LIMIT = 4096


def _x(s: str) -> str:
    """Safe for XML 1.0 and for a terminal: every line sanitized, newlines kept."""
    return clean_lines(s)


def _attr(s: str) -> str:
    """An attribute value: one sanitized line of at most :data:`ATTRIBUTE_LIMIT` characters."""
    return clean(s, ATTRIBUTE_LIMIT)


def case_name(g: Group, root: Optional[str] = None) -> str:
    f = g.finding
    site = user_site(f.access.stack)
    where = f"{junit_path(site.filename, root)}:{site.lineno}" if site else f.access.op
    return f"{f.kind.value} at {where} [{g.fingerprint[:12]}]"


def junit_path(filename: str, root: Optional[str]) -> str:
    """A file as CI dashboards resolve it: relative to the source root when under it, else
    absolute, as SARIF names it.

    A name with ``..`` parts (``../../etc/passwd``, ``<root>/../x.py``) is resolved first,
    as SARIF resolves it: relative to the root if it lands under it, else absolute. A
    consumer that joins a relative ``file`` to its checkout then never leaves it.
    """
    name = ci_path(filename, root)
    if name.startswith("<") or ".." not in name.replace("\\", "/").split("/"):
        return name
    if PureWindowsPath(name).drive:
        full = ntpath.normpath(name)
    else:
        base = os.path.abspath(root) if root is not None else os.getcwd()
        full = os.path.normpath(os.path.join(base, name.replace("\\", "/")))
    rel = relative_to_root(full, os.path.abspath(root)) if root is not None else None
    return rel if rel is not None else full


def _file_attribute(filename: str, root: Optional[str]) -> Optional[str]:
    """The ``file`` attribute for ``filename``, or None where no file can be named: a
    pseudo-file (``<string>``) or a name the cleaning would change (a cut or replaced
    character names another file)."""
    name = junit_path(filename, root)
    if not name or name.startswith("<") or _attr(name) != name:
        return None
    return name


def run_warnings(report: Report, options: ReportOptions) -> list[tuple[str, str]]:
    """``(kind, line)`` for what the text report says about the run besides its findings:
    ``warning`` lines of each analyzed trace (cut, ended early, the analyzer's warnings)
    and ``note`` lines (the run notes: what was left out, compared, recorded coarsely)."""
    out: list[tuple[str, str]] = []
    for t in report.traces:
        if t.error is not None:
            continue  # an error case of its own
        state = D.trace_state(t)
        if state:
            why = "" if t.truncated else f" ({t.end_reason})"
            out.append(("warning", f"trace {t.path}: {state}{why}"))
        out.extend(("warning", f"trace {t.path}: {w}") for w in t.warnings)
    for note in run_notes(report, options):
        if note.label == "unreadable":
            continue  # an error case of its own
        out.append(("note", note.text))
        out.extend(("note", f"  {i.marker} [{i.kind}] {i.title} ({i.fingerprint[:16]})"
                            + (f" {i.remark}" if i.remark else "")) for i in note.items)
        if note.caveat:
            out.append(("note", f"  {note.caveat}"))
    return out


@register
class JunitReporter(Reporter):
    name = "junit"
    extension = ".xml"

    def render(self, report: Report, options: ReportOptions) -> str:
        # the failure texts name files as the ``file`` attributes do
        with paths_shown_as(lambda filename: junit_path(filename, options.source_root)):
            return self._render(report, options)

    def _render(self, report: Report, options: ReportOptions) -> str:
        plain = ReportOptions(**{**options.__dict__, "color": False})
        sources = plain.source_cache()
        failures = len(report.groups)
        errors = len(report.errors)  # unreadable traces and arguments that named none: one error case each
        n = max(1, failures + errors)
        root = ET.Element("testsuites", name="npusan", tests=str(n), failures=str(failures), errors=str(errors))
        suite = ET.SubElement(
            root, "testsuite", name="npusan", tests=str(n), failures=str(failures), errors=str(errors), skipped="0"
        )
        props = ET.SubElement(suite, "properties")
        for t in report.traces:
            ET.SubElement(props, "property", name="trace", value=_attr(str(t.path)))
            if t.truncated:
                ET.SubElement(props, "property", name="truncated", value=_attr(str(t.path)))
        ET.SubElement(props, "property", name="suppressed", value=str(len(report.suppressed)))
        if options.source_root is not None:
            ET.SubElement(props, "property", name="source_root", value=_attr(options.source_root))
        warnings = run_warnings(report, options)
        for kind, line in warnings:
            ET.SubElement(props, "property", name=kind, value=_attr(line.strip()))
        stderr = _x("\n".join(line for _, line in warnings))
        for where, why in report.errors:
            case = ET.SubElement(suite, "testcase", classname="npusan.unreadable", name=_attr(f"analyze {where}"))
            ET.SubElement(case, "error", type="unreadable", message=_attr(f"{where}: could not be analyzed: {why}"))
        if not report.groups and not report.errors:
            case = ET.SubElement(
                suite, "testcase", classname="npusan", name="no stream-synchronization findings"
            )
            if warnings:  # what the pass does not cover, on the case's own page
                ET.SubElement(case, "system-err").text = stderr
        for i, g in enumerate(report.groups, 1):
            f = g.finding
            case = ET.SubElement(suite, "testcase", classname=f"npusan.{_attr(f.kind.value)}",
                                 name=_attr(case_name(g, options.source_root)))
            site = user_site(f.access.stack)
            if site is not None:
                file = _file_attribute(site.filename, options.source_root)
                if file is not None:
                    case.set("file", file)
                    case.set("line", str(site.lineno))
            failure = ET.SubElement(
                case, "failure", type=_attr(f.kind.value), message=_attr(D.title(f, report.header(f.trace)))
            )
            failure.text = _x(group_text(report, g, plain, i, len(report.groups), sources))
        if warnings:  # after the test cases, as the JUnit schema orders a suite
            ET.SubElement(suite, "system-err").text = stderr
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
