"""The caching-allocator model decides as CUDA's does (sizes, pools, best fit per stream,
splitting, merging, record_stream events, empty_cache)."""

from npusan.emulate.allocator import (BASE, LARGE_BUFFER, NPU_PAD, SMALL_BUFFER, CachingAllocator,
                                      round_size, segment_size)

MiB = 1 << 20


def test_rounding_and_segment_sizes():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(512) == SMALL_BUFFER and segment_size(MiB) == SMALL_BUFFER
    assert segment_size(MiB + 512) == LARGE_BUFFER
    assert segment_size(10 * MiB) == 10 * MiB and segment_size(11 * MiB + 1) == 12 * MiB


def test_npu_allocator_pads_32_bytes_before_rounding():
    """torch_npu's round_size is (size + 32) rounded up to 512: a 512-byte tensor takes 1024."""
    assert round_size(480, NPU_PAD) == 512 and round_size(481, NPU_PAD) == 1024
    assert round_size(2048, NPU_PAD) == 2560
    a = CachingAllocator(pad=NPU_PAD)
    p = a.malloc(512, stream=0)
    assert a.malloc(512, stream=0) == p + 1024 and a.allocated_bytes == 2048


def test_freed_block_goes_to_next_request_on_same_stream_at_once():
    a = CachingAllocator()
    p = a.malloc(1000, stream=0)
    assert p == BASE
    a.free(p)
    assert a.malloc(1000, stream=0) == p


def test_other_stream_never_gets_the_block():
    a = CachingAllocator()
    p = a.malloc(1000, stream=0)
    a.free(p)
    q = a.malloc(1000, stream=7)
    assert q != p and q >= BASE + SMALL_BUFFER  # a new segment for stream 7


def test_split_best_fit_and_merge():
    a = CachingAllocator()
    x = a.malloc(4096, 0)
    y = a.malloc(4096, 0)
    z = a.malloc(8192, 0)
    assert (y - x, z - y) == (4096, 4096)
    a.free(x)
    a.free(z)  # z merges with the segment's remainder
    # best fit: the 4 KiB hole at x, not the big tail
    assert a.malloc(3000, 0) == x
    a.free(y)
    a.free(x)  # x, y and the tail merge back into one block
    assert a._free_blocks[x].size == SMALL_BUFFER  # one free block: the whole segment
    assert a.malloc(MiB, 0) == x


def test_large_pool_split_only_over_1mib():
    a = CachingAllocator()
    p = a.malloc(19 * MiB + 512, 0)  # remainder < 1 MiB: not split
    b = a.block_of(p)
    assert b.size == LARGE_BUFFER
    q = a.malloc(2 * MiB, 0)  # a new 20 MiB segment, split (remainder 18 MiB)
    assert a.block_of(q).size == 2 * MiB


def test_record_stream_holds_block_until_host_is_ordered_after_use():
    a = CachingAllocator()
    p = a.malloc(4096, stream=0)
    a.record_stream(p, 5)
    a.free(p)
    assert a.pending() == 1
    q = a.malloc(4096, stream=0)
    assert q != p  # the use on stream 5 may still run
    a.free(q)
    a.host_observed(5)  # e.g. torch.cuda.synchronize() or stream 5 synchronize
    assert a.malloc(4096, stream=0) in (p, q)
    assert a.pending() == 0


def test_event_recorded_before_free_does_not_complete_it():
    a = CachingAllocator()
    p = a.malloc(4096, 0)
    pos = a.position(5)  # a user event recorded on stream 5 before the free
    a.record_stream(p, 5)
    a.free(p)
    a.host_observed(5, pos)
    a.malloc(4096, 0)
    assert a.pending() == 1


def test_empty_cache_releases_whole_free_segments_only():
    a = CachingAllocator()
    p = a.malloc(4096, 0)
    q = a.malloc(2 * MiB, 0)
    a.free(q)
    assert a.reserved_bytes == SMALL_BUFFER + LARGE_BUFFER
    assert a.empty_cache() == LARGE_BUFFER
    assert a.reserved_bytes == SMALL_BUFFER
    a.free(p)
    assert a.empty_cache() == SMALL_BUFFER and a.reserved_bytes == 0


def test_deterministic_addresses():
    def run():
        a = CachingAllocator()
        out = []
        live = []
        for i in range(50):
            live.append(a.malloc((i * 7919) % (3 * MiB) + 1, i % 3))
            if i % 4 == 3:
                a.free(live.pop(0))
            out.append(live[-1])
        return out
    assert run() == run()


def test_stats():
    a = CachingAllocator()
    p = a.malloc(1000, 0)
    assert a.allocated_bytes == 1024
    a.free(p)
    assert a.allocated_bytes == 0 and a.peak_allocated == 1024
