"""Streaming trace reader: constant memory, any file size, untrusted input.

:class:`TraceReader` checks the magic bytes and the header in its constructor, then
:meth:`TraceReader.records` streams the records with one :class:`msgpack.Unpacker` whose
buffer and length limits are bounded, so a corrupt length field cannot make it allocate
gigabytes. Definitions (strings, frames, stacks, streams, blocks, threads) are absorbed
into :attr:`TraceReader.symbols` before the first record that uses them is yielded.
The analyzer's replay skips the generator (``direct_begin``/``direct_absorb``: it reads the
unpacker itself and hands the reader every record that is not a kernel), with the same
checks, counts and error messages.

What the reader guarantees about yielded records: each is a list whose first element equals
a known record type (an int: a float 17.0 is refused like any non-integer type, as the
engine's direct loop refuses it) and whose length is at least ``records.MIN_LENGTH`` of that type.
Apart from a NOTE's level and text (strings) and the definitions it absorbs, it does not
type-check the fields inside (that would cost more than the replay): consumers
turn ``TypeError``/``IndexError``/``KeyError`` raised on a malformed field into a
:class:`TraceFormatError`, naming :meth:`TraceReader.where` (record index, byte offset).
"""

from __future__ import annotations

import codecs
import os
import stat
from typing import IO, Any, Callable, Iterator, Optional, Union

import msgpack

from . import records as R
from .compression import HOLD_BYTES, decompressed
from .errors import TraceFormatError
from .header import MAX_VALUE_NODES, clean_header, format_version, summarize_value
from .input_files import open_input, trace_name
from .safe_text import clean
from .symbols import SymbolTable

#: Limits on one msgpack object (a record, or the header). A record is a few dozen bytes
#: (a kernel with thousands of accesses, tens of KiB); these bound what a corrupt or
#: hostile file can make the reader allocate. Decoding can cost up to ~75 bytes of memory
#: per encoded byte (a byte ``0x80`` is a new empty dict), so one record of 4 MiB costs at
#: most ~300 MiB while it is decoded (docs/security.md).
MAX_RECORD_BYTES = 4 << 20
MAX_STR_LEN = 1 << 20
MAX_BIN_LEN = 1 << 20
MAX_ARRAY_LEN = 1 << 18
MAX_MAP_LEN = 1 << 16
MAX_EXT_LEN = 1 << 20
READ_SIZE = 1 << 16
#: The header, encoded: npusan writes well under 1 KiB; metadata maps beyond this are refused.
MAX_HEADER_BYTES = 1 << 20

_KNOWN = frozenset(R.MIN_LENGTH)
_NOT_A_RECORD = "is not a record ({}, expected an array)"
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.exceptions.ExtraData, msgpack.exceptions.StackError)

Source = Union[str, "os.PathLike[str]", IO[bytes]]


class TraceReader:
    """Read one trace: ``header`` now, records on iteration (see the module docstring)."""

    def __init__(self, source: Source, *, on_warning: Optional[Callable[[str], None]] = None) -> None:
        self.on_warning = on_warning
        self.warnings: list[str] = []
        self.symbols = SymbolTable()
        self.truncated = False
        self.ended_cleanly = False
        self.end_stats: Optional[dict] = None
        #: Why a trace with an END record still stops early (a signal ended the process,
        #: recording stopped on a full disk), from the END statistics; None for a clean end.
        self.end_reason: Optional[str] = None
        self.records_read = 0  # every record consumed (definitions and skipped ones included)
        self._unknown: dict[int, int] = {}  # unknown record type -> how many were skipped
        self._done = False
        self._gen: Any = None
        self._last: Any = None  # direct reading: the record the consumer handled last
        self._def_counts: dict[int, int] = {}
        # (records read, byte offset) just after the last record that took the slow path:
        # where error paths restart a scan to find the exact offset of a later record.
        self._mark = (0, len(R.MAGIC))
        # Bytes consumed, when a consumer reads the raw bytes itself (``read_raw``).
        self._consumed: Optional[int] = None
        self._origin = len(R.MAGIC)  # byte offset where the record unpacker's tell() counts from
        if isinstance(source, (str, bytes, os.PathLike)):
            self._file: Any = decompressed(open_input(source), trace_name(source))  # .zst/.gz as a stream
            self._owns = True
            self.name: Optional[str] = trace_name(source)
        else:
            if not hasattr(source, "read"):
                raise TypeError(f"expected a path or a binary file object, got {type(source).__name__}")
            self._file = source
            self._owns = False
            self.name = getattr(source, "name", None)
        try:
            self._base = self._tell()
            self.size = self._size()
            self._read_header()
        except TraceFormatError:
            damaged = getattr(self._file, "problem", None)  # corrupt compressed data
            self.close()
            if damaged is not None:
                raise TraceFormatError(
                    f"{damaged}, in the first compressed frame (the one that holds the trace header; a file "
                    "compressed as a whole is one frame)"
                ) from None
            raise
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------

    def _tell(self) -> int:
        try:
            return self._file.tell()
        except (OSError, AttributeError, ValueError):
            return 0

    def _size(self) -> Optional[int]:
        try:
            st = os.fstat(self._file.fileno())
        except (OSError, AttributeError, ValueError, TypeError):
            pass
        else:
            return st.st_size - self._base if stat.S_ISREG(st.st_mode) else None  # pipes: unknown
        try:  # in-memory files
            end = self._file.seek(0, os.SEEK_END)
            self._file.seek(self._base)
            return end - self._base
        except (OSError, AttributeError, ValueError):
            return None

    def _read_header(self) -> None:
        magic = _read_exactly(self._file, len(R.MAGIC))
        if not magic:
            kind = getattr(self._file, "kind", None)  # a .zst/.gz read through a DecompressingReader
            if kind is not None:
                raise TraceFormatError(
                    f"the {kind} data ends before any of it could be decoded: the file was cut inside its "
                    "first compressed frame (or block), which holds the trace header (a recording cut before "
                    "that frame was complete, or a partial copy?)"
                )
            raise TraceFormatError("the file is empty: not an npusan trace")
        if magic != R.MAGIC:
            if R.MAGIC.startswith(magic):
                raise TraceFormatError("the file ends inside the magic bytes: a trace cut before its header")
            if magic[:7] == R.MAGIC[:7]:
                raise TraceFormatError(
                    f"the trace container version {magic[7]} is not supported (this npusan reads {R.MAGIC[7]})"
                )
            raise TraceFormatError("not an npusan trace (the file does not start with the magic bytes NPUSANv\\x01)")
        header, rest = self._decode_header()
        if not isinstance(header, dict):
            raise TraceFormatError(f"the trace header is not a map (got {_typename(header)})")
        self.version = format_version(header)
        self.header: dict = clean_header(header)
        del header
        # The records get their own unpacker, starting where the header ended (the header
        # unpacker may have read ahead: those bytes come first).
        source = self._source = _RecordSource(rest, self._file, self._base + self._origin)
        self._unpacker = msgpack.Unpacker(
            source,
            raw=False,
            strict_map_key=False,
            max_buffer_size=MAX_RECORD_BYTES,
            max_str_len=MAX_STR_LEN,
            max_bin_len=MAX_BIN_LEN,
            max_array_len=MAX_ARRAY_LEN,
            max_map_len=MAX_MAP_LEN,
            max_ext_len=MAX_EXT_LEN,
            read_size=READ_SIZE,
        )
        self._mark = (0, self.position)

    def _decode_header(self) -> tuple[Any, bytes]:
        """The header object and the bytes read past it, under the tighter header limits.

        The header is fed to its own unpacker whose buffer holds at most
        :data:`MAX_HEADER_BYTES` (plus one read), so a huge metadata map is refused before
        it is decoded into Python objects (which can take 70 times its encoded size).
        """
        up = msgpack.Unpacker(
            raw=False,
            strict_map_key=False,  # default_streams is keyed by device number
            max_buffer_size=MAX_HEADER_BYTES + READ_SIZE,
            max_str_len=MAX_STR_LEN,
            max_bin_len=MAX_BIN_LEN,
            max_array_len=MAX_ARRAY_LEN,
            max_map_len=MAX_MAP_LEN,
            max_ext_len=MAX_EXT_LEN,
        )
        fed = bytearray()
        while True:
            chunk = self._file.read(READ_SIZE)
            if not chunk:
                problem = self._diagnose_tail(len(R.MAGIC))
                if problem is not None:
                    raise TraceFormatError(f"the trace header is corrupt: {problem}")
                raise TraceFormatError("the trace ends inside its header: the recording was cut before it began")
            if len(fed) + len(chunk) > MAX_HEADER_BYTES + READ_SIZE:
                raise TraceFormatError(f"the trace header is larger than the {_kib(MAX_HEADER_BYTES)} limit")
            up.feed(chunk)
            fed += chunk
            try:
                header = up.unpack()
            except msgpack.exceptions.OutOfData:
                continue
            except _MSGPACK_ERRORS as e:
                raise TraceFormatError(f"the trace header is corrupt ({_reason(e)})") from None
            used = up.tell()
            if used > MAX_HEADER_BYTES:
                raise TraceFormatError(f"the trace header is larger than the {_kib(MAX_HEADER_BYTES)} limit")
            self._origin = len(R.MAGIC) + used
            return header, bytes(fed[used:])

    # -- iteration -------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Bytes consumed so far (magic and header included), for progress bars."""
        if self._consumed is not None:
            return self._consumed
        up = getattr(self, "_unpacker", None)
        return self._origin + (up.tell() if up is not None else 0)

    def where(self, rec: Any = None) -> str:
        """Names the record read last for an error message: ``record N at byte offset X``.

        Records are numbered from 1 (the first after the header); the offset is where the
        record starts. Meant for consumers that find a malformed field in the record they
        were just given (``rec``, by default the record the generator yielded last).
        """
        index, last = self._current()
        if rec is None:
            rec = last
        start = self.position - (_packed_len(rec) if rec is not None else 0)
        return self._where(index, start)

    def _current(self) -> tuple[int, Any]:
        # The generator keeps its count and record in locals (no per-record attribute
        # store on the hot path); read them from the suspended frame.
        gen = self._gen
        frame = getattr(gen, "gi_frame", None) if gen is not None else None
        if frame is not None:
            loc = frame.f_locals
            n = loc.get("n")
            if type(n) is int:
                return n, loc.get("rec")
        return self.records_read, self._last

    def _current_index(self) -> int:
        return self._current()[0]

    @staticmethod
    def _where(index: int, offset: Optional[int]) -> str:
        if offset is None:
            return f"record {index}"
        return f"record {index} at byte offset {offset}"

    def __iter__(self) -> Iterator[list]:
        return self.records()

    def records(self) -> Iterator[list]:
        """Yield every non-definition record in order; END is consumed, not yielded.

        Ends cleanly at END (``ended_cleanly``) or at the end of the data (``truncated``,
        with a warning); raises :class:`TraceFormatError` on corrupt data.
        """
        self._gen = self._records()
        return self._gen

    def _records(self) -> Iterator[list]:
        if self._done:
            return
        unpacker = self._unpacker
        KERNEL = R.KERNEL
        list_ = list
        int_ = int
        n = self.records_read
        try:
            for rec in unpacker:
                n += 1
                # Fast path: the bulk of any trace is kernel records.
                if rec.__class__ is list_ and len(rec) >= 4 and rec[0] == KERNEL and rec[0].__class__ is int_:
                    yield rec
                    continue
                self.records_read = n
                if rec == 0 and rec.__class__ is int and self._zero_tail():
                    self.records_read = n = n - 1
                    break
                t = self._check(rec)
                self._mark = (n, self._origin + unpacker.tell())
                if t in R.DEFINITIONS:
                    self._define(rec)
                elif t == R.END:
                    self._end(rec)
                    self._done = True
                    return
                elif t < 0:  # an unknown type, already warned about
                    continue
                else:
                    if t == R.NOTE:
                        _clean_note(rec)
                    yield rec
        except (*_MSGPACK_ERRORS, msgpack.exceptions.BufferFull) as e:
            self.records_read = n
            self._corrupt(e)
        finally:
            self.records_read = n
        self._ran_out()

    def _corrupt(self, e: BaseException, offset: Optional[int] = None) -> None:
        """Raise the error for data the unpacker failed on, just after record ``records_read``.

        ``offset``: where that record starts, if the caller knows (else it is rescanned).
        An input that cannot be read again (a pipe, a decompressed stream) cannot be
        rescanned: there no offset is named, whoever knows it, so that both engines say the
        same.
        """
        n = self.records_read
        if offset is None or not self._rereadable():
            offset = self._start_of(n + 1)
        if isinstance(e, msgpack.exceptions.BufferFull):
            raise TraceFormatError(
                f"{self._where(n + 1, offset)} is larger than the {_mib(MAX_RECORD_BYTES)} "
                "limit on one record: the trace is corrupt"
            ) from None
        raise TraceFormatError(f"corrupt data at {self._where(n + 1, offset)} ({_reason(e)})") from None

    def _ran_out(self, offset: Optional[int] = None, tail: Optional[bytes] = None) -> None:
        """The data ended without an END record: a cut trace (warn) or a corrupt tail (raise).

        A consumer reading raw bytes passes where the unfinished record starts and its bytes.
        """
        n = self.records_read
        self._done = True
        unfinished = b""  # the bytes of the record the data ends inside, where known
        if tail is None:
            offset = self._start_of(n + 1)
            if self._zeros:
                problem = None
            elif self._rereadable():
                unfinished = self._tail_bytes(offset) or b""
                problem = _tail_problem(unfinished) if unfinished else None
            else:  # a pipe, a decompressed stream: the unfinished record's bytes as they were read
                at, unfinished = self._source.unfinished()
                problem = _tail_problem(unfinished[: 1 << 20])
                if offset is None and at is not None:
                    offset = self._origin + at
        elif tail and tail.count(0) == len(tail) and self._zero_tail_from(offset, tail):
            problem = None  # the space a killed mapped writer reserved (see _zero_tail)
        else:
            unfinished = tail
            problem = _tail_problem(tail[: 1 << 20])
        zeros = self._source.end_zeros or 0  # held back at the end (see _RecordSource)
        if zeros and unfinished and problem is None and self._completed_by_zeros(unfinished, zeros, offset):
            return
        if problem is not None:
            raise TraceFormatError(f"corrupt data at {self._where(n + 1, offset)}: {problem}")
        self.truncated = True
        if zeros and not self.still_written:
            self.still_written = self._written_since(self._origin + self._source.out)
        damaged = getattr(self._file, "problem", None)  # corrupt compressed data, not a cut
        if damaged is not None:
            raise TraceFormatError(
                f"{damaged}, after {self.events} events: the trace is damaged (a crash only cuts a "
                "compressed trace short; this is corruption)"
            )
        if self.still_written:
            self._warn(
                f"the trace is still being written (it grew while it was read): analyzed the {self.events} "
                "events written so far"
            )
            return
        left_out = ""
        if zeros and unfinished:
            where = f"the record at byte offset {offset}" if offset is not None else "the last record"
            left_out = (f"; {where} runs into the zero bytes that fill the file from byte offset "
                        f"{self._origin + self._source.out} on (pages its writer's machine may never have "
                        "written to disk) and was left out")
        self._warn(
            f"trace ends without an end record after {self.events} events: the recording was cut "
            "(the process was killed or crashed, is still writing it, or could not write it to the end); "
            f"analyzed up to the last complete record{left_out}"
        )

    #: The most zero bytes looked through for the end of the record the data ends inside
    #: (see _completed_by_zeros).
    ZEROS_LOOKED_AT = 4096

    def _completed_by_zeros(self, unfinished: bytes, zeros: int, offset: Optional[int]) -> bool:
        """The record the data ends inside, completed by zeros held back at the end (see
        _RecordSource), if they complete it: an END record is read as the end it is (its
        statistics' last value, a float say, may end in zero bytes), and True is returned;
        a record no valid trace has raises the error it always did. Any other record may be
        bytes its writer never wrote, read as zeros: it is left out (False), a cut record."""
        up = msgpack.Unpacker(**_UNPACK_LIMITS)
        up.feed(unfinished[: MAX_RECORD_BYTES] + bytes(min(zeros, self.ZEROS_LOOKED_AT)))
        try:
            rec = up.unpack()
        except Exception:  # noqa: BLE001 - not completed by them: a cut record
            return False
        used = up.tell() - len(unfinished)  # (at least one: the record was unfinished without them)
        t = rec[0] if rec.__class__ is list and rec else None
        if t.__class__ is int and t >= 0 and t not in _KNOWN:
            return False  # a record of an unknown type: skipped either way, nothing to say
        n, last, consumed = self.records_read, self._last, self._consumed
        self.records_read, self._last, self._gen = n + 1, rec, None  # where() names it
        if offset is not None:
            self._consumed = offset + up.tell()
        t = self._check(rec)
        if t != R.END:
            self.records_read, self._last, self._consumed = n, last, consumed
            return False
        self._consumed = consumed
        self._end(rec, zeros_used=used)
        self.end_record = rec
        return True

    def _written_since(self, offset: int) -> bool:
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

    # -- direct reading (the replay fast path) ----------------------------------------
    #
    # A consumer that handles kernel records itself (the analyzer's replay loop) can skip
    # the generator: it iterates the unpacker and hands every record that is not a kernel
    # of the fast-path form (a list of 4+ fields whose first equals KERNEL) to
    # ``direct_absorb``, which validates and absorbs it exactly as ``records()`` would. The
    # reader cannot see the kernels, so the consumer reports how many it has consumed
    # (``kernels``, a running count that started at ``direct_begin``'s) and the record
    # index is computed from that when needed; nothing is counted per kernel.

    def direct_begin(self, kernels: int = 0) -> Optional[Any]:
        """Start direct reading; return the msgpack unpacker (None if the trace was read).

        ``kernels`` is the consumer's kernel counter now; later calls pass the counter's
        current value. Use either ``records()`` or direct reading on one reader, not both.
        """
        if self._done:
            return None
        self.records_read = self._current_index()
        self._gen = None
        self._last = None
        self._dbase = self.records_read - kernels  # index = _dbase + kernels + _dother
        self._dother = 0
        return self._unpacker

    def direct_absorb(self, rec: Any, kernels: int) -> Any:
        """Handle a record that is not a fast-path kernel, read directly off the unpacker.

        Returns the record if the consumer must process it (an event, sync, allocation,
        note ... record that passed the same checks as in ``records()``), None if it was
        absorbed or skipped (a definition, an unknown type), or False at the END record
        (stop reading: the trace ended cleanly). Raises :class:`TraceFormatError` as
        ``records()`` does.
        """
        self._dother += 1
        n = self.records_read = self._dbase + kernels + self._dother
        if rec == 0 and rec.__class__ is int and self._zero_tail():
            self._dother -= 1
            self.records_read = n - 1
            self._ran_out()
            return False
        t = self._check(rec)
        self._mark = (n, self._origin + self._unpacker.tell())
        if t in R.DEFINITIONS:
            self._define(rec)
            return None
        if t == R.END:
            self._end(rec)
            self._done = True
            return False
        if t < 0:  # an unknown type, already warned about
            return None
        if t == R.NOTE:
            _clean_note(rec)
        return rec

    def direct_sync(self, kernels: int, last: Any = None) -> None:
        """Bring ``records_read`` (and ``where()``) up to date after the consumer stopped.

        ``last`` is the record the consumer handled last (what ``where()`` names).
        """
        self.records_read = self._dbase + kernels + self._dother
        self._last = last

    def direct_failed(self, e: BaseException) -> None:
        """Raise what ``records()`` raises for an exception the unpacker raised."""
        if isinstance(e, (*_MSGPACK_ERRORS, msgpack.exceptions.BufferFull)):
            self._corrupt(e)
        raise e

    def direct_exhausted(self) -> None:
        """The unpacker ran out of data before END: as ``records()`` (warn, or raise)."""
        if not self._done:
            self._ran_out()

    # -- raw reading (the compiled replay core parses the bytes itself) ---------------

    def read_raw(self, n: int) -> bytes:
        """Up to ``n`` bytes of the trace following what was read so far (b"" at the end).

        A raw consumer bounds the size of one record itself (:data:`MAX_RECORD_BYTES`).
        """
        self._source.raw = True
        return self._unpacker.read_bytes(n)

    def raw_sync(self, records: int, position: int, last: Any = None) -> None:
        """A raw consumer's progress: records consumed, bytes consumed, the record it is on."""
        self.records_read = records
        self._consumed = position
        self._last = last
        self._gen = None

    @property
    def events(self) -> int:
        """Non-definition records read so far (kernels included; exact between records)."""
        return self._current_index() - self._definitions - sum(self._unknown.values())

    _definitions = 0
    _zeros = False  # the data ended in the zero bytes a killed mapped writer leaves
    #: The data ended where a mapped writer had not written yet, and it wrote there while the
    #: trace was read: the trace is still being written (read up to there, with a warning).
    still_written = False
    #: An END record read from the bytes before the zeros held back at the end and those
    #: zeros (see _completed_by_zeros): a consumer that copies records copies it too.
    end_record: Optional[list] = None

    def _check(self, rec: Any) -> int:
        """Validate a record that missed the fast path; return its type (-1: skip it)."""
        if rec.__class__ is not list or not rec:
            raise TraceFormatError(f"{self.where(rec)} {_NOT_A_RECORD.format(_typename(rec))}")
        t = rec[0]
        if type(t) is not int:
            raise TraceFormatError(f"{self.where(rec)} has a record type that is not an integer ({_typename(t)})")
        if t < 0:  # (no version assigns one: not an unknown type to skip)
            raise TraceFormatError(f"{self.where(rec)} has a negative record type ({t}): the trace is corrupt")
        if t not in _KNOWN:
            seen = self._unknown.get(t)
            self._unknown[t] = (seen or 0) + 1
            if seen is None:
                major, minor = self.version
                if (major, minor) > (R.FORMAT_MAJOR, R.FORMAT_MINOR):
                    why = f"written for format {major}.{minor}; this npusan reads {R.FORMAT_MAJOR}.{R.FORMAT_MINOR}"
                else:
                    why = f"not defined in format {major}.{minor}"
                self._warn(f"skipping records of unknown type {t} ({why})")
            return -1
        if len(rec) < R.MIN_LENGTH[t]:
            raise TraceFormatError(
                f"{self.where(rec)} ({R.RECORD_NAMES[t]}) has {len(rec)} fields, fewer than the "
                f"{R.MIN_LENGTH[t]} it needs: the trace is corrupt"
            )
        if t == R.NOTE and (rec[1].__class__ is not str or rec[2].__class__ is not str):
            bad = rec[1] if rec[1].__class__ is not str else rec[2]
            field = "level" if bad is rec[1] else "text"
            raise TraceFormatError(
                f"{self.where(rec)} (NOTE) has a {field} that is {_a(bad)}, not a string: the trace is corrupt"
            )
        return t

    def _define(self, rec: list) -> None:
        self._definitions += 1
        t = rec[0]
        self._def_counts[t] = self._def_counts.get(t, 0) + 1
        try:
            self.symbols.define(rec)
        except TraceFormatError as e:
            raise TraceFormatError(f"{self.where(rec)}: {e}") from None
        except (TypeError, ValueError, KeyError, IndexError):  # a field of an unexpected type
            raise TraceFormatError(
                f"{self.where(rec)}: malformed {R.RECORD_NAMES[rec[0]]} record (a field has the wrong type)"
            ) from None

    def _end(self, rec: list, extra: Optional[bytes] = None, zeros_used: int = 0) -> None:
        """The END record; ``extra``: the bytes after it, if the caller has them;
        ``zeros_used``: zero bytes held back at the end that were its own last bytes."""
        stats = rec[1]
        # Informational, and shown by ``npusan info``: kept only summarized, as the header is.
        self.end_stats = summarize_value(stats, [MAX_VALUE_NODES]) if isinstance(stats, dict) else None
        self.ended_cleanly = True
        self.end_reason = _end_reason(self.end_stats)
        if self.end_reason is not None:
            self._warn(f"the recording ended early: {self.end_reason}; analyzed up to that point")
        self._definitions += 1  # END is not an event either
        if not extra:
            try:
                extra = self._unpacker.read_bytes(1)
            except Exception:  # pragma: no cover - a failing file after a clean end
                extra = b""
        self._refuse_untrusted()
        damaged = getattr(self._file, "problem", None)  # what follows the end record's frame is not valid
        if not extra and (self._source.end_zeros or 0) > zeros_used:
            extra = b"\0"  # zero bytes after it (held back: see _RecordSource)
        if extra or damaged is not None:
            self._warn(f"the trace has data after its end record{f': {damaged}' if damaged else ''}; it was ignored")
        elif getattr(self._file, "cut_short", False):
            # (the end record's own frame was released unverified, at the end of the data)
            self.truncated = True
            self._warn(
                "the compressed file ends inside its last frame, after the end record: the file was cut "
                "(a partial copy or download?) and that frame's checksum is missing, so its records "
                "were read unverified"
            )

    def _refuse_untrusted(self) -> None:
        """Raise if records already read came from a compressed frame that then failed its
        check (one too large to hold back until verified: see DecompressingReader)."""
        if getattr(self._file, "untrusted", False):
            raise TraceFormatError(
                f"{self._file.problem}, in a compressed frame of more than {_mib(HOLD_BYTES)} that was "
                "read in part before its checksum could be verified: what was decoded from it cannot be trusted"
            )

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.on_warning is not None:
            self.on_warning(message)

    def _start_of(self, k: int) -> Optional[int]:
        """Byte offset where record ``k`` starts (error paths only: rescans from the mark).

        The unpacker's own offset is unreliable here, since it has consumed part of the
        record it failed on. None if the source cannot seek back.
        """
        n0, off = self._mark
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

    def _zero_tail(self) -> bool:
        """Whether the zero byte just read starts a zero tail (see :meth:`_zero_tail_from`)."""
        return self._zero_tail_from(self.position - 1)

    #: Bytes read at a time when a zero tail is checked by reading ahead (constant memory).
    ZERO_TAIL_CHUNK = 1 << 16

    def _zero_tail_from(self, offset: int, ahead: bytes = b"") -> bool:
        """Whether the data from ``offset`` (where a record would start) to the end of the
        file is all zero bytes.

        A trace written through a mapping is grown ahead of its records; a process killed
        before closing it leaves that space as zero bytes after its last record (a zero byte
        is never the start of a record). Such a tail ends the data like a cut
        (docs/trace-format.md, section 7).

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
            return self._zero_stream(offset)
        try:
            while True:
                chunk = self._file.read(1 << 20)
                if not chunk:
                    self._zeros = True
                    return True
                if chunk.count(0) != len(chunk):
                    # A writer fills its mapping in order: bytes after a zero record start can be
                    # written only once that one is. If it is no longer zero, the trace is being
                    # written while it is read; what was read so far stands.
                    if self._written_since(offset):
                        self._zeros = self.still_written = True
                        return True
                    return False
        except (OSError, ValueError):
            return False
        finally:
            try:
                self._file.seek(here)
            except (OSError, ValueError):  # pragma: no cover - it could seek a moment ago
                pass

    def _zero_stream(self, offset: int) -> bool:
        """:meth:`_zero_tail_from` for data that cannot seek back: read the rest, chunk by chunk."""
        where = self._where(self.records_read, offset)
        self._source.raw = True  # no record boundaries to find in what is read ahead
        read = self._unpacker.read_bytes
        size = self.ZERO_TAIL_CHUNK
        try:
            while True:
                chunk = read(size)
                if not chunk:
                    self._zeros = True
                    return True
                if chunk.count(0) != len(chunk):
                    break
        except (OSError, ValueError):
            pass
        raise TraceFormatError(f"{where} {_NOT_A_RECORD.format(_typename(0))}")

    def _rereadable(self) -> bool:
        """Can the input be read again from an offset (a file, not a pipe or a decompressed
        stream)? Only then can a record's offset be found again (:meth:`_corrupt`)."""
        try:
            return bool(self._file.seekable())
        except (AttributeError, ValueError, OSError):
            return False

    def _diagnose_tail(self, offset: Optional[int], record: bool = False) -> Optional[str]:
        """Tell a cut record (``record``; else the header) from a corrupt one in the bytes
        from ``offset`` on.

        A record cut by a crash is a prefix of a valid record; a length field claiming more
        than the limits (4 GB, say) makes the tail corrupt, not truncated, and so does a
        record whose complete elements no valid record has (:func:`_unfinished_record`).
        Only a bounded prefix of the tail is examined.
        """
        tail = self._tail_bytes(offset)
        if not tail:
            return None  # unseekable: cannot look back; treat as a cut
        return _tail_problem(tail) if record else _scan_prefix(tail)

    def _tail_bytes(self, offset: Optional[int]) -> Optional[bytes]:
        """Up to 1 MiB of the file from ``offset`` on, up to the zeros held back at the end
        of the data (see _RecordSource); None where the file cannot be read again."""
        if offset is None:
            return None
        limit = 1 << 20
        source = getattr(self, "_source", None)
        if source is not None and source.end_zeros:
            limit = min(limit, self._origin + source.out - offset)
        try:
            self._file.seek(self._base + offset)
            return self._file.read(limit) if limit > 0 else b""
        except (OSError, AttributeError, ValueError):
            return None

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the file if the reader opened it."""
        self._done = True
        if self._owns and self._file is not None:
            self._file.close()

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def definition_counts(self) -> dict[int, int]:
        """Definition records absorbed so far, by record type."""
        return dict(self._def_counts)

    @property
    def unknown_types(self) -> dict[int, int]:
        """Records of unknown types skipped so far, by type."""
        return dict(self._unknown)


def _clean_note(rec: list) -> None:
    """A NOTE's level and text as safe strings, whatever types the trace gave them."""
    rec[1] = clean(rec[1] if isinstance(rec[1], (str, bytes)) else repr(rec[1]), 64)
    rec[2] = clean(rec[2] if isinstance(rec[2], (str, bytes)) else repr(rec[2]))


def _read_exactly(f: Any, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _packed_len(rec: Any) -> int:
    try:
        return len(msgpack.packb(rec, use_bin_type=True))
    except Exception:  # pragma: no cover - whatever was unpacked can be packed again
        return 0


def _reason(e: BaseException) -> str:
    """What msgpack (or Python under it) said about bad data, in the tool's own words."""
    if isinstance(e, UnicodeDecodeError):
        return f"a string is not valid UTF-8 (byte 0x{e.object[e.start]:02x} at position {e.start} of the string)"
    if isinstance(e, msgpack.exceptions.StackError):
        return "arrays or maps nested too deeply"
    if isinstance(e, msgpack.exceptions.ExtraData):
        return "unexpected data after a complete object"
    text = str(e)
    if isinstance(e, TypeError) and "unhashable" in text:
        return "a map has an array or map as a key"
    if isinstance(e, ValueError) and text.startswith(("Unpack failed", "Unpack error")):
        return "invalid msgpack"
    if isinstance(e, ValueError) and "exceeds max_" in text:  # a length over the reader's limits
        return "a length field is over the reader's limits (section 9 of docs/trace-format.md)"
    if not text or not isinstance(e, (ValueError, TypeError)):
        return "invalid msgpack"
    return text if len(text) < 200 else text[:200] + "..."


def _a(v: Any) -> str:
    from .symbols import _a as kind

    return kind(v)


def _typename(v: Any) -> str:
    """The msgpack type of ``v`` with its article: "an integer", "a map"."""
    name = {int: "integer", str: "string", bytes: "binary", dict: "map", list: "array", float: "float",
            bool: "boolean", type(None): "nil"}.get(type(v), type(v).__name__)
    if v == [] and type(v) is list:
        name = "empty array"
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _mib(n: int) -> str:
    return f"{n >> 20} MiB"


def _kib(n: int) -> str:
    return f"{n >> 10} KiB"


#: msgpack.unpackb's limits for one record read whole (as the record unpacker's).
_UNPACK_LIMITS = dict(raw=False, strict_map_key=False, max_str_len=MAX_STR_LEN, max_bin_len=MAX_BIN_LEN,
                      max_array_len=MAX_ARRAY_LEN, max_map_len=MAX_MAP_LEN, max_ext_len=MAX_EXT_LEN)


class _RecordSource:
    """What the record unpacker reads: the bytes read past the header, then the file.

    It also enforces :data:`MAX_RECORD_BYTES`. msgpack's unpacker is resumable: it keeps a
    half-built object across reads, so its buffer limit does not bound the size of one
    record, and a record of empty arrays or maps decodes to ~70 times its size. So the
    source finds the record boundaries itself: every byte it hands out is also fed to a
    second unpacker that only *skips* objects (msgpack's C parser, building nothing), and
    the offset after the last object it skipped whole is where the current record began.
    When more than the limit has been handed out since then, one record is that large,
    and the read fails (``BufferFull``) before more of it is decoded; so does a read that
    completes a record larger than the limit. The skipping is done lazily, only once the
    bytes handed out since the last known boundary pass a quarter of the limit. Where the
    data stops being valid msgpack the skipper stops finding boundaries (the decoding
    unpacker fails at that byte); the bytes handed out past the last boundary stay bounded.

    Consumers that parse the raw bytes themselves (:meth:`TraceReader.read_raw`) bound
    their records on their own; for them (``raw``) the source does no skipping.

    Zero bytes at the end of the data are held back from the first page boundary in them
    on (file offsets that are multiples of :attr:`PAGE`): a run of zeros is handed out
    only once a byte that is not zero follows it; at the end, only up to that boundary (all
    of it, if fewer than :attr:`ZERO_RUN` zeros lie past the boundary). When a machine goes
    down, pages of a mapped trace that never reached the disk read back as zeros, and the
    first may begin inside a record: completed by those zeros the record would decode (a
    zero is a valid msgpack integer) into accesses that never happened. Cut at the page
    boundary, it is an unfinished record, left out like any cut record. A record that ends
    in zero bytes before the boundary (a number's last byte, stack id 0) is handed out
    whole: the records a killed writer committed, followed by the zeros of its unwritten
    space, all stand (:attr:`end_zeros`: the zeros held back at the end).
    """

    #: Bytes read from the file at a time (a zero run is looked through this many at once).
    READ = 1 << 16
    #: The page size of a mapped writer's file (the unit a crashed machine loses).
    PAGE = 4096
    #: The fewest zeros past a page boundary at the end of the data that are held back.
    ZERO_RUN = 256

    #: Bytes handed out past the last known record boundary before the skipper looks.
    LOOK_AFTER = MAX_RECORD_BYTES // 4

    def __init__(self, prefix: bytes, f: Any, start: int = 0) -> None:
        self._prefix = prefix
        self._start = start  # the file offset of the first byte handed out
        self._f = f
        self.raw = False  # a raw consumer (read_raw): no record boundaries to find
        self._fed = 0  # bytes handed out so far
        self._boundary = 0  # offset (from the first byte handed out) of the last known record end
        # the bytes handed out from offset _kept_at on (at most a record and a look's worth):
        # an unfinished record's, when the data ends inside it and the input cannot be read again
        self._kept = bytearray()
        self._kept_at = 0
        self._skipper: Optional[msgpack.Unpacker] = msgpack.Unpacker(
            max_buffer_size=MAX_RECORD_BYTES + 2 * READ_SIZE + len(prefix),
            max_str_len=MAX_STR_LEN, max_bin_len=MAX_BIN_LEN, max_array_len=MAX_ARRAY_LEN,
            max_map_len=MAX_MAP_LEN, max_ext_len=MAX_EXT_LEN)
        self.out = 0  # bytes handed out, to every consumer
        # the zero hold: zeros read and not handed out (_held), zeros now due (_zeros_due,
        # a run that data followed), then the data read after them (_due)
        self._held = 0
        self._zeros_due = 0
        self._due = b""
        self.end_zeros: Optional[int] = None  # at the end of the data: the zeros held back there

    def read(self, n: int = -1) -> bytes:
        data = self._next(READ_SIZE if n is None or n < 0 else n)
        self.out += len(data)
        if not data or self.raw:
            return data
        self._fed += len(data)
        self._kept += data
        skipper = self._skipper
        if skipper is None:  # the data stopped being msgpack: no boundaries past that point
            if self._fed - self._boundary > MAX_RECORD_BYTES + READ_SIZE:
                raise msgpack.exceptions.BufferFull
            return data
        try:
            skipper.feed(data)
        except msgpack.exceptions.BufferFull:
            raise msgpack.exceptions.BufferFull from None
        if self._fed - self._boundary > self.LOOK_AFTER:
            self._find_boundary()
            if self._fed - self._boundary > MAX_RECORD_BYTES + READ_SIZE:
                raise msgpack.exceptions.BufferFull
        return data

    def _next(self, n: int) -> bytes:
        """Up to ``n`` bytes of the data (b"" only at its end), zeros at its end held back."""
        while True:
            if self._zeros_due:
                k = min(n, self._zeros_due)
                self._zeros_due -= k
                return bytes(k)
            if self._due:
                data, self._due = self._due[:n], self._due[n:]
                return data
            if self._prefix:
                data, self._prefix = self._prefix, b""
            else:
                data = self._f.read(max(n, self.READ))
            if not data:
                due = -(self._start + self.out) % self.PAGE  # the zeros before the first page boundary
                if self._held < due + self.ZERO_RUN:
                    due = self._held
                if due:
                    self._zeros_due, self._held = due, self._held - due
                    continue
                self.end_zeros = self._held
                return b""
            body = data.rstrip(b"\0")
            if not body:
                self._held += len(data)
                continue
            self._zeros_due, self._due, self._held = self._held, body, len(data) - len(body)

    def _find_boundary(self) -> None:
        """Skip every complete object fed so far; the end of the last one is the boundary.

        Raises ``BufferFull`` for a complete object larger than the limit (one that ends in
        the bytes about to be handed out).
        """
        skipper = self._skipper
        skip = skipper.skip
        tell = skipper.tell
        boundary = self._boundary
        try:
            while True:
                skip()
                end = tell()
                if end - boundary > MAX_RECORD_BYTES:
                    raise msgpack.exceptions.BufferFull
                boundary = end
        except msgpack.exceptions.OutOfData:
            pass
        except msgpack.exceptions.BufferFull:
            raise
        except Exception:  # not msgpack from here on: the decoding unpacker says so
            self._skipper = None
        finally:
            self._boundary = boundary
            if boundary > self._kept_at:
                del self._kept[: boundary - self._kept_at]
                self._kept_at = boundary

    def unfinished(self) -> tuple[Optional[int], bytes]:
        """At the end of the data: where the last complete record ends (counted from the
        first byte handed out) and the bytes after it (those of the record the data ends
        inside), as handed out; (None, b"") where they are not known."""
        if self.raw or self._skipper is None:
            return None, b""
        try:
            self._find_boundary()
        except msgpack.exceptions.BufferFull:
            return None, b""
        return self._boundary, bytes(self._kept[self._boundary - self._kept_at:])


_LIMITS = {"string": MAX_STR_LEN, "binary": MAX_BIN_LEN, "array": MAX_ARRAY_LEN, "map": MAX_MAP_LEN, "ext": MAX_EXT_LEN}


#: msgpack type bytes followed by a fixed number of payload bytes (numbers, fixext).
_FIXED_SIZE = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
               0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
#: msgpack type bytes followed by a length field: (kind, width of the length field).
_SIZED = {0xC4: ("binary", 1), 0xC5: ("binary", 2), 0xC6: ("binary", 4), 0xC7: ("ext", 1), 0xC8: ("ext", 2),
          0xC9: ("ext", 4), 0xD9: ("string", 1), 0xDA: ("string", 2), 0xDB: ("string", 4), 0xDC: ("array", 2),
          0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4)}


def _scan_prefix(buf: bytes, max_steps: int = 100_000) -> Optional[str]:
    """Walk msgpack headers in ``buf`` (an incomplete object); name the first over-limit length."""
    i, need, steps, size = 0, 1, 0, len(buf)
    while need > 0 and i < size and steps < max_steps:
        steps += 1
        need -= 1
        b = buf[i]
        i += 1
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):
            continue
        if 0x80 <= b <= 0x8F:
            need += 2 * (b & 0x0F)
            continue
        if 0x90 <= b <= 0x9F:
            need += b & 0x0F
            continue
        if 0xA0 <= b <= 0xBF:
            i += b & 0x1F
            continue
        if b == 0xC1:
            return "byte 0xc1 is not valid msgpack"
        if b in _FIXED_SIZE:
            i += _FIXED_SIZE[b]
            continue
        kind, width = _SIZED[b]
        if i + width > size:
            return None
        length = int.from_bytes(buf[i:i + width], "big")
        i += width
        if length > _LIMITS[kind]:
            return (f"a length field declares {'an' if kind in ('array', 'ext') else 'a'} {kind} of {length} "
                    f"{'elements' if kind in ('array', 'map') else 'bytes'}, over the reader's limit of "
                    f"{_LIMITS[kind]}")
        if kind == "array":
            need += length
        elif kind == "map":
            need += 2 * length
        else:
            i += length + (1 if kind == "ext" else 0)
    return None


def _tail_problem(buf: bytes) -> Optional[str]:
    """Why the unfinished record in ``buf`` makes the trace corrupt, or None (a cut record)."""
    return (_scan_prefix(buf) or _unfinished_record(buf)) if buf else None


#: How many elements of an unfinished record :func:`_unfinished_record` looks at.
_UNFINISHED_ELEMENTS = 1 << 16


def _unfinished_record(buf: bytes) -> Optional[str]:
    """What no prefix of a valid record holds in ``buf`` (a record the data ends inside), or
    None. A crash cuts a record short but never changes the elements before the cut: each
    complete one is what a valid record has there. One corrupt length field, though, can
    make a record (or a string in it) claim thousands of elements or bytes that the file
    does not hold, and the records after it then read as its elements (and the whole rest
    of the trace as one cut record): such a record is no array at all, a kernel whose
    "accesses" are not accesses, an event record whose stack is not an id, a VIEWS record
    whose entries are not ints, or a string running to the end that is not UTF-8. Its
    elements are decoded one at a time, under the reader's limits."""
    up = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(buf) + 1, max_str_len=MAX_STR_LEN,
                          max_bin_len=MAX_BIN_LEN, max_array_len=MAX_ARRAY_LEN, max_map_len=MAX_MAP_LEN,
                          max_ext_len=MAX_EXT_LEN)
    up.feed(buf)
    try:
        if not _is_array(buf[0]):
            return "the unfinished record is not an array"
        n = up.read_array_header()
        if n == 0:
            return None
        at = up.tell()
        if at < len(buf) and not _is_int(buf[at]):
            return f"the unfinished record's type is {_kind(buf[at])}, not a record type"
        t = _next(up, buf)  # (an int: its first byte says so)
        if t < 0:
            return f"the unfinished record's type is {t}, not a record type"
        name = R.RECORD_NAMES.get(t, "record")
        fields = _FIELD_KINDS.get(t, {})
        stack_at = R.STACK_FIELD.get(t)
        for k in range(1, min(n, _UNFINISHED_ELEMENTS)):
            if t == R.KERNEL and k >= 4:
                what = _unfinished_ints(up, buf, 3)
                if what:
                    return (f"access {k - 3} of the unfinished KERNEL record ({what}) is not a block id or "
                            "[block, offset, nbytes]: no valid record starts this way")
            elif t == R.VIEWS:
                what = _unfinished_ints(up, buf, None)
                if what:
                    return f"entry {k} of the unfinished VIEWS record is {what}, not an array of integers"
            elif k == stack_at:
                what = _other_kind(up, buf, lambda b: _is_int(b) or b == 0xC0)
                if what:
                    return f"the stack of the unfinished {name} record is {what}, not an id or nil"
            elif k in fields:
                want = fields[k]
                what = _other_kind(up, buf, _is_int if want == _INT else _is_str)
                if what:
                    return f"field {k} of the unfinished {name} record is {what}, not {want}"
            else:
                _next(up, buf)
    except _BadString:
        return "a string that runs to the end of the data is not valid UTF-8"
    except msgpack.exceptions.OutOfData:
        return None
    except Exception:  # noqa: BLE001 - not msgpack: what the decoder said already, or a cut
        return None
    return None


#: The fields of each record type that docs/trace-format.md section 7 requires to be an int
#: or a str (another type is corrupt), by position.
_INT, _STR = "an integer", "a string"
_FIELD_KINDS = {R.STR: {1: _INT, 2: _STR}, R.FRAME: {1: _INT, 3: _INT}, R.STACK: {1: _INT},
                R.STREAM_DEF: {1: _INT, 2: _INT, 3: _INT}, R.BLOCK_DEF: {1: _INT}, R.THREAD: {2: _STR},
                R.STREAM_LABEL: {1: _INT, 3: _STR}, R.NOTE: {1: _STR, 2: _STR}}


class _BadString(Exception):
    """The string the data ends inside is not valid UTF-8 as far as it goes."""


def _next(up: msgpack.Unpacker, buf: bytes) -> Any:
    """The next element; where the data ends inside a string, its bytes so far must be UTF-8
    (or _BadString), else OutOfData."""
    at = up.tell()
    if at < len(buf):
        b = buf[at]
        head, size = (1, b & 0x1F) if 0xA0 <= b <= 0xBF else (0, 0)
        if 0xD9 <= b <= 0xDB:
            head = 1 + (1, 2, 4)[b - 0xD9]
            size = int.from_bytes(buf[at + 1:at + head], "big")
        if head and at + head + size > len(buf):
            try:
                codecs.getincrementaldecoder("utf-8")().decode(buf[at + head:], final=False)
            except UnicodeDecodeError:
                raise _BadString from None
            raise msgpack.exceptions.OutOfData
    return up.unpack()


def _other_kind(up: msgpack.Unpacker, buf: bytes, takes: Callable[[int], bool]) -> Optional[str]:
    """What the next element is if its first byte is not one ``takes`` accepts; else None,
    the element read past (:func:`_next`)."""
    at = up.tell()
    if at < len(buf) and not takes(buf[at]):
        return _kind(buf[at])
    _next(up, buf)
    return None


def _unfinished_ints(up: msgpack.Unpacker, buf: bytes, length: Optional[int]) -> str:
    """The next element, read as far as it goes, as an array of ``length`` (any, if None)
    integers: what it is if it cannot be one, else "" (or OutOfData: the data ends in it).
    For ``length`` 3 (a kernel access) a lone integer (a whole block) is one, and the
    offset and size may not be negative."""
    at = up.tell()
    if at >= len(buf):
        raise msgpack.exceptions.OutOfData
    if length == 3 and _is_int(buf[at]):
        up.unpack()
        return ""
    if not _is_array(buf[at]):
        return _kind(buf[at])
    m = up.read_array_header()
    if length is not None and m != length:
        return f"an array of {m} elements"
    for j in range(m):
        at = up.tell()
        if at >= len(buf):
            raise msgpack.exceptions.OutOfData
        if not _is_int(buf[at]):
            return f"an array whose element {j + 1} is not an integer"
        if up.unpack() < 0 and length == 3 and j:
            return f"an array whose {('offset', 'size')[j - 1]} is negative"
    return ""


def _is_array(b: int) -> bool:
    """Does a msgpack object that starts with byte ``b`` hold an array?"""
    return 0x90 <= b <= 0x9F or b in (0xDC, 0xDD)


def _is_str(b: int) -> bool:
    """Does a msgpack object that starts with byte ``b`` hold a string?"""
    return 0xA0 <= b <= 0xBF or 0xD9 <= b <= 0xDB


def _is_int(b: int) -> bool:
    """Does a msgpack object that starts with byte ``b`` hold an integer?"""
    return b <= 0x7F or b >= 0xE0 or 0xCC <= b <= 0xD3


def _kind(b: int) -> str:
    """What a msgpack object that starts with byte ``b`` is, with its article."""
    if _is_int(b):
        return "an integer"
    if _is_array(b):
        return "an array"
    if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
        return "a map"
    if _is_str(b):
        return "a string"
    return {0xC0: "nil", 0xC2: "a boolean", 0xC3: "a boolean", 0xCA: "a float", 0xCB: "a float",
            0xC4: "a binary", 0xC5: "a binary", 0xC6: "a binary"}.get(b, "an extension")


def _end_reason(stats: Optional[dict]) -> Optional[str]:
    """The END statistics' ``signal`` / ``stopped`` keys as one phrase (capped), or None."""
    if not stats:
        return None
    sig, stopped = stats.get("signal"), stats.get("stopped")
    if isinstance(sig, str) and sig:
        return f"the process was ended by {sig[:40]}"
    if isinstance(stopped, str) and stopped:
        return f"recording stopped: {stopped[:300]}"
    return None
