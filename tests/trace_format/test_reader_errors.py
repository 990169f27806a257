"""The reader on bad input: truncation at every byte, versions, corrupt records, huge lengths."""

from __future__ import annotations

import io
import resource
import time

import msgpack
import pytest

from npusan.trace_format import TraceFormatError, TraceReader, UnsupportedVersionError
from npusan.trace_format import records as R

from .conftest import handmade, raw_records

HEADER = {"format": [1, 0], "writer": "hand", "backend": "cuda"}


def read(data: bytes, **kw):
    r = TraceReader(io.BytesIO(data), **kw)
    return r, list(r.records())


class Unseekable(io.RawIOBase):
    """A pipe-like source: no seek, no tell, no fileno."""

    def __init__(self, data: bytes):
        self._b = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        chunk = self._b.read(len(b))
        b[: len(chunk)] = chunk
        return len(chunk)


def test_truncation_at_every_byte_offset(small_trace):
    header, recs, ends = raw_records(small_trace)
    header_end = 8 + len(msgpack.packb(header, use_bin_type=True))
    full = [r for r in recs if r[0] not in R.DEFINITIONS and r[0] != R.END]
    assert len(full) == 14
    for cut in range(len(small_trace) + 1):
        data = small_trace[:cut]
        if cut < header_end:
            with pytest.raises(TraceFormatError):
                TraceReader(io.BytesIO(data))
            continue
        warnings = []
        r = TraceReader(io.BytesIO(data), on_warning=warnings.append)
        got = list(r.records())
        complete = [rec for rec, end in zip(recs, ends) if end <= cut]
        expected = [x for x in complete if x[0] not in R.DEFINITIONS and x[0] != R.END]
        assert got == expected, cut
        if cut == len(small_trace):
            assert r.ended_cleanly and not r.truncated and warnings == []
        else:
            assert r.truncated and not r.ended_cleanly, cut
            assert len(warnings) == 1 and warnings == r.warnings
            assert "trace ends without an end record after" in warnings[0]
            assert "analyzed up to the last complete record" in warnings[0]
            assert f"after {len(expected)} events" in warnings[0]


def test_truncation_from_an_unseekable_stream(small_trace):
    r = TraceReader(Unseekable(small_trace[:-5]))
    assert r.size is None
    recs = list(r.records())
    assert len(recs) == 14 and r.truncated


def test_header_cut_is_an_error():
    data = handmade(HEADER, [])
    with pytest.raises(TraceFormatError, match="ends inside its header"):
        TraceReader(io.BytesIO(data[:-3]))
    with pytest.raises(TraceFormatError, match="magic"):
        TraceReader(io.BytesIO(R.MAGIC[:5]))


def test_empty_file(tmp_path):
    p = tmp_path / "empty.npusan"
    p.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        TraceReader(p)


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n" + b"\0" * 100, b"hello world, not a trace", msgpack.packb({"format": [1, 0]}) * 3],
)
def test_not_a_trace(data):
    with pytest.raises(TraceFormatError, match="not an npusan trace"):
        TraceReader(io.BytesIO(data))


def test_other_container_version():
    with pytest.raises(TraceFormatError, match="container version 2"):
        TraceReader(io.BytesIO(b"NPUSANv\x02" + msgpack.packb(HEADER)))


def test_newer_major_is_refused_naming_both_versions():
    data = handmade({"format": [2, 3]}, [[R.KERNEL, 0, 0, None]])
    with pytest.raises(UnsupportedVersionError) as e:
        TraceReader(io.BytesIO(data))
    msg = str(e.value)
    assert "2.3" in msg and f"{R.FORMAT_MAJOR}.{R.FORMAT_MINOR}" in msg
    assert isinstance(e.value, TraceFormatError)


@pytest.mark.parametrize("header", [[1, 0], {"format": "1.0"}, {"format": [1]}, {"nothing": 1}, {"format": [0, 9]},
                                    {"format": [1.0, 0]}, 42])
def test_bad_headers(header):
    with pytest.raises(TraceFormatError):
        TraceReader(io.BytesIO(handmade(header, [])))


@pytest.mark.parametrize("minor", [256, 1 << 32, (1 << 64) - 1])
def test_an_implausible_minor_version_is_a_corrupt_header(minor):
    """docs/trace-format.md section 4: a minor version is at most 255 (``[1, 2**64-1]`` was
    accepted, shown by info and sent the replay to the slower Python engine)."""
    with pytest.raises(TraceFormatError, match=f"minor version {minor} is above 255"):
        TraceReader(io.BytesIO(handmade({"format": [1, minor]}, [[R.END, {}]])))
    assert TraceReader(io.BytesIO(handmade({"format": [1, 255]}, [[R.END, {}]]))).version == (1, 255)


def test_a_note_level_outside_the_documented_three_is_read_as_is():
    """docs/trace-format.md section 5: a reader accepts another level string (a later minor
    version may add levels); only a level that is not a string is corrupt."""
    r, got = read(handmade(HEADER, [[R.NOTE, "debug", "x"], [R.NOTE, "L" * 500, "y"], [R.END, {}]]))
    assert got == [[R.NOTE, "debug", "x"], [R.NOTE, "L" * 64 + "… (436 more characters)", "y"]]
    assert r.ended_cleanly and not r.warnings


def test_newer_minor_skips_unknown_record_types_with_one_warning_each():
    recs = [
        [R.STR, 0, "aten::add"],
        [R.STREAM_DEF, 0, 0, 0],
        [99, "from the future"],
        [R.KERNEL, 0, 0, None, 0],
        [99, "again"],
        [100],
        [R.FREE, 0, None, "a trailing field added by 1.4"],
        [R.END, {}],
    ]
    warnings = []
    r, got = read(handmade({"format": [1, 4]}, recs), on_warning=warnings.append)
    assert got == [[R.KERNEL, 0, 0, None, 0], [R.FREE, 0, None, "a trailing field added by 1.4"]]
    assert len(warnings) == 2 and "type 99" in warnings[0] and "type 100" in warnings[1]
    assert "1.4" in warnings[0]
    assert r.unknown_types == {99: 2, 100: 1}
    assert r.ended_cleanly and r.version == (1, 4)
    assert r.events == 2


def test_data_after_end_is_a_warning():
    r, got = read(handmade(HEADER, [[R.STREAM_DEF, 0, 0, 0], [R.STREAM_SYNC, 0, None], [R.END, {}],
                                    [R.STREAM_SYNC, 0, None]]))
    assert got == [[R.STREAM_SYNC, 0, None]]
    assert r.ended_cleanly and any("after its end record" in w for w in r.warnings)


GOOD = [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.KERNEL, 0, 0, None], [R.KERNEL, 0, 0, None]]


@pytest.mark.parametrize(
    "bad, match",
    [
        (7, "is not a record"),
        ({"a": 1}, "is not a record"),
        ("text", "is not a record"),
        ([], "is not a record"),
        (["kernel", 1], "not an integer"),
        ([True, 0, 0, 0, 0], "not an integer"),
        ([-3, 0, 0], "negative record type"),  # (a byte flip's type: no version assigns one)
        ([R.KERNEL, 0, 0], "fewer than"),
        ([R.ALLOC, 0, 1, 2], "fewer than"),
        ([R.FRAME, 0, 5, 1, 6], "undefined strings"),
        ([R.STR, 0, "duplicate"], "defined twice"),
        ([R.STACK, 0, [42]], "undefined frames"),
        ([R.FRAME, 0, [1], 1, 0], "malformed"),
        ([R.STREAM_DEF, 1, "dev", 0], "non-integer"),
        ([R.STR, -1, "x"], "out of range"),
        (b"\xc1", "corrupt data"),  # never-used msgpack byte
        (b"\x92\xa3\xff\xfe\xfd\x01", "corrupt data"),  # invalid UTF-8 in a string
    ],
)
def test_corrupt_record_in_the_middle(bad, match):
    data = handmade(HEADER, GOOD + [bad] + GOOD[2:] + [[R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    got = []
    with pytest.raises(TraceFormatError, match=match) as e:
        for rec in r.records():
            got.append(rec)
    assert got == GOOD[2:]  # the records before the corrupt one were yielded
    msg = str(e.value)
    assert "record 5" in msg and "byte offset" in msg
    assert "\n" not in msg


def test_error_offset_points_at_the_record():
    prefix = handmade(HEADER, GOOD)
    data = prefix + msgpack.packb([R.KERNEL, 0]) + msgpack.packb([R.END, {}])
    with pytest.raises(TraceFormatError, match=f"byte offset {len(prefix)}"):
        list(TraceReader(io.BytesIO(data)).records())
    data = prefix + b"\xc1"
    with pytest.raises(TraceFormatError, match=f"byte offset {len(prefix)}"):
        list(TraceReader(io.BytesIO(data)).records())


def test_where_names_the_record_a_consumer_rejects():
    data = handmade(HEADER, GOOD + [[R.KERNEL, 0, 0, None, "bad access"], [R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    for rec in r.records():
        if rec[4:] == ["bad access"]:
            where = r.where(rec)
    assert where == f"record 5 at byte offset {len(handmade(HEADER, GOOD))}"


def _huge_length_cases():
    four_gb = b"\xff\xff\xff\xff"
    return [
        ("str32", b"\x94\x11\x00\x00\xdb" + four_gb + b"abc"),
        ("bin32", b"\x94\x11\x00\x00\xc6" + four_gb + b"abc"),
        ("array32", b"\xdd" + four_gb + b"\x11\x00"),
        ("map32", b"\x91\xdf" + four_gb + b"\x01\x02"),
        ("str8 in array32", b"\xdd\x00\x00\x00\x05\x11\xd9\xff"),  # a legit-size prefix: just cut
        ("ext32", b"\x91\xc9" + four_gb + b"\x01"),
        ("array32 at top", b"\xdd\x7f\xff\xff\xff"),
    ]


@pytest.mark.parametrize("name, bad", _huge_length_cases())
def test_length_field_claiming_gigabytes(name, bad):
    data = handmade(HEADER, GOOD) + bad
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    r = TraceReader(io.BytesIO(data))
    if name == "str8 in array32":
        recs = list(r.records())  # within the limits: indistinguishable from a cut record
        assert r.truncated and len(recs) == 2
    else:
        with pytest.raises(TraceFormatError) as e:
            list(r.records())
        msg = str(e.value)
        assert "record 5" in msg and "\n" not in msg
        assert ("limit" in msg) or ("exceeds" in msg)
    assert time.perf_counter() - t < 2.0
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024


def _one_damaged_byte_cases():
    """(name, damaged record bytes, words of the error): one length byte changed so that the
    record claims more elements than the file holds, with valid records after it (they read
    as its elements, so the file ends inside it)."""
    kernel = msgpack.packb([R.KERNEL, 0, 0, None, [1, 16, 16], [~1, 32, 16]])
    assert kernel[0] == 0x96 and kernel[9] == 0x93 and kernel[10] == 0xFE
    return [
        # an access's block id (a negative fixint) became an array16: [[65312 elements...
        ("access element", kernel[:10] + b"\xdc\xff" + kernel[11:], "access 2 of the unfinished KERNEL record (an array whose element 1"),
        # the record's own length (a fixarray) became an array16: the next records are its accesses
        ("record length", b"\xdc\xff\x00" + kernel[1:], "access 3 of the unfinished KERNEL record (an array of 5 elements)"),
        # an access (a fixarray of 3) became an array16
        ("access length", kernel[:9] + b"\xdc\xff\x00" + kernel[10:], "access 2 of the unfinished KERNEL record (an array of 65280 elements)"),
        # the record's first byte became a str16: not an array at all
        ("not an array", b"\xda\xff" + kernel[1:], "the unfinished record is not an array"),
        # a record's type (an int) became an array16 header
        ("type", b"\x96\xdc\xff" + kernel[2:], "the unfinished record's type is an array"),
        # an EVENT_RECORD's stack (nil) became an array16 header
        ("event stack", b"\x94" + msgpack.packb(R.EVENT_RECORD) + b"\x01\x00\xdc\xff",
         "the stack of the unfinished event-record record is an array"),
        # a STR's text became a str16 that runs to the end: the records after it are not UTF-8
        ("string", b"\x93\x00\x07\xda\xff\xff\xc1", "a string that runs to the end of the data is not valid UTF-8"),
        # a VIEWS entry's offset (an int) became an array16 header
        ("views entry", b"\x92\x15\x93\x01\xdc\xff", "entry 1 of the unfinished VIEWS record is an array whose element 2"),
    ]


@pytest.mark.parametrize("name, bad, words", [pytest.param(*c, id=c[0]) for c in _one_damaged_byte_cases()])
@pytest.mark.parametrize("seekable", [True, False])
def test_a_damaged_length_is_corrupt_not_a_cut(name, bad, words, seekable):
    """A cut record holds what a valid one holds before the cut; a length byte damaged in
    the middle of a trace makes a record claim the rest of the file, whose records then read
    as its elements. That is corruption (an error), not a crash's cut (a warning, with the
    rest of the trace silently dropped). From a pipe, which cannot be read again, the
    reader looks at the record's bytes as it read them."""
    after = [msgpack.packb([R.KERNEL, 0, 0, None, [1, 16 * k, 16]]) for k in range(200)]
    data = handmade(HEADER, GOOD + [[R.BLOCK_DEF, 1, 0x1000, 4096, None], bad, *after, [R.END, {}]])
    r = TraceReader(io.BytesIO(data) if seekable else Unseekable(data))
    with pytest.raises(TraceFormatError) as e:
        list(r.records())
    msg = str(e.value)
    assert f"corrupt data at record 6 at byte offset {len(handmade(HEADER, GOOD + [[R.BLOCK_DEF, 1, 0x1000, 4096, None]]))}" in msg
    assert words in msg and "\n" not in msg


def test_cut_records_with_ranges_are_cuts_at_every_byte():
    """The other side of the test above: kernel records of every access form, cut at each
    byte, are cuts."""
    recs = [[R.KERNEL, 0, 0, None, [1, 16, 16], ~1, [~1, 70000, 1 << 20], 1, [1, 0, 0]],
            [R.KERNEL, 0, 0, 0, [1, 2 ** 40, 2 ** 33], [-2 ** 31, 0, 5]]]
    data = handmade(HEADER, GOOD + [[R.BLOCK_DEF, 1, 0x1000, 4096, None], *recs])
    start = len(handmade(HEADER, GOOD + [[R.BLOCK_DEF, 1, 0x1000, 4096, None]]))
    for cut in range(start, len(data)):
        r, got = read(data[:cut])
        assert r.truncated, cut


def test_length_field_claiming_gigabytes_with_data_following():
    # The file really continues (a corrupt length in a long trace): bounded buffer, clear error.
    data = handmade(HEADER, GOOD) + b"\x94\x11\x00\x00\xdb\xff\xff\xff\xff" + b"x" * (70 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TraceFormatError, match="limit"):
        list(TraceReader(io.BytesIO(data)).records())
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024


def test_header_claiming_gigabytes():
    with pytest.raises(TraceFormatError, match="header"):
        TraceReader(io.BytesIO(R.MAGIC + b"\xdf\xff\xff\xff\xff"))
    with pytest.raises(TraceFormatError, match="header is corrupt"):
        TraceReader(io.BytesIO(R.MAGIC + b"\xdb\xff\xff\xff\xff" + b"abc"))


def test_deeply_nested_arrays_do_not_explode():
    bomb = b"\xdd\x00\x04\x00\x00" * 2000
    data = handmade(HEADER, GOOD) + bomb
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = TraceReader(io.BytesIO(data))
    try:
        list(r.records())
    except TraceFormatError:
        pass
    else:
        assert r.truncated
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024


def test_reader_closes_what_it_opened(tmp_path, small_trace):
    p = tmp_path / "t.npusan"
    p.write_bytes(small_trace)
    with TraceReader(p) as r:
        f = r._file
        next(iter(r))
    assert f.closed
    bad = tmp_path / "bad.npusan"
    bad.write_bytes(b"garbage!" * 4)
    with pytest.raises(TraceFormatError):
        TraceReader(bad)


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        TraceReader(tmp_path / "nope.npusan")


def test_where_defaults_to_the_record_yielded_last():
    data = handmade(HEADER, GOOD + [[R.KERNEL, 0, 0, None, "bad access"], [R.KERNEL, 0, 0, None], [R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    for rec in r.records():
        if rec[4:] == ["bad access"]:
            assert r.where() == f"record 5 at byte offset {len(handmade(HEADER, GOOD))}"
            break
    else:
        raise AssertionError("record not seen")


# Types the format calls corrupt (docs/trace-format.md, sections 3, 5 and 6): ids are
# integers (a boolean is not), names and texts are msgpack str (not bin, not an extension
# type). Every one is refused with one line naming the record, in the tool's own words.
@pytest.mark.parametrize(
    "bad, match",
    [
        ([R.STR, True, "x"], "an id is a boolean, not an integer"),
        ([R.STR, 1, b"aten::add"], "the text of a STR record is binary data, not a string"),
        ([R.THREAD, 0, b"main"], "a thread name is binary data, not a string"),
        ([R.THREAD, False, "main"], "an id is a boolean, not an integer"),
        ([R.STREAM_DEF, 1, True, 0], "non-integer device or handle"),
        ([R.BLOCK_DEF, 1, 4096, False], "malformed pointer or size"),
        ([R.FRAME, 0, 0, True, 0], "line number that is a boolean"),
        ([R.FRAME, 0, [1], 1, 0], "file name id is an array, not an integer"),
        ([R.STACK, 0, [True]], "undefined frames"),
        ([R.NOTE, msgpack.ExtType(5, b"x"), "text"], "NOTE.* level that is an extension type, not a string"),
        ([R.NOTE, "info", b"\xff"], "NOTE.* text that is binary data, not a string"),
        ([R.NOTE, "info", 7], "NOTE.* text that is an integer, not a string"),
        ([R.STREAM_LABEL, 0, "comm", b"x"], "a stream label is binary data, not a string"),
    ],
)
def test_field_types_the_format_calls_corrupt(bad, match):
    data = handmade(HEADER, GOOD + [bad] + GOOD[2:] + [[R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    with pytest.raises(TraceFormatError, match=match) as e:
        for _ in r.records():
            pass
    msg = str(e.value)
    assert "record 5 at byte offset" in msg and "\n" not in msg
    for python in ("unhashable", "codec", "object of type", "NoneType", "ExtType"):
        assert python not in msg


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"\x92\xa3\xff\xfe\xfd\x01", "a string is not valid UTF-8 (byte 0xff at position 0 of the string)"),
        (b"\x92\x63\x81\x91\x01\x01", "a map has an array or map as a key"),  # {[1]: 1}
        (b"\xc1", "invalid msgpack"),
    ],
)
def test_msgpack_failures_are_told_in_our_words(raw, words):
    data = handmade(HEADER, GOOD + [raw] + GOOD[2:] + [[R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    with pytest.raises(TraceFormatError) as e:
        for _ in r.records():
            pass
    msg = str(e.value)
    assert words in msg and "record 5 at byte offset" in msg, msg
    assert "codec" not in msg and "unhashable" not in msg


def _empty_arrays_record(nbytes: int) -> bytes:
    """A record of an unknown type holding ``nbytes`` of empty arrays (~70x that decoded)."""
    chunks = [min(65535, nbytes - i) for i in range(0, nbytes, 65535)]
    return b"\x92\x63\xdd" + len(chunks).to_bytes(4, "big") + b"".join(
        b"\xdc" + k.to_bytes(2, "big") + b"\x90" * k for k in chunks)


@pytest.mark.parametrize("consumer", ["records", "unpacker-any-name"])
def test_record_size_limit_holds_for_any_consumer(consumer):
    """The limit on one record does not depend on how the consumer names its loop variable
    (it used to look at the caller's ``rec``): the reader finds the record boundaries."""
    from npusan.trace_format.reader import MAX_RECORD_BYTES

    data = handmade(HEADER, GOOD + [_empty_arrays_record(MAX_RECORD_BYTES + (200 << 10))] + [[R.END, {}]])
    r = TraceReader(io.BytesIO(data))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if consumer == "records":
        with pytest.raises(TraceFormatError, match="larger than the 4 MiB limit on one record"):
            for _ in r.records():
                pass
    else:
        up = r.direct_begin(0)
        with pytest.raises(msgpack.exceptions.BufferFull):
            for whatever in up:  # noqa: B007 - the name is the point
                pass
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 450, grown_mib


@pytest.mark.slow
def test_records_just_under_the_limit_are_read():
    from npusan.trace_format.reader import MAX_RECORD_BYTES

    big = _empty_arrays_record(MAX_RECORD_BYTES - (64 << 10))
    data = handmade(HEADER, GOOD + [big, big] + GOOD[2:] + [[R.END, {}]])
    r, got = read(data)
    assert r.ended_cleanly and got == GOOD[2:] * 2
    assert r.unknown_types == {99: 2}
