"""Where the verbs write: checked before any work, and written whole or not at all.

A report (or a redacted trace) goes to a temporary file beside its target, is flushed to
disk, and is renamed over the target: a full disk, a kill or a crash leaves the previous
file (or none), never a truncated one that a CI job would read as a short report.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO, Iterator, Optional

import click

from .errors import UsageProblem


def dash_is_stdout(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    """``-o -``: standard output, as without ``-o`` (the usual meaning of ``-``)."""
    return None if value == "-" else value


def check_writable(path: str, what: str = "the report") -> None:
    """Fail now, before any analysis, if ``-o PATH`` cannot be written."""
    if os.path.isdir(path):
        raise UsageProblem(f"cannot write {what} to {path}: it is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageProblem(f"cannot write {what} to {path}: directory {parent} does not exist")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageProblem(f"cannot write {what} to {path}: permission denied")
    elif not os.access(parent, os.W_OK):
        raise UsageProblem(f"cannot write {what} to {path}: directory {parent} is not writable")


def refuse_overwriting_input(path: str, arguments: "list[str]", what: str = "the report") -> None:
    """Fail now if ``-o PATH`` is one of the traces the command reads.

    The report would be renamed over the trace it was made from: the recording is lost
    and nothing says so. ``arguments`` are the command's trace arguments (files,
    directories, glob patterns); the output is compared with every trace they name, by
    resolved path and by device and inode (a relative name, a symlink, a hard link).
    """
    from ..trace_format.inputs import find_traces

    target = os.path.realpath(path)
    try:
        out = os.stat(path)
        identity = (out.st_dev, out.st_ino) if stat.S_ISREG(out.st_mode) else None
    except OSError:
        identity = None
    for trace in find_traces(arguments).paths:
        if not isinstance(trace, str):  # standard input
            continue
        same = os.path.realpath(trace) == target
        if not same and identity is not None:
            try:
                st = os.stat(trace)
                same = (st.st_dev, st.st_ino) == identity
            except OSError:
                pass
        if same:
            shown = path if trace == path else f"{path} (the same file as {trace})"
            raise UsageProblem(f"cannot write {what} to {shown}: it is a trace being read; "
                               "give another file to -o")


#: Standard output is written in pieces of this many characters (see write_output).
STDOUT_PIECE = 1 << 16


def write_output(path: Optional[str], text: str, what: str = "the report") -> None:
    """Print ``text``, or write it to ``path`` whole (see the module docstring).

    Printed in pieces, each flushed: one write larger than a pipe holds can come back
    without an error when the reader of the pipe leaves (``| head``), and the command would
    then exit as if its output had been read; a later piece fails with BrokenPipeError,
    which ends the command as every verb ends when its reader has gone (errors.reader_gone).
    """
    if path is None:
        for i in range(0, len(text), STDOUT_PIECE):
            click.echo(text[i:i + STDOUT_PIECE], nl=False)
        return
    with atomic_output(path, what) as f:
        f.write(text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output(path: str, what: str = "the report") -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` when the block ends without an exception.

    A device or pipe (``-o /dev/stdout``) is written directly: it cannot be renamed over.
    It is recognized by ``path`` itself: resolving ``/dev/stdout`` when it is a pipe gives
    ``/proc/PID/fd/pipe:[N]``, a name that cannot be opened. A link to a regular file is
    replaced at its target. An OSError becomes one :class:`UsageProblem` line saying
    nothing was written.
    """
    try:
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            with open(path, "wb") as f:
                yield f
            return
        target = os.path.realpath(path)
        import secrets

        parent, name = os.path.split(target)
        tmp = os.path.join(parent, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        # O_EXCL: never follow a planted link; 0o666 lets the umask decide, as open() would.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if os.path.exists(target):  # replacing a file keeps its mode, as writing into it would
                os.fchmod(fd, os.stat(target).st_mode & 0o7777)
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except BrokenPipeError:  # a FIFO whose reader left: see errors.reader_gone
        raise
    except OSError as e:
        raise UsageProblem(f"cannot write {what} to {path}: {e.strerror or e}; nothing was written") from None
