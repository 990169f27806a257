"""Turning the emulator on: ``npusan.emulate.install("cuda")`` (or ``"npu"``) before the program runs.

Order matters: the emulation mode must sit *below* the recorder's dispatch mode (the
recorder sees each op, then the emulator runs it and registers its device outputs,
which the recorder then reads), so the emulator is installed before recording starts (``NPUSAN_EMULATE`` is read by the
activation code, ``emulate=`` by :func:`npusan.record`).
"""

from __future__ import annotations

from typing import Any, Optional

_installed: Optional[str] = None
_mode: Any = None


def installed() -> Optional[str]:
    return _installed


#: The devices ``--emulate`` can emulate.
KINDS = ("cuda", "npu")
#: How many devices to emulate (``npusan record --emulate-devices N``; default 1).
DEVICES_ENV = "NPUSAN_EMULATE_DEVICES"


def _devices_from_env() -> int:
    import os

    v = os.environ.get(DEVICES_ENV, "").strip()
    try:
        n = int(v) if v else 1
    except ValueError:
        raise ValueError(f"{DEVICES_ENV}={v!r}: expected a number of devices") from None
    if n < 1:
        raise ValueError(f"{DEVICES_ENV}={v!r}: expected at least one device")
    return n


def install(kind: str = "cuda", devices: Optional[int] = None) -> None:
    """Emulate CUDA devices (``cuda``) or an Ascend NPU with its ``torch_npu`` (``npu``) in
    this process (idempotent). ``devices``: how many CUDA devices (default: the
    ``NPUSAN_EMULATE_DEVICES`` environment variable, else 1); a process uses one of them
    (``set_device``; a ``torchrun`` rank its ``LOCAL_RANK``)."""
    global _installed, _mode
    if kind not in KINDS:
        raise ValueError(f"npusan --emulate {kind}: only {', '.join(KINDS)} are emulated")
    if _installed is not None:
        if _installed != kind:
            raise RuntimeError(f"npusan --emulate {kind}: this process already emulates {_installed}")
        return
    from . import backward, compiled, tensor
    from .mode import EmulationMode

    if kind == "cuda":
        _install_cuda(devices if devices is not None else _devices_from_env())
    else:
        from . import npu

        npu.install()
    tensor.patch()
    backward.install()
    compiled.patch()  # torch.compile runs eagerly here: says so where CUDA graphs are asked for
    if kind == "cuda":
        from . import dist, triton_launch

        dist.install()
        triton_launch.install()  # Triton's kernels interpreted on the CPU (before the program imports it)
    from . import futures

    futures.install()
    _mode = EmulationMode()
    _mode.__enter__()
    _patch_threads(EmulationMode)
    _say_unsupported_in_one_line()
    _installed = kind


def _say_unsupported_in_one_line() -> None:
    """A program that stops at an API the emulator does not emulate ends with one line
    naming it (exit status 1, as for any uncaught exception), not a traceback."""
    import sys

    from .cuda import Unsupported

    previous = sys.excepthook

    def hook(exc_type: Any, exc: BaseException, tb: Any) -> None:
        if isinstance(exc, Unsupported):
            sys.stderr.write(f"npusan: error: {exc}\n")
        else:
            previous(exc_type, exc, tb)

    sys.excepthook = hook


def _install_cuda(devices: int) -> None:
    import importlib

    import torch

    from . import cuda

    if torch.cuda.is_available() and not hasattr(torch.cuda, "_npusan_emulated"):
        raise RuntimeError("npusan --emulate cuda: this machine has a CUDA device; record it without --emulate")
    cuda._trace = importlib.import_module("torch.cuda._gpu_trace")
    for name, fn in cuda.api().items():
        setattr(torch.cuda, name, fn)
    import torch.accelerator

    for name, fn in cuda.accelerator_api().items():
        setattr(torch.accelerator, name, fn)
    torch.cuda._npusan_emulated = True
    # The CUDA backend reads the current device and stream through these accessors.
    cuda.STATE.count = devices
    torch._C._cuda_getDevice = lambda: cuda.STATE.device
    # Python callers (FSDP2's default mesh, a backend-less init_process_group) ask it.
    torch._C._get_accelerator = lambda check=False: torch.device("cuda")
    torch._C._cuda_getCurrentRawStream = cuda.STATE.current_handle
    if not hasattr(torch._C, "_host_emptyCache"):  # (torch.cuda.graph calls it; a CPU build lacks it)
        torch._C._host_emptyCache = lambda: None
    import torch.cuda.graphs

    from .graphs import CUDAGraph, graph_pool_handle

    torch.cuda.graphs.CUDAGraph = CUDAGraph  # (make_graphed_callables and the recorder look here)
    torch.cuda.graphs.graph_pool_handle = graph_pool_handle  # (make_graphed_callables calls it)


def _patch_threads(mode_cls: Any) -> None:
    """Threads started from now on enter their own emulation mode first (a dispatch mode
    is thread-local), so factories with ``device="cuda"`` and ops on device tensors work
    in every thread. ``Thread._bootstrap`` runs *before* ``_bootstrap_inner``, which the
    recorder wraps: the emulator's mode thus sits below the recorder's in each thread,
    as it does in the main thread.

    The mode leaves the thread's stack before the thread ends: a mode still on it would be
    released by the thread's C++ thread-local destructor after Python let go of the
    thread, which needs the GIL; when the main thread is finalizing the interpreter by
    then, that thread is ended inside a ``noexcept`` destructor and the process aborts
    ("terminate called without an active exception", about one run in twenty)."""
    import threading

    from torch.utils._python_dispatch import _get_current_dispatch_mode

    orig = threading.Thread._bootstrap  # type: ignore[attr-defined]

    def _bootstrap(self: Any) -> None:
        mode = None
        try:
            mode = mode_cls()
            mode.__enter__()
        except Exception:  # never stop a thread from running
            mode = None
        try:
            orig(self)
        finally:
            try:
                if mode is not None and _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
            except Exception:
                pass

    threading.Thread._bootstrap = _bootstrap  # type: ignore[attr-defined]
