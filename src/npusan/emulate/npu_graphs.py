"""torch_npu's graph API on the emulated NPU: ``torch.npu.NPUGraph``, the ``torch.npu.graph``
context manager, ``graph_pool_handle``, ``is_current_stream_capturing`` and
``make_graphed_callables``.

An NPU graph (aclmdlRI capture) has CUDA graphs' semantics -- a capture records the work
issued on the capture stream and the streams it forks to, a replay re-issues it on the
current stream, allocations during a capture come from the graph's private pool -- so
the emulated NPUGraph is the emulated CUDAGraph (:mod:`.graphs`) under torch_npu's names
and signatures. The recorder's NPU backend patches ``torch_npu.npu.NPUGraph`` as the CUDA
backend patches ``CUDAGraph``: the same GRAPH_BEGIN/GRAPH_END/GRAPH_LAUNCH records.

Not emulated (one line each): ``NPUGraph.update`` and ``graph(auto_dispatch_capture=True)``
(torch_npu's re-parameterised replays of selected ops), ``debug_dump``,
``super_kernel_optimize``.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterator, Optional

import torch

from . import cuda as _cuda
from . import graphs as _graphs

graph_pool_handle = _graphs.graph_pool_handle
is_current_stream_capturing = _graphs.is_current_stream_capturing


class NPUGraph(_graphs.CUDAGraph):
    """``torch_npu.npu.NPUGraph`` (torch_npu's signatures on the emulated graph).

    A capture that forks to a stream it never joins back is ended, not refused as CUDA
    refuses it: whether ``aclmdlRICaptureEnd`` refuses it has not been established, so the
    emulated NPU does not claim it (the analyzer reports what the missing join leaves
    unordered)."""

    refuses_unjoined = False

    def __init__(self) -> None:
        super().__init__()
        self.auto_dispatch_capture = False

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_: Any) -> None:
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self) -> None:
        super().capture_end()

    def replay(self) -> None:
        super().replay()

    def update(self, cpu_update_input: Any) -> None:
        _cuda.unsupported("torch.npu.NPUGraph.update")()

    def super_kernel_optimize(self, optimize_options: Any = None, debug_options: Any = None) -> None:
        _cuda.unsupported("torch.npu.NPUGraph.super_kernel_optimize")()


class graph:
    """``torch.npu.graph``: capture the work of the ``with`` block into ``npu_graph``, on
    ``stream`` or on a side stream of its own (never the default stream), after
    synchronizing the device and emptying the allocator's cache as torch_npu does."""

    default_capture_stream: Optional[torch.Stream] = None

    def __init__(self, npu_graph: NPUGraph, pool: Any = None, stream: Optional[torch.Stream] = None,
                 auto_dispatch_capture: bool = False, capture_error_mode: str = "global") -> None:
        if auto_dispatch_capture:
            _cuda.unsupported("torch.npu.graph(auto_dispatch_capture=True)")()
        if graph.default_capture_stream is None:
            graph.default_capture_stream = torch.npu.Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = _cuda.StreamContext(self.capture_stream)
        self.npu_graph = npu_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        _cuda.synchronize()
        gc.collect()
        _cuda.STATE.allocator.empty_cache()
        self.stream_ctx.__enter__()
        self.npu_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: Any) -> None:
        self.npu_graph.capture_end()
        self.stream_ctx.__exit__(*exc)


@contextlib.contextmanager
def _cuda_names_as_npu() -> Iterator[None]:
    """While torch's ``make_graphed_callables`` runs, the ``torch.cuda`` names it calls are
    the NPU's (torch_npu's function is the same algorithm on those names)."""
    import torch.cuda.graphs as cg

    npu = torch.npu
    names = {"CUDAGraph": NPUGraph, "graph": graph, "synchronize": npu.synchronize,
             "stream": npu.stream, "Stream": npu.Stream}
    saved = {k: getattr(torch.cuda, k) for k in names}
    saved_pool = cg.graph_pool_handle
    try:
        for k, v in names.items():
            setattr(torch.cuda, k, v)
        cg.graph_pool_handle = graph_pool_handle
        yield
    finally:
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
        cg.graph_pool_handle = saved_pool


def make_graphed_callables(callables: Any, sample_args: Any, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool: Any = None) -> Any:
    """``torch.npu.make_graphed_callables``: forward and backward graphs of each callable,
    warmed up on a side stream, replayed inside an autograd Function."""
    import torch.cuda.graphs as cg

    with _cuda_names_as_npu():
        return cg.make_graphed_callables(callables, sample_args, num_warmup_iters=num_warmup_iters,
                                         allow_unused_input=allow_unused_input, pool=pool)
