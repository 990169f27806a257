"""Strided views as the exact set of bytes they touch (trace format 1.1, VIEWS records).

A tensor view touches the elements ``{offset + sum(i_k * stride_k) : 0 <= i_k < size_k}``
of its storage, not every byte between its first and its last one. :func:`normalize`
turns ``(offset, sizes, strides, element size)`` into a compact canonical *shape* that
describes the same bytes:

    ``(lo, run, dims)``: the bytes ``lo + sum(i_k * s_k) + j`` for ``0 <= i_k < n_k`` and
    ``0 <= j < run``, with ``dims = ((n_1, s_1), (n_2, s_2), ...)`` outermost first.

Normalizing drops size-1 and stride-0 dimensions (they add no bytes), mirrors negative
strides, sorts by stride, folds every dimension whose stride is at most the contiguous run
into the run (``x.t()`` of a contiguous ``x``, overlapping ``unfold`` windows), and merges
a dimension into the next outer one when they are contiguous (``s_outer == n * s``) or
have equal strides. A view left with no dimension is a plain byte range; one left with more
than :data:`MAX_DIMS` is represented by its hull (the fallback, counted by ``npusan info``).

In a trace (docs/trace-format.md, section 6.5) a strided access is its KERNEL access, the
hull ``[a, offset, nbytes]`` that every 1.0 reader understands, plus an entry
``[a, offset, nbytes, run, n_1, s_1, ...]`` in a VIEWS record just before the KERNEL;
:func:`entry` builds one and :func:`parse_entry` validates one read from a trace.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

#: Dimensions a shape may keep after normalizing; more fall back to the hull.
MAX_DIMS = 8
#: Largest offset, size or stride accepted in a trace (bytes of a 64-bit address space).
MAX_VALUE = (1 << 64) - 1

Dims = Tuple[Tuple[int, int], ...]


class Shape(NamedTuple):
    """The bytes ``lo + sum(i_k * s_k) + j`` (see the module docstring); ``dims`` may be empty."""

    lo: int
    run: int
    dims: Dims

    @property
    def hi(self) -> int:
        """One past the last byte (the end of the hull)."""
        dims = self.dims
        if len(dims) == 1:
            return self.lo + self.run + (dims[0][0] - 1) * dims[0][1]
        return self.lo + self.run + sum((n - 1) * s for n, s in dims)


class Strided(NamedTuple):
    """A strided access for :meth:`TraceWriter.kernel`: a view of the memory at ``ptr``.

    ``ptr`` is the address of the view's first element (``tensor.data_ptr()``), ``sizes``
    and ``strides`` are in elements (``tensor.size()``, ``tensor.stride()``), ``itemsize``
    is the element size in bytes (``tensor.element_size()``).
    """

    ptr: int
    sizes: Sequence[int]
    strides: Sequence[int]
    itemsize: int


def normalize(offset: int, sizes: Sequence[int], strides: Sequence[int], itemsize: int) -> Optional[Shape]:
    """The canonical shape of a view (strides in elements, offset in bytes); None if empty.

    The result may have more than :data:`MAX_DIMS` dims: callers record the hull then.
    """
    dims = []
    lo = offset
    for n, s in zip(sizes, strides):
        if n <= 0:
            return None  # no elements: no bytes
        if n == 1 or s == 0:
            continue
        s *= itemsize
        if s < 0:  # mirrored: the same bytes, walked from the other end
            lo += (n - 1) * s
            s = -s
        dims.append((n, s))
    return Shape(lo, *_fold(itemsize, dims))


def _fold(run: int, dims: list) -> Tuple[int, Dims]:
    """Fold dims into the contiguous run and merge adjacent ones (see the module docstring)."""
    if not dims:
        return run, ()
    dims.sort(key=lambda d: d[1], reverse=True)
    out: list = []
    for n, s in dims:
        if out:
            m, t = out[-1]
            if t == s:  # equal strides: i*s + j*s covers 0 .. (n + m - 2) * s
                out[-1] = (n + m - 1, s)
                continue
            if t == n * s:  # the outer dim continues this one
                out[-1] = (n * m, s)
                continue
        out.append((n, s))
    while out and out[-1][1] <= run:  # innermost stride within the run: one longer run
        n, s = out.pop()
        run += (n - 1) * s
    return run, tuple(out)


def entry(a: int, offset: int, run: int, dims: Dims) -> list:
    """The VIEWS entry of a strided access (``a`` the encoded block and direction)."""
    nbytes = run + sum((n - 1) * s for n, s in dims)
    out = [a, offset, nbytes, run]
    for n, s in dims:
        out.append(n)
        out.append(s)
    return out


def parse_entry(e) -> Tuple[tuple, Optional[Shape]]:
    """Validate a VIEWS entry from a trace: ``((a, offset, nbytes), shape or None)``.

    None means a hull fallback (a 3-element entry). Raises ValueError with a short reason
    for anything malformed: wrong types, more than MAX_DIMS dims, a size below 2, a
    stride or run below 1, values beyond 64 bits, or dims whose hull is not
    ``[offset, offset + nbytes)``. Cost is bounded by MAX_DIMS whatever the values.
    """
    if e.__class__ is not list or len(e) < 3:
        raise ValueError("a views entry is an array [block, offset, nbytes, ...]")
    a, off, nb = e[0], e[1], e[2]
    if not (a.__class__ is int and off.__class__ is int and nb.__class__ is int):
        raise ValueError("block, offset and nbytes of a views entry must be integers")
    if not (0 <= off <= MAX_VALUE and 1 <= nb <= MAX_VALUE):
        raise ValueError("views entry offset or nbytes out of range")
    key = (a, off, nb)
    if len(e) == 3:
        return key, None
    k = len(e) - 4
    if k % 2 or not 2 <= k <= 2 * MAX_DIMS:
        raise ValueError(f"a views entry has a run and 1 to {MAX_DIMS} (size, stride) pairs")
    run = e[3]
    if run.__class__ is not int or not 1 <= run <= nb:
        raise ValueError("views entry run out of range")
    dims = []
    span = run
    for i in range(4, len(e), 2):
        n, s = e[i], e[i + 1]
        if n.__class__ is not int or s.__class__ is not int or not 2 <= n <= MAX_VALUE or not 1 <= s <= MAX_VALUE:
            raise ValueError("views entry sizes must be >= 2 and strides >= 1")
        span += (n - 1) * s
        if span > nb:
            break
        dims.append((n, s))
    if span != nb:
        raise ValueError(f"views entry dims span {span} bytes, not the access's {nb}")
    return key, Shape(off, run, tuple(dims))
