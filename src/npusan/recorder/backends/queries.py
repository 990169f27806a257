"""``Event.query()`` and ``Stream.query()`` answering True, recorded as the synchronizations
they amount to.

A query that answers True tells the host the work is done: from then on the host is ordered
after it exactly as after ``Event.synchronize()`` / ``Stream.synchronize()`` (a serving loop
that polls ``done.query()`` before reusing a pinned buffer is correct). No runtime trace
hook reports a query (``torch.cuda._gpu_trace`` has none, nor has torch_npu's), so the
adapters wrap the runtime classes' ``query`` methods: a True answer is reported as the
matching synchronize; False reports nothing (the host learned nothing it may rely on).

Like the trace hooks, a wrapper is installed at most once per class and process (it lives
on the class) and forwards to whatever the adapter's forwarder currently targets, or to
nothing once recording stopped.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

#: Attribute on a wrapper naming the method it wraps.
_ORIGINAL = "_npusan_query"


def wrap_query(cls: Any, report: Callable[[Any], None]) -> bool:
    """Wrap ``cls.query`` so that a True answer calls ``report(self)`` (guarded: never
    raises into the program). A second call for the same class only replaces ``report``.
    Returns whether ``cls`` has a ``query`` to wrap."""
    current = getattr(cls, "query", None)
    if current is None:
        return False
    holder = getattr(current, "_npusan_report", None)
    if holder is not None and getattr(current, _ORIGINAL, None) is not None:
        holder[0] = report
        return True
    original = current
    box = [report]

    def query(self: Any, *args: Any, **kwargs: Any) -> bool:
        done = original(self, *args, **kwargs)
        if done:
            try:
                box[0](self)
            except Exception:  # never into the program
                pass
        return done

    query.__name__ = "query"
    query.__qualname__ = f"{getattr(cls, '__name__', 'cls')}.query"
    query.__doc__ = getattr(original, "__doc__", None)
    setattr(query, _ORIGINAL, original)
    query._npusan_report = box  # type: ignore[attr-defined]
    cls.query = query
    return True


def forward_event_query(hooks: Any, handle_of: Callable[[Any], Optional[int]]) -> Callable[[Any], None]:
    """A reporter for events: a True ``query`` is the event's synchronization (nothing for
    an event never recorded: it has no handle, and there is nothing to wait for)."""

    def report(ev: Any) -> None:
        r = hooks.target
        if r is None:
            return
        h = handle_of(ev)
        if h:
            r.on_event_sync(int(h))

    return report


def forward_stream_query(hooks: Any, key_of: Callable[[Any], Tuple[int, int]]) -> Callable[[Any], None]:
    """A reporter for streams: a True ``query`` is the stream's synchronization;
    ``key_of(stream)`` is its ``(device, handle)``."""

    def report(stream: Any) -> None:
        r = hooks.target
        if r is None:
            return
        device, handle = key_of(stream)
        r.on_stream_sync(int(handle), int(device))

    return report
