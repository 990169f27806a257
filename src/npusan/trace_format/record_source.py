"""The bytes a trace reader's record unpacker reads: one record at most so large, end zeros held back.

:class:`RecordSource` sits between the file and the msgpack unpacker that decodes the
records. It does two things the unpacker cannot: it bounds the size of one record (the
unpacker keeps a half-built object across reads, so its own buffer limit does not), and
it holds back the zero bytes at the end of the data that may be pages a crashed machine
never wrote (docs/trace-format.md, section 7), so that they never complete a record.
"""

from __future__ import annotations

from typing import Any, Optional

import msgpack

from .limits import MAX_ARRAY_LEN, MAX_BIN_LEN, MAX_EXT_LEN, MAX_MAP_LEN, MAX_RECORD_BYTES, MAX_STR_LEN, READ_SIZE


class RecordSource:
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
        self._budget: Optional[int] = None  # bytes still read from the file (None: no bound)

    def bound(self, n: int) -> None:
        """Read at most ``n`` more bytes of the file; past them, zeros held back are handed
        out as data (the reader only asks whether anything follows the end record, and a
        run of zeros that long is something: a decompression bomb after it is not decoded)."""
        self._budget = n

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
            elif self._budget is None:
                data = self._f.read(max(n, self.READ))
            elif self._budget > 0:
                data = self._f.read(min(max(n, self.READ), self._budget))
                self._budget -= len(data)
            else:  # the bound is reached with zeros still coming
                if self._held:
                    self._zeros_due, self._held = self._held, 0
                    continue
                return b""
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
                due = -(self._start + self.out) % self.PAGE
                if due and self._held >= due + self.ZERO_RUN:
                    # Those before the page boundary are handed out whatever follows (at the
                    # end too): at once, so that a record ending in zero bytes (END's last
                    # float) is complete without reading the rest of a long zero run.
                    self._zeros_due, self._held = due, self._held - due
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

