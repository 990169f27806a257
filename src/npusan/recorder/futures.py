"""torch Futures on the simulated device, synchronized with streams the way a CUDA Future is.

A ``c10::ivalue::Future`` that holds device tensors carries the events recorded on the
streams that were current when it was completed, and the storages of its value
(``aten/src/ATen/core/ivalue_inl.h``):

- ``markCompleted(value)`` / ``set_result``: an event recorded on each current stream;
- ``wait()``: each current stream waits for those events and the value's storages are
  ``record_stream``-ed to it (``synchronizeWithCurrentStreams``); the host is not blocked
  by the device work;
- ``value()``: the value, with no synchronization at all;
- ``then(cb)`` and ``add_done_callback(cb)``: ``cb`` runs with current streams taken from
  the device's stream pool (``getStreamFromGlobalPool``), which first wait for the
  future's events as ``wait()`` does (``invokeCallback``); the child future of ``then`` is
  completed with ``cb``'s result while those streams are still current, so its events
  are recorded on them after ``cb``.

ProcessGroupNCCL (and ProcessGroupHCCL) complete a Work's future at launch, with the
communication stream current (``collective()``: ``CUDAMultiStreamGuard(ncclStream)``, then
``future_->markCompleted(outputs)``): ``work.get_future().wait()`` is ``work.wait()``, and
a ``then`` callback runs on a pool stream that waited for the collective.

On CUDA and NPU the events and streams reach the recorder by themselves (the runtime's
event hooks, the stream the callback runs on), but a CUDA Future's ``record_stream`` of its
value to a waiting stream is made inside the allocator, not by an aten op: :class:`Futures`
plays it (:meth:`Futures.record_value`) for the futures that have devices -- a Work's, one
made with ``devices=[...]`` naming a device, the child of ``then`` on one of those -- when
``wait()`` returns, when a callback starts on its pool stream, and when the DDP reducer
waits for a hook's future at the end of backward. NPU's allocator hook reports every
``record_stream`` itself (``native_record_stream``): nothing is played there. On the simulated device nothing is asynchronous and
gloo's futures have no devices, so :class:`Futures` plays the CUDA Future for those that
come from a modeled collective or from ``set_result`` with device tensors: it wraps the
callbacks, waits and results, and emits the events. The DDP reducer waits for the future
a communication hook returns in C++ (``Reducer::finalize_backward``: ``wait()``, then it
reads ``value()``), at the end of backward: :meth:`Futures.reducer_waits` queues that wait
as an autograd final callback, which runs before the reducer's own (queued after the last
bucket's hook).
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple

from torch import Tensor

#: The label of the pool streams callbacks run on (role: STREAM_LABEL readers that do not
#: know it name the stream by this label alone).
POOL_ROLE = "pool"
POOL_LABEL = "callback stream of a Future (torch's stream pool)"


@dataclass
class FutureState:
    """What waiting for one Future does on the device."""

    #: ``(event, device)``: what a waiting stream waits for.
    events: List[Tuple[Any, int]] = field(default_factory=list)
    #: Weak references to the value's device tensors (``record_stream``-ed to a waiting stream).
    values: List[Any] = field(default_factory=list)
    #: The collectives (:class:`~.collectives.Pending`) whose Work keeps their tensors alive
    #: until a wait through this future orders the program after them.
    works: List[Any] = field(default_factory=list)
    #: False for the child of ``then`` until its callback has run.
    ready: bool = True


class Futures:
    """The recording's Futures (one per :class:`~.collectives.Collectives`): played on the
    simulated device; on CUDA / NPU, the record_stream a device future makes in the allocator."""

    #: The unwrapped ``torch._C.Future.wait`` (set when the wrappers are installed).
    host_wait: Optional[Callable[[Any], Any]] = None

    def __init__(self, rec: Any) -> None:
        self.rec = rec
        self._states: "weakref.WeakKeyDictionary[Any, FutureState]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._labelled: set = set()
        #: CUDA / NPU: the futures with devices (whose waits record_stream their value).
        self._device: "weakref.WeakSet[Any]" = weakref.WeakSet()

    # -- CUDA / NPU: the record_stream a device future makes in the allocator --------------

    def mark_device(self, fut: Any) -> None:
        """``fut`` has devices: waiting for it ``record_stream``-s its value."""
        with self._lock:
            self._device.add(fut)

    def is_device(self, fut: Any) -> bool:
        with self._lock:
            return fut in self._device

    def record_value(self, value: Any) -> None:
        """A stream waited for a device future holding ``value``: its device storages are
        ``record_stream``-ed to the current stream (``CUDAFuture``, in the allocator)."""
        rec = self.rec
        be = rec.backend
        if getattr(be, "native_record_stream", False) or not rec.active:
            return
        ts: List[Tensor] = []
        collect_tensors(value, ts)
        key = rec.stacks.key(3) if rec.stacks.depth else None
        seen = set()
        for t in ts:
            if not be.is_device_tensor(t):
                continue
            ptr = t.untyped_storage().data_ptr()
            if ptr and ptr not in seen:
                seen.add(ptr)
                dev = be.tensor_device(t)
                rec._post(rec._emit, ("record_stream", (ptr, be.current_stream(dev), dev), key))

    def reducer_records(self, fut: Any) -> None:
        """CUDA / NPU: the DDP reducer's wait for a hook's device future (in C++, at the end
        of backward) record_streams its value to the stream current there."""
        if not self.is_device(fut):
            return
        rec = self.rec

        def at_end() -> None:
            try:
                value = fut.value()
            except Exception:
                return  # the reducer raises it
            try:
                self.record_value(value)
            except Exception as e:
                rec._fail(e)

        try:
            from torch.autograd import Variable

            Variable._execution_engine.queue_callback(at_end)
        except RuntimeError:  # not in backward
            at_end()

    # -- where states come from -----------------------------------------------------------

    def state(self, fut: Any) -> Optional[FutureState]:
        with self._lock:
            return self._states.get(fut)

    def of_work(self, fut: Any, pending: Any) -> None:
        """``work.get_future()``: completed at launch on the communication stream."""
        st = FutureState([(pending.end, pending.device)], list(pending.values), [pending])
        with self._lock:
            self._states[fut] = st

    def result_set(self, fut: Any, value: Any) -> None:
        """``fut.set_result(value)``: events recorded on the current stream (for a value
        holding device tensors; a CPU value needs none)."""
        values = self._device_tensors(value)
        if not values:
            return
        be = self.rec.backend
        st = FutureState([(be.record_current(0), 0)], values)
        with self._lock:
            self._states[fut] = st

    # -- waits ------------------------------------------------------------------------------

    def waited(self, fut: Any) -> List[Any]:
        """``fut.wait()``: the current stream waits for the future; returns the Pendings it
        ordered the program after (their Works no longer need to keep their tensors)."""
        st = self.state(fut)
        if st is not None and not st.ready and Futures.host_wait is not None:
            try:  # gloo runs the callback on its own thread: the host waits for it first
                Futures.host_wait(fut)
            except Exception:
                return []  # the wait raises it
        if st is None or not st.ready:
            return []
        self._sync(st)
        for p in st.works:
            p.keep.clear()
        return st.works

    def _sync(self, st: FutureState) -> None:
        """``synchronizeWithCurrentStreams``: the current stream waits for the events, and
        the value's storages are ``record_stream``-ed to it."""
        rec = self.rec
        be = rec.backend
        for ev, dev in st.events:
            be.comm_wait(ev, dev)
        cur = be.current_stream(0)
        key = rec.stacks.key(3) if rec.stacks.depth else None
        seen = set()
        for ref in st.values:
            t = ref()
            if t is None:
                continue
            try:
                ptr = t.untyped_storage().data_ptr()
            except Exception:
                continue
            if ptr and ptr not in seen:
                seen.add(ptr)
                rec._post(rec._emit, ("record_stream", (ptr, cur, 0), key))

    # -- callbacks ----------------------------------------------------------------------------

    def callback(self, parent: Any, cb: Callable, with_child: bool) -> Tuple[Optional[Callable], Optional[FutureState]]:
        """Wrap ``cb`` (given to ``parent.then`` or ``add_done_callback``) to run as a CUDA
        Future runs it; returns ``(wrapped, state of the child)``, or ``(None, None)`` for a
        future nothing is known of (its callback runs as it is)."""
        st = self.state(parent)
        if st is None:
            return None, None
        child = FutureState(works=list(st.works), ready=False)
        rec = self.rec

        @functools.wraps(cb)
        def run(fut):
            from .dispatch import _enter_mode, _exit_mode

            if not rec.active:
                return cb(fut)
            be = rec.backend
            pool = be.pool_stream(0)
            self._label(pool.stream_id)
            # gloo completes a future on its own thread, which no recording mode watches.
            mode = _enter_mode()
            try:
                with be.using_stream(pool):
                    self._sync(st)
                    out = cb(fut)
                    if with_child:
                        child.events = [(be.record_current(0), 0)]
                        child.values = self._device_tensors(out)
                        child.ready = True
                return out
            finally:
                if mode is not None:
                    _exit_mode(mode)

        return run, child

    def adopt(self, child: Any, state: FutureState) -> None:
        """The future ``then`` returned is the one ``state`` describes."""
        with self._lock:
            self._states[child] = state

    def reducer_waits(self, fut: Any) -> None:
        """The DDP reducer will wait for ``fut`` (what a communication hook returned) at the
        end of backward, on the stream current there."""
        if self.state(fut) is None:
            return
        rec = self.rec

        def at_end() -> None:
            if not rec.active:
                return
            try:
                self.waited(fut)
            except Exception as e:
                rec._fail(e)

        try:
            from torch.autograd import Variable

            Variable._execution_engine.queue_callback(at_end)
        except RuntimeError:  # not in backward (DDP's join mode calls hooks outside it)
            at_end()

    # -- helpers ----------------------------------------------------------------------------

    def _device_tensors(self, value: Any) -> List[Any]:
        ts: List[Tensor] = []
        collect_tensors(value, ts)
        is_dev = self.rec.backend.is_device_tensor
        return [weakref.ref(t) for t in ts if is_dev(t)]

    def _label(self, stream: int, device: int = 0) -> None:
        if (stream, device) in self._labelled:
            return
        self._labelled.add((stream, device))
        rec = self.rec
        rec._post(rec._emit, ("stream_label", (stream, POOL_ROLE, POOL_LABEL, device), None))

    def callback_starts(self, value: Any) -> None:
        """CUDA / NPU: a device future's callback starts on the pool stream the runtime made
        current (labelled as such in reports), which waited for the future: its value is
        ``record_stream``-ed to it."""
        be = self.rec.backend
        device = be.current_device()
        self._label(be.current_stream(device), device)
        if value is not None:
            self.record_value(value)


def collect_tensors(x: Any, into: List[Tensor], depth: int = 0) -> None:
    """The tensors in a future's value (nested lists, tuples and dicts, four levels deep)."""
    if isinstance(x, Tensor):
        into.append(x)
    elif isinstance(x, (list, tuple)) and depth < 4:
        for y in x:
            collect_tensors(y, into, depth + 1)
    elif isinstance(x, dict) and depth < 4:
        for y in x.values():
            collect_tensors(y, into, depth + 1)
