"""Writing trace files: :class:`FileSink` (bytes to a file) and :class:`TraceWriter` (the API).

:class:`TraceWriter` is the public contract (``docs/trace-format.md``, section 12) that
third-party runtimes use to emit traces. npusan's own recorder reuses the same pieces on its fast path: it drives
``writer.encoder`` (a :class:`~npusan.trace_format.encoder.RecordEncoder`) directly under its
own lock and lets ``writer.sink`` (a :class:`FileSink`) pack and write the records.

Write errors surface as :class:`OSError`, always: a failed ``write`` of the underlying file,
or a file object that raises something else (``ValueError`` on a closed file...), is turned
into an ``OSError`` by the sink. After the first failure the sink is *broken*: it refuses
every later record (raising ``OSError`` again) and never writes another byte, so a partial
record can only ever be the last thing in the file, and readers see a truncated trace, never
a silently corrupt one.

Two sinks: :class:`MappedFileSink` for a trace path on a regular file (the usual case),
which copies each committed batch of records into a ``MAP_SHARED`` mapping of the file, so
that what was committed is in the kernel's page cache and survives a SIGKILL of the
process; and :class:`FileSink` for everything else (file objects, pipes, devices, and the
compressed outputs), which buffers and writes now and then. :func:`open_sink` picks one.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
import stat
import threading
import time
import weakref
from typing import IO, Any, Iterable, Mapping, Optional, Sequence, Union

import msgpack

from . import records as R
from .compression import open_for_writing
from .encoder import RecordEncoder
from .header import build_header
from .sourcelines import SourceLines
from .strided import MAX_VALUE, Strided

PathOrFile = Union[str, "os.PathLike[str]", IO[bytes]]
StackArg = Optional[Sequence[Sequence]]  # [(filename, lineno, function), ...] outermost first

#: Flush when this many bytes are buffered ...
DEFAULT_FLUSH_BYTES = 1 << 20
#: ... or when a record arrives this many seconds after the last flush.
DEFAULT_FLUSH_INTERVAL = 1.0

_monotonic = time.monotonic
_MAX_PERIOD = 64


class FileSink:
    """Packs records with msgpack into a buffer and writes it to a file now and then.

    Calling the sink with one record (a list) appends it to the buffer; the buffer goes to
    the file when it holds more than ``flush_bytes`` bytes or when a record arrives
    ``flush_interval`` seconds or more after the last flush (so a crash loses at most that
    much), and on :meth:`flush` / :meth:`close`. Records are only ever written whole.

    The size is checked on every record; the clock only every few records while records
    come fast (up to every 64th, a few microseconds apart) and on every record when they
    come slowly, which keeps the per-record cost at a pack and an append. Not thread-safe:
    callers serialize (TraceWriter holds a lock).
    """

    def __init__(
        self,
        file: PathOrFile,
        *,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
    ) -> None:
        if isinstance(file, (str, bytes, os.PathLike)):
            # Unbuffered: this class buffers, so a flush really reaches the OS. A name ending
            # in .zst or .gz compresses: one complete frame per flush.
            self._file: Any = open_for_writing(file)
            self._owns = True
            self.name: Optional[str] = os.fspath(file)
        else:
            if not hasattr(file, "write"):
                raise TypeError(f"expected a path or a binary file object, got {type(file).__name__}")
            self._file = file
            self._owns = False
            self.name = getattr(file, "name", None)
        # "replace": an undecodable str (a surrogate-escaped path) must never stop recording,
        # and the file must stay valid UTF-8.
        self._pack = msgpack.Packer(use_bin_type=True, unicode_errors="replace").pack
        self._buf = bytearray()
        self.flush_bytes = int(flush_bytes)
        self.flush_interval = float(flush_interval)
        self._last_flush = self._last_tick = time.monotonic()
        self.bytes_written = 0
        self._counted = 0  # records up to the last tick
        self._period = 1  # records between two looks at the clock
        self._count = 1  # records left until the next look
        self.closed = False
        self.error: Optional[OSError] = None
        self._pid = os.getpid()

    def __call__(self, rec: Union[list, dict]) -> None:
        """Append one record (or the header, a map); may flush (and then raise OSError on a failed write)."""
        buf = self._buf
        buf += self._pack(rec)  # packed whole before touching the buffer: no partial record
        self._count -= 1
        if self._count <= 0 or len(buf) >= self.flush_bytes:
            self._tick()

    def _tick(self) -> None:
        if self.error is not None or self.closed:
            self._buf.clear()
            self._count = 0  # refuse every later record too
            self._refuse()
        self._counted += self._period - self._count
        now = _monotonic()
        slow = now - self._last_tick > self.flush_interval / 16
        self._period = 1 if slow else min(self._period * 2, _MAX_PERIOD)
        self._count = self._period
        self._last_tick = now
        if len(self._buf) >= self.flush_bytes or now - self._last_flush >= self.flush_interval:
            self.flush()

    @property
    def records(self) -> int:
        """Records appended so far."""
        return self._counted + self._period - self._count

    def write_bytes(self, data: bytes) -> None:
        """Append raw bytes (the magic) to the buffer."""
        if self.error is not None or self.closed:
            self._refuse()
        self._buf += data

    def pending(self) -> int:
        """Bytes buffered and not yet written."""
        return len(self._buf)

    #: Whether :meth:`commit` puts the records where they outlive the process (a kill).
    durable = False

    def commit(self) -> None:
        """The end of a batch of records: this sink writes on its own schedule (see above)."""

    def flush(self) -> None:
        """Write the buffer to the file (and flush the file object if it buffers)."""
        if self.error is not None:
            self._refuse()
        if self.closed:
            return
        self._last_flush = time.monotonic()
        if not self._buf:
            return
        if os.getpid() != self._pid:
            # A forked child inherited this sink (and the parent's unflushed records): it
            # must never write into the parent's trace.
            self._buf.clear()
            self.error = OSError(f"this trace belongs to process {self._pid}; a forked child does not write to it")
            raise self.error
        data = bytes(self._buf)
        self._buf.clear()
        try:
            view = memoryview(data)
            while view:
                n = self._file.write(view)
                if n is None:  # a non-blocking raw file that would block
                    raise BlockingIOError("the trace file would block")
                if n <= 0 and len(view):
                    raise OSError("the trace file accepted no bytes")
                self.bytes_written += n
                view = view[n:]
            if not self._owns:
                fl = getattr(self._file, "flush", None)
                if fl is not None:
                    fl()
        except OSError as e:
            self.error = e
            raise
        except Exception as e:  # closed file objects raise ValueError; surface as OSError
            err = OSError(f"cannot write the trace: {e}")
            self.error = err
            raise err from e

    def _refuse(self) -> None:
        if self.closed:
            raise OSError("the trace file is closed")
        raise OSError(f"the trace file could not be written earlier ({self.error}); no more records are written")

    def close(self) -> None:
        """Flush and close (the file is closed only if the sink opened it)."""
        if self.closed:
            return
        try:
            if self.error is None and os.getpid() == self._pid:
                self.flush()
        finally:
            self.closed = True
            if self._owns:
                self._file.close()


#: How much a mapped trace grows at a time (the most zero bytes a killed trace ends with).
MAP_STEP_MAX = 8 << 20
MAP_STEP_MIN = 256 << 10
#: Space always kept allocated past the committed records, so that the note and the END
#: record saying why recording stopped still fit when the disk is full.
MAP_RESERVE = 16 << 10


class MappedFileSink(FileSink):
    """A sink that copies each committed batch into a shared mapping of the trace file.

    The file is grown ahead of the records in steps (``posix_fallocate``, so the space is
    really reserved: a full disk is an ``OSError`` here, never a ``SIGBUS`` on a store into
    the mapping) and cut back to the exact length at :meth:`close`. A process killed in
    between leaves its records followed by zero bytes, which readers treat as the end of
    the data (docs/trace-format.md, section 7). Records buffered and not committed are
    committed when the buffer exceeds ``flush_bytes`` and at :meth:`flush` / :meth:`close`;
    :class:`TraceWriter` commits after every call, the recorder after each batch.

    Near a full disk a step that does not fit is halved down to what the commit needs, so
    the trace takes what fits. When the disk is full, :attr:`MAP_RESERVE` bytes remain
    allocated: :meth:`finish_after_error` writes the records that explain the stop there.
    """

    durable = True

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
    ) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
            super().__init__(os.fdopen(fd, "r+b", buffering=0), flush_bytes=flush_bytes,
                             flush_interval=flush_interval)
        except BaseException:
            os.close(fd)
            raise
        self._owns = True
        self.name = os.fspath(path)
        self._fd = fd
        self._map: Optional[mmap.mmap] = None
        self._size = 0  # bytes allocated (and mapped)
        self._pos = 0  # bytes committed
        self._limit = -1  # commit without growing while _pos + n <= _limit (-1: refuse)
        #: Commit after every record (TraceWriter's calls); the recorder commits per batch.
        self.autocommit = True
        #: Records handed over by :attr:`defer` and not packed yet (packed in one call at the
        #: next commit, in order, after everything in the buffer).
        self._recs: list = []
        #: ``list.append`` of those records: the kill-safe recorder's encoder sink (a C call
        #: per record: no Python frame, no pack, no buffer append until the op commits).
        self.defer = self._recs.append
        try:
            self._grow(0, MAP_RESERVE)
        except (OSError, ValueError) as e:
            self._file.close()
            if isinstance(e, OSError) and e.errno not in _CANNOT_MAP:
                # no room even for the first records (a full disk, a tiny filesystem): no
                # trace, and no empty file left behind that would read as one
                try:
                    os.unlink(path)
                except OSError:
                    pass
                raise
            raise _CannotMap(e) from e

    def __call__(self, rec: Union[list, dict]) -> None:
        if self._recs:  # deferred records come first
            self._pack_deferred()
        buf = self._buf
        buf += self._pack(rec)
        if self.autocommit or len(buf) >= self.flush_bytes:
            self.commit()

    def _packed_deferred(self) -> bytes:
        """The deferred records packed back to back (and forgotten), as packing each would
        give them: one pack of the list, less the array header.

        If the list does not pack, each record is packed on its own: a record that cannot be
        packed raises, with the records before it in the buffer (as if each had been packed
        on arrival) and the rest dropped.
        """
        recs = self._recs
        n = len(recs)
        try:
            if n == 1:
                data = self._pack(recs[0])
            else:
                data = self._pack(recs)[1 if n < 16 else 3 if n < 0x10000 else 5:]
        except BaseException:
            out = bytearray()
            try:
                for r in recs:
                    out += self._pack(r)
            except BaseException:
                self._buf += out
                raise
            finally:
                recs.clear()
            return bytes(out)
        recs.clear()
        return data

    def _pack_deferred(self) -> None:
        self._buf += self._packed_deferred()

    def _grow(self, need: int, reserve: int) -> None:
        size = self._size
        want = self._pos + need + reserve
        new = size + min(max(size, MAP_STEP_MIN), MAP_STEP_MAX)
        if new < want:
            new = want + MAP_STEP_MIN
        while True:
            try:
                os.posix_fallocate(self._fd, size, new - size)
                break
            except OSError as e:
                # Less room than a step: halve the step down to what this commit needs,
                # so a nearly full disk still takes what fits (and the reserve behind it).
                if e.errno not in _NO_ROOM or new <= want:
                    raise
                new = max(want, size + (new - size) // 2)
        if self._map is None:
            self._map = mmap.mmap(self._fd, new, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        else:
            self._map.resize(new)
        self._size = new
        self._limit = new - MAP_RESERVE
        _MAPPED.add(self)

    def commit(self) -> None:
        """Copy the buffered records into the mapped file (they survive a kill from now on).

        With nothing in the buffer, the deferred records (:attr:`defer`) are packed and
        copied straight into the mapping: one pack, one copy.
        """
        buf = self._buf
        recs = self._recs
        if recs:
            if buf:
                self._pack_deferred()
            else:
                # _packed_deferred, inlined: this is the kill-safe recorder's per-op commit
                k = len(recs)
                try:
                    data = self._pack(recs[0]) if k == 1 else self._pack(recs)[1 if k < 16 else 3 if k < 0x10000 else 5:]
                except BaseException:
                    # one by one into the buffer: raises at a record that cannot be packed
                    # (the ones before it buffered); else the buffer is committed
                    self._pack_deferred()
                    self.commit()
                    return
                recs.clear()
                pos = self._pos
                n = len(data)
                if pos + n > self._limit:  # grow, or refuse (error, closed, forked child)
                    buf += data
                    self._commit_slow()
                    return
                self._map[pos:pos + n] = data  # type: ignore[index]
                self._pos = pos + n
                return
        n = len(buf)
        if n:
            pos = self._pos
            if pos + n > self._limit:  # grow, or refuse (error, closed, forked child)
                self._commit_slow()
                return
            self._map[pos:pos + n] = buf  # type: ignore[index]
            self._pos = pos + n
            buf.clear()

    def put(self, rec: list) -> None:
        """Append one record and commit everything buffered (it survives a kill from now on).

        The kill-safe recorder's per-op path: with nothing deferred or buffered (a kernel
        that needed no new definition, after no queued hook), the record is packed and
        copied straight into the mapping.
        """
        if self._recs or self._buf:
            self._recs.append(rec)
            self.commit()
            return
        data = self._pack(rec)
        pos = self._pos
        n = len(data)
        if pos + n > self._limit:  # grow, or refuse (error, closed, forked child)
            self._buf += data
            self._commit_slow()
            return
        self._map[pos:pos + n] = data  # type: ignore[index]
        self._pos = pos + n

    def _commit_slow(self) -> None:
        buf = self._buf
        if self.error is not None or self.closed:
            buf.clear()
            self._recs.clear()
            self._refuse()
        if os.getpid() != self._pid:
            buf.clear()
            self._recs.clear()
            self._limit = -1
            self.error = OSError(f"this trace belongs to process {self._pid}; a forked child does not write to it")
            raise self.error
        n = len(buf)
        pos = self._pos
        try:
            if pos + n + MAP_RESERVE > self._size:
                self._grow(n, MAP_RESERVE)
            self._map[pos:pos + n] = buf  # type: ignore[index]
        except OSError as e:
            buf.clear()
            self._limit = -1
            self.error = e
            raise
        except Exception as e:  # mmap errors other than OSError (ValueError, ...)
            buf.clear()
            self._limit = -1
            self.error = OSError(f"cannot write the trace: {e}")
            raise self.error from e
        self._pos = pos + n
        buf.clear()

    @property
    def bytes_written(self) -> int:  # type: ignore[override]
        return self._pos

    @bytes_written.setter
    def bytes_written(self, value: int) -> None:
        pass  # FileSink's counter; the committed length is the count here

    def flush(self) -> None:
        if self.error is not None:
            self._refuse()
        if not self.closed:
            self._last_flush = time.monotonic()
            self.commit()

    def pending(self) -> int:
        """Bytes buffered and not yet committed (deferred records count as one byte each)."""
        return len(self._buf) + len(self._recs)

    def finish_after_error(self, records: Sequence[list]) -> bool:
        """After a failed commit (a full disk), write ``records`` into the reserved space.

        Returns whether they were written. Used for the note and the END record that say
        why the trace stops early; never grows the file.
        """
        if self.closed or self._map is None or os.getpid() != self._pid:
            return False
        data = b"".join(self._pack(r) for r in records)
        if self._pos + len(data) > self._size:
            return False
        self._map[self._pos:self._pos + len(data)] = data
        self._pos += len(data)
        self._buf.clear()
        self._recs.clear()
        return True

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.error is None and os.getpid() == self._pid:
                self.commit()
        finally:
            self.closed = True
            self._limit = -1
            mine = os.getpid() == self._pid
            try:
                if self._map is not None:
                    self._map.close()
                    self._map = None
            finally:
                try:
                    if mine:
                        os.ftruncate(self._fd, self._pos)
                finally:
                    self._file.close()


#: Live mapped sinks: a forked child must never write into its parent's mapping.
_MAPPED: "weakref.WeakSet[MappedFileSink]" = weakref.WeakSet()


def _refuse_mapped_in_child() -> None:
    for sink in list(_MAPPED):
        sink._limit = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_refuse_mapped_in_child)

#: errno values of a full disk or quota: a smaller allocation may still fit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)

#: errno values that mean "this file cannot be mapped here" (use the buffered sink).
_CANNOT_MAP = (errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP, errno.EACCES)


class _CannotMap(Exception):
    pass


#: Names that ask for a compressed trace (written by the buffered sink, a frame per flush).
COMPRESSED_SUFFIXES = (".zst", ".gz")


def open_sink(
    file: PathOrFile,
    *,
    flush_bytes: int = DEFAULT_FLUSH_BYTES,
    flush_interval: float = DEFAULT_FLUSH_INTERVAL,
) -> FileSink:
    """The sink for ``file``: mapped for a path to a regular (or new) uncompressed file,
    buffered otherwise (a file object, a pipe or device path, a compressed name, or a
    file system that cannot map the file)."""
    if isinstance(file, (str, bytes, os.PathLike)):
        name = os.fsdecode(file)
        try:
            regular = stat.S_ISREG(os.stat(name).st_mode)
        except FileNotFoundError:
            regular = True
        except OSError:
            regular = False
        if regular and not name.endswith(COMPRESSED_SUFFIXES):
            try:
                return MappedFileSink(name, flush_bytes=flush_bytes, flush_interval=flush_interval)
            except _CannotMap:
                pass
    return FileSink(file, flush_bytes=flush_bytes, flush_interval=flush_interval)


class TraceWriter:
    """Emit an npusan trace from any runtime: the contract in ``docs/trace-format.md``.

    ``file`` is a path or a binary file object (left open on close). Streams, events and
    pointers are ints; ``device=`` names the device of the stream (streams are identified
    per device), ``stack=`` is a list of ``(filename, lineno, function)`` outermost first,
    and ``thread=`` (an id, a name, or ``(id, name)``) is noted once per thread for ``npusan info``
    (records of format 1.0 carry no thread). With ``source_text`` (the default), each frame's
    source line is read (``linecache``) and stored with the frame, so that the trace reads
    with its source on any machine; pass False when the stacks do not name local files. Every method is thread-safe. Writing errors
    raise :class:`OSError` (see the module docstring). ``header=`` overrides header keys
    (the recorder passes ``device_count`` and ``default_streams``).
    """

    def __init__(
        self,
        file: PathOrFile,
        *,
        backend: str = "cuda",
        metadata: Optional[Mapping] = None,
        header: Optional[Mapping] = None,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        source_text: bool = True,
    ) -> None:
        self.sink = open_sink(file, flush_bytes=flush_bytes, flush_interval=flush_interval)
        self.lock = threading.Lock()
        self.encoder = RecordEncoder(self.sink)
        if source_text:
            self.encoder.source_lines = SourceLines()
        self.header = build_header(backend, metadata, header)
        self._threads: dict[Any, int] = {}
        self.closed = False
        try:
            self.sink.write_bytes(R.MAGIC)
            self.sink(self.header)
            self.sink.flush()  # a crash right after this still leaves a readable (empty) trace
        except BaseException:
            self.sink.close()
            raise

    # -- context manager -------------------------------------------------------------

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.closed and self.sink.error is None:
            try:
                self.note("warning", f"the traced code raised {exc_type.__name__}: {exc}")
            except OSError:
                pass
        self.close()

    # -- helpers ---------------------------------------------------------------------

    def _stack(self, stack: StackArg) -> Optional[int]:
        if stack is None:
            return None
        return self.encoder.stack([(str(f[0]), operator.index(f[1]), str(f[2])) for f in stack])

    def _thread(self, thread: Any) -> None:
        """Note a thread once: an id (``threading.get_ident()``), a name, or ``(id, name)``.

        Threads get small sequential ids in the trace (raw idents are too large for the
        reader's id tables).
        """
        if thread is None:
            return
        key = tuple(thread) if isinstance(thread, list) else thread
        if key in self._threads:
            return
        if isinstance(key, tuple) and len(key) == 2:
            name = str(key[1])
        elif isinstance(key, str):
            name = key
        else:
            name = f"thread {operator.index(key)}"
        tid = self._threads[key] = len(self._threads)
        self.encoder.thread(tid, name)

    def _check(self) -> None:
        if self.closed:
            raise OSError("the trace writer is closed")
        if self.sink.error is not None:
            self.sink._refuse()

    # -- the contract ----------------------------------------------------------------

    def stream_created(self, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.stream_created(_int(stream), _int(device), self._stack(stack))

    def event_created(self, event: int, *, thread: Any = None, stack: StackArg = None) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.event_created(_int(event), self._stack(stack))

    def event_deleted(self, event: int, *, thread: Any = None, stack: StackArg = None) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.event_deleted(_int(event), self._stack(stack))

    def event_recorded(
        self, event: int, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None
    ) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.event_recorded(_int(event), _int(stream), _int(device), self._stack(stack))

    def event_waited(
        self, event: int, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None
    ) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.event_waited(_int(event), _int(stream), _int(device), self._stack(stack))

    def event_synchronized(self, event: int, *, thread: Any = None, stack: StackArg = None) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.event_synchronized(_int(event), self._stack(stack))

    def stream_synchronized(self, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.stream_synchronized(_int(stream), _int(device), self._stack(stack))

    def device_synchronized(
        self, *, device: Optional[int] = None, thread: Any = None, stack: StackArg = None
    ) -> None:
        """A device-wide synchronize; ``device=None`` (the default) means every device."""
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.device_synchronized(None if device is None else _int(device), self._stack(stack))

    def memory_allocated(
        self,
        ptr: int,
        stream: int,
        size: Optional[int] = None,
        *,
        device: int = 0,
        thread: Any = None,
        stack: StackArg = None,
    ) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.memory_allocated(
                _ptr(ptr), _int(stream), _int(device), None if size is None else _ptr(size, "size"), self._stack(stack)
            )

    def memory_freed(self, ptr: int, *, thread: Any = None, stack: StackArg = None) -> None:
        """A free of the block based at ``ptr`` (a pointer never allocated in the trace is ignored)."""
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.memory_freed(_ptr(ptr), self._stack(stack))

    def record_stream(
        self, ptr: int, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None
    ) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.record_stream(_ptr(ptr), _int(stream), _int(device), self._stack(stack))

    def erase_stream(
        self, ptr: int, stream: int, *, device: int = 0, thread: Any = None, stack: StackArg = None
    ) -> None:
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.erase_stream(_ptr(ptr), _int(stream), _int(device), self._stack(stack))

    def stream_label(self, stream: int, label: str, *, role: str = "", device: int = 0) -> None:
        """Say what ``stream`` is for (format 1.1), e.g. ``role="comm"``, ``label="comm stream
        of process group 0"``: reports then name it so."""
        with self.lock:
            self._check()
            self.encoder.stream_label(_int(stream), str(role), str(label), _int(device))

    def graph_begin(self, graph: int, stream: int, *, device: int = 0, thread: Any = None,
                    stack: StackArg = None) -> None:
        """(1.3) Capture of graph ``graph`` (an int the writer chooses) begins on ``stream``:
        the kernels and event records written until :meth:`graph_end` are its program,
        run at each :meth:`graph_launch`, not now."""
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.graph_begin(_int(graph), _int(stream), _int(device), self._stack(stack))

    def graph_end(self, graph: int) -> None:
        """(1.3) The capture of graph ``graph`` ends."""
        with self.lock:
            self._check()
            self.encoder.graph_end(_int(graph))

    def graph_launch(self, graph: int, stream: int, *, device: int = 0, thread: Any = None,
                     stack: StackArg = None) -> None:
        """(1.3) Graph ``graph`` is replayed on ``stream`` (its capture stream's work runs there)."""
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.graph_launch(_int(graph), _int(stream), _int(device), self._stack(stack))

    def host_access(
        self,
        op: str,
        reads: Iterable = (),
        writes: Iterable = (),
        *,
        thread: Any = None,
        stack: StackArg = None,
    ) -> None:
        """The host reads or writes pinned host memory (format 1.2): ``reads``/``writes`` as
        for :meth:`kernel` (a strided view is written as its hull). The host is ordered after
        a stream's work only by a synchronization (event, stream or device synchronize);
        every operation written after this one is ordered after it."""
        r = [_access(p) for p in reads]
        w = [_access(p) for p in writes]
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.host_access(str(op), r, w, self._stack(stack))

    def kernel(
        self,
        stream: int,
        op: str,
        reads: Iterable = (),
        writes: Iterable = (),
        *,
        device: int = 0,
        thread: Any = None,
        stack: StackArg = None,
    ) -> None:
        """A kernel on ``stream``: each read/write is a pointer (the whole block that contains
        it), a ``(ptr, nbytes)`` pair (that byte range), or a
        ``Strided(ptr=, sizes=, strides=, itemsize=)`` view (exactly the bytes of its
        elements; strides in elements, ``ptr`` the address of the first element). An empty
        range or view (``buf[n:n]``) touches nothing and is not written, wherever it points."""
        r = [_access(p) for p in reads]
        w = [_access(p) for p in writes]
        with self.lock:
            self._check()
            self._thread(thread)
            self.encoder.kernel(_int(stream), str(op), r, w, _int(device), self._stack(stack))

    def note(self, level: str, text: str) -> None:
        """A message for whoever reads the trace (``level``: "info", "warning", "error")."""
        with self.lock:
            self._check()
            self.encoder.note(str(level), str(text))

    def flush(self) -> None:
        """Write everything buffered so far to the file."""
        with self.lock:
            if not self.closed:
                self.sink.flush()

    def close(self, *, end: Optional[Mapping] = None) -> None:
        """Write the END record (the clean-end marker) with statistics and close.

        ``end``: extra keys for the END statistics (the recorder notes ``signal`` when a
        signal ends the process). If an earlier write failed, no END is written: the trace
        reads as truncated.
        """
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                if self.sink.error is None and os.getpid() == self.sink._pid:
                    stats = self.stats()
                    if end:
                        stats.update(end)
                    self.encoder.end(stats)
            finally:
                self.sink.close()

    def close_after_error(self, reason: str) -> None:
        """Close a trace that stops early: a NOTE and an END record saying ``reason``
        (``"stopped"`` in the END statistics), where they can still be written.

        After a failed write they go into the space a mapped trace keeps for this; a
        buffered one gets nothing more (it reads as truncated).
        """
        with self.lock:
            if self.closed:
                return
            self.closed = True
            sink = self.sink
            try:
                if os.getpid() != sink._pid:
                    return
                stats = self.stats()
                stats["stopped"] = reason
                note = f"recording stopped: {reason}"
                if sink.error is None:
                    self.encoder.note("error", note)
                    self.encoder.end(stats)
                elif isinstance(sink, MappedFileSink):
                    sink.finish_after_error([[R.NOTE, "error", note], [R.END, stats]])
            except Exception:
                pass
            finally:
                sink.close()

    def stats(self) -> dict:
        """What the END record says: record counts by type name, end time."""
        counts = {R.RECORD_NAMES.get(t, str(t)): n for t, n in sorted(self.encoder.counts.items())}
        return {"events": sum(self.encoder.counts.values()), "counts": counts, "end_time": time.time()}


def _int(v: Any) -> int:
    """An int argument (numpy ints welcome); bools and floats are mistakes."""
    if isinstance(v, bool):
        raise TypeError("expected an integer, got a bool")
    i = operator.index(v)
    if not -(1 << 63) <= i < (1 << 64):
        raise ValueError(f"{i} does not fit in 64 bits")
    return i


def _ptr(v: Any, what: str = "pointer") -> int:
    """A pointer or a size: an int from 0 to 2^64 - 1 (a trace with a negative one is refused
    by the analyzer as a whole, so it is refused here, at the call that made it)."""
    i = _int(v)
    if i < 0:
        raise ValueError(f"negative {what} {i}")
    return i


def _access(p: Any):
    if isinstance(p, Strided):
        sizes = [_int(n) for n in p.sizes]
        strides = [_int(d) for d in p.strides]
        itemsize = _int(p.itemsize)
        if len(sizes) != len(strides) or itemsize < 1 or any(n < 0 for n in sizes):
            raise ValueError(f"a strided view needs as many sizes as strides, sizes >= 0 and itemsize >= 1: {p!r}")
        if len(sizes) > 64 or any(n > MAX_VALUE for n in sizes):
            raise ValueError(f"a strided view with more than 64 dims or absurd sizes: {p!r}")
        return Strided(_ptr(p.ptr), sizes, strides, itemsize)
    if isinstance(p, (tuple, list)):
        if len(p) != 2:
            raise ValueError(f"a range access is (ptr, nbytes), got {p!r}")
        ptr, n = _int(p[0]), _int(p[1])
        if ptr < 0 or n < 0:
            raise ValueError(f"negative pointer or size in {p!r}")
        return (ptr, n)
    return _ptr(p)
