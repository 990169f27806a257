"""Which streams an emulated graph capture forked to, and whether each was joined back.

CUDA ends a capture only when every stream the capture forked to (a stream that waited
for an event recorded on a capturing stream) has been joined back to the stream the
capture began on: the origin stream must, by the end, wait for the last work captured on
each of them. Otherwise ``cudaStreamEndCapture`` fails with ``cudaErrorStreamCaptureUnjoined``
("capturing stream has unjoined work"), which torch's ``CUDAGraph.capture_end`` raises.
The emulator runs every op at once, so it has to follow these dependencies itself to
refuse the same captures: a vector clock per captured stream, counting the ops captured
on each stream that it is ordered after.
"""

from __future__ import annotations

from typing import Dict, List


class CaptureJoins:
    """The dependencies among the streams of one capture (see the module docstring)."""

    __slots__ = ("origin", "clocks", "ops", "events")

    def __init__(self, origin: int) -> None:
        self.origin = origin
        #: captured stream -> {stream: how many of its captured ops this stream is ordered after}
        self.clocks: Dict[int, Dict[int, int]] = {origin: {}}
        self.ops: Dict[int, int] = {}  # captured stream -> ops captured on it
        self.events: Dict[int, Dict[int, int]] = {}  # event -> the clock it recorded in this capture

    def op(self, stream: int) -> None:
        """An op was captured on ``stream`` (work on a stream outside the capture is not its)."""
        clock = self.clocks.get(stream)
        if clock is None:
            return
        n = self.ops[stream] = self.ops.get(stream, 0) + 1
        clock[stream] = n

    def recorded(self, event: int, stream: int) -> None:
        """``event`` was recorded on ``stream``: it carries that stream's clock, if captured."""
        clock = self.clocks.get(stream)
        if clock is None:
            self.events.pop(event, None)  # recorded outside the capture: it forks nothing
        else:
            self.events[event] = dict(clock)

    def waited(self, event: int, stream: int) -> bool:
        """``stream`` waited for ``event``: an event recorded in the capture makes ``stream``
        a stream of the capture (a fork) or orders it after more of it (a join). Returns
        False when CUDA refuses the wait: a capturing stream waiting for an event recorded
        outside the capture (cudaErrorStreamCaptureIsolation, "dependency created on
        uncaptured work in another stream"), which also invalidates the capture."""
        recorded = self.events.get(event)
        if recorded is None:
            return stream not in self.clocks
        clock = self.clocks.setdefault(stream, {})
        for s, n in recorded.items():
            if clock.get(s, 0) < n:
                clock[s] = n
        return True

    def unjoined(self) -> List[int]:
        """The streams with captured work the origin stream does not wait for, in the order
        they were forked to (empty: the capture may end)."""
        origin = self.clocks[self.origin]
        return [s for s, n in self.ops.items() if s != self.origin and origin.get(s, 0) < n]
