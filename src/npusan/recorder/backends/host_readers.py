"""``torch.Tensor`` methods that read a tensor's memory on the host without an op a dispatch
mode sees: ``tolist`` and ``numpy`` read CPU memory directly, and printing (``__repr__``)
runs with dispatch modes disabled.

While recording they are wrapped so that the host's read of *watched* pinned memory is
recorded as a host access (:mod:`..host_memory`), and, on a backend whose runtime reports
no synchronization when the host reads a device value (the simulated device), a read of a
device tensor reports the synchronization of the blocking copy a GPU makes. ``numpy()``
counts as a read when it is called: the array it returns is a view whose later reads and
writes are not seen.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

#: The wrapped methods.
HOST_READERS: Tuple[str, ...] = ("tolist", "__repr__", "numpy")


def patch(backend: Any, device_read: Optional[Callable[[], None]]) -> Dict[str, Tuple[Any, bool]]:
    """Wrap the readers for ``backend`` (its ``_rec``, ``host_watch`` and
    ``is_device_tensor``); returns what :func:`unpatch` restores."""
    import torch

    saved = {}
    for name in HOST_READERS:
        current = getattr(torch.Tensor, name)
        original = getattr(current, "_npusan_reader", current)  # a stale patch: unwrap it
        # torch.Tensor's own method (__repr__), or one it inherits (tolist, numpy)
        saved[name] = (original, getattr(torch.Tensor.__bases__[0], name, None) is not original)
        setattr(torch.Tensor, name, _reader(backend, original, name, device_read))
    return saved


def _reader(backend: Any, original: Any, name: str, device_read: Optional[Callable[[], None]]) -> Any:
    import torch

    op = f"Tensor.{name}"

    def reader(t, *args, **kwargs):
        rec = backend._rec
        pw = getattr(rec, "pages", None)
        if pw is not None and pw.armed and name != "numpy":  # read here, recorded below: not a fault
            # (``numpy()`` reads nothing: what the view does later faults like any access)
            try:
                pw.before_op((t,), None)
            except Exception:
                pass
        out = original(t, *args, **kwargs)
        try:
            if rec is not None and isinstance(t, torch.Tensor):
                if backend.is_device_tensor(t):
                    if device_read is not None:
                        device_read()
                elif backend.host_watch is not None:  # the host reads pinned memory
                    rec.host_op(op, [(t, False)], ())
        except Exception:  # never into user code
            pass
        return out

    reader.__name__ = getattr(original, "__name__", "reader")
    reader.__doc__ = original.__doc__
    reader._npusan_reader = original  # type: ignore[attr-defined]
    return reader


def unpatch(saved: Optional[Dict[str, Tuple[Any, bool]]]) -> None:
    """Put back what :func:`patch` replaced (unless someone replaced it since)."""
    if not saved:
        return
    import torch

    for name, (original, own) in saved.items():
        if getattr(getattr(torch.Tensor, name), "_npusan_reader", None) is not original:
            continue  # replaced since by someone else: leave theirs
        if own:
            setattr(torch.Tensor, name, original)
        else:
            delattr(torch.Tensor, name)  # inherited from torch._C.TensorBase
