"""The emulator's dispatch mode: which op outputs are device memory, and host/device copies.

It sits *below* the recorder's mode (the recorder sees each op first and reads the
registry the emulator filled for its outputs). Every op runs as the CPU op it is; the mode
only decides, per output, whether it is device memory:

* a factory with ``device="cuda"`` (or ``_to_copy(device="cuda")``, the copy behind
  ``.to("cuda")``) makes device tensors -- the kernel runs with ``device="cpu"``;
* ``_to_copy`` with an explicit CPU device makes host tensors (``.cpu()``,
  ``.to("cpu")``, see :func:`.tensor.patch`);
* any other op with a device tensor among its inputs makes device tensors (an output
  sharing an input's storage -- a view, an in-place or ``out=`` op -- keeps that storage's
  kind, so ``host.copy_(dev)`` stays a host tensor).

An op on a tensor subclass with its own ``__torch_dispatch__`` (DTensor, FSDP2's sharded
parameters and gradients) is answered ``NotImplemented``: the subclass unwraps and runs
its ops on the plain tensors it holds, which come back to the mode and are classified
like any other (the optimizer state that DTensor's local ops make from a device shard is
device memory); see :mod:`npusan.tensor_subclasses`. Ops on FakeTensors (DTensor's
sharding propagation), and factories while a fake mode is active (they make FakeTensors),
are run as they are: they allocate nothing.

A blocking copy between host and device (``.item()``, ``.cpu()``, ``copy_`` across,
``.to("cuda")`` of a host tensor without ``non_blocking``) synchronizes the current
stream, as CUDA does; a non-blocking copy to the host (``.to("cpu", non_blocking=True)``)
makes its output pinned, as aten's ``_to_copy`` does on a GPU. Pinned host memory is ordinary host memory that says it is pinned
(its storage is marked, so a view of a pinned buffer is pinned too).
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import weakref
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..tensor_subclasses import PLAIN, SUBCLASS, dispatch_kind

from . import cuda as _cuda
from . import dist as _dist
from . import tensor as _tensor
from .tensor import _dev, register
from .tensor import storage_key as key

aten = torch.ops.aten
Tensor = torch.Tensor
_CPU = torch.device("cpu")

_fake_mode = torch._C._get_dispatch_mode
_FAKE = torch._C._TorchDispatchModeKey.FAKE

_HOST_READS = {aten._local_scalar_dense.default, aten.equal.default, aten.is_nonzero.default}
_PIN = {aten._pin_memory.default}
_C10D = ("c10d", "_c10d_functional")


def _is_cuda(d: Any) -> bool:
    """Whether ``d`` names the emulated device (``cuda``, or ``npu`` under --emulate npu)."""
    if isinstance(d, torch.device):
        return d.type == _tensor.DEVICE.type
    if isinstance(d, str):
        return d.split(":", 1)[0] == _tensor.DEVICE.type
    return False


def _inputs(args: Any, kwargs: dict) -> list:
    """Storage keys of the tensor inputs (lists included)."""
    keys = []
    for a in (args, kwargs.values()):
        for x in a:
            if isinstance(x, Tensor):
                keys.append(key(x))
            elif isinstance(x, (list, tuple)):
                for y in x:
                    if isinstance(y, Tensor):
                        keys.append(key(y))
    return keys


def _register_new(out: Any, ins: list) -> None:
    if isinstance(out, Tensor):
        if key(out) not in ins:
            register(out)
    elif isinstance(out, (list, tuple)):
        for y in out:
            _register_new(y, ins)


_scope = threading.local()


@contextlib.contextmanager
def device_factories() -> Iterator[None]:
    """Within it, in this thread, what C++ allocates without a device tensor among its
    inputs is device memory: C++ that sizes buffers from a parameter's options (the DDP
    reducer's buckets) allocates "on the CPU" at the C++ level, on the device in the
    program."""
    _scope.depth = getattr(_scope, "depth", 0) + 1
    try:
        yield
    finally:
        _scope.depth -= 1


#: ``StorageImpl`` addresses of the pinned host storages: pinned-ness belongs to the
#: memory, so a view of a pinned buffer (``buf[:n]``) is pinned too, as on a GPU.
_pinned_storages: set = set()


def _page_backed(t: torch.Tensor) -> torch.Tensor:
    """``t`` moved into pages of its own, as ``cudaHostAlloc`` allocates pinned memory:
    the recorder's page-fault watch protects only storages that start on a page boundary
    and own their last page (:mod:`npusan.recorder.host_faults`). Done only while that
    watch is on: such a storage cannot be resized, as a plain CPU one can."""
    st = torch._C.TensorBase.untyped_storage(t)
    n = st.nbytes()
    if not n:
        return t
    buf = mmap.mmap(-1, n)  # anonymous: page-aligned, zeroed, freed with the storage
    new = torch.frombuffer(buf, dtype=torch.uint8).untyped_storage()
    new.copy_(st)
    out = torch.empty((0,), dtype=t.dtype)
    out.set_(new, t.storage_offset(), t.size(), t.stride())
    return out


def _pinned(t: torch.Tensor) -> torch.Tensor:
    if _faults_watched():
        t = _page_backed(t)
    k = key(t)
    if k and k not in _pinned_storages:
        _pinned_storages.add(k)
        weakref.finalize(torch._C.TensorBase.untyped_storage(t), _pinned_storages.discard, k).atexit = False
    return t


def _faults_watched() -> bool:
    from ..recorder.host_faults import requested

    return requested()


def is_pinned(t: torch.Tensor) -> bool:
    """Whether ``t`` lies in emulated pinned host memory."""
    return key(t) in _pinned_storages


def _noted(func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    """An op run during a graph capture, kept in the graph's program (:mod:`.graphs`): what
    a replay runs again (a factory's device is the CPU, as the op ran)."""
    if kwargs.get("device") is not None and _is_cuda(kwargs["device"]):
        kwargs = dict(kwargs)
        kwargs["device"] = _CPU
        kwargs.pop("pin_memory", None)
    _cuda.STATE.capture.note(func, args, kwargs, out)
    return out


class EmulationMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if types:
            kind = dispatch_kind(types)
            if kind == SUBCLASS:
                return NotImplemented  # its inner ops on plain tensors come back here
            if kind != PLAIN:  # fake tensors (DTensor's sharding propagation): no memory
                return func(*args, **(kwargs or {}))
        elif _fake_mode(_FAKE) is not None:  # a factory the fake mode below answers
            return func(*args, **(kwargs or {}))
        kwargs = kwargs or {}
        if _cuda.STATE.capture is not None:
            device_op = _is_cuda(kwargs.get("device")) or any(k in _dev for k in _inputs(args, kwargs))
            if device_op and func.namespace in _C10D:
                _cuda.unsupported("a collective inside a CUDA graph capture")()
            out = self._run(func, args, kwargs)
            if device_op and func is not aten.record_stream.default:
                _noted(func, args, kwargs, out)
            return out
        return self._run(func, args, kwargs)

    def _run(self, func, args, kwargs):
        ins = _inputs(args, kwargs)
        dev_in = any(k in _dev for k in ins)
        d = kwargs.get("device")
        if d is not None:
            if _is_cuda(d):  # a factory or a host-to-device copy
                _cuda.STATE.use_device(d)
                kw = dict(kwargs)
                kw["device"] = _CPU
                kw.pop("pin_memory", None)
                nb = kw.get("non_blocking", False)
                if func is aten._to_copy.default and not dev_in and not nb:
                    _cuda.STATE.host_reads_current_stream()  # a blocking host-to-device copy
                out = func(*args, **kw)
                _register_new(out, ins)
                return out
            if func is aten._to_copy.default and dev_in:  # device to host
                if not kwargs.get("non_blocking"):
                    _cuda.STATE.host_reads_current_stream()
                    return func(*args, **kwargs)
                # A non-blocking copy to the host lands in pinned memory, as aten's
                # ``_to_copy`` allocates it on a GPU: the host must synchronize before
                # it reads the result.
                return _pinned(func(*args, **kwargs))
            # A factory that names the host (``x.new_empty(0, device="cpu")``, ``empty_like(x,
            # device="cpu")``) makes host memory, whatever tensor lends it its shape.
            dev_in = False
        if dev_in:
            if func.namespace in _C10D:  # a collective: as ProcessGroupNCCL runs it
                return _dist.run(func, args, kwargs, _register_new, ins)
            if func is aten.record_stream.default:
                t, s = args
                ptr = _dev[key(t)]
                if ptr:  # an empty storage has no block (CUDA: nothing to do)
                    _cuda.STATE.record_stream(ptr, int(s.stream_id))
                return None
            if func in _HOST_READS:  # a blocking device-to-host read
                _cuda.STATE.host_reads_current_stream()
                return func(*args, **kwargs)
            if func is aten.copy_.default:
                nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
                if not nb and ((ins[0] in _dev) != (ins[1] in _dev)):
                    _cuda.STATE.host_reads_current_stream()
                return func(*args, **kwargs)
            out = func(*args, **kwargs)
            _register_new(out, ins)
            return out
        if func in _PIN:
            return _pinned(args[0].clone())  # pinned host memory is host memory
        if func is aten.is_pinned.default:
            return is_pinned(args[0])
        if kwargs.get("pin_memory"):
            kw = dict(kwargs)
            kw["pin_memory"] = False
            return _pinned(func(*args, **kw))
        if func is aten.record_stream.default:
            return None  # a host tensor: CUDA rejects it, nothing to model
        out = func(*args, **kwargs)
        if not ins and getattr(_scope, "depth", 0):
            _register_new(out, ins)
        return out
