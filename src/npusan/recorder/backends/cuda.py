"""CUDA adapter: ``torch.cuda._gpu_trace`` hooks routed to the recorder.

What the hooks give (torch >= 2.4, checked against torch 2.13's ``torch/cuda/_gpu_trace.py``
and the C++ callers in c10/cuda and the caching allocator): raw ints only -- an event
(``cudaEvent_t``), a stream (``cudaStream_t``), a block pointer -- and never a device. Each
C++ caller holds a device guard for the object's device while it fires (event record/wait,
stream synchronize, pool-stream creation), and the allocator fires on the device it
allocates on, so the calling thread's current device is the right one. The allocation
hook passes neither the size nor the stream: the stream is the calling thread's current
stream on that device (which is what the allocator used); the size is left unknown.

The default stream's handle is 0 on every device (1 and 2 are the legacy and per-thread
default streams), so streams are named ``(device, handle)``.

``torch._C._activate_gpu_trace()`` cannot be undone and registries cannot be emptied, so
the forwarding functions are registered once per process (they live on the registry
module) and forward to whichever recorder is installed, or to nothing.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from ..host_memory import HostWatch
from . import host_readers
from .graphs import patch_graphs
from .base import Backend, RecorderCallbacks
from .hooks import COMMON_HOOK_NAMES, TraceHooks
from .queries import forward_event_query, forward_stream_query, wrap_query

#: Attribute set on the registry module holding our forwarder (registered at most once).
_HOOKS_ATTR = "_npusan_cuda_hooks"
#: Handles that name a stream on every device: 0 (the NULL stream, PyTorch's default),
#: 1 (cudaStreamLegacy), 2 (cudaStreamPerThread).
_SHARED_HANDLES = 2

#: The ten hooks torch exposes; the forwarder has a method of the same name for each.
HOOK_NAMES: Tuple[str, ...] = COMMON_HOOK_NAMES


class _CudaHooks(TraceHooks):
    """The functions registered with ``torch.cuda._gpu_trace``.

    Handles 0-2 name a stream on every device, so their device is never cached: it is the
    calling thread's current device (the C++ callers hold a device guard).
    """

    def _dev(self, handle: int) -> int:
        if handle > _SHARED_HANDLES:
            d = self.dev_of.get(handle)
            if d is not None:
                return d
        return self.get_device()

    def _learn_device(self, handle: int, device: int) -> None:
        if handle > _SHARED_HANDLES:
            self.dev_of[handle] = device


def _pinned(t: Any) -> bool:
    """Whether a host tensor lies in pinned (page-locked) memory."""
    return t.is_cpu and t.is_pinned()


def _torch() -> Any:
    import torch

    return torch


def hooks_for(trace_mod: Any, get_device: Callable[[], int], get_stream: Callable[[int], int]) -> _CudaHooks:
    """The forwarder registered on ``trace_mod``, registering a new one the first time."""
    hooks = getattr(trace_mod, _HOOKS_ATTR, None)
    if hooks is None:
        hooks = _CudaHooks(get_device, get_stream)
        for name in HOOK_NAMES:
            getattr(trace_mod, "register_callback_for_" + name)(getattr(hooks, name))
        setattr(trace_mod, _HOOKS_ATTR, hooks)
    else:
        hooks.get_device, hooks.get_stream = get_device, get_stream
    return hooks


class CudaBackend(Backend):
    """CUDA streams, events and caching-allocator blocks, via the GPU trace hooks.

    There is no kernel-launch hook and no record_stream hook on CUDA: both come from the
    recorder's dispatch mode (``aten.record_stream`` carries the tensor and the stream).
    Nor is there one for ``Event.query``/``Stream.query``: their methods are wrapped
    (:mod:`.queries`). Pinned host memory a stream copies from or to is watched
    (:mod:`..host_memory`): pinned means ``t.is_cpu and t.is_pinned()``.
    """

    name = "cuda"
    #: CUDA has no native record_stream hook: the dispatch mode must report it.
    native_record_stream = False

    def __init__(self) -> None:
        torch = _torch()
        self._torch = torch
        C = torch._C
        # Direct C accessors: torch.cuda.current_device() adds a lazy-init check per call.
        self._get_device: Callable[[], int] = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
        raw = getattr(C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # very old torch: slower, but correct
            raw = lambda d: torch.cuda.current_stream(d).cuda_stream  # noqa: E731
        self._get_stream: Callable[[int], int] = raw
        self._rec: Optional[RecorderCallbacks] = None
        self._readers: Optional[dict] = None  # torch.Tensor host readers wrapped while recording
        self._hooks: Optional[_CudaHooks] = None
        self._handles: Dict[Tuple[int, int], int] = {}

    @classmethod
    def available(cls) -> bool:
        try:
            torch = _torch()
            return bool(torch.cuda.is_available()) and hasattr(torch._C, "_activate_gpu_trace")
        except Exception:
            return False

    def install(self, recorder: RecorderCallbacks) -> None:
        trace_mod = importlib.import_module("torch.cuda._gpu_trace")
        hooks = hooks_for(trace_mod, self._get_device, self._get_stream)
        hooks.target = recorder
        self._hooks = hooks
        cuda = self._torch.cuda
        wrap_query(cuda.Event, forward_event_query(hooks, lambda ev: getattr(ev, "cuda_event", 0)))
        wrap_query(cuda.Stream, forward_stream_query(hooks, self.stream_key))
        self.host_watch = HostWatch(_pinned)
        self._rec = recorder
        self._readers = host_readers.patch(self, None)
        # Idempotent (the C++ side keeps the first interpreter); also fine when CSAN
        # already activated it: our callbacks sit next to CSAN's.
        self._torch._C._activate_gpu_trace()
        try:
            graphs = importlib.import_module("torch.cuda.graphs")
            patch_graphs(getattr(graphs, "CUDAGraph", None), hooks)
        except Exception:  # (no graphs in this torch: nothing to patch)
            pass

    def uninstall(self) -> None:
        host_readers.unpatch(self._readers)
        self._readers = None
        self._rec = None
        self.host_watch = None
        if self._hooks is not None:
            self._hooks.target = None
            self._hooks = None

    def current_device(self) -> int:
        return self._get_device()

    def current_stream(self, device: int) -> int:
        return self._get_stream(device)

    def default_streams(self) -> Dict[int, int]:
        return {d: 0 for d in range(self.device_count())}

    def device_count(self) -> int:
        try:
            return int(self._torch.cuda.device_count())
        except Exception:
            return 0

    def stream_key(self, stream_obj: Any) -> Tuple[int, int]:
        """``(device, cudaStream_t)`` of a ``torch.cuda.Stream`` or a CUDA ``torch.Stream``.

        ``aten.record_stream`` hands the dispatch mode a plain ``torch.Stream`` (stream id,
        device index, device type) with no ``cuda_stream``; it is rebuilt as a
        ``torch.cuda.Stream`` once per distinct stream and the handle cached (pool
        streams live as long as the process).
        """
        dev = stream_obj.device_index
        if dev is None or dev < 0:
            dev = self._get_device()
        handle = getattr(stream_obj, "cuda_stream", None)
        if handle is None:
            key = (dev, stream_obj.stream_id)
            handle = self._handles.get(key)
            if handle is None:
                handle = self._torch.cuda.Stream(
                    stream_id=stream_obj.stream_id, device_index=dev, device_type=stream_obj.device_type
                ).cuda_stream
                self._handles[key] = handle
        return int(dev), int(handle)

    def is_device_tensor(self, t: Any) -> bool:
        return t.is_cuda

    def tensor_device(self, t: Any) -> int:
        return t.get_device()
