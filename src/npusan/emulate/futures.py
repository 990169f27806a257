"""torch Futures on the emulated device, synchronized with streams as a CUDA Future is.

A CPU-only torch has no CUDA Future: ``torch.futures.Future(devices=["cuda:0"])`` would
stop the program, and the futures of emulated NCCL Works are gloo's, which know nothing of
streams. The emulator plays ``c10::ivalue::Future`` with devices (``ivalue_inl.h``,
``CUDAFuture``), firing its events through the emulated runtime, so npusan's CUDA backend
records what a GPU would report:

- a device future is one made with the emulated device among its ``devices``, the future
  of a Work of an emulated collective (``ProcessGroupNCCL::getFuture``: completed at
  launch, its event recorded on the communication stream), or the child of ``then`` on a
  device future (it inherits the devices);
- ``set_result(value)`` on a device future records an event on the current stream;
- ``wait()`` makes the current stream wait for the future's events and ``record_stream``-s
  the value's device storages to it in the allocator (not an aten op: the recorder plays
  that record itself, as on a GPU, :mod:`npusan.recorder.futures`);
- ``value()`` synchronizes nothing;
- ``then(cb)`` / ``add_done_callback(cb)`` run ``cb`` with a stream of the pool current
  (``getStreamFromGlobalPool``), which first waits for the future as ``wait()`` does; the
  child of ``then`` records its event on that stream after ``cb``;
- the DDP reducer waits (in C++) for the future a communication hook returned, at the end
  of backward, on the stream current there: an autograd final callback plays that wait.

A future made without devices is a CPU future, as on a GPU: nothing synchronizes (a
communication hook that returns one holding a tensor a collective still writes races).
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from typing import Any, Callable, List, Optional

import torch

from . import cuda as _cuda
from . import tensor as _tensor
from ..recorder.futures import collect_tensors
from .tensor import _dev, storage_key

_POOL_SIZE = 32  # torch's stream pool: 32 streams per device and priority, handed round-robin
_lock = threading.Lock()
_pool: List[Any] = []
_next = itertools.count()


class _State:
    """What waiting for one device future does on the device."""

    __slots__ = ("events", "pending", "__weakref__")

    def __init__(self, events: List[Any], pending: Optional[List[Any]] = None) -> None:
        self.events = events  # emulated Events the waiting stream waits for
        #: The emulated collectives (dist._Pending) this future (or its parent) completes
        #: after: their Works keep their tensors until the program waits through it.
        self.pending = pending or []


_states: "weakref.WeakKeyDictionary[Any, _State]" = weakref.WeakKeyDictionary()
_orig: dict = {}


def of_work(fut: Any, pending: Any) -> None:
    """``work.get_future()`` of an emulated collective: complete at launch, on the comm stream."""
    with _lock:
        _states[fut] = _State([pending.end], [pending])


def _pool_stream() -> Any:
    with _lock:
        if len(_pool) < _POOL_SIZE:
            _pool.append(_cuda.Stream())
            return _pool[-1]
        return _pool[next(_next) % _POOL_SIZE]


def _sync(fut: Any, st: _State, program: bool = True) -> None:
    """``synchronizeWithCurrentStreams``: the current stream waits for the future's events,
    and the value's storages are ``record_stream``-ed to it. ``program``: a stream of the
    program waits (not a callback's pool stream), so the collectives' Works no longer need
    to keep their tensors alive (on a GPU the watchdog releases them once they completed)."""
    cur = _cuda.STATE.current()
    for ev in st.events:
        ev.wait(cur)
    if program and st.pending:
        from . import dist as _dist

        for p in st.pending:
            _dist.forget(p)
    if not fut.done():
        return
    try:
        value = _orig["value"](fut)
    except Exception:
        return  # an error: waiting raises it
    ts: List[torch.Tensor] = []
    collect_tensors(value, ts)  # (host tensors have no block: skipped below)
    seen = set()
    for t in ts:
        ptr = _dev.get(storage_key(t))
        if ptr and ptr not in seen:  # (an empty storage has no block)
            seen.add(ptr)
            _cuda.STATE.record_stream(ptr, cur.stream_id)


def _state(fut: Any) -> Optional[_State]:
    with _lock:
        return _states.get(fut)


def _wait(self: Any, *a: Any, **k: Any) -> Any:
    st = _state(self)
    if st is not None:
        _sync(self, st)
    return _orig["wait"](self, *a, **k)


def _set_result(self: Any, result: Any, *a: Any, **k: Any) -> Any:
    st = _state(self)
    if st is not None:  # a device future: its event, before the callbacks completion runs
        ev = _cuda.Event()
        ev.record()
        st.events = [ev]
    return _orig["set_result"](self, result, *a, **k)


def _callbacks(name: str, with_child: bool) -> Callable:
    orig = _orig[name]

    def wrapper(self: Any, callback: Callable, *a: Any, **k: Any) -> Any:
        st = _state(self)
        if st is None:  # a CPU future: the callback runs as it is
            return orig(self, callback, *a, **k)
        child = _State([], list(st.pending))

        @functools.wraps(callback)
        def run(fut: Any) -> Any:
            with _cuda.StreamContext(_pool_stream()):
                _sync(fut, st, program=False)
                out = callback(fut)
                if with_child:
                    ev = _cuda.Event()
                    ev.record()
                    child.events = [ev]
            return out

        out = orig(self, run, *a, **k)
        if with_child and out is not None:
            with _lock:
                _states[out] = child
        return out

    wrapper.__doc__ = orig.__doc__
    wrapper.__name__ = name
    return wrapper


def _device(d: Any) -> torch.device:
    if isinstance(d, int):
        return torch.device(_tensor.DEVICE.type, d)
    return torch.device(d)


def _init(self: Any, *, devices: Optional[list] = None) -> None:
    """``torch.futures.Future(devices=[...])``: the emulated device is not one the CPU torch
    knows; a future naming it is a device future (its other devices go to torch)."""
    devs = [_device(d) for d in devices or []]
    mine = [d for d in devs if d.type == _tensor.DEVICE.type]
    torch._C.Future.__init__(self, [d for d in devs if d.type != _tensor.DEVICE.type])
    if mine:
        with _lock:
            _states[self] = _State([])


def reducer_waits(fut: Any) -> None:
    """The DDP reducer will wait for ``fut`` (a communication hook's result) at the end of
    backward, on the stream current there (``Reducer::finalize_backward``)."""
    st = _state(fut)
    if st is None:
        return

    def at_end() -> None:
        _sync(fut, st)

    try:
        torch.autograd.Variable._execution_engine.queue_callback(at_end)
    except RuntimeError:  # not in backward (DDP's join mode calls hooks outside it)
        at_end()


def _patch_comm_hooks() -> None:
    import torch.distributed as dist

    orig = getattr(dist, "_register_comm_hook", None)
    if orig is None:
        return

    def hooked(hook: Any) -> Any:
        @functools.wraps(hook)
        def run(state: Any, bucket: Any) -> Any:
            fut = hook(state, bucket)
            reducer_waits(fut)
            return fut

        return run

    def register(reducer: Any, state: Any, hook: Any, *a: Any, **k: Any) -> Any:
        return orig(reducer, state, hooked(hook), *a, **k)

    register.__doc__ = orig.__doc__
    dist._register_comm_hook = register


def install() -> None:
    """Play device futures (once per process; :mod:`.dist` adds the reducer's wait)."""
    if _orig:
        return
    F = torch._C.Future
    for name in ("wait", "value", "set_result", "then", "add_done_callback"):
        _orig[name] = getattr(F, name)
    F.wait = _wait
    F.set_result = _set_result
    F.then = _callbacks("then", True)
    F.add_done_callback = _callbacks("add_done_callback", False)
    torch.futures.Future.__init__ = _init  # type: ignore[method-assign]
