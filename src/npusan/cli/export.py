"""`npusan export TRACE --format chrome -o timeline.json`: a picture instead of seq numbers."""

from __future__ import annotations

import json
from typing import Optional

import click

from ..trace_format.errors import TraceFormatError
from .analyze import check_writable, write_output
from .errors import UsageProblem, one_line_errors

FORMATS = ("chrome",)


@click.command()
@click.argument("trace", metavar="TRACE")
@click.option("--format", "fmt", default="chrome", metavar="FORMAT", show_default=True,
              help="Timeline format: chrome (Chrome Trace Event JSON for Perfetto / chrome://tracing).")
@click.option("-o", "--output", default=None, metavar="FILE", help="Write to FILE instead of stdout.")
@click.option("--around-findings", default=None, type=int, metavar="N",
              help="Keep only the N kernels before and after each finding's accesses.")
@click.option("--check-leaks", is_flag=True, help="Also mark blocks never freed (as npusan analyze --check-leaks).")
@one_line_errors
def export(trace: str, fmt: str, output: Optional[str], around_findings: Optional[int], check_leaks: bool) -> None:
    """Export TRACE as a timeline: one track per stream, sync arrows, findings marked."""
    from ..analyzer.timeline import export_chrome

    if fmt not in FORMATS:
        raise UsageProblem(f"unknown timeline format '{fmt}' (expected one of {', '.join(FORMATS)})")
    if around_findings is not None and around_findings < 0:
        raise UsageProblem(f"--around-findings must be 0 or more (got {around_findings})")
    if output is not None:
        check_writable(output)
    try:
        doc = export_chrome(trace, around_findings=around_findings, check_leaks=check_leaks)
    except OSError as e:
        raise TraceFormatError(f"{trace}: cannot read the trace: {e.strerror or e}") from None
    except TraceFormatError as e:
        raise type(e)(f"{trace}: {e}") from None
    write_output(output, json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n")
