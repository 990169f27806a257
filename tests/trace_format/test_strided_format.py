"""Format 1.1 VIEWS records: what the writer emits, what readers accept, what they refuse."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from npusan.cli import cli
from npusan.trace_format import Strided, TraceReader, TraceWriter
from npusan.trace_format import records as R
from npusan.trace_format.info import summarize
from npusan.trace_format.strided import MAX_DIMS, Shape, normalize, parse_entry

from .conftest import handmade, raw_records

DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"
BASE = 0x7F0000000000
HEADER = {"format": [1, 1], "writer": "hand", "backend": "sim"}


def write(*kernels, size=64 * 64 * 4) -> bytes:
    """A trace: streams 1 and 2, one block of ``size`` bytes, then ``(stream, reads, writes)`` kernels."""
    buf = io.BytesIO()
    with TraceWriter(buf, backend="sim") as w:
        w.stream_created(1)
        w.stream_created(2)
        w.memory_allocated(BASE, 0, size)
        for i, (stream, reads, writes) in enumerate(kernels):
            w.kernel(stream, f"op{i}", reads=reads, writes=writes)
    return buf.getvalue()


def events(data: bytes) -> list:
    return [r for r in raw_records(data)[1] if r[0] not in R.DEFINITIONS and r[0] != R.END]


def test_a_strided_write_is_its_hull_plus_a_views_entry_just_before_the_kernel():
    data = write((1, [], [Strided(BASE + 128, (64, 32), (64, 1), 4)]))
    header, recs, _ = raw_records(data)
    assert header["format"] == [1, R.FORMAT_MINOR]
    i = next(i for i, r in enumerate(recs) if r[0] == R.KERNEL)
    assert recs[i - 1] == [R.VIEWS, [-1, 128, 16256, 128, 64, 256]]
    assert recs[i][4:] == [[-1, 128, 16256]]


def test_contiguous_and_transposed_views_stay_plain_ranges():
    data = write((1, [Strided(BASE, (16, 16), (1, 16), 4)], [Strided(BASE + 64, (8,), (1,), 4)]))
    ev = events(data)
    assert all(r[0] != R.VIEWS for r in ev)
    assert ev[-1][4:] == [[0, 0, 1024], [-1, 64, 32]]
    assert events(write((1, [Strided(BASE, (0, 4), (4, 1), 4)], [])))[-1][4:] == []  # empty: no access


def test_one_entry_per_triple_and_ambiguous_triples_fall_back():
    even = Strided(BASE, (4,), (2,), 4)  # bytes 0-3, 8-11, 16-19, 24-27: hull [0, 28)
    same_hull = Strided(BASE, (2,), (6,), 4)  # bytes 0-3 and 24-27: the same hull
    ev = events(write((1, [even, even], [even])))
    assert ev[-2] == [R.VIEWS, [0, 0, 28, 4, 4, 8], [-1, 0, 28, 4, 4, 8]]  # read and write
    ev = events(write((1, [even, same_hull], [])))
    assert ev[-2] == [R.VIEWS, [0, 0, 28]]  # two views, one triple: the hull, flagged
    ev = events(write((1, [even, (BASE, 28)], [])))
    assert ev[-2] == [R.VIEWS, [0, 0, 28]]  # a view and a plain range with its hull


def test_too_many_dims_fall_back_to_the_hull_and_info_counts_it(tmp_path):
    strides = tuple(3 ** (i + 1) for i in range(MAX_DIMS + 1))  # no two dims merge
    odd = Strided(BASE, (2,) * (MAX_DIMS + 1), strides, 1)
    assert len(normalize(0, odd.sizes, odd.strides, 1).dims) == MAX_DIMS + 1
    data = write((1, [], [odd]), (2, [Strided(BASE, (4,), (2,), 4)], []), size=1 << 16)
    ev = events(data)
    assert [r for r in ev if r[0] == R.VIEWS] == [[R.VIEWS, [-1, 0, sum(strides) + 1]],
                                                  [R.VIEWS, [0, 0, 28, 4, 4, 8]]]
    p = tmp_path / "t.npusan"
    p.write_bytes(data)
    info = summarize(str(p))
    assert (info.views.exact, info.views.hull_fallbacks) == (1, 1)
    res = CliRunner().invoke(cli, ["info", str(p), "--json"])
    assert json.loads(res.stdout)["views"] == {"exact": 1, "hull_fallbacks": 1}
    res = CliRunner().invoke(cli, ["info", str(p)])
    assert "Strided views: 1 exact, 1 recorded as their hull" in " ".join(res.stdout.split())


def test_round_trip_through_the_reader():
    data = write((1, [], [Strided(BASE, (64, 32), (64, 1), 4)]), (2, [], [Strided(BASE + 128, (64, 32), (64, 1), 4)]))
    r = TraceReader(io.BytesIO(data))
    recs = list(r.records())
    views = [rec for rec in recs if rec[0] == R.VIEWS]
    assert [parse_entry(v[1]) for v in views] == [
        ((-1, 0, 16256), Shape(0, 128, ((64, 256),))),
        ((-1, 128, 16256), Shape(128, 128, ((64, 256),))),
    ]
    assert r.ended_cleanly and r.warnings == []


def test_the_documented_example_is_what_the_writer_writes():
    text = DOC.read_text(encoding="utf-8").split("### 6.5", 1)[1]
    block = text.split("Example:", 1)[1].split("```", 2)[1]
    doc = bytes(int(tok, 16) for line in block.splitlines() for tok in line.split("  ")[0].split()
                if re.fullmatch(r"[0-9a-f]{2}", tok))
    # Two kernels first, so that the example's kernel gets op string 2 (on stream index 1).
    data = write((1, [], []), (1, [], []), (2, [], [Strided(BASE + 128, (64, 32), (64, 1), 4)]))
    assert doc in data


# -- what an analyzer accepts and refuses ------------------------------------------------------

PROLOGUE = [[R.STREAM_DEF, 0, 0, 1], [R.ALLOC, 0, BASE, 1024, 0, None], [R.STR, 0, "op"]]


def analyze_raw(tmp_path, *records, header=HEADER):
    p = tmp_path / "t.npusan"
    p.write_bytes(handmade(header, [*PROLOGUE, *records]))
    return CliRunner().invoke(cli, ["analyze", str(p), "--format", "json"])


def kernel(*accesses, stream=0):
    return [R.KERNEL, stream, 0, None, *accesses]


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("text", "views entry"),
        ([0, 0], "views entry"),
        ([0, 0, 28, 4, 4], "pairs"),  # a size without a stride
        ([0, 0, 28, 0, 4, 8], "run"),
        ([0, 0, 28, 4, 1, 8], "sizes"),  # a size-1 dim
        ([0, 0, 28, 4, 4, 0], "strides"),
        ([0, -1, 28, 4, 4, 8], "out of range"),
        ([0, 0, 0], "out of range"),  # an empty hull
        ([0, 0, 28, 4, 4, 9], "span"),  # dims not matching the hull
        ([0, 0, 28, 4, 4, "8"], "strides"),
        ([0, 0, 28, 4] + [2, 1] * (MAX_DIMS + 1), "pairs"),
        ([0, 0, 1 << 63, 1, 1 << 62, 1 << 62], "span"),  # huge values: checked, not enumerated
    ],
)
def test_malformed_views_entries_are_one_line_exit_2(tmp_path, entry, needle):
    res = analyze_raw(tmp_path, [R.VIEWS, entry], kernel([0, 0, 28]))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusan: error: ") and needle in lines[0], res.stderr
    assert "Traceback" not in res.output
    p = tmp_path / "t.npusan"
    info = CliRunner().invoke(cli, ["info", str(p)])
    assert info.exit_code == 2 and info.stderr.count("\n") == 1, info.output


def test_a_triple_described_twice_is_corrupt(tmp_path):
    e = [0, 0, 28, 4, 4, 8]
    res = analyze_raw(tmp_path, [R.VIEWS, e, list(e)], kernel([0, 0, 28]))
    assert res.exit_code == 2 and "twice" in res.stderr


def race_between(tmp_path, first: list, second: list, **kw):
    """Stream 0 writes ``first`` (a views entry), stream 1 writes ``second``: the findings."""
    res = analyze_raw(
        tmp_path,
        [R.STREAM_DEF, 1, 0, 2],
        [R.VIEWS, first], kernel(first[:3], **kw),
        [R.VIEWS, second], kernel(second[:3], stream=1),
    )
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)["findings"]


def test_views_refine_only_the_next_kernel_and_matching_triples(tmp_path):
    even, odd = [-1, 0, 28, 4, 4, 8], [-1, 4, 28, 4, 4, 8]
    assert race_between(tmp_path, even, odd) == []
    # The same views records, but each before a kernel of another stream: not applied.
    res = analyze_raw(
        tmp_path,
        [R.STREAM_DEF, 1, 0, 2],
        [R.VIEWS, even], kernel([-1, 4, 28]), kernel(even[:3], stream=1),
    )
    assert len(json.loads(res.stdout)["findings"]) == 1
    # An entry for an access the kernel does not have is ignored.
    res = analyze_raw(tmp_path, [R.STREAM_DEF, 1, 0, 2], [R.VIEWS, odd], kernel(even[:3]),
                      [R.VIEWS, odd], kernel(odd[:3], stream=1))
    assert len(json.loads(res.stdout)["findings"]) == 1


def views_entry(a: int, lo: int, run: int, dims) -> list:
    return [a, lo, run + sum((n - 1) * d for n, d in dims), run] + [x for dim in dims for x in dim]


def test_hostile_but_valid_views_stay_cheap(tmp_path):
    # Three-dimensional views whose exact comparison would need a long search: it gives up
    # after its budget and answers "overlap" (a report, and a warning saying so).
    a = views_entry(-1, 45, 1, ((130, 4412), (73, 2358), (73, 826)))
    b = views_entry(-1, 35, 1, ((171, 3917), (77, 2590), (52, 654)))
    res = analyze_raw(tmp_path, [R.STREAM_DEF, 1, 0, 2], [R.VIEWS, a], kernel(a[:3]),
                      [R.VIEWS, b], kernel(b[:3], stream=1))
    doc = json.loads(res.stdout)
    assert len(doc["findings"]) == 1
    assert "1 comparisons of strided views were too costly" in json.dumps(doc)
    # Huge counts in a one-term comparison are plain arithmetic: no search, no warning.
    a = views_entry(-1, 0, 4, ((1 << 40, 1 << 20),))
    b = views_entry(-1, 4, 4, ((1 << 40, 1 << 20),))
    assert race_between(tmp_path, a, b) == []


def test_a_10_reader_sees_hulls(tmp_path):
    """What a reader that skips VIEWS records (format 1.0) makes of a 1.1 trace: the hulls."""
    even, odd = [-1, 0, 28, 4, 4, 8], [-1, 4, 28, 4, 4, 8]
    res = analyze_raw(tmp_path, [R.STREAM_DEF, 1, 0, 2], kernel(even[:3]), kernel(odd[:3], stream=1),
                      header={"format": [1, 0]})
    assert len(json.loads(res.stdout)["findings"]) == 1  # a report exact views avoid (above)


def test_the_compiled_core_replays_1_1_traces():
    from npusan.analyzer.replay import native
    from npusan.trace_format.symbols import SymbolTable

    if not native.available():
        pytest.skip("the compiled core is not built")
    header = {"format": [1, 1]}
    assert isinstance(native.make_engine(SymbolTable(), header=header), native.NativeEngine)  # files and online
