"""The end of a trace's data: a cut, a killed writer's zeros, a trace still being written.

A trace without an END record ends in one of a few ways (docs/trace-format.md, section 7),
and a reader must tell them apart from damage, whichever way it reads the records:

* **cut** inside a record (a crash, a kill, a full disk): the unfinished record is left out
  with a warning, unless its bytes are what no valid record holds (:mod:`.unfinished`);
* **zero-filled**: a writer that maps its file grows it ahead of its records, and a process
  killed before closing it leaves that space as zero bytes. A zero byte never starts a
  record, so a zero where one would start, followed by zeros only, ends the data like a
  cut (:meth:`Tail.zeros_to_end`); where the data ends in zeros, the reader's
  :class:`~.record_source.RecordSource` held them back so that they complete no record
  (:attr:`Tail.held_zeros`), and only an END record may be completed by them
  (:meth:`Tail.completed_by_zeros`);
* **still being written**: a mapped writer that writes over those zeros while the file is
  read (:meth:`Tail.written_since`): what was read so far stands, with its own warning.

:class:`Tail` answers these questions about one reader's input; the reader words the
warnings and errors (it knows the record count and the events). The answers are the same
for a file, a pipe and a ``.zst``/``.gz`` trace decompressed as a stream: where the input
cannot be read again, the bytes are looked at as they were read, or read ahead.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import msgpack

from .errors import TraceFormatError
from .limits import (MAX_ARRAY_LEN, MAX_BIN_LEN, MAX_EXT_LEN, MAX_MAP_LEN, MAX_RECORD_BYTES, MAX_STR_LEN,
                     READ_SIZE, UNPACK_LIMITS)
from .record_source import RecordSource
from .unfinished import over_limit
from .unfinished import problem as unfinished_problem

#: The most bytes of an unfinished record (or header) looked at to tell a cut from damage.
LOOK_AT = 1 << 20


def header_problem(file: Any, base: int, offset: int) -> Optional[str]:
    """Why the header the data ends inside (from file offset ``offset`` on, ``base`` being
    where the trace starts in ``file``) is corrupt rather than cut, or None (a cut, or an
    input that cannot be read again: nothing to look back at)."""
    data = _read_at(file, base + offset, LOOK_AT)
    return over_limit(data) if data else None


class Tail:
    """What one reader's input holds at its end (see the module docstring).

    ``file`` is the reader's input and ``base`` where the trace starts in it; ``origin``
    the offset (from ``base``) of the first byte ``source`` hands out, and ``read_ahead``
    reads past the bytes the record unpacker consumed (its ``read_bytes``).
    ``zero_record_error(offset)`` is the reader's message for a zero byte read where a
    record starts at ``offset`` that is not the start of a zero tail (:meth:`zeros_to_end`
    raises it where the data cannot be read again).
    """

    #: The most zero bytes looked through for the end of the record the data ends inside
    #: (see :meth:`completed_by_zeros`).
    ZEROS_LOOKED_AT = 4096
    #: Bytes read at a time when a zero tail is checked by reading ahead (constant memory).
    ZERO_TAIL_CHUNK = 1 << 16

    def __init__(self, file: Any, base: int, origin: int, source: RecordSource,
                 read_ahead: Callable[[int], bytes], zero_record_error: Callable[[int], str]) -> None:
        self._file = file
        self._base = base
        self._origin = origin
        self._source = source
        self._read_ahead = read_ahead
        self._zero_record_error = zero_record_error
        #: The data ended in the zero bytes a killed mapped writer leaves (:meth:`zeros_to_end`).
        self.zeros = False
        #: The data ended where a mapped writer had not written yet, and it wrote there while
        #: the trace was read: the trace is still being written.
        self.still_written = False

    @property
    def held_zeros(self) -> int:
        """Zero bytes held back at the end of the data (0 before the end, or where there are none)."""
        return self._source.end_zeros or 0

    @property
    def zeros_from(self) -> int:
        """The byte offset where the zeros held back at the end begin (all that was handed out
        to the record unpacker ends there)."""
        return self._origin + self._source.out

    def rereadable(self) -> bool:
        """Can the input be read again from an offset (a file, not a pipe or a decompressed
        stream)? Only then can a record's offset be found again (:meth:`record_start`)."""
        try:
            return bool(self._file.seekable())
        except (AttributeError, ValueError, OSError):
            return False

    def record_start(self, mark: tuple[int, int], k: int) -> Optional[int]:
        """Byte offset where record ``k`` starts, rescanned from ``mark`` (records read, the
        offset just after them); None if the input cannot seek back.

        For error paths only: the record unpacker's own offset is unreliable there, since it
        has consumed part of the record it failed on.
        """
        n0, off = mark
        try:
            self._file.seek(self._base + off)
            up = msgpack.Unpacker(self._file, max_buffer_size=MAX_RECORD_BYTES, max_str_len=MAX_STR_LEN,
                                  max_bin_len=MAX_BIN_LEN, max_array_len=MAX_ARRAY_LEN, max_map_len=MAX_MAP_LEN,
                                  max_ext_len=MAX_EXT_LEN, read_size=READ_SIZE)
            for _ in range(k - 1 - n0):
                up.skip()
            return off + up.tell()
        except Exception:  # unseekable, or the data changed under us: no exact offset
            return None

    def unfinished_record(self, offset: Optional[int]) -> tuple[Optional[int], bytes, Optional[str]]:
        """The record the data ends inside, for a reader whose record unpacker ran out of
        data: where it starts (``offset``, if known), its bytes (up to the zeros held back),
        and why it makes the trace corrupt (None: a cut, or the zeros of a killed writer)."""
        if self.zeros:
            return offset, b"", None
        if self.rereadable():
            data = self.bytes_from(offset) or b""
            return offset, data, unfinished_problem(data) if data else None
        # a pipe, a decompressed stream: the unfinished record's bytes as they were read
        at, data = self._source.unfinished()
        problem = unfinished_problem(data[:LOOK_AT])
        if offset is None and at is not None:
            offset = self._origin + at
        return offset, data, problem

    def bytes_from(self, offset: Optional[int]) -> Optional[bytes]:
        """Up to :data:`LOOK_AT` bytes of the file from ``offset`` on, up to the zeros held
        back at the end of the data; None where the file cannot be read again."""
        if offset is None:
            return None
        limit = LOOK_AT
        if self._source.end_zeros:
            limit = min(limit, self.zeros_from - offset)
        return _read_at(self._file, self._base + offset, limit)

    def zeros_to_end(self, offset: int, ahead: bytes = b"") -> bool:
        """Whether the data from ``offset`` (where a record would start, at a zero byte) to
        the end of the file is all zero bytes: the reserved space of a killed mapped writer,
        which ends the data like a cut (:attr:`zeros`), or the zeros a writer wrote over
        while the file was read (:attr:`still_written` too).

        ``ahead``: bytes just after the zero that a raw consumer already holds (the rest of
        its buffer). A seekable file is read from ``offset`` and put back where it was.
        Data that cannot seek back (a ``.zst``/``.gz`` trace, decompressed as a stream; a
        pipe) is read ahead in chunks instead, in constant memory: both answers end the
        reading (the cut, or the error for the zero record), so nothing read ahead is
        needed again. There a non-zero byte raises the error at once, naming the record
        as the record types check would (the read-ahead moved the position).
        """
        if ahead.count(0) != len(ahead):
            return False
        try:
            here = self._file.tell()
            self._file.seek(self._base + offset)
        except (OSError, AttributeError, ValueError):
            return self._zeros_to_end_of_stream(offset)
        try:
            while True:
                chunk = self._file.read(1 << 20)
                if not chunk:
                    self.zeros = True
                    return True
                if chunk.count(0) != len(chunk):
                    # A writer fills its mapping in order: bytes after a zero record start can be
                    # written only once that one is. If it is no longer zero, the trace is being
                    # written while it is read; what was read so far stands.
                    if self.written_since(offset):
                        self.zeros = self.still_written = True
                        return True
                    return False
        except (OSError, ValueError):
            return False
        finally:
            try:
                self._file.seek(here)
            except (OSError, ValueError):  # pragma: no cover - it could seek a moment ago
                pass

    def _zeros_to_end_of_stream(self, offset: int) -> bool:
        """:meth:`zeros_to_end` for data that cannot seek back: read the rest, chunk by chunk."""
        error = self._zero_record_error(offset)
        self._source.raw = True  # no record boundaries to find in what is read ahead
        read = self._read_ahead
        size = self.ZERO_TAIL_CHUNK
        try:
            while True:
                chunk = read(size)
                if not chunk:
                    self.zeros = True
                    return True
                if chunk.count(0) != len(chunk):
                    break
        except (OSError, ValueError):
            pass
        raise TraceFormatError(error)

    def written_since(self, offset: int) -> bool:
        """Is the byte at ``offset``, read as a zero, no longer zero? Then the writer wrote
        there while the file was read: the trace is still being written."""
        try:
            here = self._file.tell()
            self._file.seek(self._base + offset)
            try:
                return self._file.read(1) not in (b"", b"\0")
            finally:
                self._file.seek(here)
        except (OSError, AttributeError, ValueError):
            return False

    def grew_over_held_zeros(self) -> bool:
        """At the end of the data: did the writer write over the zeros held back there while
        the file was read? (:attr:`still_written`, checked once.)"""
        if self.held_zeros and not self.still_written:
            self.still_written = self.written_since(self.zeros_from)
        return self.still_written

    def completed_by_zeros(self, unfinished: bytes) -> Optional[tuple[Any, int, int]]:
        """The record the data ends inside (``unfinished``: its bytes) as the zeros held back
        at the end complete it: ``(record, its length, how many of those zeros it takes)``,
        or None where they do not complete it (a cut record).

        Only an END record may end in them (its statistics' last value, a float say, may end
        in zero bytes): the reader keeps the record only if it is one; any other record may
        be bytes its writer never wrote, read as zeros.
        """
        up = msgpack.Unpacker(**UNPACK_LIMITS)
        up.feed(unfinished[: MAX_RECORD_BYTES] + bytes(min(self.held_zeros, self.ZEROS_LOOKED_AT)))
        try:
            rec = up.unpack()
        except Exception:  # noqa: BLE001 - not completed by them: a cut record
            return None
        used = up.tell() - len(unfinished)  # (at least one: the record was unfinished without them)
        return rec, up.tell(), used


def _read_at(file: Any, offset: int, limit: int) -> Optional[bytes]:
    """Up to ``limit`` bytes of ``file`` from ``offset`` on; None where it cannot seek there."""
    try:
        file.seek(offset)
        return file.read(limit) if limit > 0 else b""
    except (OSError, AttributeError, ValueError):
        return None
