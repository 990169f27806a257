"""Hypothesis fuzzing of the reader: on any input it yields records or raises TraceFormatError.

Never another exception, never a hang, never a record that breaks the reader's promise
(a list whose first element is a known type, at least MIN_LENGTH long).
"""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.trace_format import TraceFormatError, TraceReader
from npusan.trace_format import records as R

from .conftest import handmade, write_small_trace

HEADER = {"format": [1, 0], "backend": "cuda"}
PREFIX = handmade(HEADER, [])


def _small() -> bytes:
    buf = io.BytesIO()
    write_small_trace(buf)
    return buf.getvalue()


VALID = _small()
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def consume(data: bytes) -> None:
    try:
        r = TraceReader(io.BytesIO(data))
        for rec in r.records():
            assert rec.__class__ is list
            assert rec[0] in R.MIN_LENGTH and rec[0] not in R.DEFINITIONS and rec[0] != R.END
            assert len(rec) >= R.MIN_LENGTH[rec[0]]
        assert r.ended_cleanly != r.truncated
    except TraceFormatError as e:
        msg = str(e)
        assert msg and "\n" not in msg


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_after_a_valid_header(tail):
    consume(PREFIX + tail)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_anywhere(data):
    consume(data)
    consume(R.MAGIC + data)


# Records that look like records: arrays of small ints, nil, strings, nested arrays.
_atom = st.one_of(st.integers(-3, 25), st.none(), st.text(max_size=4), st.booleans(),
                  st.integers(-(1 << 63), (1 << 64) - 1))
_record = st.lists(st.one_of(_atom, st.lists(_atom, max_size=4)), min_size=0, max_size=7)


@FUZZ
@given(st.lists(_record, max_size=30), st.booleans())
def test_structured_random_records(records, end):
    recs = list(records) + ([[R.END, {}]] if end else [])
    consume(handmade(HEADER, recs))


@FUZZ
@given(st.data())
def test_mutations_and_truncations_of_a_valid_trace(data):
    buf = bytearray(VALID)
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(buf) - 1))
        op = data.draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        if op == "flip":
            buf[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = data.draw(st.sampled_from([0x00, 0x7F, 0xC1, 0xDB, 0xDD, 0xDF, 0xFF, 0xC6, 0x9F]))
        elif op == "insert":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and len(buf) > 1:
            del buf[i]
    cut = data.draw(st.integers(0, len(buf)))
    consume(bytes(buf[:cut]))


def test_all_single_byte_corruptions_of_a_small_trace():
    # Exhaustive over positions (every byte replaced by a few troublesome values).
    for i in range(len(VALID)):
        for v in (0x00, 0xC1, 0xDD, 0xFF):
            data = bytearray(VALID)
            data[i] = v
            consume(bytes(data))


@FUZZ
@given(st.lists(_record, max_size=20), st.booleans())
def test_info_summary_on_random_records(records, end):
    from npusan.trace_format.info import info_dict, summarize

    # Definitions that make many random records resolvable, so the summary gets exercised.
    defs = [[R.STR, 0, "op"], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 7]]
    data = handmade(HEADER, defs + list(records) + ([[R.END, {}]] if end else []))
    try:
        info = summarize(io.BytesIO(data))
    except TraceFormatError as e:
        assert "\n" not in str(e)
    else:
        import json

        json.dumps(info_dict(info))
