"""Compressed traces: ``.zst`` and ``.gz`` files read as streams, ``.zst``/``.gz`` written frame by frame.

Nightly jobs keep one trace per rank and compress them. A reader recognizes a compressed
trace by its content (the zstandard or gzip magic bytes), not by its name, and decompresses
it as a stream in bounded memory (a frame of up to 8 MiB is held until its checksum has
verified it: see DecompressingReader).

Writing keeps the crash safety of plain traces: every flush of the trace's buffer becomes
one complete, independent compressed frame (a zstandard frame or a gzip member), and a
concatenation of frames is itself a valid file. A process killed mid-run leaves every
frame written before the kill readable; only the frame being written (one flush worth of
records) can be lost, exactly what a plain trace loses.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import IO, Any, Optional

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
#: zstandard level of written traces: fast, still 5-10x smaller than msgpack records.
ZSTD_LEVEL = 3
GZIP_LEVEL = 6

#: Name endings that make the writer compress.
WRITE_SUFFIXES = {".zst": "zstd", ".zstd": "zstd", ".gz": "gzip"}


def compression_for_name(name: str) -> Optional[str]:
    """``"zstd"``, ``"gzip"`` or ``None`` from a file name's ending (writer side)."""
    return WRITE_SUFFIXES.get(os.path.splitext(str(name))[1].lower())


def sniff(head: bytes) -> Optional[str]:
    """``"zstd"``, ``"gzip"`` or ``None`` from a file's first bytes (reader side)."""
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    return None


class FrameWriter(io.RawIOBase):
    """A write-only raw file: each ``write`` is compressed into one complete frame.

    The trace writer buffers records and writes them in one call per flush, so each flush
    is one frame on disk, independently decodable.
    """

    def __init__(self, path: Any, kind: str, raw: Optional[IO[bytes]] = None) -> None:
        super().__init__()
        self.kind = kind
        self.name = os.fspath(path)
        if kind == "zstd":
            import zstandard

            self._compress = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress
        else:
            self._compress = lambda data: gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
        self._owns_raw = raw is None  # a file handed in is its owner's to close
        self._raw = open(path, "wb", buffering=0) if raw is None else raw

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        n = len(data)
        if n:
            frame = self._compress(bytes(data))
            view = memoryview(frame)
            while view:
                k = self._raw.write(view)
                if not k:
                    raise OSError("the trace file accepted no bytes")
                view = view[k:]
        return n

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if not self.closed:
            try:
                if self._owns_raw:
                    self._raw.close()
            finally:
                super().close()


def open_for_writing(path: Any) -> IO[bytes]:
    """An unbuffered binary file for a trace: compressing per write when the name says so."""
    kind = compression_for_name(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else None
    if kind is None:
        return open(path, "wb", buffering=0)
    return FrameWriter(path, kind)


def compressing_into(raw: IO[bytes], name: str) -> IO[bytes]:
    """``raw``, or a :class:`FrameWriter` over it when ``name`` (the file it will become) asks
    for compression: for a trace written under a temporary name and renamed (``redact``)."""
    kind = compression_for_name(name)
    return raw if kind is None else FrameWriter(name, kind, raw=raw)


class DecompressingReader(io.RawIOBase):
    """A read-only stream of the decompressed bytes of a ``.zst`` or ``.gz`` file.

    Deliberately without ``fileno``/``seek``: consumers must treat it as a pipe (its size is
    unknown). The bytes of a frame (a zstandard frame, a gzip member) are handed out only
    once the frame's checksum has verified them: a damaged byte in compressed data can
    decode to plausible records (deflate has no check of its own, and zstandard checks a
    frame at its end), and a trace attached to a bug report must not yield a finding that
    was never recorded. Corrupt compressed data therefore ends the stream at the start of
    its frame, with :attr:`problem` set (the trace reader then refuses the trace as
    damaged: a crash only cuts a compressed trace short). A frame larger than :data:`HOLD_BYTES` (npusan writes
    frames of about 1 MiB; other tools may write one frame for a whole file) is handed out
    as it is decoded instead, and :attr:`untrusted` says that bytes of a frame that then
    failed its check were already read. A file cut inside a frame (a killed writer) ends
    after the decoded bytes of that frame, which no checksum covers yet.
    """

    def __init__(self, raw: IO[bytes], kind: str, name: Optional[str] = None) -> None:
        super().__init__()
        self.kind = kind
        self.name = name
        self.problem: Optional[str] = None
        self._frames = _VerifiedFrames(raw, kind)

    @property
    def cut_short(self) -> bool:
        """Whether the file ended inside a frame (its checksum missing): the file was cut."""
        return self._frames.cut_short

    @property
    def untrusted(self) -> bool:
        """Whether bytes already read came from the frame that failed its check."""
        return self.problem is not None and self._frames.released_unverified

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.problem is not None:
            return b""
        try:
            return self._frames.read(size)
        except DecompressionBomb as e:
            self.problem = str(e)
            return b""
        except self._frames.errors as e:  # (raised once the verified bytes before it are out)
            self.problem = f"the {self.kind} data is corrupt ({e})"
            return b""

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._frames.raw.close()
            finally:
                super().close()


#: Decoded bytes of one frame held back until its checksum verifies them (see
#: DecompressingReader); past this the frame is handed out unverified.
HOLD_BYTES = 8 << 20
#: Decoded bytes allowed per compressed byte read, past :data:`BOMB_FLOOR`: recorded traces
#: compress 5-50 times; 16 GiB of zeros fit in 512 KB of zstandard (32,000 times), which
#: would cost a minute of decoding for nothing. Work stays bounded per input byte.
MAX_RATIO = 1000
BOMB_FLOOR = 256 << 20


class DecompressionBomb(Exception):
    """Compressed data that decodes to more than :data:`MAX_RATIO` times its size."""


class _VerifiedFrames:
    """Concatenated zstandard frames or gzip members, each released once verified.

    Output per decoder call is bounded, so memory stays bounded on hostile files (a few
    bytes of compressed input can stand for megabytes of output): gzip decodes at most
    :attr:`GZIP_OUT` bytes a call; zstandard decodes all a piece of input holds, so it gets
    :attr:`ZSTD_IN` bytes at a time (at most 64 blocks of 128 KiB).
    """

    READ = 1 << 16
    GZIP_OUT = 1 << 16
    ZSTD_IN = 256

    def __init__(self, raw: IO[bytes], kind: str) -> None:
        self.raw = raw
        if kind == "zstd":
            import zstandard

            self.errors: tuple = (zstandard.ZstdError,)
            self._new = zstandard.ZstdDecompressor().decompressobj
            self._gzip = False
        else:
            self.errors = (zlib.error,)
            self._new = lambda: zlib.decompressobj(wbits=31)
            self._gzip = True
        self._d: Any = None  # the current frame's decoder (None: between frames)
        self._in = memoryview(b"")  # compressed bytes not yet given to a decoder
        self._frame = bytearray()  # decoded bytes of the current frame, not yet verified
        self._ready = bytearray()  # verified bytes not yet returned
        self._eof = False
        self._error: Optional[BaseException] = None
        self.released_unverified = False  # bytes of the current frame were handed out before its check
        self.cut_short = False  # the input ended inside a frame
        self.errors += (DecompressionBomb,)
        self._kind = kind
        self._read_in = self._decoded = 0  # compressed bytes read, bytes decoded
        self._seen = 0  # decoded bytes moved out of the current frame's buffer

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` verified bytes; raises the decoder's error once those before it are out."""
        want = size if size is not None and size >= 0 else 1 << 62
        while len(self._ready) < want and not self._eof and self._error is None:
            try:
                self._step()
            except self.errors as e:
                self._error = e
                self._frame.clear()  # a frame that fails its check yields nothing
        if not self._ready and self._error is not None:
            raise self._error
        data = bytes(self._ready[:want])
        del self._ready[:want]
        return data

    def _step(self) -> None:
        if not self._in:
            self._in = memoryview(self.raw.read(self.READ))
            self._read_in += len(self._in)
            if not self._in:  # the end: between frames, or a frame cut short (a killed writer)
                self._eof = True
                self.cut_short = self._d is not None
                self._ready += self._frame
                self._frame.clear()
                return
        if self._d is None:
            self._d = self._new()
        d = self._d
        if self._gzip:  # (all the input goes in: what is left is the tail, or past the member's end)
            self._frame += d.decompress(self._in, self.GZIP_OUT)
            self._in = memoryview(d.unused_data if d.eof else d.unconsumed_tail)
        else:  # (a piece goes in: what is left of it past the frame's end comes before the rest)
            self._frame += d.decompress(self._in[: self.ZSTD_IN])
            self._in = self._in[self.ZSTD_IN:]
            if d.eof and d.unused_data:
                self._in = memoryview(bytes(d.unused_data) + bytes(self._in))
        self._decoded = self._seen + len(self._frame)
        if self._decoded > BOMB_FLOOR + MAX_RATIO * self._read_in:
            raise DecompressionBomb(
                f"the {self._kind} data decodes to more than {MAX_RATIO:,} times its size "
                f"({self._decoded:,} bytes from {self._read_in:,}): refused as a decompression bomb")
        if d.eof:  # the frame ended and its checksum matched: its bytes stand
            self._d = None
            self._seen += len(self._frame)
            self._ready += self._frame
            self._frame.clear()
            self.released_unverified = False
        elif len(self._frame) > HOLD_BYTES:
            self._seen += len(self._frame)
            self._ready += self._frame
            self._frame.clear()
            self.released_unverified = True


def open_for_reading(path: Any) -> IO[bytes]:
    """Open a trace for reading; a compressed one (by content) is decompressed as a stream."""
    raw = open(path, "rb")
    try:
        return decompressed(raw, os.fsdecode(path))
    except BaseException:
        raw.close()
        raise


def decompressed(raw: IO[bytes], name: Optional[str] = None) -> IO[bytes]:
    """``raw`` itself, or a decompressing stream over it when its content is compressed.

    A seekable ``raw`` is read and put back; a pipe (``cat t.npusan.zst | npusan analyze -``)
    is peeked at, when it can be (a buffered reader), and read as it comes otherwise.
    """
    if raw.seekable():
        start = raw.tell()
        head = raw.read(4)
        raw.seek(start)
    elif hasattr(raw, "peek"):
        head = raw.peek(4)[:4]
    else:
        return raw
    kind = sniff(head)
    if kind is None:
        return raw
    return DecompressingReader(raw, kind, name)
