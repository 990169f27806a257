"""Compressed traces: ``.zst`` and ``.gz`` files read as streams, ``.zst``/``.gz`` written frame by frame.

Nightly jobs keep one trace per rank and compress them. A reader recognizes a compressed
trace by its content (the zstandard or gzip magic bytes), not by its name, and decompresses
it as a stream in constant memory.

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

    def __init__(self, path: Any, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.name = os.fspath(path)
        if kind == "zstd":
            import zstandard

            self._compress = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress
        else:
            self._compress = lambda data: gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
        self._raw = open(path, "wb", buffering=0)

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
                self._raw.close()
            finally:
                super().close()


def open_for_writing(path: Any) -> IO[bytes]:
    """An unbuffered binary file for a trace: compressing per write when the name says so."""
    kind = compression_for_name(os.fsdecode(path)) if isinstance(path, (str, bytes, os.PathLike)) else None
    if kind is None:
        return open(path, "wb", buffering=0)
    return FrameWriter(path, kind)


class DecompressingReader(io.RawIOBase):
    """A read-only stream of the decompressed bytes of a ``.zst`` or ``.gz`` file.

    Deliberately without ``fileno``/``seek``: consumers must treat it as a pipe (its size is
    unknown). Corrupt compressed data ends the stream where it starts, with :attr:`problem`
    set, so a reader analyzes everything before it, as it does for a cut plain trace; a
    file cut inside a frame simply ends after the last complete data.
    """

    def __init__(self, raw: IO[bytes], kind: str, name: Optional[str] = None) -> None:
        super().__init__()
        self.kind = kind
        self.name = name
        self.problem: Optional[str] = None
        self._raw = raw
        if kind == "zstd":
            import zstandard

            self._errors: tuple = (zstandard.ZstdError,)
            self._stream: Any = zstandard.ZstdDecompressor().stream_reader(
                raw, read_across_frames=True, closefd=False
            )
        else:
            self._errors = (zlib.error,)
            self._stream = _GzipMembers(raw)

    def readable(self) -> bool:
        return True

    #: Decompressed bytes asked of the decoder at a time: data decoded in a call that then
    #: meets corrupt input is lost with it, so calls are kept small.
    STEP = 4096

    def read(self, size: int = -1) -> bytes:
        want = size if size is not None and size >= 0 else 1 << 62
        out = bytearray()
        while len(out) < want and self.problem is None:
            try:
                chunk = self._stream.read(min(self.STEP, want - len(out)))
            except self._errors as e:
                self.problem = f"the {self.kind} data is corrupt ({e})"
                break
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            try:
                self._stream.close()
            finally:
                self._raw.close()
                super().close()


class _GzipMembers:
    """Decompresses concatenated gzip members; a file cut inside one yields what was decoded.

    (``gzip.GzipFile`` raises at a cut member and drops the bytes decoded from it.)
    """

    CHUNK = 1 << 16

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._d = zlib.decompressobj(wbits=31)
        self._in = b""  # compressed bytes not yet decompressed
        self._out = bytearray()  # decompressed bytes not yet returned
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        want = size if size is not None and size >= 0 else 1 << 62
        while len(self._out) < want and not self._eof:
            if self._d.eof:  # the next member starts in what is left
                self._in = self._d.unused_data + self._in
                self._d = zlib.decompressobj(wbits=31)
            if not self._in:
                self._in = self._raw.read(self.CHUNK)
                if not self._in:
                    self._eof = True  # a member cut short ends here: decoded bytes stand
                    break
            self._out += self._d.decompress(self._in, 4 * self.CHUNK)
            self._in = self._d.unconsumed_tail
        data = bytes(self._out[:want])
        del self._out[:want]
        return data

    def close(self) -> None:
        pass


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

    Only a seekable ``raw`` is sniffed (a pipe is read as it comes).
    """
    if not raw.seekable():
        return raw
    start = raw.tell()
    head = raw.read(4)
    raw.seek(start)
    kind = sniff(head)
    if kind is None:
        return raw
    return DecompressingReader(raw, kind, name)
