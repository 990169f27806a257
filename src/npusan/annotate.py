"""Declaring device work npusan cannot see: :func:`kernel`.

npusan records ops as they pass the PyTorch dispatcher. An extension that launches its
kernels itself -- a ``ctypes`` or pybind call into a library, a raw stream handle passed
to a custom launcher -- never passes it, so its reads and writes are simply missing from
the trace: a race with them cannot be found, and nothing says so. ``kernel`` lets the
code that makes such a call (or the library that wraps it) say what it touches::

    npusan.kernel("fused_adam", reads=[grad], writes=[param, exp_avg])   # after the launch

    @npusan.kernel("my_op", reads=["x"], writes=["out"])   # the named arguments, per call
    def my_op(x, out): ...

Either form records one kernel on the given stream (else the current one) with the
caller's stack. Neither does anything when nothing is recording, so it can stay in
production code; importing this module does not import torch.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Optional, Sequence


class kernel:  # lower case: used as a function and as a decorator
    """Record one kernel ``name`` that reads ``reads`` and writes ``writes`` on ``stream``
    (a stream of the recording backend: a ``torch.cuda.Stream``, ``torch.npu.Stream`` or
    ``npusan.sim.Stream``; None: the current stream of the tensors' device).

    Called with tensors, it records at once (call it right after the launch). With
    argument *names* (strings), it is a decorator: each call of the decorated function
    runs it, then records the kernel with the tensors bound to those arguments (a list or
    tuple argument counts as its tensors). ``stream`` may also name an argument.
    """

    def __init__(self, name: str, reads: Sequence[Any] = (), writes: Sequence[Any] = (),
                 stream: Any = None) -> None:
        self.name = name
        self.reads = list(reads)
        self.writes = list(writes)
        self.stream = stream
        names = [x for x in self.reads + self.writes if isinstance(x, str)]
        if names and len(names) != len(self.reads) + len(self.writes):
            raise TypeError("npusan.kernel: give either argument names (a decorator) or tensors, not both")
        self._decorator = bool(names)
        if not self._decorator:
            _record(name, self.reads, self.writes, stream)

    def __call__(self, fn: Callable) -> Callable:
        if not self._decorator:
            raise TypeError("npusan.kernel(...) with tensors records at once; to decorate a function, "
                            "name its arguments: @npusan.kernel('op', reads=['x'], writes=['out'])")
        sig = inspect.signature(fn)
        missing = [n for n in self.reads + self.writes if n not in sig.parameters]
        if isinstance(self.stream, str) and self.stream not in sig.parameters:
            missing.append(self.stream)
        if missing:
            raise TypeError(f"npusan.kernel: {fn.__qualname__} has no argument named {', '.join(missing)}")
        name, reads, writes, stream = self.name, self.reads, self.writes, self.stream

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            out = fn(*args, **kwargs)
            session = sys.modules.get("npusan.recorder.session")
            rec = session._current if session is not None else None
            if rec is None or not rec.active:
                return out
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            st = a.get(stream) if isinstance(stream, str) else stream
            _record(name, _tensors(a[n] for n in reads), _tensors(a[n] for n in writes), st)
            return out

        return wrapper


def _tensors(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(v)
        elif v is not None:
            out.append(v)
    return out


def _record(name: str, reads: Sequence[Any], writes: Sequence[Any], stream: Optional[Any]) -> None:
    """Record the kernel if a recorder is active (torch is imported only then)."""
    session = sys.modules.get("npusan.recorder.session")
    if session is None or session._current is None or not session._current.active:
        return
    from .recorder.explicit import record_accesses

    record_accesses(name, _tensors(reads), _tensors(writes), stream=stream, stack_skip=2)
