"""Fuzzing every verb that reads a trace with traces whose field TYPES are wrong.

Byte-level fuzzing (tests/trace_format/test_reader_fuzz.py) rarely produces a well-formed
record whose stack id is a map, or a header whose backend is a list: these mutations take a
valid trace, decode it, put a value of another type (or a hostile value of the same type)
in one field of the header or of one record, and re-encode it; a second strategy flips,
inserts and deletes bytes. Every verb must then exit 0, 1 or 2, with exactly one
``npusan: error:`` line on stderr for 2, and no exception may escape (click's runner
catches them, so they would show as ``result.exception``).
"""

from __future__ import annotations

import io
import os

import msgpack
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npusan.cli import cli
from npusan.trace_format import records as R

from . import npusan_scenarios as S

#: NPUSAN_FUZZ_EXAMPLES=5000 for a longer hunt; the suite's default keeps it to seconds.
FUZZ = settings(max_examples=int(os.environ.get("NPUSAN_FUZZ_EXAMPLES", "120")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: Values of every msgpack type, including ones the format never uses (ext, bin, float)
#: and hostile values of the right type (huge ids, negative ids, escape sequences).
HOSTILE_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-1, 0, 1, 2**24 - 1, 2**24, 2**32, 2**63 - 1, 2**64 - 1]),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.sampled_from(["\x1b]52;c;aGk=\x07", "\x1b[2J", "a\nb", "\u202etxt.exe", "\x9b31m"]),
    st.binary(max_size=8),
    st.lists(st.integers(-2, 30), max_size=4),
    st.lists(st.lists(st.integers(-2, 3), max_size=3), max_size=3),
    st.dictionaries(st.one_of(st.integers(-2, 3), st.text(max_size=3)), st.integers(-2, 3), max_size=3),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4)),
)


def _base_traces() -> dict:
    """Valid traces of each scenario, as (header, records) decoded with plain msgpack."""
    out = {}
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for name in ("seed_example", "data_race", "view_race", "reuse_race"):
            p = getattr(S, name)(os.path.join(d, f"{name}.npusan"))
            up = msgpack.Unpacker(io.BytesIO(p.read_bytes()[len(R.MAGIC):]), raw=False, strict_map_key=False)
            header = up.unpack()
            out[name] = (header, list(up))
    return out


BASE = _base_traces()


def encode(header, records) -> bytes:
    out = bytearray(R.MAGIC)
    out += msgpack.packb(header, use_bin_type=True)
    for rec in records:
        out += msgpack.packb(rec, use_bin_type=True)
    return bytes(out)


@st.composite
def type_mutated(draw) -> bytes:
    header, records = BASE[draw(st.sampled_from(sorted(BASE)))]
    header = dict(header)
    records = [list(r) for r in records]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 5)) == 0:
            key = draw(st.sampled_from(["backend", "default_streams", "argv", "metadata", "host", "pid",
                                        "rank", "device_count", "torch", "writer", "start_time", "format"]))
            header[key] = draw(HOSTILE_VALUE)
        else:
            rec = records[draw(st.integers(0, len(records) - 1))]
            i = draw(st.integers(1, len(rec)))  # == len(rec): append a trailing field
            value = draw(HOSTILE_VALUE)
            if i == len(rec):
                rec.append(value)
            else:
                rec[i] = value
    return encode(header, records)


@st.composite
def byte_mutated(draw) -> bytes:
    header, records = BASE[draw(st.sampled_from(sorted(BASE)))]
    data = bytearray(encode(header, records))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(len(R.MAGIC), len(data) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            data[pos] = draw(st.integers(0, 255))
        elif op == 1:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[pos:pos + draw(st.integers(1, 4))]
    return bytes(data)


VERBS = [
    ("analyze", "--format", "text"),
    ("analyze", "--format", "json"),
    ("analyze", "--format", "sarif"),
    ("analyze", "--format", "junit", "--check-leaks"),
    ("analyze", "--format", "short"),
    ("analyze", "--format", "html"),
    ("info",),
    ("info", "--json"),
    ("export",),
    ("export", "--around-findings", "1"),
]


def check_all_verbs(path: str) -> None:
    runner = CliRunner()
    for verb in VERBS:
        r = runner.invoke(cli, [verb[0], path, *verb[1:]])
        context = f"npusan {' '.join(verb)}: exit {r.exit_code}\nstderr: {r.stderr!r}"
        assert r.exception is None or isinstance(r.exception, SystemExit), (
            f"{context}\nexception: {r.exception!r}\n{''.join(__import__('traceback').format_exception(r.exception))}"
        )
        assert r.exit_code in (0, 1, 2), context
        assert "Traceback" not in r.stderr, context
        if r.exit_code == 2:
            lines = r.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("npusan: error: "), context
        for out in (r.stdout, r.stderr):
            assert "\x1b]" not in out and "\x1b[2J" not in out and "\u202e" not in out and "\x9b" not in out, context


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz") / "mutant.npusan")


@FUZZ
@given(type_mutated())
def test_type_mutations_never_crash_any_verb(fuzz_file, data):
    with open(fuzz_file, "wb") as f:
        f.write(data)
    check_all_verbs(fuzz_file)


@FUZZ
@given(byte_mutated())
def test_byte_mutations_never_crash_any_verb(fuzz_file, data):
    with open(fuzz_file, "wb") as f:
        f.write(data)
    check_all_verbs(fuzz_file)
