"""The fork/join bookkeeping of an emulated capture (capture_joins.py): CUDA refuses to end a
capture that forked work to a stream and never joined that stream back."""

from npusan.emulate.capture_joins import CaptureJoins

O, A, B, OUT = 1, 2, 3, 4


def test_a_fork_with_work_and_no_join_is_unjoined():
    j = CaptureJoins(O)
    j.op(O)
    j.recorded(10, O)
    j.waited(10, A)  # A forks from the capture
    j.op(A)
    assert j.unjoined() == [A]
    j.recorded(11, A)
    j.waited(11, O)  # joined back after its last work
    assert j.unjoined() == []
    j.op(A)  # more work after the join: unjoined again
    assert j.unjoined() == [A]


def test_a_fork_without_work_needs_no_join():
    j = CaptureJoins(O)
    j.recorded(10, O)
    j.waited(10, A)
    assert j.unjoined() == []


def test_a_join_through_another_side_stream_counts():
    j = CaptureJoins(O)
    j.recorded(10, O)
    j.waited(10, A)
    j.waited(10, B)
    j.op(A)
    j.op(B)
    j.recorded(11, A)
    j.waited(11, B)  # B is ordered after A's work
    j.recorded(12, B)
    j.waited(12, O)  # ... and O after B's: both joined
    assert j.unjoined() == []


def test_streams_outside_the_capture_are_not_its():
    j = CaptureJoins(O)
    j.op(OUT)  # work on a stream that never waited for the capture
    j.recorded(10, OUT)
    j.waited(10, O)  # an event recorded outside the capture forks nothing
    assert j.unjoined() == []
    j.recorded(11, O)
    j.recorded(11, OUT)  # the same event recorded again outside the capture
    j.waited(11, A)
    j.op(A)
    assert j.unjoined() == []  # A waited for no event of the capture: not forked to


def test_a_capturing_stream_may_not_wait_for_work_outside_the_capture():
    j = CaptureJoins(O)
    j.recorded(10, OUT)  # recorded outside the capture
    assert j.waited(10, OUT + 1)  # a stream outside the capture may wait for it
    assert not j.waited(10, O)  # the capture stream may not (cudaErrorStreamCaptureIsolation)
    j.recorded(11, O)
    assert j.waited(11, A)  # a fork
    assert not j.waited(10, A)  # a forked stream is capturing too
