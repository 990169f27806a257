"""An emulated Ascend NPU: the ``torch_npu`` package a program imports, on the CUDA emulator.

``--emulate npu`` runs an unmodified torch_npu program (``import torch_npu``,
``device="npu"``, ``.npu()``, ``torch.npu.Stream``/``Event``, ``record_stream``) on the CPU.
The device runtime is the one :mod:`.cuda` emulates -- one device, streams, events,
the caching-allocator model, device-ness per storage, backward streams -- with what
differs on an NPU:

* the device type is ``npu``: torch's PrivateUse1 slot renamed (as torch_npu does), so
  ``torch.device("npu")`` parses and factories with ``device="npu"`` reach the
  emulation mode; ``torch.npu`` is this module's ``torch_npu.npu``;
* the hooks are torch_npu's: ``torch_npu.utils._npu_trace.register_callback_for_npu_*(cb,
  cb_name)`` registries, fired only after ``torch_npu._C._activate_npu_trace(0)`` (stream
  mode, first activation wins), plus ``record_stream(ptr, stream)`` fired from the
  allocator at every ``record_stream``;
* stream ids are ``aclrtStream`` pointers, the default stream's is not 0, and the
  current one is read with ``torch_npu._C._npu_getCurrentRawStreamNoWait(device)``;
* the allocator adds 32 bytes to each request before rounding (torch_npu's
  ``round_size``); its other rules are CUDA's;
* graphs (``NPUGraph``, ``graph``, ``make_graphed_callables``) are the emulated CUDA
  graphs under torch_npu's names (:mod:`.npu_graphs`).

So npusan's NPU backend records an emulated run exactly as it records one on Ascend
hardware. No real ``torch_npu`` is ever imported: the modules built here are put in
``sys.modules`` under the real names before the program imports them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from . import cuda as _cuda
from . import tensor as _tensor
from .allocator import NPU_PAD, CachingAllocator

#: ``c10::DeviceType::PrivateUse1``, the device type torch_npu's streams carry.
PRIVATEUSE1 = 20
#: The default stream's ``aclrtStream`` (never 0 on an NPU; side streams are
#: ``0x1000 + 16 * n``, n >= 1).
DEFAULT_HANDLE = 0x1000
#: Sanitizer modes of ``_activate_npu_trace`` (0: stream hooks, 1: kernel hooks only).
STREAM_MODE = 0

STATE = _cuda.STATE
HOOKS = (
    "event_creation", "event_deletion", "event_record", "event_wait", "memory_allocation",
    "memory_deallocation", "stream_creation", "device_synchronization", "stream_synchronization",
    "event_synchronization", "record_stream", "erase_stream",
)
#: hook suffix -> registry name in ``torch_npu.utils._npu_trace`` (the CUDA runtime fires
#: ``<Name>Callbacks``; torch_npu's registry for it is ``NPU<Name>Callbacks``).
_REGISTRY = {h: "NPU" + "".join(w.capitalize() for w in h.split("_")) + "Callbacks" for h in HOOKS}


class CallbackRegistry:
    """A registry of ``(cb, cb_name)`` pairs, as in torch_npu: an exception from one
    callback is logged and the others still run."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.callback_list: List[Tuple[Callable[..., Any], str]] = []

    def add_callback(self, cb: Callable[..., Any], cb_name: str) -> None:
        self.callback_list.append((cb, cb_name))

    def fire_callbacks(self, *args: Any) -> None:
        for cb, cb_name in self.callback_list:
            try:
                cb(*args)
            except Exception:
                import logging

                logging.getLogger("torch_npu.utils._npu_trace").exception(
                    "Exception in callback %s for %s registered with NPU trace", cb_name, self.name)


class _Silent:
    def fire_callbacks(self, *args: Any) -> None:
        pass


class _Trace:
    """What the CUDA runtime fires through (its ``_trace``): the NPU registries once the
    trace is activated in stream mode, nothing before (as ``NPUTrace::getTrace()`` is null)."""

    def __init__(self, mod: types.ModuleType) -> None:
        self.mod = mod
        self.mode: Optional[int] = None

    def __getattr__(self, name: str) -> Any:
        if self.mode != STREAM_MODE:
            return _SILENT
        return getattr(self.mod, "NPU" + name)


_SILENT = _Silent()
_trace: Optional[_Trace] = None


class Stream(_cuda.Stream):
    """``torch_npu.npu.Stream``: a ``torch.Stream`` of device type npu (PrivateUse1) whose
    ``stream_id`` is its ``aclrtStream`` (``npu_stream``)."""

    def __new__(cls, device: Any = None, priority: int = 0, stream_id: Optional[int] = None,
                device_index: Optional[int] = None, device_type: Optional[int] = None, **_: Any) -> "Stream":
        created = stream_id is None
        if created:
            stream_id = STATE.new_handle()
        self = torch.Stream.__new__(cls, stream_id=stream_id, device_index=0, device_type=PRIVATEUSE1)
        if created:
            _cuda._fire("StreamCreationCallbacks", stream_id)
        return self

    @property
    def npu_stream(self) -> int:
        return self.stream_id

    def __eq__(self, o: object) -> bool:
        return isinstance(o, torch.Stream) and o.stream_id == self.stream_id and o.device_type == PRIVATEUSE1

    def __hash__(self) -> int:
        return hash((self.stream_id, PRIVATEUSE1))

    def __repr__(self) -> str:
        return f"<torch_npu.npu.Stream device=npu:0 npu_stream={self.stream_id:#x}>"


class Event(_cuda.Event):
    """``torch_npu.npu.Event`` (created at its first record, as ``NPUEvent`` is)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        if interprocess:
            _cuda.unsupported("torch.npu.Event(interprocess=True) (IPC)")()
        super().__init__(enable_timing, blocking)

    @property
    def npu_event(self) -> int:
        return self._h or 0


def _module(name: str, attrs: Dict[str, Any], doc: str) -> types.ModuleType:
    m = types.ModuleType(name, doc)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    m.__dict__.update(attrs)
    return m


def _trace_module() -> types.ModuleType:
    attrs: Dict[str, Any] = {"CallbackRegistry": CallbackRegistry}
    for kind in ("acl_start_execution", "acl_finish_execution"):
        reg = CallbackRegistry(f"[kernel check] NPU {kind.replace('_', ' ')}")
        attrs["NPUACL" + ("Start" if "start" in kind else "Finish") + "ExecuteCallbacks"] = reg
        attrs["register_callback_for_" + kind] = reg.add_callback
    for hook, reg_name in _REGISTRY.items():
        reg = CallbackRegistry("NPU " + hook.replace("_", " "))
        attrs[reg_name] = reg
        attrs["register_callback_for_npu_" + hook] = reg.add_callback
    return _module("torch_npu.utils._npu_trace", attrs, "torch_npu's trace-hook registries (emulated).")


def _set_stream(stream_id: int = 0, device_index: int = 0, device_type: int = PRIVATEUSE1) -> None:
    """``_npu_setStream``: make the stream with that id current (no backward-range note:
    the NPU backend only peeks at a stream's raw handle this way and puts it back)."""
    STATE.tls.stream = _cuda.DEFAULT if stream_id == _cuda.DEFAULT.stream_id else Stream(stream_id=stream_id)


def _c_module() -> types.ModuleType:
    def activate(mode: int) -> None:
        assert _trace is not None
        if _trace.mode is None:  # NPUTrace::setTrace is call_once: the first mode wins
            _trace.mode = int(mode)

    def stream_tuple(s: torch.Stream) -> Tuple[int, int, int]:
        return (s.stream_id, 0, PRIVATEUSE1)

    attrs = {
        "_activate_npu_trace": activate,
        "_npu_getDevice": lambda: 0,
        "_npu_setDevice": lambda device: None,
        "_npu_getDeviceCount": lambda: 1,
        "_npu_getCurrentStream": lambda device=0: stream_tuple(STATE.current()),
        "_npu_getDefaultStream": lambda device=0: stream_tuple(_cuda.DEFAULT),
        "_npu_setStream": _set_stream,
        "_npu_getCurrentRawStreamNoWait": STATE.current_handle,
        "_npu_getCurrentRawStream": STATE.current_handle,
    }
    return _module("torch_npu._C", attrs, "torch_npu's C accessors (emulated).")


class _Props:
    name = "npusan emulated Ascend NPU"
    total_memory = 64 << 30

    def __repr__(self) -> str:
        return f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB)"


@contextlib.contextmanager
def _stream(s: Optional[Stream]) -> Iterator[Optional[Stream]]:
    with _cuda.StreamContext(s):
        yield s


def _npu_module() -> types.ModuleType:
    from . import npu_graphs

    attrs = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "get_device_name": lambda device=None: _Props.name,
        "get_device_properties": lambda device=None: _Props(),
        "Stream": Stream,
        "Event": Event,
        "StreamContext": _cuda.StreamContext,
        "stream": _stream,
        "current_stream": lambda device=None: STATE.current(),
        "default_stream": lambda device=None: _cuda.DEFAULT,
        "set_stream": _cuda.set_stream,
        "synchronize": _cuda.synchronize,
        "memory_allocated": lambda device=None: STATE.allocator.allocated_bytes,
        "max_memory_allocated": lambda device=None: STATE.allocator.peak_allocated,
        "memory_reserved": lambda device=None: STATE.allocator.reserved_bytes,
        "max_memory_reserved": lambda device=None: STATE.allocator.peak_reserved,
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: STATE.allocator.empty_cache(),
        "manual_seed": lambda seed: None,  # emulated tensors draw from the CPU generator
        "manual_seed_all": lambda seed: None,
        "_is_in_bad_fork": lambda: False,  # torch.manual_seed asks the device module
        # torch.autocast("npu") asks for these; it then runs (the CPU ops keep their dtype)
        "get_amp_supported_dtype": lambda: [torch.float16, torch.bfloat16],
        "is_bf16_supported": lambda: True,
        "NPUGraph": npu_graphs.NPUGraph,
        "graph": npu_graphs.graph,
        "graph_pool_handle": npu_graphs.graph_pool_handle,
        "is_current_stream_capturing": npu_graphs.is_current_stream_capturing,
        "make_graphed_callables": npu_graphs.make_graphed_callables,
    }
    return _module("torch_npu.npu", attrs, "torch_npu.npu (emulated): one NPU on the CPU.")


def _hccl_unsupported(*_a: Any, **_k: Any) -> Any:
    raise _cuda.Unsupported(
        "npusan --emulate npu: the hccl process-group backend is not emulated "
        "(record a distributed NPU program on Ascend hardware)")


def _register_hccl() -> None:
    """``init_process_group("hccl")`` stops with one line (HCCL is not emulated)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and "hccl" not in dist.Backend.backend_list:
            dist.Backend.register_backend("hccl", _hccl_unsupported, devices=["npu"])
    except Exception:  # a torch without distributed: nothing to refuse
        pass


def _tensor_methods() -> None:
    """What torch_npu adds to ``torch.Tensor`` (``.npu()``, ``is_npu``) and ``nn.Module``
    (``.npu()``)."""
    T = torch.Tensor

    def npu(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
            memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        return self.to(_tensor.DEVICE, non_blocking=non_blocking, memory_format=memory_format)

    def module_npu(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
        return self._apply(lambda t: npu(t, device))

    T.npu = npu  # type: ignore[attr-defined]
    T.is_npu = property(lambda self: _tensor.is_device(self))  # type: ignore[attr-defined]
    torch.nn.Module.npu = module_npu  # type: ignore[attr-defined]


def install() -> None:
    """Put the emulated NPU in place of CUDA's device face (before the shared tensor
    patches, the emulation mode and the backward model are installed)."""
    global _trace
    real = sys.modules.get("torch_npu")
    if real is not None and not getattr(real, "_npusan_emulated", False):
        raise RuntimeError("npusan --emulate npu: torch_npu is already imported in this process; "
                           "record it without --emulate")
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    _cuda.KIND = "npu"
    _cuda.DEVICE = _tensor.DEVICE = torch.device("npu", 0)
    STATE.allocator = CachingAllocator(pad=NPU_PAD)
    _cuda.DEFAULT = Stream(stream_id=DEFAULT_HANDLE)

    trace_mod = _trace_module()
    _trace = _Trace(trace_mod)
    _cuda._trace = _trace
    npu_mod = _npu_module()
    c_mod = _c_module()
    utils_mod = _module("torch_npu.utils", {"_npu_trace": trace_mod}, "torch_npu.utils (emulated).")
    root = _module("torch_npu", {"npu": npu_mod, "_C": c_mod, "utils": utils_mod,
                                 "__version__": "2.5.1+npusan.emulated", "_npusan_emulated": True},
                   "torch_npu, emulated by npusan (--emulate npu): one Ascend NPU on the CPU.")
    for m in (root, npu_mod, c_mod, utils_mod, trace_mod):
        sys.modules[m.__name__] = m
    torch._register_device_module("npu", npu_mod)

    orig_record_stream = STATE.record_stream

    def record_stream(ptr: int, handle: int) -> None:
        """The NPU allocator reports each ``record_stream`` through its trace hook."""
        orig_record_stream(ptr, handle)
        _cuda._fire("RecordStreamCallbacks", ptr, handle)

    STATE.record_stream = record_stream  # type: ignore[method-assign]
    _tensor_methods()
    accelerator = importlib.import_module("torch.accelerator")
    for name, fn in _cuda.accelerator_api().items():
        setattr(accelerator, name, fn)
    accelerator.current_accelerator = lambda check_available=False: torch.device("npu")
    _register_hccl()
