"""What the unfinished record at the end of a trace's data says: cut, or corrupt.

A trace cut by a crash ends inside a record: every byte before the cut is what the writer
wrote, so the unfinished record is a prefix of a valid one, and it is left out with a
warning. A damaged length field looks the same to the unpacker (it waits for bytes the file
does not hold) but is not a cut: :func:`problem` tells the two apart from the unfinished
record's own bytes, and names what no valid record holds (docs/trace-format.md, sections 7
and 9). Only a bounded prefix is looked at, element by element, under the reader's limits.
"""

from __future__ import annotations

import codecs
from typing import Any, Callable, Optional

import msgpack

from . import records as R
from .limits import MAX_ARRAY_LEN, MAX_BIN_LEN, MAX_EXT_LEN, MAX_MAP_LEN, MAX_STR_LEN

_LIMITS = {"string": MAX_STR_LEN, "binary": MAX_BIN_LEN, "array": MAX_ARRAY_LEN, "map": MAX_MAP_LEN, "ext": MAX_EXT_LEN}


#: msgpack type bytes followed by a fixed number of payload bytes (numbers, fixext).
_FIXED_SIZE = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8,
               0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
#: msgpack type bytes followed by a length field: (kind, width of the length field).
_SIZED = {0xC4: ("binary", 1), 0xC5: ("binary", 2), 0xC6: ("binary", 4), 0xC7: ("ext", 1), 0xC8: ("ext", 2),
          0xC9: ("ext", 4), 0xD9: ("string", 1), 0xDA: ("string", 2), 0xDB: ("string", 4), 0xDC: ("array", 2),
          0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4)}


def over_limit(buf: bytes, max_steps: int = 100_000) -> Optional[str]:
    """Walk msgpack headers in ``buf`` (an incomplete object); name the first over-limit length.

    A length field over the limits cannot be a cut: it is what a damaged byte makes of a
    record (or of the header), and read on, it would swallow the rest of the data."""
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


def problem(buf: bytes) -> Optional[str]:
    """Why the unfinished record in ``buf`` (the bytes from where it starts to the end of
    the data) makes the trace corrupt, or None: it is a record cut short, left out with a
    warning. A crash cuts a record; it does not make one claim more than the limits
    (:func:`over_limit`) or hold what no valid record holds (:func:`_unfinished_record`)."""
    return (over_limit(buf) or _unfinished_record(buf)) if buf else None


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

