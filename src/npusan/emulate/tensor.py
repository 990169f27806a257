"""Which CPU storages are emulated device memory, and the tensor methods that say so.

Every emulated CUDA tensor is a *real CPU tensor* at the C++ level: autograd, optimizers,
``_foreach`` kernels and every C++ path run on it natively (a tensor that C++ believed to
be on ``cuda`` would need a CUDA accelerator that a CPU-only torch cannot provide).
Device-ness is a property of the *storage*: this registry maps a storage (its
``StorageImpl`` address, ``_cdata``) to the emulated caching-allocator block backing it,
so views, ``.grad`` tensors and tensors made inside C++ (gradients, optimizer state) are
device tensors exactly when their storage was registered. :mod:`.mode` registers the
outputs of ops on device tensors and of factories with ``device="cuda"``.

The Python face of a device tensor is patched onto ``torch.Tensor`` (so a ``Parameter``
moved by ``Module.to`` answers too): ``device``, ``is_cuda``, ``is_cpu``, ``get_device()`` and
``data_ptr()`` answer as CUDA with the virtual address, and ``UntypedStorage.data_ptr()``
/ ``.device`` do the same for the storage -- which is where npusan's recorder reads
addresses, so it records emulated tensors as it records real ones. ``to``/``cuda``/``cpu``
are patched because C++ sees every tensor on the CPU: moving a device tensor "to the CPU"
must copy it to a host tensor, moving it "to cuda" must not copy.

A block is freed when its storage dies (a ``weakref.finalize`` on the storage object,
which torch keeps alive as long as the ``StorageImpl`` is), as CUDA frees a block when
its storage's refcount drops.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, Optional

import torch

from . import cuda as _cuda

#: ``StorageImpl`` address -> virtual address of its block (0 for an empty storage).
_dev: Dict[int, int] = {}
#: The emulated device (``npu:0`` under ``--emulate npu``, set before :func:`patch`).
DEVICE = torch.device("cuda", 0)
_CPU = torch.device("cpu")


def _release(cdata: int) -> None:
    # The storage object lives exactly as long as its StorageImpl, so ``cdata`` cannot
    # have been reused by another storage before this runs.
    ptr = _dev.pop(cdata, None)
    if ptr:
        try:
            _cuda.STATE.free(ptr)
        except Exception:  # interpreter shutdown
            pass


def register(t: torch.Tensor) -> None:
    """Make ``t``'s storage device memory (a block of the emulated allocator)."""
    if storage_key(t):
        register_storage(_untyped_storage(t))


_untyped_storage = torch._C.TensorBase.untyped_storage


def storage_key(t: torch.Tensor) -> int:
    """The ``StorageImpl`` address of ``t``'s storage; 0 for a tensor without one (sparse,
    nested...: host tensors)."""
    try:
        return _untyped_storage(t)._cdata
    except (RuntimeError, NotImplementedError):
        return 0


def register_storage(st: Any) -> None:
    """Make an untyped storage device memory (``torch.load`` of a ``cuda`` checkpoint)."""
    cd = st._cdata
    if cd in _dev:
        return
    n = st.nbytes()
    _dev[cd] = _cuda.STATE.alloc(n) if n else 0
    weakref.finalize(st, _release, cd).atexit = False


def _load_cuda(obj: Any, location: str) -> Any:
    """``torch.load`` of a storage saved from ``cuda``: a host storage that is device memory
    (torch's own deserializer would call into the CUDA runtime)."""
    if not location.startswith(DEVICE.type):
        return None
    if getattr(obj, "_torch_load_uninitialized", False):
        obj = torch.UntypedStorage(obj.nbytes())
    register_storage(obj)  # a fresh storage the loader made: it becomes the device copy
    return obj


def is_device(t: Any) -> bool:
    return storage_key(t) in _dev


def storage_address(st: Any) -> Optional[int]:
    """The virtual address of a device storage; None for host memory."""
    return _dev.get(st._cdata)


def resized(st: Any, old_ptr: int) -> None:
    """A device storage was resized in place (``untyped_storage().resize_(n)``, how FSDP
    frees and re-materializes parameters): its old block is freed and, if it still has
    bytes, a new one allocated for the new size."""
    cd = st._cdata
    if old_ptr:
        _cuda.STATE.free(old_ptr)
    n = st.nbytes()
    ptr = _cuda.STATE.alloc(n) if n else 0
    _dev[cd] = ptr  # its finalizer frees whatever block it holds when it dies


def patch() -> None:
    """The Python face of device tensors and storages (see the module docstring)."""
    T = torch.Tensor
    S = torch.UntypedStorage
    base_device = torch._C.TensorBase.device
    base_get_device = torch._C.TensorBase.get_device
    base_is_cpu = torch._C.TensorBase.is_cpu
    base_data_ptr = torch._C.TensorBase.data_ptr
    base_to = torch._C.TensorBase.to
    st_data_ptr = torch._C.StorageBase.data_ptr
    st_device = torch._C.StorageBase.device
    st_resize = torch._C.StorageBase.resize_
    parse_to = torch._C._nn._parse_to
    aten_to_copy = torch.ops.aten._to_copy.default
    dev = _dev
    key = storage_key

    def device(self: torch.Tensor) -> torch.device:
        if key(self) in dev:
            return _cuda.STATE.torch_device()
        return base_device.__get__(self)

    def is_cuda(self: torch.Tensor) -> bool:
        return key(self) in dev and DEVICE.type == "cuda"

    def is_cpu(self: torch.Tensor) -> bool:
        return key(self) not in dev and base_is_cpu.__get__(self)

    def get_device(self: torch.Tensor) -> int:
        if key(self) in dev:
            return _cuda.STATE.device
        return base_get_device(self)

    def data_ptr(self: torch.Tensor) -> int:
        p = dev.get(key(self))
        if p is None:
            return base_data_ptr(self)
        return p + self.storage_offset() * self.element_size() if p else 0

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        other = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("other")
        if isinstance(other, torch.Tensor):  # to(other): its device as this module reports it
            kw = {k: v for k, v in kwargs.items() if k != "other"}
            return to(self, device(other), other.dtype, *args[1:], **kw)
        copy = bool(kwargs.get("copy", False))
        d, dtype, nb, fmt = parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})
        if d is None:
            return base_to(self, *args, **kwargs)  # dtype only: C++ decides, the mode follows
        fmt = fmt if fmt is not None else torch.preserve_format
        if key(self) not in dev:
            if d.type != DEVICE.type:
                return base_to(self, *args, **kwargs)
            # Host to device: straight to the copy op (C++'s ``to`` would look for a CUDA
            # runtime to check pinned memory); the mode makes its output device memory.
            return aten_to_copy(self, dtype=dtype or self.dtype, device=d, non_blocking=nb,
                                memory_format=fmt)
        if d.type == DEVICE.type:  # already there: a copy only if dtype/format/copy ask for one
            return base_to(self, dtype or self.dtype, non_blocking=nb, copy=copy, memory_format=fmt)
        # To the host: C++ would alias (it is a CPU tensor); an explicit device makes the
        # copy that the emulation mode sees as a device-to-host copy.
        return base_to(self, d, dtype or self.dtype, non_blocking=nb, copy=True, memory_format=fmt)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        d = torch.device("cuda") if device is None else torch.device("cuda", _cuda._index(device))
        return to(self, d, non_blocking=non_blocking, memory_format=memory_format)

    def cpu(self: torch.Tensor, memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        return to(self, _CPU, memory_format=memory_format)

    def st_ptr(self: Any) -> int:
        p = dev.get(self._cdata)
        return st_data_ptr(self) if p is None else p

    def st_dev(self: Any) -> torch.device:
        return _cuda.STATE.torch_device() if self._cdata in dev else st_device.__get__(self)

    def st_resize_(self: Any, size: int) -> Any:
        old = dev.get(self._cdata)
        if old is None:
            return st_resize(self, size)
        out = st_resize(self, size)
        resized(self, old)
        return out

    def from_data(orig: Any) -> Any:
        """``torch.tensor``/``as_tensor`` build their tensor in C++ with the dispatch modes
        switched off, so ``device="cuda"`` never reaches the emulation mode: they build it
        on the host and copy it over (a blocking copy, as on a GPU)."""
        def make(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            d = kwargs.get("device")
            if d is None or torch.device(d).type != DEVICE.type:
                if kwargs.get("pin_memory"):  # C++ would ask for a pinned allocator: pin it here
                    kw = dict(kwargs)
                    kw.pop("pin_memory")
                    return orig(data, *args, **kw).pin_memory()
                return orig(data, *args, **kwargs)
            kw = dict(kwargs)
            kw["device"] = None
            rg = kw.pop("requires_grad", False)
            kw.pop("pin_memory", None)
            if isinstance(data, torch.Tensor) and key(data) in dev and orig is torch.as_tensor:
                return orig(data, *args, **kw)  # already on the device: as_tensor aliases
            t = to(orig(data, *args, **kw), torch.device(d))
            return t.requires_grad_() if rg else t
        make.__doc__ = orig.__doc__
        make.__name__ = orig.__name__
        return make

    torch.tensor = from_data(torch.tensor)
    torch.as_tensor = from_data(torch.as_tensor)
    # Saving needs nothing: a device storage's ``device`` is cuda, so torch tags it
    # "cuda:0" as a GPU run would; loading one comes here before torch's deserializer.
    torch.serialization.register_package(15, lambda obj: None, _load_cuda)
    T.device = property(device)  # type: ignore[assignment]
    T.is_cuda = property(is_cuda)  # type: ignore[assignment]
    T.is_cpu = property(is_cpu)  # type: ignore[assignment]
    T.get_device = get_device  # type: ignore[assignment]
    T.data_ptr = data_ptr  # type: ignore[assignment]
    T.to = to  # type: ignore[assignment]
    T.cuda = cuda  # type: ignore[assignment]
    T.cpu = cpu  # type: ignore[assignment]
    S.data_ptr = st_ptr  # type: ignore[assignment]
    S.device = property(st_dev)  # type: ignore[assignment]
    S.resize_ = st_resize_  # type: ignore[assignment]
