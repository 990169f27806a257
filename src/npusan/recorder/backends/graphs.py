"""CUDA and NPU graph captures and replays, told to the recorder (format 1.3).

Neither runtime has a trace hook for graphs, so the graph class's ``capture_begin``,
``capture_end`` and ``replay`` are wrapped (once per class, for the life of the process)
and forward to whichever recorder the backend's hooks point at. The wrappers never
change what the graph does: they call the original first (begin, end) or between the
launch and its check (replay) and let its exceptions through unchanged. After a replay
returns, online raise mode may raise its ``RaceError`` from it (a race inside the
replayed work belongs to the ``replay()`` line, not to whatever op comes next).
"""

from __future__ import annotations

from typing import Any

from .hooks import TraceHooks

#: Attribute set on a patched graph class (patched at most once per class).
_GRAPHS_ATTR = "_npusan_graph_hooks"


def patch_graphs(graph_cls: Any, hooks: TraceHooks) -> None:
    """Make ``graph_cls`` (``torch.cuda.graphs.CUDAGraph``, torch_npu's ``NPUGraph``) tell
    the recorder of each capture and replay (format 1.3): GRAPH_BEGIN once the capture has begun (the capture's kernels
    follow, from the dispatch mode), GRAPH_END once it has ended, GRAPH_LAUNCH before a replay
    enqueues its work (then ``on_graph_replayed`` once it did: the online check); the stream
    is the current one. A graph is named by its object's id
    (a graph captured again replaces its program). Patched once per class; the wrappers
    forward to whichever recorder the hooks point at, or to nothing."""
    if not isinstance(graph_cls, type) or graph_cls.__dict__.get(_GRAPHS_ATTR) is not None:
        return
    begin, end, replay = graph_cls.capture_begin, graph_cls.capture_end, graph_cls.replay

    def where() -> tuple:
        dev = hooks.get_device()
        return dev, hooks.get_stream(dev)

    capturing: set = set()  # graphs whose capture began (and was told to the recorder)
    failed: set = set()  # graphs whose last capture the runtime refused to end

    def capture_begin(self: Any, *a: Any, **k: Any) -> Any:
        r = begin(self, *a, **k)
        capturing.add(id(self))
        failed.discard(id(self))
        t = hooks.target
        if t is not None:
            dev, handle = where()
            t.on_graph_begin(id(self), handle, dev)
        return r

    def capture_end(self: Any) -> Any:
        try:
            r = end(self)
        except BaseException:
            # The runtime ended the capture all the same (CUDA's "capturing stream has
            # unjoined work"): the trace's capture ends too, and the graph, which holds
            # nothing to run, is launched by no later replay (torch refuses those).
            if id(self) in capturing:
                failed.add(id(self))
                _ended(self)
            raise
        _ended(self)
        return r

    def _ended(graph: Any) -> None:
        capturing.discard(id(graph))
        t = hooks.target
        if t is not None:
            t.on_graph_end(id(graph))

    def replay_(self: Any) -> Any:
        t = hooks.target
        if t is not None and id(self) not in failed:
            dev, handle = where()
            t.on_graph_launch(id(self), handle, dev)
        r = replay(self)
        if t is not None and hooks.target is t:
            done = getattr(t, "on_graph_replayed", None)
            if done is not None:
                done(id(self))  # online raise mode: a race in the replay is raised here
        return r

    graph_cls.capture_begin, graph_cls.capture_end, graph_cls.replay = capture_begin, capture_end, replay_
    setattr(graph_cls, _GRAPHS_ATTR, hooks)
