"""Emulated CUDA tensors: CPU tensors that report ``device='cuda:0'`` and a virtual address.

An :class:`EmuTensor` is a ``_make_wrapper_subclass`` tensor holding a CPU tensor
(``elem``); every op runs on the ``elem`` s in :class:`EmulationMode` (or the subclass's own
``__torch_dispatch__`` in threads without the mode) and the results are wrapped again.
Each CPU storage owns one block of the emulated caching allocator (:class:`Storage`),
shared by every view of it; the block is freed when the last wrapper dies, as CUDA frees a
block when its storage's refcount drops. ``untyped_storage()`` answers with the block's
virtual address, so the recorder reads emulated tensors exactly as it reads real ones.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import cuda as _cuda

aten = torch.ops.aten


class Storage:
    """One allocator block backing one CPU storage (all its views share it)."""

    __slots__ = ("ptr", "nbytes", "cpu_ptr", "__weakref__")

    def __init__(self, nbytes: int, cpu_ptr: int) -> None:
        self.nbytes = nbytes
        self.cpu_ptr = cpu_ptr
        self.ptr = _cuda.STATE.alloc(nbytes) if nbytes else 0

    def data_ptr(self) -> int:
        return self.ptr

    def size(self) -> int:
        return self.nbytes

    def __del__(self) -> None:
        try:
            _by_cpu.pop(self.cpu_ptr, None)
            if self.ptr:
                _cuda.STATE.free(self.ptr)
        except Exception:  # interpreter shutdown
            pass


#: CPU storage address -> its live Storage (a view's output finds its base's block).
_by_cpu: "weakref.WeakValueDictionary[int, Storage]" = weakref.WeakValueDictionary()


class _StorageView:
    """What ``untyped_storage()`` returns for an emulated tensor: the recorder reads
    ``data_ptr()`` and ``nbytes()``."""

    __slots__ = ("_s",)

    def __init__(self, s: Storage) -> None:
        self._s = s

    def data_ptr(self) -> int:
        return self._s.ptr

    def nbytes(self) -> int:
        return self._s.nbytes

    def size(self) -> int:
        return self._s.nbytes

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)


class EmuTensor(torch.Tensor):
    elem: torch.Tensor
    _st: Storage

    @staticmethod
    def __new__(cls, elem: torch.Tensor, st: Optional[Storage] = None) -> "EmuTensor":
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=_cuda.DEVICE, requires_grad=elem.requires_grad)
        r.elem = elem
        if st is None:
            ust = elem.untyped_storage()
            cp = ust.data_ptr()
            st = _by_cpu.get(cp) if cp else None
            if st is None:
                st = Storage(ust.nbytes(), cp)
                if cp:
                    _by_cpu[cp] = st
        r._st = st
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    def untyped_storage(self) -> Any:  # type: ignore[override]
        return _StorageView(self._st)

    def data_ptr(self) -> int:  # type: ignore[override]
        return self._st.ptr + self.storage_offset() * self.element_size()

    def __repr__(self, *, tensor_contents=None) -> str:  # type: ignore[override]
        return repr(self.elem).replace("tensor(", "tensor(", 1)[:-1] + ", device='cuda:0')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_op(func, args, kwargs or {})


def _is_cuda_device(d: Any) -> bool:
    if d is None:
        return False
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d.startswith("cuda")
    return False


def _unwrap(x: Any) -> Any:
    if isinstance(x, EmuTensor):
        return x.elem
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(y) for y in x)
    return x


def _has_emu(args: Any) -> bool:
    for a in args:
        if isinstance(a, EmuTensor):
            return True
        if isinstance(a, (list, tuple)) and a and any(isinstance(y, EmuTensor) for y in a):
            return True
    return False


def _wrap(out: Any, ins: Dict[int, EmuTensor]) -> Any:
    if isinstance(out, torch.Tensor) and not isinstance(out, EmuTensor):
        same = ins.get(id(out))
        return same if same is not None else EmuTensor(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap(y, ins) for y in out)
    return out


_HOST_READS = {aten._local_scalar_dense.default, aten.equal.default, aten.is_nonzero.default}


def run_op(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run one op of emulated tensors on their CPU payloads."""
    if func is aten.record_stream.default:
        t, s = args
        _cuda.STATE.record_stream(t._st.ptr, int(s.stream_id))
        return None
    if func in _HOST_READS:  # a blocking device-to-host copy
        _cuda.STATE.host_reads_current_stream()
        return func(*_unwrap(args), **kwargs)
    if func is aten._to_copy.default:
        dev = kwargs.get("device")
        src = args[0]
        if dev is not None and not _is_cuda_device(dev):  # to the host
            if isinstance(src, EmuTensor) and not kwargs.get("non_blocking"):
                _cuda.STATE.host_reads_current_stream()
            kw = dict(kwargs)
            kw.pop("non_blocking", None)
            return func(_unwrap(src), **kw)
        kw = dict(kwargs)
        kw["device"] = torch.device("cpu")
        if not isinstance(src, EmuTensor) and not kw.pop("non_blocking", False):
            _cuda.STATE.host_reads_current_stream()  # a blocking host-to-device copy
        kw.pop("non_blocking", None)
        kw.pop("pin_memory", None)
        return EmuTensor(func(_unwrap(src), **kw))
    if func is aten.copy_.default:
        dst, src = args[0], args[1]
        nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
        if isinstance(dst, EmuTensor) != isinstance(src, EmuTensor) and not nb:
            _cuda.STATE.host_reads_current_stream()
        dst.elem.copy_(_unwrap(src)) if isinstance(dst, EmuTensor) else dst.copy_(_unwrap(src))
        return dst
    ins = {}
    for a in args:
        if isinstance(a, EmuTensor):
            ins[id(a.elem)] = a
    kw = kwargs
    if "device" in kwargs:
        kw = dict(kwargs)
        kw["device"] = torch.device("cpu")
    out = func(*_unwrap(args), **_unwrap_kw(kw))
    return _wrap(out, ins)


def _unwrap_kw(kw: dict) -> dict:
    if not kw:
        return kw
    return {k: _unwrap(v) for k, v in kw.items()}


_PIN = {aten._pin_memory.default}


class EmulationMode(TorchDispatchMode):
    """Below the recorder's mode: factories with ``device='cuda'`` make emulated tensors,
    ops on emulated tensors run on their payloads, pinned host memory is a host tensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _has_emu(args) or _has_emu(kwargs.values()):
            return run_op(func, args, kwargs)
        dev = kwargs.get("device")
        if dev is not None and _is_cuda_device(dev):
            kw = dict(kwargs)
            kw["device"] = torch.device("cpu")
            kw.pop("pin_memory", None)
            return EmuTensor(func(*args, **kw))
        if func in _PIN:
            return _pinned(args[0].clone())  # pinned host memory is host memory
        if func is aten.is_pinned.default:
            return bool(getattr(args[0], "_npusan_pinned", False))
        if kwargs.get("pin_memory"):
            kw = dict(kwargs)
            kw["pin_memory"] = False
            return _pinned(func(*args, **kw))
        return func(*args, **kwargs)


def _pinned(t: torch.Tensor) -> torch.Tensor:
    t._npusan_pinned = True  # type: ignore[attr-defined]
    return t
