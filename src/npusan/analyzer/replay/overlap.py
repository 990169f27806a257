"""Do two strided views share a byte? The exact test, bounded in cost.

Views are :class:`~npusan.trace_format.strided.Shape` values: the bytes
``lo + sum(i_k * s_k) + j`` with ``0 <= i_k < n_k``, ``0 <= j < run``. A plain byte range is a
shape without dims.

An element of ``x`` starting at ``p`` and one of ``y`` starting at ``q`` share a byte iff
``q - p`` lies in ``[1 - y.run, x.run - 1]``. With ``p = x.lo + sum(i_k a_k)`` and
``q = y.lo + sum(j_l b_l)`` the question is whether the integer combination

    ``c + sum(t_m d_m)``,  ``c = y.lo - x.lo``,  ``t_m`` in ``[tmin_m, tmax_m]``

hits that window, where every dim of ``y`` is a term ``(b_l, 0, n_l - 1)`` and every dim of
``x`` a term ``(a_k, 1 - n_k, 0)``; terms with equal strides are added into one (the sum of
two integer intervals is an integer interval, so this is exact). That is what makes the
common cases O(1): two views of the same layout at different offsets (column halves
``buf[:, :32]`` / ``buf[:, 32:]``, rows ``x[0::2]`` / ``x[1::2]``, channels ``img[:, c]``)
reduce to one term, and a range against a one-dim view is one term too.

The search fixes one term at a time (the terms with the fewest values first, so that the
last, solved in O(1) by division, is the widest), pruning with the interval the remaining
terms can reach and with their gcd (the remaining sum is a multiple of it). It visits at
most :data:`BUDGET` partial assignments; past that the answer is "overlap", which can only
add a report, never lose one. :func:`covers` (used to drop state a write has overwritten)
answers the other way round when unsure: "not covered" keeps state, never loses it.

A :class:`Budget` shared by every test of one analysis caps the search steps of the whole
trace (:data:`TOTAL_BUDGET`): a hostile trace built so that every comparison needs a long
search costs bounded time, and once it is spent only the O(1) cases are answered exactly.
"""

from __future__ import annotations

from math import gcd
from typing import Optional

from ...trace_format.strided import Shape

#: Partial assignments one test may visit before answering conservatively.
BUDGET = 2000
#: Partial assignments all the tests of one analysis may visit together.
TOTAL_BUDGET = 10_000_000


class Budget:
    """Search steps left to one analysis, and how many tests ran out (answered conservatively)."""

    __slots__ = ("left", "gave_up")

    def __init__(self, steps: int = TOTAL_BUDGET) -> None:
        self.left = steps
        self.gave_up = 0


class _Exhausted(Exception):
    pass


def overlaps(x: Shape, y: Shape, budget: Optional[Budget] = None) -> bool:
    """True iff ``x`` and ``y`` share a byte (or the exact answer would cost too much)."""
    r = _intersect(x, y, budget)
    return True if r is None else r


def overlaps_range(x: Shape, lo: int, hi, budget: Optional[Budget] = None) -> bool:
    """:func:`overlaps` against the byte range ``[lo, hi)`` (``hi`` may be ``inf``)."""
    xhi = x.hi
    if hi > xhi:
        hi = xhi
    if lo < x.lo:
        lo = x.lo
    if lo >= hi:
        return False
    dims = x.dims
    if not dims:
        return True
    if len(dims) == 1:  # an element i (start x.lo + i*d) meets [lo, hi) iff it starts before hi and ends after lo
        n, d = dims[0]
        return max(0, (lo - x.run - x.lo) // d + 1) <= min(n - 1, -((x.lo - hi) // d) - 1)
    return overlaps(x, Shape(lo, hi - lo, ()), budget)


def covers(big: Optional[Shape], small: Shape, budget: Optional[Budget] = None) -> bool:
    """True only if every byte of ``small`` is in ``big`` (None: the whole block).

    Exact for a range ``big``, for two views of the same dims, and for a range ``small``
    inside one element run of ``big``; False (keep the state) otherwise.
    """
    if big is None:
        return True
    if small.lo < big.lo or small.hi > big.hi:
        return False
    if not big.dims:
        return True
    delta = small.lo - big.lo
    if small.dims == big.dims:
        return delta + small.run <= big.run
    if small.dims:
        return False
    # A range: inside one element ``[p, p + big.run)`` iff some element start p lies in
    # ``[small.hi - big.run, small.lo]``.
    first = small.hi - big.run
    if first > small.lo:
        return False
    starts = Shape(big.lo, 1, big.dims)
    return _intersect(starts, Shape(first, small.lo - first + 1, ()), budget) is True


def _intersect(x: Shape, y: Shape, total: Optional[Budget] = None) -> Optional[bool]:
    """The exact answer, or None when the search ran out of budget."""
    if x.lo >= y.hi or y.lo >= x.hi:
        return False
    xd, yd = x.dims, y.dims
    if not xd and not yd:
        return True
    c = y.lo - x.lo
    if len(xd) + len(yd) == 1 or (len(xd) == 1 and len(yd) == 1 and xd[0][1] == yd[0][1]):
        # One term (the common cases): is there a t in [tmin, tmax] with c + t*d in the window?
        d = (xd or yd)[0][1]
        tmin = 1 - xd[0][0] if xd else 0
        tmax = yd[0][0] - 1 if yd else 0
        return max(tmin, -((c + y.run - 1) // d)) <= min(tmax, (x.run - 1 - c) // d)
    span: dict = {}  # stride -> [tmin, tmax]
    for n, s in x.dims:
        t = span.setdefault(s, [0, 0])
        t[0] -= n - 1
    for n, s in y.dims:
        t = span.setdefault(s, [0, 0])
        t[1] += n - 1
    # Fewest values first; the last term is solved by division, so make it the widest.
    terms = sorted(((d, lo, hi) for d, (lo, hi) in span.items()), key=lambda t: (t[2] - t[1], -t[0]))
    m = len(terms)
    rmin = [0] * (m + 1)
    rmax = [0] * (m + 1)
    g = [0] * (m + 1)
    for i in range(m - 1, -1, -1):
        d, lo, hi = terms[i]
        rmin[i] = rmin[i + 1] + lo * d
        rmax[i] = rmax[i + 1] + hi * d
        g[i] = gcd(d, g[i + 1])
    allowed = BUDGET if total is None else min(BUDGET, total.left)
    budget = [allowed]
    try:
        return _search(terms, 0, c, 1 - y.run, x.run - 1, rmin, rmax, g, budget)
    except _Exhausted:
        if total is not None:
            total.gave_up += 1
        return None
    finally:
        if total is not None:
            total.left -= allowed - max(budget[0], 0)


def _search(terms, i, c, lo, hi, rmin, rmax, g, budget) -> bool:
    """Is there a choice of ``t_i, t_(i+1), ...`` with ``c + sum(t_m d_m)`` in ``[lo, hi]``?"""
    a, b = lo - c, hi - c  # the remaining terms must sum into [a, b]
    if rmin[i] > b or rmax[i] < a:
        return False
    gi = g[i]
    if -(-a // gi) * gi > b:  # no multiple of their gcd in [a, b]
        return False
    d, tmin, tmax = terms[i]
    t_lo = max(tmin, -((rmax[i + 1] - a) // d))  # ceil((a - rmax) / d)
    t_hi = min(tmax, (b - rmin[i + 1]) // d)
    if i == len(terms) - 1:
        return t_lo <= t_hi
    for t in range(t_lo, t_hi + 1):
        budget[0] -= 1
        if budget[0] < 0:
            raise _Exhausted
        if _search(terms, i + 1, c + t * d, lo, hi, rmin, rmax, g, budget):
            return True
    return False
