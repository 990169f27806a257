"""The runtime hooks a backend calls (:class:`~.backends.base.RecorderCallbacks`), as the
part of :class:`~.session.Recorder` that turns each into a queued event.

Every hook queues one entry on the recorder's queue (:mod:`.event_queue`) and never raises.
What it needs of the recorder: ``active``, ``enc``, ``stacks``, ``_pinned`` and the queue
(and, for the online check after a graph replay, ``engine`` and its findings).
"""

from __future__ import annotations

from typing import Callable, Optional

from .quiet import is_muted


def _event_hook(meth: str) -> Callable[..., None]:
    """The hook that queues the encoder's ``meth`` with the hook's own arguments.

    Event bookkeeping carries no stack: no report shows where an event was created,
    recorded or waited, and these are the most frequent hooks (wait_stream fires three),
    so they queue directly, with no stack walk and no call to :meth:`_post`.
    """

    def hook(self, *args) -> None:
        if self.active:
            q = self._deferred
            q.append((getattr(self.enc, meth), args))
            if len(q) >= self._qmax:
                self._drain_now()

    hook.__qualname__ = hook.__name__ = f"on_{meth}"
    return hook


class RuntimeCallbacks:
    """The backend-facing hooks (see the module docstring)."""

    def _cb(self, meth: str, *args) -> None:
        if not self.active or is_muted():  # a runtime's own synchronizations (see .quiet)
            return
        try:
            key = self.stacks.key(2)
        except Exception:
            key = None
        self._post(self._emit, (meth, args, key))

    def on_stream_created(self, handle: int, device: int) -> None:
        self._cb("stream_created", handle, device)

    on_event_created = _event_hook("event_created")  # (ev)
    on_event_deleted = _event_hook("event_deleted")  # (ev)
    _event_recorded = _event_hook("event_recorded")  # (ev, handle, device)
    on_event_wait = _event_hook("event_waited")  # (ev, handle, device)

    # The host's synchronizations also lift the page-fault watch of the pinned buffers the
    # copies they wait for read or write (:mod:`.host_faults`): the faults noted so far are
    # queued first, before the synchronization's own record.
    def _pages(self, meth: str, *args) -> None:
        try:
            getattr(self.pages, meth)(*args)
        except Exception as e:  # never into the runtime's callback
            self._fail(e)

    def on_event_record(self, ev: int, handle: int, device: int) -> None:
        if self.pages is not None:
            self._pages("event_recorded", ev, handle, device)
        self._event_recorded(ev, handle, device)

    def on_event_sync(self, ev: int) -> None:
        if self.pages is not None:
            self._pages("event_synced", ev)
        self._cb("event_synchronized", ev)

    def on_stream_sync(self, handle: int, device: int) -> None:
        if self.pages is not None:
            self._pages("stream_synced", handle, device)
        self._cb("stream_synchronized", handle, device)

    def on_device_sync(self, device: Optional[int]) -> None:
        if self.pages is not None:
            self._pages("device_synced", device)
        self._cb("device_synchronized", device)

    # Allocations and frees are as frequent as kernels: _cb and _post are inlined.

    def on_alloc(self, ptr: int, handle: int, device: int, size: Optional[int]) -> None:
        if not self.active:
            return
        key = getattr(self._pinned, "key", None)  # an output of the op being recorded
        if key is None:
            try:
                key = self.stacks.key(1)
            except Exception:
                key = None
        q = self._deferred
        q.append((self._alloc, (ptr, handle, device, size, key)))
        if len(q) >= self._qmax:
            self._drain_now()

    def on_free(self, ptr: int) -> None:
        if not self.active:
            return
        try:
            key = self.stacks.key(1)
        except Exception:
            key = None
        q = self._deferred
        q.append((self._free, (ptr, key)))
        if len(q) >= self._qmax:
            self._drain_now()

    # CUDA graphs (format 1.3): a capture's kernels come through the dispatch mode as usual
    # and land between its GRAPH_BEGIN and GRAPH_END; a replay is one GRAPH_LAUNCH.

    def on_graph_begin(self, graph: int, handle: int, device: int) -> None:
        self._cb("graph_begin", graph, handle, device)

    def on_graph_end(self, graph: int) -> None:
        self._cb("graph_end", graph)

    def on_graph_launch(self, graph: int, handle: int, device: int) -> None:
        self._cb("graph_launch", graph, handle, device)

    def on_graph_replayed(self, graph: int) -> None:
        # Online: the launch is replayed now rather than at the next op's drain, so a race
        # in the graph's work is raised (raise mode) or warned about from replay() itself.
        if self.engine is None or not self.active:
            return
        self._drain_now()
        if self._findings:
            self._report_findings()  # online mode: may raise RaceError (on purpose)

    def on_record_stream(self, ptr: int, handle: int, device: int) -> None:
        self._cb("record_stream", ptr, handle, device)

    def on_erase_stream(self, ptr: int, handle: int, device: int) -> None:
        self._cb("erase_stream", ptr, handle, device)
