"""RecordEncoder's mapping of pointers to blocks for memory the trace never saw allocated."""

from npusan.trace_format import records as R
from npusan.trace_format.encoder import RecordEncoder


def _encoder():
    out: list = []
    return RecordEncoder(out.append), out


def _kernels(out):
    return [r for r in out if r[0] == R.KERNEL]


def test_ranges_in_unallocated_memory_share_one_block():
    enc, out = _encoder()
    enc.kernel(0, "w", writes=[(0x1000, 16)])
    enc.kernel(1, "r", reads=[(0x1008, 16)])
    enc.kernel(1, "r2", reads=[(0x1014, 4)])
    k1, k2, k3 = _kernels(out)
    assert k1[4] == [~0, 0, 16]
    assert k2[4] == [0, 8, 16]  # same block, offset from its base
    assert k3[4] == [0, 0x14, 4]  # the block grew to 0x1018 with the previous access
    assert sum(1 for r in out if r[0] == R.BLOCK_DEF) == 1


def test_pointer_past_the_known_extent_is_another_block():
    enc, out = _encoder()
    enc.kernel(0, "w", writes=[(0x1000, 16)])
    enc.kernel(0, "w", writes=[(0x2000, 16)])
    bids = [R.decode_access(k[4])[0] for k in _kernels(out)]
    assert bids[0] != bids[1]


def test_allocation_over_unallocated_memory_takes_it_over():
    enc, out = _encoder()
    enc.kernel(0, "w", writes=[(0x1010, 16)])
    enc.memory_allocated(0x1000, 0, size=0x100)
    enc.kernel(0, "r", reads=[(0x1010, 16)])
    first, second = _kernels(out)
    alloc = next(r for r in out if r[0] == R.ALLOC)
    assert R.decode_access(second[4]) == (alloc[1], False, 0x10, 16)
    assert R.decode_access(first[4])[0] != alloc[1]


def test_allocated_block_ranges_and_whole_block():
    enc, out = _encoder()
    enc.memory_allocated(0x1000, 0, size=64)
    enc.kernel(0, "k", reads=[(0x1000, 64), (0x1010, 8), 0x1020], writes=[0x1000])
    (k,) = _kernels(out)
    assert k[4:] == [0, [0, 16, 8], 0, ~0]


def test_an_empty_range_is_no_access_and_defines_no_block():
    """``buf[n:n]`` at the end of a buffer points one past it: an empty range touches
    nothing, so it is not written (no block of unknown size appears for it), like an empty
    strided view; the kernel's other accesses are kept."""
    enc, out = _encoder()
    enc.memory_allocated(0x1000, 0, size=0x100)
    enc.kernel(0, "w", reads=[(0x1100, 0), (0x1010, 0)], writes=[(0x1000, 16), (0x5000, 0)])
    (k,) = _kernels(out)
    assert k[4:] == [[~0, 0, 16]]
    assert not [r for r in out if r[0] == R.BLOCK_DEF]
