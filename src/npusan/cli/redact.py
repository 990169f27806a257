"""`npusan redact TRACE -o OUT`: a copy of a trace fit for a public bug report."""

from __future__ import annotations

import os
import stat
from typing import Optional

import click

from ..trace_format.errors import TraceFormatError
from .errors import UsageProblem, one_line_errors, refuse_like_analyze
from .output import atomic_output, check_writable


@click.command()
@click.argument("trace", metavar="TRACE")
@click.option("-o", "--output", required=True, metavar="OUT", help="Where to write the redacted trace.")
@click.option("--source-root", default=None, metavar="DIR",
              help="Files under DIR keep their path inside it (default: the header's source_root, the recorded root, the nearest "
                   "folder with .git or pyproject.toml, or the common folder of the recorded files).")
@click.option("--drop-source", is_flag=True,
              help="Drop every source line recorded in the trace, the project's too (fingerprints then use line numbers).")
@click.option("--keep-outside-source", is_flag=True,
              help="Keep the source lines recorded for files outside the source root (dropped by default: findings "
                   "with such frames then get other fingerprints).")
@click.option("--force", is_flag=True, help="Overwrite OUT if it exists.")
@one_line_errors
def redact(trace: str, output: str, source_root: Optional[str], drop_source: bool, keep_outside_source: bool,
           force: bool) -> None:
    """Copy TRACE without host, command line, pid, times, metadata, thread names, note texts,
    stream labels other than npusan's own, the directories outside the source root and the
    source lines recorded for files outside it. Findings stay the same; so do the fingerprints
    of findings in the project's own files (fingerprints use paths relative to the source root
    and the recorded line text; a frame outside the root whose text is dropped counts by its
    line number).

    See docs/bug-reports.md.
    """
    from ..trace_format.compression import compressing_into
    from ..trace_format.redact import redact as run_redact

    try:  # read twice: a regular file only (stat does not block on a FIFO)
        st = os.stat(trace)
    except OSError as e:
        raise TraceFormatError(f"{trace}: cannot read the trace: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceFormatError(f"{trace}: cannot read the trace: not a regular file "
                               "(redact reads it twice; copy it to a file first)")
    check_writable(output, "the redacted trace")
    if os.path.exists(output):
        out_st = os.stat(output)
        if (out_st.st_dev, out_st.st_ino) == (st.st_dev, st.st_ino):
            raise UsageProblem(f"{output} is the input trace; write the redacted copy to another file")
        if stat.S_ISREG(out_st.st_mode) and not force:
            raise UsageProblem(f"{output} exists; add --force to overwrite it")
    # A trace analyze refuses is refused here too, with analyze's line and before anything
    # is written: the redacted copy would only be refused by whoever analyzes it.
    refuse_like_analyze(trace)
    try:
        with atomic_output(output, "the redacted trace") as f:
            summary = run_redact(trace, compressing_into(f, output), source_root=source_root, drop_source=drop_source,
                                 keep_outside_source=keep_outside_source)
    except OSError as e:
        raise TraceFormatError(f"{trace}: cannot read the trace: {e.strerror or e}") from None
    except TraceFormatError as e:
        raise type(e)(f"{trace}: {e}") from None
    root = summary.source_root or "none found (every directory dropped)"
    parts = [f"{summary.paths} file names rewritten (source root: {root})"]
    if summary.header_keys:
        parts.append(f"header keys dropped: {', '.join(summary.header_keys)}")
    if summary.header_values:
        parts.append(f"header values replaced: {', '.join(summary.header_values)}")
    parts += [f"{n} {what}" for n, what in (
        (summary.threads, "thread names replaced"),
        (summary.source_lines, "recorded source lines dropped"),
        (summary.outside_source_lines, "recorded source lines of files outside the source root dropped"),
        (summary.notes, "note texts dropped"),
        (summary.stream_labels, "stream labels replaced"),
        (summary.strings, "strings that name nothing replaced"),
        (summary.unknown_records, "records of unknown types dropped"),
        (summary.extra_fields, "unknown fields of known records dropped"),
    ) if n]
    click.echo(f"npusan: redacted trace written: {output} ({'; '.join(parts)})", err=True)
    if summary.truncated:
        click.echo("npusan: warning: the trace was cut (no end record); so is the redacted copy", err=True)
