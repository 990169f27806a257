"""Emulated CUDA graphs: ``torch.cuda.CUDAGraph`` captured and replayed for real on the CPU.

A capture runs its ops (so the graph's outputs exist, with the right values) and keeps
each op the emulation mode runs on device memory -- the op, its arguments and its output
tensors -- as the graph's program. Replaying runs the program again, below every dispatch
mode (the recorder records one GRAPH_LAUNCH, not the kernels), each out-of-place op's
result copied into the output tensor the capture made: outputs are recomputed into the
same static buffers, as a real graph's kernels write the same addresses.

The private memory pool: what is allocated while a graph captures comes from a caching
allocator of the graph's own, at addresses no other allocation uses; the program holds
every tensor it touches, so those addresses stay the graph's for as long as it lives
(they are freed to its pool when the graph is reset or collected).

Not emulated (raised as CUDA raises, or as :class:`~.cuda.Unsupported`): a synchronization
of the host with the device while capturing (``synchronize``, ``.item()``, a blocking copy
to or from the host -- CUDA's "operation not permitted when stream is capturing"), a
collective inside a capture, and a capture inside another. A capture that forked work to
another stream and did not join that stream back before it ends is refused at
``capture_end`` as CUDA refuses it ("capturing stream has unjoined work",
:mod:`.capture_joins`): the capture is over, the graph holds nothing to replay. So is a
wait of a capturing stream for an event recorded outside the capture ("dependency created
on uncaptured work in another stream"), which also makes ``capture_end`` fail ("operation
failed due to a previous error during capture").
"""

from __future__ import annotations

import itertools
from typing import Any, List, Optional

import torch
from torch.utils._python_dispatch import _disable_current_modes

from . import cuda as _cuda
from .allocator import BASE, CachingAllocator
from .capture_joins import CaptureJoins
from .tensor import storage_key

_ids = itertools.count(1)
#: Where graph n's private pool starts (1 TiB apart; the main allocator is at BASE).
POOL_STRIDE = 1 << 40


class CaptureError(RuntimeError):
    """What CUDA raises for an operation not permitted while a stream is capturing."""


def forbid_while_capturing(what: str) -> None:
    """Raise as CUDA does when the host would wait for the device during a capture."""
    if _cuda.STATE.capture is not None:
        raise CaptureError(f"CUDA error: operation not permitted when stream is capturing ({what}; "
                           "npusan --emulate cuda)")


#: What torch raises for a failed CUDA call (``cudaStreamEndCapture``'s cudaErrorStreamCaptureUnjoined).
_CUDA_ERROR = getattr(torch, "AcceleratorError", RuntimeError)


class CUDAGraph:
    """``torch.cuda.CUDAGraph`` (see the module docstring)."""

    #: Whether the capture refuses what CUDA's stream capture refuses: a stream not joined
    #: back by ``capture_end``, a wait of a capturing stream for work outside the capture.
    refuses_unjoined = True

    def __init__(self, keep_graph: bool = False) -> None:
        self._n = next(_ids)
        self._ops: List[tuple] = []
        self._pool: Optional[CachingAllocator] = None
        self._captured = False
        self._joins: Optional[CaptureJoins] = None
        self._invalidated = False  # an error during the capture: capture_end fails (CUDA's rule)

    # capture
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_: Any) -> None:
        st = _cuda.STATE
        if st.capture is not None:
            _cuda.unsupported("a graph capture inside another capture")()
        self.reset()
        shared = pool[1] if isinstance(pool, tuple) and len(pool) == 2 and isinstance(pool[1], CachingAllocator) else None
        self._pool = shared or CachingAllocator(base=BASE + POOL_STRIDE * self._n)
        self._joins = CaptureJoins(st.current_handle())
        self._invalidated = False
        st.capture = self

    def capture_end(self) -> None:
        st = _cuda.STATE
        if st.capture is not self:
            raise RuntimeError("CUDAGraph.capture_end: this graph is not capturing")
        st.capture = None
        invalidated, self._invalidated = self._invalidated, False
        unjoined = self._joins.unjoined() if self._joins is not None and self.refuses_unjoined else []
        self._joins = None
        if invalidated:  # an error during the capture (a refused wait): CUDA ends it, no graph
            self._ops = []
            raise _CUDA_ERROR("CUDA error: operation failed due to a previous error during capture (npusan "
                              "--emulate cuda: the capture was invalidated by the error raised inside it)")
        if unjoined:  # CUDA ends the capture and returns no graph
            self._ops = []
            n = len(unjoined)
            raise _CUDA_ERROR(
                "CUDA error: capturing stream has unjoined work (npusan --emulate cuda: the capture forked to "
                f"{n} other stream{'s' if n != 1 else ''} and the capture stream did not wait for "
                f"{'their' if n != 1 else 'its'} last work before the capture ended; join each back inside the "
                "capture, after its last work: torch.cuda.current_stream().wait_stream(<side stream>))")
        self._captured = True

    def note(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """One op run during the capture (the emulation mode calls it)."""
        self._ops.append((func, args, kwargs, out))
        if self._joins is not None:
            self._joins.op(_cuda.STATE.current_handle())

    def event_recorded(self, event: int, stream: int) -> None:
        """An event recorded while this graph captures (the emulated Event tells it)."""
        if self._joins is not None:
            self._joins.recorded(event, stream)

    def event_waited(self, event: int, stream: int) -> None:
        """A stream waited for an event while this graph captures: raises as CUDA does for
        a wait of a capturing stream for work outside the capture (which invalidates it)."""
        if self._joins is None or self._joins.waited(event, stream) or not self.refuses_unjoined:
            return
        self._invalidated = True
        raise _CUDA_ERROR(
            "CUDA error: dependency created on uncaptured work in another stream (npusan --emulate cuda: a "
            "stream of the capture waited for an event recorded outside the capture; wait before the capture "
            "begins, or before the graph's replay() after it)")

    # replay
    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("CUDAGraph.replay: the graph was not captured")
        forbid_while_capturing("a graph replay")
        with _disable_current_modes():
            for func, args, kwargs, out in self._ops:
                _store(out, func(*args, **kwargs))

    def instantiate(self) -> None:
        pass

    def reset(self) -> None:
        self._ops = []
        self._captured = False

    def pool(self) -> tuple:
        """A token another capture may share this graph's pool with."""
        return ("npusan-graph-pool", self._pool)

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        _cuda.unsupported("CUDAGraph.debug_dump")()

    # the private pool
    def malloc(self, nbytes: int, stream: int) -> int:
        assert self._pool is not None
        return self._pool.malloc(nbytes, stream)


def _store(out: Any, res: Any) -> None:
    """Put a replayed op's result where the capture's output is (an in-place op, a view, an
    ``out=`` op already wrote it)."""
    if isinstance(out, torch.Tensor):
        if isinstance(res, torch.Tensor) and res is not out and storage_key(res) != storage_key(out):
            out.copy_(res)
    elif isinstance(out, (list, tuple)) and isinstance(res, (list, tuple)):
        for o, r in zip(out, res):
            _store(o, r)


def graph_pool_handle() -> tuple:
    """``torch.cuda.graph_pool_handle()``: a pool that graphs captured with it share."""
    return ("npusan-graph-pool", CachingAllocator(base=BASE + POOL_STRIDE * next(_ids)))


def is_current_stream_capturing() -> bool:
    return _cuda.STATE.capture is not None
