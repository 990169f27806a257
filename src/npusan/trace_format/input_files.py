"""Opening the files a user names (traces, suppression files, baselines) without hanging.

A path may name anything: a regular file, a FIFO nobody writes to (a plain ``open`` waits
forever for a writer), ``/dev/zero`` or a terminal (endless data, or a read that waits
for typing). :func:`open_input` accepts regular files, and pipes and FIFOs that deliver
data within :data:`PIPE_WAIT_S` seconds (``<(zcat trace.gz)`` works), and then reads
them until their writer closes them (:class:`_PatientPipe`); everything else is refused
at once. Every failure is an :class:`OSError` whose ``strerror`` says what
happened, so callers' existing one-line error paths report it.
"""

from __future__ import annotations

import errno
import io
import os
import select
import stat
import sys
from dataclasses import dataclass
from typing import BinaryIO, Optional

#: How long a pipe or FIFO may stay silent before it is given up as having no writer.
PIPE_WAIT_S = 10.0


@dataclass(frozen=True)
class StandardInput(os.PathLike):
    """The trace ``-`` names: standard input, opened as a file and shown as ``<stdin>``.

    ``os.fspath`` gives ``/dev/stdin``, so every reader opens it as it opens any path (a
    pipe included); ``str`` gives ``<stdin>``, the name Python and most tools give standard
    input, for reports and messages: ``/dev/stdin`` would name this machine's device, not
    the trace that came through it.
    """

    path: str = "/dev/stdin"
    name: str = "<stdin>"

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.name


def trace_name(source: object) -> Optional[str]:
    """What messages and reports call a trace source: a path as given, ``<stdin>`` for
    :class:`StandardInput`, a file object's ``name`` (None when it has none)."""
    if isinstance(source, StandardInput):
        return source.name
    if isinstance(source, (str, bytes, os.PathLike)):
        return os.fsdecode(source)
    return getattr(source, "name", None)


def open_input(path: "str | os.PathLike[str]") -> BinaryIO:
    """Open ``path`` for binary reading; refuse devices and writer-less FIFOs (OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            if not _readable_within(fd, PIPE_WAIT_S):
                raise OSError(
                    errno.ETIMEDOUT,
                    f"a pipe or FIFO that delivered nothing in {PIPE_WAIT_S:g} s (is anything writing to it?)",
                    os.fsdecode(path),
                )
        elif stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "is a directory", os.fsdecode(path))
        elif not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"not a regular file ({_kind(mode)})", os.fsdecode(path))
        os.set_blocking(fd, True)
        if stat.S_ISFIFO(mode):
            return io.BufferedReader(_PatientPipe(fd, os.fsdecode(path)))  # type: ignore[return-value]
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


#: Seconds without data on a pipe or FIFO, after it delivered some, before one note says
#: that npusan is waiting for its writer (it keeps waiting: a pipe is read until closed).
SILENCE_NOTE_S = 10.0


def _say(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:
        pass


class _PatientPipe(io.RawIOBase):
    """A pipe or FIFO read until its writer closes it, however long the writer pauses.

    After :data:`SILENCE_NOTE_S` seconds without data it says once, on stderr, that it is
    waiting (a trace being written by a paused program looks like a hang otherwise), and
    goes on waiting: no time limit could tell a slow writer from a dead one. Ctrl-C ends
    the wait at once (the poll is interrupted; the verb exits with 130).
    """

    def __init__(self, fd: int, name: str) -> None:
        super().__init__()
        self._fd = fd
        self.name = name
        self._noted = False
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN | select.POLLHUP)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, b) -> int:
        if not self._noted and not self._poller.poll(int(SILENCE_NOTE_S * 1000)):
            self._noted = True
            _say(f"npusan: note: waiting for data on the pipe or FIFO {self.name} (no data for "
                 f"{SILENCE_NOTE_S:g} s; it is read until its writer closes it; Ctrl-C stops)\n")
        return os.readv(self._fd, [b])

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def read_limited(f: BinaryIO, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``f``: one byte more than allowed tells "too large"

    without trusting a size (a pipe or a device has none).
    """
    chunks = []
    left = limit + 1
    while left > 0:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _readable_within(fd: int, seconds: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(max(0, int(seconds * 1000))))


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def distinct_inputs(paths: "list[str]") -> "tuple[list[str], list[tuple[str, str]]]":
    """``paths`` without repeats of one file: ``(kept, [(dropped, same file as), ...])``.

    Two names are the same file when they resolve to one device and inode (a relative and
    an absolute path, a symlink, a hard link); a name that cannot be examined is kept, for
    the reader to report. Analyzing one trace twice would double every count.
    """
    seen: dict = {}
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for p in paths:
        try:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None
        except (OSError, ValueError):
            key = None
        if key is not None and key in seen:
            dropped.append((p, seen[key]))
            continue
        if key is not None:
            seen[key] = p
        kept.append(p)
    return kept, dropped
