"""Streaming trace reader: constant memory, any file size, untrusted input.

:class:`TraceReader` checks the magic bytes and the header in its constructor, then reads
the records with one :class:`msgpack.Unpacker` whose buffer and length limits are bounded
(:mod:`.limits`; :mod:`.record_source` bounds one record), so a corrupt length field cannot
make it allocate gigabytes. Definitions (strings, frames, stacks, streams, blocks, threads)
are absorbed into :attr:`TraceReader.symbols` before the first record that uses them is
handed on. It reads in one of three modes, with the same checks, counts, warnings and
error messages in each:

* **records** (:meth:`TraceReader.records`): a generator of the records that are not
  definitions; what ``npusan info``, export and the Python engine's online use read.
* **direct** (``direct_begin``/``direct_absorb``/``direct_sync``/``direct_failed``/
  ``direct_exhausted``): the Python engine iterates the unpacker itself and hands the reader
  every record that is not a kernel.
* **raw** (``read_raw``/``raw_sync``/``check_record``/``absorb_definition``/``raw_failed``/
  ``raw_exhausted``/``raw_end``, with :attr:`TraceReader.tail`): the compiled replay core
  parses the bytes itself and hands back, as msgpack objects, the records it does not
  replay. The consumer keeps the reader's count and position current (``raw_sync``) before
  each call that may warn or raise, so that the messages name the same record and offset;
  a zero where a record would start is checked with ``tail.zeros_to_end`` (the zeros a
  killed mapped writer leaves), and the end of the data is handed to ``raw_exhausted``.

How the data ends (a cut, a killed writer's zeros, a trace still being written, a corrupt
unfinished record) is decided by :mod:`.tail` and :mod:`.unfinished`
(docs/trace-format.md, section 7); the reader words the warnings and errors.

What the reader guarantees about yielded records: each is a list whose first element equals
a known record type (an int: a float 17.0 is refused like any non-integer type, as the
engine's direct loop refuses it) and whose length is at least ``records.MIN_LENGTH`` of that type.
Apart from a NOTE's level and text (strings) and the definitions it absorbs, it does not
type-check the fields inside (that would cost more than the replay): consumers
turn ``TypeError``/``IndexError``/``KeyError`` raised on a malformed field into a
:class:`TraceFormatError`, naming :meth:`TraceReader.where` (record index, byte offset).
"""

from __future__ import annotations

import itertools
import os
import stat
import weakref
from typing import IO, Any, Callable, Iterable, Iterator, Optional, Union

import msgpack

from . import records as R
from .compression import HOLD_BYTES, decompressed
from .errors import TraceFormatError
from .header import MAX_VALUE_NODES, clean_header, format_version, summarize_value
from .input_files import open_input, trace_name
from .limits import (  # noqa: F401 - MAX_* re-exported: the reader's limits, by their old address
    MAX_ARRAY_LEN, MAX_BIN_LEN, MAX_EXT_LEN, MAX_HEADER_BYTES, MAX_MAP_LEN, MAX_RECORD_BYTES, MAX_STR_LEN,
    READ_SIZE, UNPACK_LIMITS,
)
from .record_source import RecordSource
from .safe_text import clean
from .symbols import SymbolTable
from .tail import LOOK_AT, Tail, header_problem
from .unfinished import problem as unfinished_problem

_KNOWN = frozenset(R.MIN_LENGTH)
_NOT_A_RECORD = "is not a record ({}, expected an array)"
_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.exceptions.ExtraData, msgpack.exceptions.StackError)

#: The most bytes of data read past the end record to see whether anything follows it.
AFTER_END_LOOK = 64 << 10
#: Distinct unknown record types named, each in a warning of its own; the rest are counted
#: in one warning at the end (a trace can hold a hundred thousand of them in 470 KB).
MAX_NAMED_UNKNOWN_TYPES = 20

Source = Union[str, "os.PathLike[str]", IO[bytes]]


class TraceReader:
    """Read one trace: ``header`` now, records on iteration (see the module docstring)."""

    def __init__(self, source: Source, *, on_warning: Optional[Callable[[str], None]] = None,
                 string_texts: bool = True) -> None:
        """``string_texts=False``: the symbol table keeps no string's text (see
        :class:`SymbolTable`), for a reader that counts definitions but shows no names."""
        self.on_warning = on_warning
        self.warnings: list[str] = []
        self.symbols = SymbolTable(texts=string_texts)
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
        source = self._source = RecordSource(rest, self._file, self._base + self._origin)
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
        #: How the data ends: a cut, a killed writer's zeros, a trace still being written.
        # (the tail calls back through a weak reference: a bound method would make a cycle
        # reader -> tail -> reader, which kept the whole symbol table alive after the reader
        # was done, until a full collection: ``npusan info`` held one trace's strings twice)
        method = weakref.WeakMethod(self._zero_record_error)

        def zero_record_error(offset: int) -> str:
            bound = method()
            return bound(offset) if bound is not None else "a record of zero bytes"  # (never: the reader owns the tail)

        self.tail = Tail(self._file, self._base, self._origin, source, self._unpacker.read_bytes, zero_record_error)
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
                problem = header_problem(self._file, self._base, len(R.MAGIC))
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
                if rec == 0 and rec.__class__ is int and self.tail.zeros_to_end(self.position - 1):
                    self.records_read = n = n - 1
                    break
                t = self.check_record(rec)
                self._mark = (n, self._origin + unpacker.tell())
                if t in R.DEFINITIONS:
                    self.absorb_definition(rec)
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
        if offset is None or not self.tail.rereadable():
            offset = self.tail.record_start(self._mark, n + 1)
        if isinstance(e, msgpack.exceptions.BufferFull):
            raise TraceFormatError(
                f"{self._where(n + 1, offset)} is larger than the {_mib(MAX_RECORD_BYTES)} "
                "limit on one record: the trace is corrupt"
            ) from None
        raise TraceFormatError(f"corrupt data at {self._where(n + 1, offset)} ({_reason(e)})") from None

    def _ran_out(self, offset: Optional[int] = None, rest: Optional[bytes] = None) -> None:
        """The data ended without an END record: a cut trace (warn) or a corrupt tail (raise).

        A consumer reading raw bytes passes where the unfinished record starts and its bytes
        (``rest``); else the record unpacker's position says (see :class:`.tail.Tail`).
        """
        n = self.records_read
        self._done = True
        tail = self.tail
        unfinished = b""  # the bytes of the record the data ends inside, where known
        if rest is None:
            offset, unfinished, problem = tail.unfinished_record(tail.record_start(self._mark, n + 1))
        elif rest and rest.count(0) == len(rest) and tail.zeros_to_end(offset, rest):
            problem = None  # the space a killed mapped writer reserved
        else:
            unfinished = rest
            problem = unfinished_problem(rest[:LOOK_AT])
        zeros = tail.held_zeros
        if zeros and unfinished and problem is None and self._completed_by_zeros(unfinished, offset):
            return
        if problem is not None:
            raise TraceFormatError(f"corrupt data at {self._where(n + 1, offset)}: {problem}")
        self.truncated = True
        self._warn_unnamed_types()
        still_written = tail.grew_over_held_zeros()
        damaged = getattr(self._file, "problem", None)  # corrupt compressed data, not a cut
        if damaged is not None:
            raise TraceFormatError(
                f"{damaged}, after {self.events} events: the trace is damaged (a crash only cuts a "
                "compressed trace short; this is corruption)"
            )
        if still_written:
            self._warn(
                f"the trace is still being written (it grew while it was read): analyzed the {self.events} "
                "events written so far"
            )
            return
        left_out = ""
        if zeros and unfinished:
            where = f"the record at byte offset {offset}" if offset is not None else "the last record"
            left_out = (f"; {where} runs into the zero bytes that fill the file from byte offset "
                        f"{tail.zeros_from} on (pages its writer's machine may never have "
                        "written to disk) and was left out")
        self._warn(
            f"trace ends without an end record after {self.events} events: the recording was cut "
            "(the process was killed or crashed, is still writing it, or could not write it to the end); "
            f"analyzed up to the last complete record{left_out}"
        )

    def _completed_by_zeros(self, unfinished: bytes, offset: Optional[int]) -> bool:
        """Is the record the data ends inside an END record once the zeros held back at the
        end complete it (:meth:`.tail.Tail.completed_by_zeros`)? Then it is read as the end
        it is, and True is returned; a record no valid trace has raises the error it always
        did; any other record is left out (False), a cut record."""
        completed = self.tail.completed_by_zeros(unfinished)
        if completed is None:
            return False
        rec, size, used = completed
        t = rec[0] if rec.__class__ is list and rec else None
        if t.__class__ is int and t >= 0 and t not in _KNOWN:
            return False  # a record of an unknown type: skipped either way, nothing to say
        n, last, consumed = self.records_read, self._last, self._consumed
        self.records_read, self._last, self._gen = n + 1, rec, None  # where() names it
        if offset is not None:
            self._consumed = offset + size
        t = self.check_record(rec)
        if t != R.END:
            self.records_read, self._last, self._consumed = n, last, consumed
            return False
        self._consumed = consumed
        self._end(rec, zeros_used=used)
        self.end_record = rec
        return True

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
        if rec == 0 and rec.__class__ is int and self.tail.zeros_to_end(self.position - 1):
            self._dother -= 1
            self.records_read = n - 1
            self._ran_out()
            return False
        t = self.check_record(rec)
        self._mark = (n, self._origin + self._unpacker.tell())
        if t in R.DEFINITIONS:
            self.absorb_definition(rec)
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
    #
    # The consumer reads the bytes after the header (``read_raw``), parses and replays the
    # records it can, and hands the reader the others as msgpack objects: each is checked
    # (``check_record``), a definition absorbed (``absorb_definition``), END ends the trace
    # (``raw_end``); bad msgpack raises (``raw_failed``), the end of the data warns or raises
    # (``raw_exhausted``). ``raw_sync`` first tells the reader the consumer's count and
    # position, so that every message names the record and offset the other modes name.

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

    def raw_failed(self, e: BaseException, offset: Optional[int]) -> None:
        """Raise what ``records()`` raises for the exception msgpack raised on the record
        that starts at byte ``offset`` (``BufferFull``: a record over :data:`MAX_RECORD_BYTES`).
        Call :meth:`raw_sync` first, with the records before it."""
        self._corrupt(e, offset)

    def raw_exhausted(self, offset: int, rest: bytes) -> None:
        """The data ended before END, inside the record that starts at byte ``offset``
        (``rest``: its bytes, b"" if none): as ``records()``, warn of a cut (zeros a killed
        writer left included) or raise for a corrupt tail; an END record that the zeros held
        back at the end complete is read (:attr:`end_record`). Call :meth:`raw_sync` first."""
        self._ran_out(offset, rest)

    def raw_end(self, rec: list, after: bytes) -> None:
        """The END record (checked: :meth:`check_record`); ``after``: the byte that follows
        it, if the consumer has read it, else b"" (the reader then looks itself, a bounded
        way; data after the end record is warned about). The trace is read."""
        self._end(rec, after)
        self._done = True

    @property
    def done(self) -> bool:
        """The trace was read to its end (END, a cut, an error) or the reader closed."""
        return self._done

    @property
    def last_record(self) -> Any:
        """The record a direct or raw consumer handled last (what :meth:`where` names)."""
        return self._last

    @property
    def events(self) -> int:
        """Non-definition records read so far (kernels included; exact between records)."""
        self._drain_skipped()
        return self._current_index() - self._definitions - sum(self._unknown.values())

    _definitions = 0
    #: An END record read from the bytes before the zeros held back at the end and those
    #: zeros (see _completed_by_zeros): a consumer that copies records copies it too.
    end_record: Optional[list] = None

    def check_record(self, rec: Any) -> int:
        """Validate a record that missed the fast path; return its type (-1: skip it).

        Raises :class:`TraceFormatError` for what no record is (not an array, a type that is
        not a non-negative integer, too few fields, a NOTE's level or text not a string);
        warns once per unknown type. A raw consumer calls it for every record it hands back.
        """
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
            if seen is None and len(self._unknown) <= MAX_NAMED_UNKNOWN_TYPES:
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

    def absorb_definition(self, rec: list) -> None:
        """Absorb a definition record (one :meth:`check_record` typed as such) into
        :attr:`symbols`, counted; a malformed one raises, naming it."""
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
        if self.end_stats is None:  # nothing is lost that the analysis uses: a warning, not an error
            self._warn("the end record's statistics are not a map; ignored")
        self.ended_cleanly = True
        self.end_reason = _end_reason(self.end_stats)
        self._warn_unnamed_types()
        if self.end_reason is not None:
            self._warn(f"the recording ended early: {self.end_reason}; analyzed up to that point")
        self._definitions += 1  # END is not an event either
        if not extra:
            # Whether anything follows is all that is asked: a bounded look, so that a
            # compressed trace with a zero bomb after its end is not decompressed.
            self._source.bound(AFTER_END_LOOK)
            try:
                extra = self._unpacker.read_bytes(1)
            except Exception:  # pragma: no cover - a failing file after a clean end
                extra = b""
        self._refuse_untrusted()
        damaged = getattr(self._file, "problem", None)  # what follows the end record's frame is not valid
        if not extra and self.tail.held_zeros > zeros_used:
            extra = b"\0"  # zero bytes after it (held back: see RecordSource)
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

    def _warn_unnamed_types(self) -> None:
        """Once the trace is read: one warning for the unknown types past the first
        :data:`MAX_NAMED_UNKNOWN_TYPES` (each of those had a warning of its own)."""
        more, records = unnamed_unknown_types(self.unknown_types)
        if more:
            self._warn(
                f"skipped {records:,} records of {more:,} more unknown types (only the first "
                f"{MAX_NAMED_UNKNOWN_TYPES} unknown types are named)"
            )

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.on_warning is not None:
            self.on_warning(message)

    def _zero_record_error(self, offset: int) -> str:
        """The error for a zero byte where record ``records_read`` starts, at ``offset``,
        that does not start a zero tail (as the record types check words it)."""
        return f"{self._where(self.records_read, offset)} {_NOT_A_RECORD.format(_typename(0))}"

    @property
    def still_written(self) -> bool:
        """The data ended where a mapped writer had not written yet, and it wrote there while
        the trace was read: the trace is still being written (read up to there, with a warning)."""
        tail = getattr(self, "tail", None)
        return tail is not None and tail.still_written

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

    def skipped_elsewhere(self, drain: Optional[Callable[[], Iterable[tuple]]]) -> None:
        """Let a raw consumer skip records of the unknown types :meth:`check_record` has
        warned about without handing them here: ``drain()`` returns the (type, records)
        it skipped since its last call, and is asked whenever the counts are needed
        (:attr:`events`, :attr:`unknown_types`, an error's message)."""
        self._drain_skipped()
        self._skip_drain = drain

    def _drain_skipped(self) -> None:
        drain = self._skip_drain
        if drain is not None:
            for t, n in drain():
                self._unknown[t] = self._unknown.get(t, 0) + n

    _skip_drain: Optional[Callable[[], Iterable[tuple]]] = None

    @property
    def unknown_types(self) -> dict[int, int]:
        """Records of unknown types skipped so far, by type."""
        self._drain_skipped()
        return dict(self._unknown)


def named_unknown_types(unknown: dict) -> dict:
    """The first :data:`MAX_NAMED_UNKNOWN_TYPES` of ``unknown`` (type -> records), those
    a report or ``npusan info`` names one by one."""
    return dict(itertools.islice(unknown.items(), MAX_NAMED_UNKNOWN_TYPES))


def unnamed_unknown_types(unknown: dict) -> tuple[int, int]:
    """(types, records) of ``unknown`` past the first :data:`MAX_NAMED_UNKNOWN_TYPES`."""
    rest = list(itertools.islice(unknown.values(), MAX_NAMED_UNKNOWN_TYPES, None))
    return len(rest), sum(rest)


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



def _end_reason(stats: Optional[dict]) -> Optional[str]:
    """The END statistics' ``signal`` / ``stopped`` / ``raised`` keys as one phrase
    (capped), or None."""
    if not stats:
        return None
    sig, stopped, raised = stats.get("signal"), stats.get("stopped"), stats.get("raised")
    if isinstance(sig, str) and sig:
        return f"the process was ended by {sig[:40]}"
    if isinstance(stopped, str) and stopped:
        return f"recording stopped: {stopped[:300]}"
    if isinstance(raised, str) and raised:
        return f"the program ended with an uncaught {raised[:100]}"
    return None
