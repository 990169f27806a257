"""JUnit XML for CI dashboards: one test case per finding group, a passing case when clean.

Test case names are derived from the kind and the code location of the later access plus
the fingerprint, so a dashboard tracks the same bug across nightly runs.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Optional

from ...trace_format.safe_text import clean_lines
from ..findings.grouping import Group
from .sources import paths_shown_as, user_site
from . import describe as D
from .base import Report, Reporter, ReportOptions, register
from .sarif import ci_path
from .text import group_text

def _x(s: str) -> str:
    """Safe for XML 1.0 and for a terminal: every line sanitized, newlines kept."""
    return clean_lines(s)


def case_name(g: Group, root: Optional[str] = None) -> str:
    f = g.finding
    site = user_site(f.access.stack)
    where = f"{junit_path(site.filename, root)}:{site.lineno}" if site else f.access.op
    return f"{f.kind.value} at {where} [{g.fingerprint[:12]}]"


def junit_path(filename: str, root: Optional[str]) -> str:
    """A file as CI dashboards resolve it: relative to the source root when under it, else
    absolute, as SARIF names it."""
    return ci_path(filename, root)


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
            ET.SubElement(props, "property", name="trace", value=_x(str(t.path)))
            if t.truncated:
                ET.SubElement(props, "property", name="truncated", value=_x(str(t.path)))
        ET.SubElement(props, "property", name="suppressed", value=str(len(report.suppressed)))
        if options.source_root is not None:
            ET.SubElement(props, "property", name="source_root", value=_x(options.source_root))
        for where, why in report.errors:
            case = ET.SubElement(suite, "testcase", classname="npusan.unreadable", name=_x(f"analyze {where}"))
            ET.SubElement(case, "error", type="unreadable", message=_x(f"{where}: could not be analyzed: {why}"))
        if not report.groups and not report.errors:
            ET.SubElement(
                suite, "testcase", classname="npusan", name="no stream-synchronization findings"
            )
        for i, g in enumerate(report.groups, 1):
            f = g.finding
            case = ET.SubElement(suite, "testcase", classname=f"npusan.{f.kind.value}",
                                 name=_x(case_name(g, options.source_root)))
            site = user_site(f.access.stack)
            if site is not None:
                case.set("file", _x(junit_path(site.filename, options.source_root)))
                case.set("line", str(site.lineno))
            failure = ET.SubElement(
                case, "failure", type=f.kind.value, message=_x(D.title(f, report.header(f.trace)))
            )
            failure.text = _x(group_text(report, g, plain, i, len(report.groups), sources))
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
