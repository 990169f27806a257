"""What a dispatch mode of npusan's does with an op on tensor subclasses.

A ``TorchDispatchMode`` runs before a tensor subclass's ``__torch_dispatch__``, and the
mode is popped while it runs the op: were it to run an op on a DTensor itself, the
subclass would run its own ops on the plain tensors it holds with the mode off, unseen.
Answering ``NotImplemented`` instead lets the subclass's ``__torch_dispatch__`` run with
the mode still on the stack; the ops it runs on its inner tensors come back to the mode
(checked with torch 2.13; FakeTensorMode and FunctionalTensorMode do the same). The
recorder's mode and the emulator's both use this.

An op's ``types`` names only classes that override ``__torch_dispatch__``: a
``torch.Tensor`` subclass made with ``_make_subclass`` and an ``nn.Parameter`` are not
among them (their ops reach the mode as ops on plain tensors).

FakeTensor and FunctionalTensor are the exception: they are the tensors of torch's own
infrastructure modes (fake, functionalization), which sit below every user mode and
handle these tensors there. FakeTensor's ``__torch_dispatch__`` answers ``NotImplemented``
while the fake mode is active, so a mode above must pass such ops down (run them), and
they touch no device memory (meta storage): they are run, not recorded.
"""

from __future__ import annotations

from typing import Any, Dict

from torch._C import _disabled_torch_dispatch_impl

#: No subclass with its own dispatch among the types: handle the op as usual.
PLAIN = 0
#: Tensors of torch's fake or functionalization mode: run the op, touch nothing.
INFRA = 1
#: A subclass with its own ``__torch_dispatch__``: answer ``NotImplemented``.
SUBCLASS = 2

_kinds: Dict[type, int] = {}


def _infra_types() -> tuple:
    found = []
    try:
        from torch._subclasses.fake_tensor import FakeTensor

        found.append(FakeTensor)
    except Exception:  # pragma: no cover - a torch without it
        pass
    try:
        from torch._subclasses.functional_tensor import FunctionalTensor

        found.append(FunctionalTensor)
    except Exception:  # pragma: no cover
        pass
    return tuple(found)


def _classify(t: type) -> int:
    if getattr(t, "__torch_dispatch__", _disabled_torch_dispatch_impl) is _disabled_torch_dispatch_impl:
        k = PLAIN
    elif issubclass(t, _infra_types()):
        k = INFRA
    else:
        k = SUBCLASS
    _kinds[t] = k
    return k


def dispatch_kind(types: Any) -> int:
    """:data:`SUBCLASS` if one of an op's ``types`` has a ``__torch_dispatch__`` of its own
    (other than the infrastructure tensors'), else :data:`INFRA` if one is a FakeTensor
    or FunctionalTensor, else :data:`PLAIN`. Cached per class: a dict look-up per type."""
    kind = PLAIN
    for t in types:
        k = _kinds.get(t)
        if k is None:
            k = _classify(t)
        if k > kind:
            kind = k
    return kind
