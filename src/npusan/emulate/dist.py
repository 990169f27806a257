"""``torch.distributed`` with ``backend="nccl"`` on the emulated device: gloo underneath,
ProcessGroupNCCL's stream semantics on top.

Emulated device tensors are CPU tensors at the C++ level, so a gloo process group carries
them as they are. The emulator makes every ``nccl`` in a backend configuration resolve to
gloo (for the ``cpu`` device type too, which is where C++ dispatches these tensors);
``dist.get_backend()`` still answers ``nccl``. What ProcessGroupNCCL does on the device
around each collective (see docs/collectives.md, and the per-version model
:class:`npusan.recorder.collectives.CommModel`, which the emulator shares with the
recorder) is fired through the same ``torch.cuda._gpu_trace`` hooks a GPU fires, so
npusan's CUDA backend records an emulated NCCL job exactly as a real one:

1. ``syncStream``: an event recorded on the current stream, waited on by the process
   group's communication stream of the device (one per process group, made at its first
   collective);
2. the collective runs -- at once, to completion (gloo's work is waited here, so its
   values are there when the end event is, as every emulated kernel's are);
3. ``record_stream`` of its tensors to the communication stream in the allocator model
   (torch < 2.8 without ``TORCH_NCCL_AVOID_RECORD_STREAMS``), else the tensors are kept
   alive until the Work is waited;
4. an end event recorded on the communication stream;
5. ``work.wait()``, ``work.get_future().wait()`` and ``wait_tensor`` make the current
   stream wait for the end event (the Work's future is a device future, see
   :mod:`.futures`: its ``then`` callbacks run on a pool stream that waited for it, and the
   DDP reducer waits for a communication hook's future at the end of backward). A collective that C++ launches and waits for itself (the
   DDP reducer in backward, DDP's constructor broadcasts) is waited at once, on the stream
   current at the launch.

With torch >= 2.8 an ``async_op=False`` collective runs on the current stream: none of
the above is fired. Point-to-point ops (``send``/``recv``) are not waited at launch (a
gloo send may wait for its receive): their values are there after ``work.wait()``.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any, Dict, List, Optional

import torch

from . import cuda as _cuda
from . import futures as _futures
from .tensor import _dev, storage_key

_lock = threading.Lock()
_comm: Dict[str, Any] = {}  # process group name -> its communication stream
_works: Dict[int, "_Pending"] = {}  # id(Work) -> pending (the Work is kept alive by it)
_storages: Dict[int, "_Pending"] = {}  # storage key of a functional output -> pending
_orig_work_wait: Any = None
_P2P = {"send", "recv", "batch_isend_irecv"}
_MAX_PENDING = 4096  # Works a program never waits: forget the oldest beyond this many

_CPP_WAITERS = re.compile(r"[\\/]torch[\\/](autograd|nn[\\/]parallel|distributed[\\/]utils\.py)")
_SKIP_FRAMES = re.compile(
    r"[\\/]npusan[\\/]|[\\/]torch[\\/](utils[\\/](_python_dispatch|_device)\.py|_ops\.py|overrides\.py"
    r"|_dynamo[\\/]|_compile\.py)")
#: Handlers of torch function and dispatch modes: the recorder re-calls each op from
#: Python, so every active torch function mode (``torch.set_default_device``'s, a user's)
#: runs between the recorder's frame and this one; none of them launched the collective.
_MODE_HANDLERS = frozenset({"__torch_function__", "__torch_dispatch__"})


class _Pending:
    __slots__ = ("end", "keep", "work")

    def __init__(self, end: Any, keep: List[torch.Tensor], work: Any = None) -> None:
        self.end = end  # the end event (an emulated torch.cuda.Event)
        self.keep = keep  # tensors kept alive until the wait (torch >= 2.8 / AVOID_RECORD_STREAMS)
        self.work = work


def _model() -> Any:
    from ..recorder.collectives import CommModel

    return CommModel.for_torch(torch.__version__)


def _waited_in_cpp() -> bool:
    """Whether C++ launched this collective and waits for it itself (no Python Work)."""
    f: Any = sys._getframe(1)
    while f is not None and (f.f_code.co_name in _MODE_HANDLERS or _SKIP_FRAMES.search(f.f_code.co_filename)):
        f = f.f_back
    return f is None or bool(_CPP_WAITERS.search(f.f_code.co_filename))


def _device_tensors(x: Any, into: List[torch.Tensor]) -> None:
    if isinstance(x, torch.Tensor):
        if storage_key(x) in _dev:
            into.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            _device_tensors(y, into)


def _comm_stream(group: str) -> Any:
    with _lock:
        s = _comm.get(group)
        if s is None:
            s = _comm[group] = _cuda.Stream()
        return s


def _finish(p: Optional[_Pending]) -> None:
    """A wait of the program: its current stream waits for the collective's end."""
    if p is None:
        return
    p.end.wait(_cuda.STATE.current())
    p.keep.clear()


def run(func: Any, args: tuple, kwargs: dict, register_new: Any, ins: list) -> Any:
    """Run the c10d op ``func`` (its device tensors are CPU tensors gloo can carry) as
    ProcessGroupNCCL runs it on the device."""
    from ..recorder.collectives import OUT, _bind, spec_of

    name = func._schema.name
    if name == "_c10d_functional::wait_tensor":
        with _lock:
            p = _storages.pop(storage_key(args[0]), None)
            if p is not None:
                for k in [k for k, v in _storages.items() if v is p]:
                    del _storages[k]
        _finish(p)
        return func(*args, **kwargs)
    spec = spec_of(name)
    if spec is None:
        out = func(*args, **kwargs)
        register_new(out, ins)
        return out
    model = _model()
    argv = _bind(func._schema, args, kwargs)
    async_op = argv.get("async_op", argv.get("asyncOp", True))
    on_comm = spec.functional or async_op is not False or not model.sync_on_current_stream
    cur = _cuda.STATE.current()
    out = func(*args, **kwargs)
    register_new(out, ins)  # functional outputs: made on the current stream, before the collective
    if not on_comm:
        return out  # torch >= 2.8, async_op=False: on the current stream, nothing else
    work = None
    if not spec.functional:
        w = out[-1] if isinstance(out, (tuple, list)) and out else out
        try:
            from torch._C._distributed_c10d import Work

            work = Work.unbox(w)
        except Exception:
            work = None
    if spec.name not in _P2P:  # complete it now, as every emulated kernel is
        if work is not None:
            _orig_work_wait(work)
        elif spec.functional:
            for t in _outputs(out):
                torch.ops._c10d_functional.wait_tensor.default(t)
    tensors: List[torch.Tensor] = []
    for nm in spec.reads + spec.writes:
        _device_tensors(out if nm == OUT else argv.get(nm), tensors)
    if not tensors:
        return out  # a host collective (gloo on CPU tensors): nothing on the device
    from ..recorder.collectives import Collectives

    group = Collectives._group(None, argv)  # type: ignore[arg-type]
    comm = _comm_stream(group)
    start = _cuda.Event()
    start.record(cur)
    start.wait(comm)
    end = _cuda.Event()
    end.record(comm)
    keep: List[torch.Tensor] = []
    if model.record_streams:
        for t in tensors:
            ptr = _dev.get(storage_key(t))
            if ptr:
                _cuda.STATE.record_stream(ptr, comm.stream_id)
    else:
        keep = tensors
    p = _Pending(end, keep)
    if _waited_in_cpp():
        _finish(p)
    elif spec.functional:
        with _lock:
            for t in _outputs(out) if spec.writes == (OUT,) else tensors:
                _storages[storage_key(t)] = p
    elif work is not None:
        p.work = work  # kept alive: the program's Work is this very wrapper (pybind)
        with _lock:
            _works[id(work)] = p
            if len(_works) > _MAX_PENDING:
                del _works[next(iter(_works))]
    return out


def _outputs(out: Any) -> List[torch.Tensor]:
    ts: List[torch.Tensor] = []
    _device_tensors(out, ts)
    return ts


def forget(p: "_Pending") -> None:
    """A wait through the Work's future ordered the program after the collective (the
    current stream waited for its end event): the Work no longer keeps its tensors."""
    with _lock:
        _works.pop(id(p.work), None)
    p.keep.clear()


def _work_waited(work: Any) -> None:
    with _lock:
        p = _works.pop(id(work), None)
    _finish(p)


#: What ``torch.cuda.nccl.version()`` answers on the emulated device (NCCL of torch's CUDA 12 wheels).
NCCL_VERSION = (2, 27, 3)


def _nccl_version() -> None:
    """``torch.cuda.nccl.version()`` answers on a CPU build too: torch's c10d logger calls it
    while it reports a failed collective, and its AttributeError (a CPU build has no
    ``torch._C._nccl_version``) replaced the collective's own error."""
    try:
        import torch
        import torch.cuda.nccl as nccl

        if not hasattr(torch._C, "_nccl_version"):
            nccl.version = lambda: NCCL_VERSION
    except Exception:
        pass


def install() -> None:
    """Make ``nccl`` resolve to gloo and wrap the waits (once per process)."""
    global _orig_work_wait
    if _orig_work_wait is not None:
        return
    try:
        import torch.distributed as dist
        from torch._C._distributed_c10d import Work
        from torch.distributed import distributed_c10d as c10d
    except Exception:  # torch without distributed support
        return
    if not dist.is_available() or not dist.is_gloo_available():
        return
    _orig_work_wait = Work.wait
    cfg_init = c10d.BackendConfig.__init__

    def backend_config(self: Any, backend: Any) -> None:
        cfg_init(self, backend)
        m = self.device_backend_map
        nccl = any(str(b).lower() == "nccl" for b in m.values()) or str(backend) == c10d.Backend.UNDEFINED
        if nccl:
            gloo = c10d.Backend("gloo")
            for d in list(m):
                if str(m[d]).lower() == "nccl":
                    m[d] = gloo
            m.setdefault("cpu", gloo)  # where C++ dispatches the emulated tensors
            m.setdefault("cuda", gloo)

    c10d.BackendConfig.__init__ = backend_config
    timeout = c10d._get_default_timeout
    c10d._get_default_timeout = lambda backend: timeout("gloo" if str(backend).lower() == "nccl" else backend)
    dist.is_nccl_available = c10d.is_nccl_available = lambda: True
    _nccl_version()
    c10d.Backend.default_device_backend_map["cuda"] = "nccl"

    def wait(self: Any, *a: Any, **k: Any) -> Any:
        _work_waited(self)
        return _orig_work_wait(self, *a, **k)

    wait.__doc__ = _orig_work_wait.__doc__
    Work.wait = wait
    orig_future = Work.get_future

    def get_future(self: Any) -> Any:
        fut = orig_future(self)
        with _lock:
            p = _works.get(id(self))
        if p is not None:
            _futures.of_work(fut, p)
        return fut

    Work.get_future = get_future
    _futures._patch_comm_hooks()
    _patch_reducer(dist)
    from torch.distributed import _functional_collectives as fc

    orig_wt = fc.wait_tensor

    def wait_tensor(tensor: Any) -> Any:
        if isinstance(tensor, torch.Tensor):
            with _lock:
                p = _storages.pop(storage_key(tensor), None)
                if p is not None:
                    for k in [k for k, v in _storages.items() if v is p]:
                        del _storages[k]
            _finish(p)
        return orig_wt(tensor)

    wait_tensor.__doc__ = orig_wt.__doc__
    fc.wait_tensor = wait_tensor


def _patch_reducer(dist: Any) -> None:
    """The DDP reducer allocates its buckets in C++ from the parameters' options: a CPU
    allocation at the C++ level, device memory in the program (so the bucket all-reduce is
    device work). Its constructor and ``_rebuild_buckets`` run in :func:`.mode.device_factories`."""
    from .mode import device_factories

    cls = dist.Reducer

    def Reducer(*a: Any, **k: Any) -> Any:  # noqa: N802 -- stands for the class
        with device_factories():
            return cls(*a, **k)

    Reducer.__doc__ = cls.__doc__
    dist.Reducer = Reducer
    rebuild = cls._rebuild_buckets

    def _rebuild_buckets(self: Any) -> Any:
        with device_factories():
            return rebuild(self)

    cls._rebuild_buckets = _rebuild_buckets
