"""c10d collectives, recorded the way the process group runs them on the device.

The c10d ops (``c10d::allreduce_``, ``c10d::_allgather_base_``, ... and the functional
``_c10d_functional::*``) reach the recorder's dispatch mode, but their schemas carry no
alias annotation: read as plain aten ops, an in-place ``all_reduce(bucket)`` would be a
*read* of ``bucket`` on the current stream. What ProcessGroupNCCL really does
(``collective()`` in ``ProcessGroupNCCL.cpp``; ProcessGroupHCCL is shaped the same) is:

1. ``syncStream``: an event recorded on the current stream, waited on by the process
   group's internal communication stream of that device;
2. the collective reads its inputs and writes its outputs *on the communication stream*
   (in-place collectives read and write their tensors);
3. the tensors are ``record_stream``-ed to the communication stream, or, with
   ``TORCH_NCCL_AVOID_RECORD_STREAMS=1``, kept alive by the Work until it is waited;
4. an end event is recorded on the communication stream;
5. ``work.wait()`` -- called by ``torch.distributed`` itself for ``async_op=False``, and by
   ``wait_tensor`` for functional collectives -- makes the then-current stream wait for
   the end event.

torch 2.8 changed two of these (pytorch PR 150398): with ``async_op=False`` the
collective runs on the current stream itself (no event, no wait, no record_stream), and
``async_op=True`` collectives never call ``record_stream``: the Work keeps the tensors
until it is waited (``TORCH_NCCL_AVOID_RECORD_STREAMS`` became the only behaviour).
:class:`CommModel` holds what one torch version does.

On CUDA and NPU the events of steps 1, 4 and 5 arrive by themselves through the
runtime's trace hooks, fired inside the op: the recorder holds its queue while the op
runs and puts the collective's accesses between the communication stream's wait and its
end-event record (:meth:`Collectives._placed`). On the simulated device nothing fires, so
the adapter plays the process group (:meth:`SimBackend.comm_launch` and friends), in
trace order.

Work objects: the Python ``Work`` that ``torch.distributed`` returns is the same object
the op returns (pybind keeps one wrapper per C++ Work), so ``Work.wait`` is wrapped once
per process and looks the Work up in a weak table. Functional collectives are waited by
``wait_tensor``: the op itself when called directly, and
``torch.distributed._functional_collectives.wait_tensor`` (wrapped) when an
``AsyncCollectiveTensor`` waits inside its own ``__torch_dispatch__``, where no mode sees
the op.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch import Tensor

from .futures import Futures

#: The writes of a functional collective that go to the tensor the op returns.
OUT = "<out>"


@dataclass(frozen=True)
class Spec:
    """What one c10d op does, as its process group runs it."""

    name: str  # what reports call it ("all_reduce")
    reads: Tuple[str, ...] = ()  # arguments the collective reads on the communication stream
    writes: Tuple[str, ...] = ()  # arguments it writes there (OUT: the returned tensor(s))
    #: Functional collectives that return new memory make it on the current stream first:
    #: "clone" (a copy of ``reads[0]``: all_reduce, broadcast) or "empty".
    prep: Optional[str] = None
    functional: bool = False


def _c10d(name: str, reads=(), writes=()) -> Spec:
    return Spec(name, tuple(reads), tuple(writes))


def _fn(name: str, reads=(), writes=(), prep=None) -> Spec:
    return Spec(name, tuple(reads), tuple(writes), prep, True)


#: Every collective the recorder models, by schema name (overload names do not matter).
SPECS: Dict[str, Spec] = {
    "c10d::allreduce_": _c10d("all_reduce", ["tensors"], ["tensors"]),
    "c10d::allreduce_coalesced_": _c10d("all_reduce_coalesced", ["tensors"], ["tensors"]),
    "c10d::allgather_": _c10d("all_gather", ["input_tensors"], ["output_tensors"]),
    "c10d::_allgather_base_": _c10d("all_gather_into_tensor", ["input_tensor"], ["output_tensor"]),
    "c10d::allgather_coalesced_": _c10d("all_gather_coalesced", ["input_list"], ["output_lists"]),
    "c10d::allgather_into_tensor_coalesced_": _c10d("all_gather_into_tensor_coalesced", ["inputs"], ["outputs"]),
    "c10d::reduce_scatter_": _c10d("reduce_scatter", ["input_tensors"], ["output_tensors"]),
    "c10d::_reduce_scatter_base_": _c10d("reduce_scatter_tensor", ["input_tensor"], ["output_tensor"]),
    "c10d::reduce_scatter_tensor_coalesced_": _c10d("reduce_scatter_tensor_coalesced", ["inputs"], ["outputs"]),
    "c10d::broadcast_": _c10d("broadcast", ["tensors"], ["tensors"]),
    "c10d::reduce_": _c10d("reduce", ["tensors"], ["tensors"]),
    "c10d::alltoall_": _c10d("all_to_all", ["input_tensors"], ["output_tensors"]),
    "c10d::alltoall_base_": _c10d("all_to_all_single", ["input"], ["output"]),
    "c10d::gather_": _c10d("gather", ["input_tensors"], ["output_tensors"]),
    "c10d::scatter_": _c10d("scatter", ["input_tensors"], ["output_tensors"]),
    "c10d::send": _c10d("send", ["tensors"]),
    "c10d::recv_": _c10d("recv", (), ["tensors"]),
    "c10d::recv_any_source_": _c10d("recv", (), ["tensors"]),
    "c10d::barrier": _c10d("barrier"),
    "_c10d_functional::all_reduce": _fn("all_reduce", [OUT], [OUT], "clone"),
    "_c10d_functional::all_reduce_": _fn("all_reduce", ["input"], ["input"]),
    "_c10d_functional::all_reduce_coalesced": _fn("all_reduce_coalesced", [OUT], [OUT], "clone"),
    "_c10d_functional::all_reduce_coalesced_": _fn("all_reduce_coalesced", ["inputs"], ["inputs"]),
    "_c10d_functional::all_gather_into_tensor": _fn("all_gather_into_tensor", ["input"], [OUT], "empty"),
    "_c10d_functional::all_gather_into_tensor_out": _fn("all_gather_into_tensor", ["input"], ["out"]),
    "_c10d_functional::all_gather_into_tensor_coalesced": _fn(
        "all_gather_into_tensor_coalesced", ["inputs"], [OUT], "empty"),
    "_c10d_functional::reduce_scatter_tensor": _fn("reduce_scatter_tensor", ["input"], [OUT], "empty"),
    "_c10d_functional::reduce_scatter_tensor_out": _fn("reduce_scatter_tensor", ["input"], ["out"]),
    "_c10d_functional::reduce_scatter_tensor_coalesced": _fn(
        "reduce_scatter_tensor_coalesced", ["inputs"], [OUT], "empty"),
    "_c10d_functional::all_to_all_single": _fn("all_to_all_single", ["input"], [OUT], "empty"),
    "_c10d_functional::broadcast": _fn("broadcast", [OUT], [OUT], "clone"),
    "_c10d_functional::broadcast_": _fn("broadcast", ["input"], ["input"]),
    "_c10d_functional::isend": _fn("send", ["tensor"]),
    "_c10d_functional::irecv": _fn("recv", (), ["tensor"]),
    "_c10d_functional::batch_p2p_ops": _fn("batch_isend_irecv", ["tensors"], ["tensors"]),
}

WAIT_TENSOR = "_c10d_functional::wait_tensor"
#: Appended to the kernel name of a collective that ran on the communication stream with
#: ``async_op=False`` (torch < 2.8), which torch.distributed waits for at once.
SYNC_SUFFIX = " (async_op=False)"


def spec_of(schema_name: str) -> Optional[Spec]:
    return SPECS.get(schema_name)


# ---------------------------------------------------------------------- per torch version


@dataclass(frozen=True)
class CommModel:
    """How ProcessGroupNCCL (and ProcessGroupHCCL) runs a collective in one torch version."""

    torch_version: Tuple[int, int]
    #: ``async_op=False`` collectives run on the current stream (torch >= 2.8).
    sync_on_current_stream: bool
    #: Inputs and outputs are ``record_stream``-ed to the communication stream (torch < 2.8
    #: without ``TORCH_NCCL_AVOID_RECORD_STREAMS=1``); otherwise the Work keeps them alive
    #: until it is waited.
    record_streams: bool

    @classmethod
    def for_torch(cls, version: str, env: Optional[Dict[str, str]] = None) -> "CommModel":
        """The model of torch ``version`` (``"2.7.1+cu126"``) under environment ``env``.

        ``NPUSAN_C10D_MODEL=2.7`` makes the recorder model another version's process
        group (for trying a program against both behaviours on the simulated device).
        """
        env = os.environ if env is None else env
        ver = parse_version(env.get("NPUSAN_C10D_MODEL") or version)
        avoid = env.get("TORCH_NCCL_AVOID_RECORD_STREAMS", "0").strip().lower() in ("1", "true", "yes", "on", "y")
        new = ver >= (2, 8)
        return cls(ver, sync_on_current_stream=new, record_streams=not new and not avoid)


def parse_version(v: str) -> Tuple[int, int]:
    m = re.match(r"\s*(\d+)\.(\d+)", v or "")
    return (int(m.group(1)), int(m.group(2))) if m else (2, 13)


# ---------------------------------------------------------------------- pending work


@dataclass
class Pending:
    """A launched collective not yet waited."""

    device: int
    end: Any  # the end event (a sim.Event), or None where the runtime's hooks carry it
    keep: List[Tensor] = field(default_factory=list)  # stashed tensors (sim, no record_stream)
    values: List[Any] = field(default_factory=list)  # weak references to the outputs (its future's value)


#: Frames of code that launches collectives from C++ and waits for them there (the DDP
#: reducer during backward, ``_broadcast_coalesced`` in DDP's constructor and buffer sync).
_CPP_WAITERS = re.compile(r"[\\/]torch[\\/](autograd|nn[\\/]parallel|distributed[\\/]utils\.py)")
_SKIP_FRAMES = re.compile(
    r"[\\/](npusan[\\/]recorder|torch[\\/](utils[\\/]_python_dispatch\.py|_dynamo[\\/]|_compile\.py))")


def _waited_in_cpp() -> bool:
    """Whether the collective being dispatched was launched by C++ that waits for it itself.

    Such a Work never reaches Python. On CUDA and NPU its wait arrives through the event
    hooks anyway; the simulated device has to assume it, and does so at once (these
    collectives are torch's own business, never a bug in the program).
    """
    f = sys._getframe(2)
    while f is not None and _SKIP_FRAMES.search(f.f_code.co_filename):
        f = f.f_back
    return f is None or bool(_CPP_WAITERS.search(f.f_code.co_filename))


class Collectives:
    """The recorder's collective handling: one per recording (:attr:`Recorder.collectives`)."""

    def __init__(self, rec: Any) -> None:
        import torch

        self.rec = rec
        self.model = CommModel.for_torch(torch.__version__)
        self._works: "weakref.WeakKeyDictionary[Any, Pending]" = weakref.WeakKeyDictionary()
        self.futures = Futures(rec)  # torch Futures (:mod:`.futures`)
        self._tensors: Dict[int, Pending] = {}  # storage ptr of a functional output -> pending
        self._labelled: set = set()
        self._lock = threading.Lock()

    # -- the op ---------------------------------------------------------------------

    def run(self, func: Any, spec: Spec, args: tuple, kwargs: Optional[dict]) -> Any:
        """Run the c10d op ``func`` and record it as its process group runs it."""
        rec = self.rec
        be = rec.backend
        kwargs = kwargs or {}
        if spec.functional:
            patch_functional()
        schema = func._schema
        argv = _bind(schema, args, kwargs)
        async_op = argv.get("async_op", argv.get("asyncOp", True))
        on_comm = spec.functional or async_op is not False or not self.model.sync_on_current_stream
        if on_comm and async_op is False and not spec.functional:
            # torch < 2.8: waited by torch.distributed at once, on the stream current now;
            # reports say so (the program's fix is then a wait_stream, not a work.wait()).
            spec = dataclasses.replace(spec, name=spec.name + SYNC_SUFFIX)
        if be.comm_modeled:
            out = func(*args, **kwargs)
            try:
                self._record_modeled(spec, argv, out, on_comm)
            except Exception as e:
                rec._fail(e)
            return out
        start = rec.hold()
        try:
            out = func(*args, **kwargs)
        except BaseException:
            rec.release()
            raise
        try:
            self._record_hooked(spec, argv, out, on_comm, start)
        except Exception as e:
            rec._fail(e)
        finally:
            rec.release()
        return out

    def _tensors_of(self, spec: Spec, argv: dict, out: Any, names: Tuple[str, ...]) -> List[Tensor]:
        ts: List[Tensor] = []
        for nm in names:
            _collect(out if nm == OUT else argv.get(nm), ts)
        is_dev = self.rec.backend.is_device_tensor
        return [t for t in ts if is_dev(t)]

    def _group(self, argv: dict) -> str:
        pg = argv.get("process_group")
        if pg is None:
            g = argv.get("group_name")
            return str(g) if isinstance(g, str) else "?"
        try:
            from torch._C._distributed_c10d import ProcessGroup

            return str(ProcessGroup.unbox(pg).group_name)
        except Exception:
            return "?"

    def _work(self, out: Any) -> Any:
        w = out[-1] if isinstance(out, (tuple, list)) and out else out
        try:
            from torch._C._distributed_c10d import Work

            return Work.unbox(w)
        except Exception:
            return None

    def _spans(self, tensors: List[Tensor], write: bool) -> list:
        return [s for s in (_span(t, write) for t in tensors) if s is not None]

    def _record_modeled(self, spec: Spec, argv: dict, out: Any, on_comm: bool) -> None:
        """The simulated device: every event is ours, emitted in trace order."""
        rec = self.rec
        be = rec.backend
        device = 0
        key = rec.stacks.key(2) if rec.stacks.depth else None
        reads = self._tensors_of(spec, argv, out, spec.reads)
        writes = self._tensors_of(spec, argv, out, spec.writes)
        if spec.prep is not None:  # the output is made on the current stream first
            new = self._tensors_of(spec, argv, out, (OUT,))
            for t in new:
                be.observe_output(t)
            if spec.prep == "clone":
                src = self._tensors_of(spec, argv, None, ("input", "inputs"))
                rec.record_kernel("aten::clone", device, be.current_stream(device),
                                  self._spans(src, False) + self._spans(new, True), key)
        if not on_comm:  # torch >= 2.8, async_op=False: on the current stream, nothing else
            rec.record_kernel(spec.name, device, be.current_stream(device),
                              self._spans(reads, False) + self._spans(writes, True), key)
            return
        group = self._group(argv)
        comm = be.comm_launch(group, device)
        self._label(comm, device, group)
        rec.record_kernel(spec.name, device, comm, self._spans(reads, False) + self._spans(writes, True), key)
        keep: List[Tensor] = []
        if self.model.record_streams:
            self._record_streams(reads + writes, comm, device, key)
        else:
            keep = reads + writes
        pending = Pending(device, be.comm_end(comm, device), keep, [weakref.ref(t) for t in writes])
        if _waited_in_cpp():
            be.comm_wait(pending.end, device)
            return
        self._register(spec, argv, out, pending)

    def _record_hooked(self, spec: Spec, argv: dict, out: Any, on_comm: bool, start: int) -> None:
        """CUDA / NPU: the process group's events were queued by the hooks while the op ran
        (the queue is held); place the accesses among them."""
        rec = self.rec
        be = rec.backend
        reads = self._tensors_of(spec, argv, out, spec.reads)
        writes = self._tensors_of(spec, argv, out, spec.writes)
        first = (reads or writes or self._tensors_of(spec, argv, out, (OUT,)))
        device = be.tensor_device(first[0]) if first else be.current_device()
        cur = be.current_stream(device)
        key = rec.stacks.key(2) if rec.stacks.depth else None
        q = rec._deferred
        enc = rec.enc
        region = [(i, q[i]) for i in range(start, len(q))]
        waits = [(i, a) for i, (fn, a) in region if fn == enc.event_waited and a[1] != cur and a[2] == device]
        comm = waits[0][1][1] if (waits and on_comm) else cur
        at = len(q)
        if comm != cur:
            ends = [i for i, (fn, a) in region if fn == enc.event_recorded and a[1] == comm and i > waits[0][0]]
            at = ends[-1] if ends else len(q)
            self._label(comm, device, self._group(argv))
        items = [(rec._kernel_fn, (spec.name, device, comm, self._spans(reads, False) + self._spans(writes, True), key))]
        if comm != cur and self.model.record_streams and not getattr(be, "native_record_stream", False):
            for ptr in _storages(reads + writes):
                items.append((rec._emit, ("record_stream", (ptr, comm, device), key)))
        if spec.prep == "clone":
            new = self._tensors_of(spec, argv, out, (OUT,))
            src = self._tensors_of(spec, argv, None, ("input", "inputs"))
            recs = [i for i, (fn, a) in region if fn == enc.event_recorded and a[1] == cur]
            pos = recs[0] if recs else at
            q.insert(pos, (rec._kernel_fn, ("aten::clone", device, cur,
                                            self._spans(src, False) + self._spans(new, True), key)))
            if pos <= at:
                at += 1
        for k, item in enumerate(items):
            q.insert(at + k, item)
        # Nothing to register: the runtime fires the wait's events itself.

    def _record_streams(self, tensors: List[Tensor], comm: int, device: int, key) -> None:
        rec = self.rec
        for ptr in _storages(tensors):
            rec._post(rec._emit, ("record_stream", (ptr, comm, device), key))

    def _label(self, comm: int, device: int, group: str) -> None:
        if (device, comm) in self._labelled:
            return
        self._labelled.add((device, comm))
        rec = self.rec
        rec._post(rec._emit, ("stream_label", (comm, "comm", f"comm stream of process group {group}", device), None))

    def _register(self, spec: Spec, argv: dict, out: Any, pending: Pending) -> None:
        if spec.functional:
            with self._lock:
                for ptr in _storages(self._tensors_of(spec, argv, out, spec.writes or spec.reads)):
                    self._tensors[ptr] = pending
            return
        work = self._work(out)
        if work is not None:
            with self._lock:
                self._works[work] = pending
            # The wrapper made here is the program's Work only if it is still alive when
            # the op returns (pybind hands a live wrapper back): kept until the next op the
            # recorder sees, never longer (a Work holds tensors).
            self.rec._recent_works.append(work)

    # -- waits ------------------------------------------------------------------------

    def work_waited(self, work: Any) -> None:
        """``work.wait()``: the current stream waits for the collective's end."""
        with self._lock:
            pending = self._works.pop(work, None)
        self._finish(pending)

    def future_made(self, work: Any, fut: Any) -> None:
        """``work.get_future()``: a future completed at launch on the communication stream
        (what ``all_reduce_coalesced(async_op=True)`` and communication hooks return)."""
        if not self.rec.backend.comm_modeled:  # ProcessGroupNCCL's future has the devices
            self.futures.mark_device(fut)
            return
        with self._lock:
            pending = self._works.get(work)
        if pending is not None:
            self.futures.of_work(fut, pending)

    def future_waited(self, fut: Any) -> None:
        """``fut.wait()``: the current stream waits for the future (:mod:`.futures`)."""
        if not self.rec.active:
            return
        done = self.futures.waited(fut)
        if done:  # a later work.wait() of the same collectives has nothing left to do
            with self._lock:
                self._works = weakref.WeakKeyDictionary(
                    {w: p for w, p in self._works.items() if not any(p is d for d in done)})

    def future_result(self, fut: Any, result: Any) -> None:
        """CUDA / NPU: ``fut.wait()`` returned; a device future record_streams its value to
        the waiting stream in the allocator (:meth:`.futures.Futures.record_value`)."""
        if not self.rec.backend.comm_modeled and self.futures.is_device(fut):
            self.futures.record_value(result)

    def tensor_waited(self, t: Any, result: Any = None) -> None:
        """``wait_tensor(t)``: as ``work.wait()`` for the functional collective that made t."""
        if not isinstance(t, Tensor):
            return
        try:
            ptr = t.untyped_storage().data_ptr()
        except Exception:
            return
        with self._lock:
            pending = self._tensors.pop(ptr, None)
            if pending is not None:  # a coalesced collective: one wait for all its outputs
                for p in [p for p, v in self._tensors.items() if v is pending]:
                    del self._tensors[p]
        self._finish(pending)

    def _finish(self, pending: Optional[Pending]) -> None:
        if pending is None or not self.rec.active:
            return
        if pending.end is not None:
            self.rec.backend.comm_wait(pending.end, pending.device)
        pending.keep.clear()


def _bind(schema: Any, args: tuple, kwargs: dict) -> dict:
    argv = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            argv[a.name] = args[i]
        elif a.name in kwargs:
            argv[a.name] = kwargs[a.name]
        elif a.has_default_value():
            argv[a.name] = a.default_value
    return argv


def _collect(x: Any, into: List[Tensor]) -> None:
    if isinstance(x, Tensor):
        into.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _collect(y, into)


def _storages(tensors: List[Tensor]) -> List[int]:
    seen: Dict[int, None] = {}
    for t in tensors:
        try:
            p = t.untyped_storage().data_ptr()
        except Exception:
            continue
        if p:
            seen.setdefault(p)
    return list(seen)


def _span(t: Tensor, write: bool) -> Optional[tuple]:
    """``(storage base, byte offset, byte extent, storage nbytes, is_write, view)`` as the
    dispatch mode records it (see :func:`npusan.recorder.access.span`; ``view`` is None for
    a plain range, else the strided shape that goes to a 1.1 VIEWS record)."""
    from .access import span

    s = span(t)
    if s is None:
        return None
    base, off, ext, total, view = s
    return (base, off, ext, total, write, view)


# ---------------------------------------------------------------------- process-wide hooks

_installed = False
_fc_patched = False


def _current() -> Optional[Collectives]:
    from . import session

    rec = session._current
    if rec is None or not rec.active:
        return None
    return getattr(rec, "collectives", None)


def _wrap(owner: Any, name: str, notify: Any, *, after: bool = False) -> None:
    """Replace ``owner.name`` by a wrapper that tells the recording's :class:`Collectives`
    (``notify(collectives, first_arg)`` before the call, or with ``after``
    ``notify(collectives, first_arg, result)`` after it) and never raises into the program."""
    orig = getattr(owner, name)

    def tell(*args) -> None:
        c = _current()
        if c is not None:
            try:
                notify(c, *args)
            except Exception as e:
                c.rec._fail(e)

    def wrapper(first, *args, **kwargs):
        if not after:
            tell(first)
        res = orig(first, *args, **kwargs)
        if after:
            tell(first, res)
        return res

    wrapper.__doc__ = orig.__doc__
    wrapper.__name__ = getattr(orig, "__name__", name)
    setattr(owner, name, wrapper)


def install() -> None:
    """Wrap ``Work.wait``, ``Work.get_future``, the ``Future`` methods that synchronize
    (:mod:`.futures`) and DDP's hook registration once per process (the wrappers do nothing
    while nothing records).

    The waits are told before the real wait: what a backend does inside it (gloo copies
    the results of some collectives into their outputs) comes after the wait, as on a device.
    """
    global _installed
    if _installed:
        return
    _installed = True
    try:
        import torch
        from torch._C._distributed_c10d import Work
    except Exception:  # torch without distributed support
        return
    _wrap(Work, "wait", Collectives.work_waited)
    _wrap(Work, "get_future", Collectives.future_made, after=True)
    fut = torch._C.Future  # torch.futures.Future's methods call these
    wait = Futures.host_wait = fut.wait
    _wrap(fut, "wait", Collectives.future_waited)
    _wrap(fut, "wait", Collectives.future_result, after=True)
    _wrap_callbacks(fut, "then", with_child=True)
    _wrap_callbacks(fut, "add_done_callback", with_child=False)
    _wrap_set_result(fut)
    _wrap_value(fut, wait)
    _wrap_comm_hooks()
    _wrap_future_init(torch)


def _modeled() -> Optional[Collectives]:
    """The recording's collectives where Futures are played by npusan (the simulated device)."""
    c = _current()
    return c if c is not None and c.rec.backend.comm_modeled else None


def _hooked() -> Optional[Collectives]:
    """The recording's collectives where the runtime plays Futures (CUDA, NPU)."""
    c = _current()
    return c if c is not None and not c.rec.backend.comm_modeled else None


def _wrap_future_init(torch: Any) -> None:
    """``torch.futures.Future(devices=[...])``: a future naming a device is a device future."""
    cls = torch.futures.Future
    orig = cls.__init__

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        devices = kwargs.get("devices") or []
        c = _hooked()
        if c is not None and any(not (isinstance(d, str) and d.split(":")[0] == "cpu")
                                 and not (isinstance(d, torch.device) and d.type == "cpu") for d in devices):
            c.futures.mark_device(self)

    __init__.__doc__ = orig.__doc__
    cls.__init__ = __init__


def _recording_callback(c: Collectives, callback: Callable) -> Callable:
    """CUDA / NPU: a callback of a device future starts on its pool stream, which waited for
    the future: the value is record_stream-ed to it (in the allocator on a GPU)."""
    @functools.wraps(callback)
    def run(fut):
        try:
            value = fut.value()
        except Exception:
            value = None  # the callback sees the error
        if c.rec.active:
            try:
                c.futures.callback_starts(value)
            except Exception as e:
                c.rec._fail(e)
        return callback(fut)

    return run


def _wrap_callbacks(cls: Any, name: str, *, with_child: bool) -> None:
    """``Future.then(cb)`` / ``add_done_callback(cb)``: ``cb`` runs on a pool stream that
    waited for the future; the child of ``then`` is completed there after ``cb``."""
    orig = getattr(cls, name)

    def wrapper(self, callback, *args, **kwargs):
        h = _hooked()
        if h is not None and h.futures.is_device(self):
            out = orig(self, _recording_callback(h, callback), *args, **kwargs)
            if with_child and out is not None:
                h.futures.mark_device(out)  # the child inherits the devices
            return out
        c = _modeled()
        run = child = None
        if c is not None:
            try:
                run, child = c.futures.callback(self, callback, with_child)
            except Exception as e:
                c.rec._fail(e)
        if run is None:
            return orig(self, callback, *args, **kwargs)
        if not self.done():
            # ProcessGroupNCCL's futures are complete at launch, so their callbacks run
            # at once, on the calling thread; gloo's complete later on its own threads
            # (where a callback that waits for a collective can starve them). Play NCCL.
            try:
                Futures.host_wait(self)
            except Exception:
                pass  # the callback sees the error
        out = orig(self, run, *args, **kwargs)
        if with_child and out is not None:
            try:
                c.futures.adopt(out, child)
            except Exception as e:
                c.rec._fail(e)
        return out

    wrapper.__doc__ = orig.__doc__
    wrapper.__name__ = name
    setattr(cls, name, wrapper)


def _wrap_value(cls: Any, wait: Any) -> None:
    """``Future.value()`` synchronizes nothing; but ProcessGroupNCCL completes a Work's
    future at launch, where gloo completes it later on its own thread: on the simulated
    device the host waits for a modeled collective's future first (as ``value()`` of an
    incomplete future is an error, not a wait)."""
    orig = cls.value

    def value(self, *args, **kwargs):
        c = _modeled()
        if c is not None and not self.done() and c.futures.state(self) is not None:
            try:
                wait(self)
            except Exception:
                pass  # value() raises it
        return orig(self, *args, **kwargs)

    value.__doc__ = orig.__doc__
    cls.value = value


def _wrap_set_result(cls: Any) -> None:
    """``Future.set_result(value)``: events recorded on the current stream."""
    orig = cls.set_result

    def set_result(self, result, *args, **kwargs):
        c = _modeled()
        if c is not None:
            try:
                c.futures.result_set(self, result)
            except Exception as e:
                c.rec._fail(e)
        return orig(self, result, *args, **kwargs)

    set_result.__doc__ = orig.__doc__
    cls.set_result = set_result


def _wrap_comm_hooks() -> None:
    """``torch.distributed._register_comm_hook`` (what ``DistributedDataParallel.
    register_comm_hook`` calls): the reducer waits in C++ for the future each hook call
    returns, which the simulated device has to play (:meth:`.futures.Futures.reducer_waits`)."""
    import functools

    import torch.distributed as dist

    orig = getattr(dist, "_register_comm_hook", None)
    if orig is None:
        return

    def hooked(hook: Any) -> Any:
        @functools.wraps(hook)
        def run(state, bucket):
            fut = hook(state, bucket)
            c = _current()
            if c is not None:
                try:
                    if c.rec.backend.comm_modeled:
                        c.futures.reducer_waits(fut)
                    else:
                        c.futures.reducer_records(fut)
                except Exception as e:
                    c.rec._fail(e)
            return fut

        return run

    def register(reducer, state, hook, *args, **kwargs):
        return orig(reducer, state, hooked(hook), *args, **kwargs)

    register.__doc__ = orig.__doc__
    dist._register_comm_hook = register


def patch_functional() -> None:
    """Wrap ``_functional_collectives.wait_tensor``, which AsyncCollectiveTensor calls from
    its own ``__torch_dispatch__`` (where the recorder's mode does not see the op)."""
    global _fc_patched
    if _fc_patched:
        return
    _fc_patched = True
    try:
        from torch.distributed import _functional_collectives as fc
    except Exception:
        return
    _wrap(fc, "wait_tensor", Collectives.tensor_waited, after=True)
