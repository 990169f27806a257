"""The overlap test of strided views against brute force: the bytes a view really touches.

Views are described as PyTorch describes them (storage offset, sizes, strides in elements,
element size), normalized as the recorder normalizes them, and compared with the set of
byte offsets obtained by enumerating every element.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npusan.analyzer.replay import overlap
from npusan.analyzer.replay.overlap import covers, overlaps, overlaps_range
from npusan.trace_format.strided import Shape, normalize


def brute(offset: int, sizes, strides, itemsize: int) -> set:
    out: set = set()
    for idx in itertools.product(*(range(n) for n in sizes)):
        p = offset + sum(i * s for i, s in zip(idx, strides)) * itemsize
        out.update(range(p, p + itemsize))
    return out


def shape_bytes(sh: Shape) -> set:
    out: set = set()
    for idx in itertools.product(*(range(n) for n, _ in sh.dims)):
        p = sh.lo + sum(i * s for i, (_, s) in zip(idx, sh.dims))
        out.update(range(p, p + sh.run))
    return out


def view(offset_elems, sizes, strides, itemsize=4) -> Shape:
    return normalize(offset_elems * itemsize, sizes, strides, itemsize)


# -- the named patterns of real models --------------------------------------------------------

# A 64x64 float32 matrix: row stride 64 elements.
LEFT = view(0, (64, 32), (64, 1))
RIGHT = view(32, (64, 32), (64, 1))


def test_column_halves_are_disjoint_though_their_hulls_overlap():
    assert LEFT.hi > RIGHT.lo  # the hulls overlap ...
    assert not overlaps(LEFT, RIGHT)  # ... the bytes do not
    assert overlaps(view(0, (64, 33), (64, 1)), RIGHT)  # one column more: they share column 32
    assert LEFT == Shape(0, 128, ((64, 256),))  # 64 runs of 32 floats, one row apart


def test_interleaved_rows():
    even, odd = view(0, (2048,), (2,)), view(1, (2048,), (2,))
    assert not overlaps(even, odd) and overlaps(even, even)
    assert overlaps(even, view(0, (1366,), (3,)))  # x[0::3] meets x[0::2] at multiples of 6
    assert not overlaps(odd, view(0, (1024,), (4,)))
    # Rows of a matrix: x.view(8, 16)[0::2] against [1::2].
    assert not overlaps(view(0, (4, 16), (32, 1)), view(16, (4, 16), (32, 1)))


def test_nchw_channel_slices():
    n, c, h, w = 4, 3, 8, 8
    strides = (c * h * w, h * w, w, 1)
    chans = [view(k * h * w, (n, h, w), (strides[0], strides[2], strides[3])) for k in range(c)]
    for a, b in itertools.combinations(chans, 2):
        assert not overlaps(a, b)
    assert chans[1] == Shape(h * w * 4, h * w * 4, ((n, c * h * w * 4),))
    row = view(1 * h * w + 2 * w, (n, w), (strides[0], 1))  # img[:, 1, 2]: inside channel 1
    assert overlaps(row, chans[1]) and not overlaps(row, chans[0]) and not overlaps(row, chans[2])


def test_transposes():
    # x.t() of a contiguous 16x16 matrix touches exactly its range: no dims left.
    assert view(0, (16, 16), (1, 16)) == Shape(0, 1024, ())
    # x.t()[:8] is x[:, :8] (columns 0..7), x.t()[8:] is x[:, 8:].
    first, second = view(0, (8, 16), (1, 16)), view(8, (8, 16), (1, 16))
    assert first == view(0, (16, 8), (16, 1))
    assert not overlaps(first, second)
    assert overlaps(view(0, (9, 16), (1, 16)), second)


def test_as_strided_overlaps():
    a = view(0, (5, 4), (20, 1))  # rows of 4 every 20 elements
    assert not overlaps(a, view(4, (5, 4), (20, 1)))
    assert overlaps(a, view(2, (5, 4), (20, 1)))
    assert overlaps(a, view(81, (2,), (1,))) and not overlaps(a, view(98, (2,), (1,)))  # last row: 80..83
    assert not overlaps(a, view(84, (16,), (1,)))
    # Self-overlapping as_strided (stride smaller than the row): a contiguous range.
    assert view(0, (5, 4), (2, 1)) == Shape(0, 48, ())


def test_unfold_windows():
    # x.unfold(0, 4, 8): windows of 4 every 8 elements; x[4:].unfold(0, 4, 8): the gaps.
    assert not overlaps(view(0, (8, 4), (8, 1)), view(4, (7, 4), (8, 1)))
    assert overlaps(view(0, (8, 4), (8, 1)), view(3, (7, 4), (8, 1)))
    # Overlapping windows (step < size) cover their whole range.
    assert view(0, (31, 4), (2, 1)) == Shape(0, (30 * 2 + 4) * 4, ())


def test_ranges_and_whole_block():
    even = view(0, (8,), (2,))  # bytes 0-3, 8-11, ..., 56-59
    assert overlaps_range(even, 8, 12) and not overlaps_range(even, 4, 8)
    assert overlaps_range(even, 0, float("inf")) and not overlaps_range(even, 60, float("inf"))
    assert covers(None, even) and covers(Shape(0, 60, ()), even) and not covers(Shape(4, 60, ()), even)
    assert covers(even, Shape(8, 4, ())) and not covers(even, Shape(8, 8, ()))
    assert covers(LEFT, view(0, (64, 16), (64, 1))) and not covers(LEFT, RIGHT)


def test_exhausted_budget_answers_overlap(monkeypatch):
    # Bytes 1000 i (i < 500) against 600 + 999 j (j < 500): 1000 i - 999 j = 600 needs
    # i = 600 (mod 999), out of range, so the exact answer is "no"; a search that may visit
    # only 10 assignments cannot tell and must say "overlap".
    a, b = Shape(0, 1, ((500, 1000),)), Shape(600, 1, ((500, 999),))
    assert overlaps(a, b) is False
    monkeypatch.setattr(overlap, "BUDGET", 10)
    assert overlaps(a, b) is True
    # A budget for a whole analysis: once spent, every long search answers at once.
    monkeypatch.setattr(overlap, "BUDGET", 2000)
    total = overlap.Budget(600)
    assert overlaps(a, b, total) is False and 0 < total.left < 600 and total.gave_up == 0
    assert overlaps(a, b, total) is True and total.left == 0 and total.gave_up == 1
    assert overlaps(a, b, total) is True and total.gave_up == 2
    assert overlaps(LEFT, RIGHT, total) is False  # one-term cases need no search


def test_hostile_sizes_cost_nothing():
    huge = Shape(0, 1, tuple((1 << 40, (1 << 20) + k) for k in range(8)))
    other = Shape(3, 1, tuple((1 << 40, (1 << 21) + 2 * k) for k in range(8)))
    assert overlaps(huge, other) in (True, False)  # bounded by BUDGET, whatever it answers


# -- brute force on random small views --------------------------------------------------------

views = st.tuples(
    st.integers(0, 12),  # storage offset (elements)
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 7)), min_size=0, max_size=4),  # (size, stride)
    st.sampled_from([1, 2, 4]),  # element size
)


def _both(v):
    off, dims, isz = v
    sizes = [n for n, _ in dims]
    strides = [s for _, s in dims]
    return normalize(off * isz, sizes, strides, isz), brute(off * isz, sizes, strides, isz)


@settings(max_examples=1500, deadline=None)
@given(views, views)
def test_overlap_agrees_with_brute_force(v, w):
    x, xb = _both(v)
    y, yb = _both(w)
    assert shape_bytes(x) == xb  # normalizing keeps exactly the bytes
    assert (x.lo, x.hi) == (min(xb), max(xb) + 1)
    assert shape_bytes(y) == yb
    assert overlaps(x, y) == bool(xb & yb)
    assert overlaps(y, x) == bool(xb & yb)
    if covers(x, y):
        assert yb <= xb  # "covered" is never wrong (it is allowed to miss)


@settings(max_examples=300, deadline=None)
@given(views, st.integers(0, 60), st.integers(1, 30))
def test_overlap_with_a_range(v, lo, n):
    x, xb = _both(v)
    assert overlaps_range(x, lo, lo + n) == bool(xb & set(range(lo, lo + n)))
    assert covers(x, Shape(lo, n, ())) <= set(range(lo, lo + n)).issubset(xb)


@pytest.mark.parametrize("sizes", [(0,), (3, 0), (0, 5)])
def test_empty_view_has_no_shape(sizes):
    assert normalize(0, sizes, (1,) * len(sizes), 4) is None
