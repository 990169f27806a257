"""Kernels the recorder is told about instead of seeing them in the dispatcher.

Two kinds of device work never reach the dispatch mode (:mod:`.dispatch`): the fused
kernels of a ``torch.compile``'d region (:mod:`.compiled`) and extension ops that call
their kernels directly (declared with :func:`npusan.kernel`). Both are recorded here as
one KERNEL record of the tensors they read and write, on a stream they name or the
current one, with the stack of the user's call -- the same record the dispatch mode
writes for an op, so the analyzer needs nothing new to replay them.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from torch import Tensor

from . import session
from .access import span


def _payload(t: Tensor) -> Optional[Tensor]:
    """``t``, or the tensor a wrapper subclass holds (as the dispatch mode records it)."""
    try:
        t.untyped_storage()
        return t
    except (RuntimeError, NotImplementedError):
        inner = getattr(t, "elem", None)
        return inner if isinstance(inner, Tensor) else None


def record_accesses(
    name: str,
    reads: Iterable[Any] = (),
    writes: Iterable[Any] = (),
    *,
    stream: Any = None,
    fresh: Iterable[Any] = (),
    key: Any = None,
    stack_skip: int = 1,
) -> bool:
    """Record one kernel ``name`` reading ``reads`` and writing ``writes`` (tensors; other
    values are ignored) on ``stream`` (a stream object of the recording backend) or the
    current stream of the tensors' device. ``fresh``: tensors among ``writes`` that the
    kernel allocated, reported as allocations where the backend learns of them from
    outputs (the simulated device). ``key``: the stack key to use (else the caller's stack,
    ``stack_skip`` frames up). Returns whether a kernel was recorded; never raises except
    :class:`~npusan.RaceError` in online mode with ``mode="raise"``.
    """
    rec = session._current
    if rec is None or not rec.active:
        return False
    try:
        be = rec.backend
        is_dev = be.is_device_tensor
        acc: dict = {}  # (base, off, ext) -> [span, tensor]; a range read and written is a write
        first = None
        for ts, w in ((reads, False), (writes, True)):
            for t in ts:
                if not isinstance(t, Tensor) or not is_dev(t):
                    continue
                t = _payload(t)
                if t is None:
                    continue
                sp = span(t)
                if sp is None:
                    continue
                base, off, ext, total, view = sp
                if not base:
                    continue
                if first is None:
                    first = t
                k = (base, off, ext, view)
                old = acc.get(k)
                if old is None or (w and not old[4]):
                    acc[k] = (base, off, ext, total, w, view)
        if first is None:
            return False
        if key is None and rec.stacks.depth:
            key = rec.stacks.key(stack_skip + 1)
        if be.observes_outputs:
            pin = rec._pinned
            pin.key = None if rec.stacks.keep_internal else key
            try:
                for t in fresh:
                    if isinstance(t, Tensor) and is_dev(t):
                        be.observe_output(t)
            finally:
                pin.key = None
        if stream is not None:
            device, handle = be.stream_key(stream)
        else:
            device = 0 if be.single_device else be.tensor_device(first)
            handle = be.current_stream(device)
        rec.record_kernel(name, device, handle, list(acc.values()), key)
    except Exception as e:  # never into user code
        rec._fail(e)
        return False
    if rec._findings:
        rec._report_findings()  # online mode: may raise RaceError (on purpose)
    return True


def note_once(rec: Any, topic: str, text: str) -> None:
    """Put a NOTE record ``text`` into ``rec``'s trace, once per recording and ``topic``."""
    noted = rec.__dict__.setdefault("_npusan_noted", set())
    if topic in noted or not rec.active:
        return
    noted.add(topic)
    rec._post(_note, (rec, text))


def _note(rec: Any, text: str) -> None:
    rec.enc.note("info", text)
