"""The simulated device's events (npusan.sim)."""

from __future__ import annotations

import gc
import sys

from npusan import sim


def _python_calls_while(fn) -> list:
    calls = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is not fn.__code__:
            calls.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_a_dropped_event_runs_no_python_code_when_nobody_listens():
    # Python code run when an object dies can swallow a Ctrl-C ("Exception ignored in"):
    # a program on the simulated device drops an event at every wait_stream.
    sim.trace.unregister_all()
    ev = sim.Event()
    ev.record()

    def drop():
        nonlocal ev
        del ev

    assert _python_calls_while(drop) == []


def test_a_dropped_event_is_reported_once_to_listeners():
    deleted = []
    sim.trace.unregister_all()
    sim.trace.register_callback_for_event_deletion(deleted.append)
    try:
        ev = sim.Event()
        ev.record()
        ev.record()  # recorded again: still one event
        handle = ev.handle
        del ev
        gc.collect()
        assert deleted == [handle]
        sim.Event()  # never recorded: no event to delete
        gc.collect()
        assert deleted == [handle]
    finally:
        sim.trace.unregister_all()
