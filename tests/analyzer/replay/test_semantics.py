"""One test per rule of docs/semantics.md (one per record), plus the ordering and race rules."""

from __future__ import annotations

import pytest

from ..engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

X = 0x1000
Y = 0x2000
S0, S1, S2, S3 = 0, 0x11, 0x22, 0x33


def setup_blocks(p: Prog, *ptrs, stream=S0):
    for ptr in ptrs:
        p.memory_allocated(ptr, stream, size=256)


# -- stream created ------------------------------------------------------------------------


def test_stream_creation_copies_host_state():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S1)
    setup_blocks(p, X)
    p.write(S1, X)
    p.stream_synchronized(S1)  # host now knows S1's kernel
    p.stream_created(S2)  # S2 starts from the host's state
    p.read(S2, X)
    assert p.races() == []


def test_existing_streams_do_not_learn_a_new_stream():
    p = Prog()
    p.stream_created(S0)
    setup_blocks(p, X)
    p.stream_created(S1)
    p.write(S1, X)
    p.read(S0, X)  # S0 never synchronized with S1
    (f,) = p.races()
    assert (f.access.stream.handle, f.previous.stream.handle) == (S0, S1)
    assert (f.access.type, f.previous.type) == ("read", "write")


def test_stream_first_seen_in_a_kernel_is_backfilled_from_the_host():
    p = Prog()
    setup_blocks(p, X)
    p.write(S1, X)  # S1 was never created: backfilled here
    p.stream_synchronized(S1)
    p.read(S2, X)  # S2 backfilled after the host learned S1's work
    assert p.races() == []
    p.write(S1, X)  # races with S2's read
    p.read(S2, X)  # and S2's next read races with it
    assert [(f.access.type, f.previous.type) for f in p.races()] == [("write", "read"), ("read", "write")]


def test_second_creation_of_a_known_stream_is_ignored():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S1)
    setup_blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.stream_created(S1)  # would wipe S1's knowledge of S0 if it were honoured
    p.read(S1, X)
    assert p.races() == []


# -- kernel on S ---------------------------------------------------------------------------


def test_kernel_sequence_numbers_start_at_one():
    p = Prog()
    setup_blocks(p, X)
    assert p.engine.seq == 0
    p.write(S0, X)
    assert p.engine.seq == 1
    p.read(S1, X)
    assert p.engine.seq == 2
    (f,) = p.races()
    assert (f.previous.seq, f.access.seq) == (1, 2)
    assert f.first_seq == f.last_seq == 2


# -- event recorded / waited ---------------------------------------------------------------


def test_event_record_snapshots_the_stream_state():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.write(S0, X)  # after the record: not covered by the snapshot
    p.event_waited(1, S1)
    p.read(S1, X)
    (f,) = p.races()
    assert f.previous.seq == 2


def test_event_wait_orders_the_waiting_stream():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.event_waited(1, S1)
    p.read(S1, X)
    assert p.races() == []


def test_event_rerecord_overwrites_instead_of_merging():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S2)
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.event_recorded(1, S2)  # S2 knows nothing of S0's write: the snapshot is replaced
    p.event_waited(1, S1)
    p.read(S1, X)
    assert len(p.races()) == 1


def test_wait_on_unknown_or_never_recorded_event_is_a_noop():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_waited(99, S1)  # never created
    p.event_created(5)
    p.event_waited(5, S1)  # created, never recorded
    p.read(S1, X)
    assert len(p.races()) == 1


# -- event created / deleted ---------------------------------------------------------------


def test_event_creation_wipes_an_old_snapshot():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.event_created(1)  # a new event with the same handle
    p.event_waited(1, S1)
    p.read(S1, X)
    assert len(p.races()) == 1


def test_event_deletion_wipes_the_snapshot():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.event_deleted(1)
    p.event_deleted(1)  # NPU may report a deletion twice
    p.event_waited(1, S1)
    p.read(S1, X)
    assert len(p.races()) == 1


# -- synchronizations ----------------------------------------------------------------------


def test_event_synchronize_merges_into_every_stream_and_the_host():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S1)
    setup_blocks(p, X, Y)
    p.write(S0, X)
    p.event_created(1)
    p.event_recorded(1, S0)
    p.write(S0, Y)  # after the record
    p.event_synchronized(1)
    p.read(S1, X)  # existing stream: ordered
    p.read(S2, X)  # stream created after: inherits the host's state
    p.read(S2, Y)  # Y was written after the record: still a race
    races = p.races()
    assert len(races) == 1 and races[0].access.stream.handle == S2 and races[0].block.address == Y


def test_stream_synchronize_merges_into_every_stream_and_the_host():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S1)
    setup_blocks(p, X, Y)
    p.write(S1, X)
    p.stream_synchronized(S1)
    p.write(S1, Y)  # after the synchronize
    p.read(S0, X)
    p.read(S2, X)  # created after the synchronize
    p.read(S0, Y)
    races = p.races()
    assert [(f.access.stream.handle, f.block.address) for f in races] == [(S0, Y)]


def test_device_synchronize_orders_everything_before_it():
    p = Prog()
    p.stream_created(S0)
    p.stream_created(S1)
    setup_blocks(p, X, Y)
    p.write(S1, X)
    p.write(S0, Y)
    p.device_synchronized()
    p.read(S0, X)
    p.read(S1, Y)
    p.read(S2, X)
    assert p.races() == []


def test_device_synchronize_of_one_device_leaves_the_others_unsynchronized():
    p = Prog()
    p.stream_created(S0, device=0)
    p.stream_created(S1, device=1)
    setup_blocks(p, X, Y)
    p.write(S0, X, device=0)
    p.write(S1, Y, device=1)
    p.device_synchronized(0)
    p.read(S2, X, device=0)  # device 0's work is done
    p.read(S2, Y, device=0)  # device 1 was not synchronized
    races = p.races()
    assert [(f.block.address, f.previous.stream.device) for f in races] == [(Y, 1)]


def test_streams_are_identified_per_device():
    p = Prog()
    setup_blocks(p, X)
    p.write(0, X, device=0)  # handle 0 on device 0 ...
    p.read(0, X, device=1)  # ... is not handle 0 on device 1
    (f,) = p.races()
    assert (f.access.stream.device, f.previous.stream.device) == (1, 0)


def test_wait_stream_is_create_record_wait():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=7)
    p.read(S1, X)
    p.write(S1, X)
    p.wait_stream(S0, S1, event=8)
    p.read(S0, X)
    assert p.races() == []


# -- data-race rules ------------------------------------------------------------------------


def test_read_conflicts_with_last_write_only():
    p = Prog()
    setup_blocks(p, X)
    p.write(S1, X)
    p.wait_stream(S0, S1, event=1)
    p.write(S0, X)  # ordered after S1's write
    p.read(S0, X)
    assert p.races() == []


def test_write_conflicts_with_every_read_since_the_last_write():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.wait_stream(S2, S0, event=2)
    p.read(S1, X)
    p.read(S2, X)
    p.write(S0, X)  # neither read is ordered before this write
    races = p.races()
    assert sorted(f.previous.stream.handle for f in races) == [S1, S2]
    assert all(f.previous.type == "read" and f.access.type == "write" for f in races)


def test_write_checks_the_last_write_when_there_were_no_reads():
    p = Prog()
    setup_blocks(p, X)
    p.write(S1, X)
    p.write(S0, X)
    (f,) = p.races()
    assert (f.access.type, f.previous.type) == ("write", "write")


def test_only_the_latest_read_per_stream_matters():
    p = Prog()
    setup_blocks(p, X)
    p.write(S0, X)
    p.wait_stream(S1, S0, event=1)
    p.read(S1, X)  # seq 2
    p.wait_stream(S0, S1, event=2)  # S0 knows S1 up to seq 2
    p.read(S1, X)  # seq 3: not known to S0
    p.write(S0, X)
    (f,) = p.races()
    assert f.previous.seq == 3


def test_same_stream_is_always_ordered():
    p = Prog()
    setup_blocks(p, X)
    for _ in range(3):
        p.write(S1, X)
        p.read(S1, X)
    assert p.findings() == []


# -- a hand-made range past the end of a block of known size -------------------------------


def _raw(p: Prog, stream: int, access) -> None:
    """A kernel whose access is written as given (npusan's writers split ranges at a block's
    end; a hand-made trace need not)."""
    p.enc.kernel_blocks(p.enc.stream(stream), p.enc.string("aten::raw"), [access])


@pytest.mark.parametrize(
    "second, races",
    [
        (lambda bid: [bid, 105, 10], 1),  # the same bytes past the end: a conflict
        (lambda bid: bid, 1),  # the whole block
        (lambda bid: [bid, 0, 50], 0),  # bytes inside, apart from the range
        (lambda bid: [bid, 110, 4], 0),  # past the end, apart from the range
    ],
)
def test_a_range_past_the_end_of_its_block_is_not_clipped(second, races):
    p = Prog()
    p.stream_created(S1)
    p.stream_created(S2)
    p.memory_allocated(X, S0, size=100)
    bid = p.enc.block(X)[0]
    _raw(p, S1, [~bid, 90, 20])  # writes [90, 110) of a 100-byte block
    _raw(p, S2, second(bid))
    assert len(p.races()) == races
