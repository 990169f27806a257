"""MappedFileSink.defer: records handed over as a list append and packed in one call at
the commit are byte for byte what packing each on arrival writes."""

from __future__ import annotations

import io

import msgpack
import pytest

from npusan.trace_format.writer import MappedFileSink


def _records(n):
    # small and large ints, None, nested lists, strings: every array-header size in a list
    return [[i % 23, i, None if i % 3 else -i, [i, i << 40, "s" * (i % 5)]] for i in range(n)]


def _packed_each(recs):
    pack = msgpack.Packer(use_bin_type=True, unicode_errors="replace").pack
    return b"".join(pack(r) for r in recs)


def _committed(path, sink):
    sink.close()
    return path.read_bytes()


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 0xFFFF, 0x10000, 0x10001])
def test_one_commit_of_n_deferred_records_is_each_packed(tmp_path, n):
    path = tmp_path / f"d{n}.bin"
    sink = MappedFileSink(path)
    sink.autocommit = False
    recs = _records(n)
    for r in recs:
        sink.defer(r)
    assert sink.pending()
    sink.commit()
    assert sink.pending() == 0
    assert _committed(path, sink) == _packed_each(recs)


def test_deferred_records_keep_their_order_among_direct_ones(tmp_path):
    path = tmp_path / "mix.bin"
    sink = MappedFileSink(path)
    sink.autocommit = False
    recs = _records(40)
    for i, r in enumerate(recs):
        (sink if i % 7 == 0 else sink.defer)(r)  # a direct call packs what was deferred first
        if i % 11 == 0:
            sink.commit()
    sink.put([99, "last"])
    assert _committed(path, sink) == _packed_each(recs + [[99, "last"]])


def test_a_record_that_cannot_be_packed_keeps_the_ones_before_it(tmp_path):
    path = tmp_path / "bad.bin"
    sink = MappedFileSink(path)
    sink.autocommit = False
    good = _records(3)
    for r in good:
        sink.defer(r)
    sink.defer([1, 1 << 70])  # too big for msgpack
    sink.defer([2, "after"])
    with pytest.raises(OverflowError):
        sink.commit()
    assert sink.pending() == len(_packed_each(good))  # buffered, as if packed on arrival
    assert _committed(path, sink) == _packed_each(good)


def test_records_that_pack_alone_but_not_as_one_list_are_committed(tmp_path):
    """msgpack's nesting limit: a record nested just under it packs alone, not in a list."""
    deep = 1
    while True:  # the deepest record that packs alone
        deeper = [deep]
        try:
            msgpack.packb(deeper)
        except ValueError:
            break
        deep = deeper
    with pytest.raises(ValueError):
        msgpack.packb([deep, deep])
    path = tmp_path / "deep.bin"
    sink = MappedFileSink(path)
    sink.autocommit = False
    recs = [[1, "a"], deep, [2, "b"]]
    for r in recs:
        sink.defer(r)
    sink.commit()
    assert sink.pending() == 0
    sink.defer([3])
    sink.put([4])
    assert _committed(path, sink) == _packed_each(recs + [[3], [4]])
