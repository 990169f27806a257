"""What memory an aten op touches: classification from the op schema, byte ranges of views.

Classification happens once per op overload (:func:`op_info`, cached on the overload
object) from the schema's alias annotations, so the per-op cost is a dict lookup:

* **no event** (``OpInfo.view``): pure view/metadata ops -- every return aliases an input
  without writing (``view``, ``t``, ``transpose``, ``detach``, ``select``, ``expand``,
  ``as_strided``, ``alias``, ``slice``, ``permute``, ``split`` ...), plus the few views the
  schema does not annotate (``_unsafe_view``) and metadata-only mutators (``set_``);
* **writes**: arguments annotated ``(a!)`` (in-place ``self``, ``out=``, ``Tensor(a!)[]``
  lists of ``_foreach_*_``), every tensor a non-aliasing return produces (all outputs of
  multi-output ops; factories: ``empty``, ``zeros``, ``randn``, ``new_*``, ``*_like``), and
  the running statistics of batch norm (mutated without a schema annotation);
* **reads**: every other tensor argument, including tensors inside lists (``cat``'s
  ``Tensor[]``, ``index``'s ``Tensor?[]``), except the inputs of ``new_*`` / ``*_like``
  factories, which only lend their shape and dtype.

Each access is the byte range the tensor's view can reach inside its storage:
``[storage_offset * itemsize, + extent of the strided view)``; the whole block when that
covers the storage. A non-contiguous view also gets its exact shape (:func:`view_of`:
the bytes of its elements, so that ``x[0::2]`` and ``x[1::2]`` do not overlap), unless it
normalizes to a plain range (a transpose of a contiguous tensor). Zero-size tensors touch
no memory and produce no access (the kernel itself is still recorded, because it still
orders its stream).
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

from ..trace_format.strided import normalize

#: Ops that alias their input without saying so in the schema, or only change metadata.
_NO_ACCESS_NAMES = frozenset({"_unsafe_view", "set_", "_reshape_alias", "_nested_view_from_buffer",
                              "_wrap_tensor_autograd"})
#: ``(op name, argument name)`` pairs that are mutated although the schema does not say so.
_UNANNOTATED_WRITES = frozenset(
    {
        (op, arg)
        for op in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_impl_index",
                   "batch_norm_cpu", "_native_batch_norm_legit")
        for arg in ("running_mean", "running_var")
    }
)

# Return kinds.
RET_NEW = 0  # fresh memory written by the op
RET_ALIAS = 1  # aliases an argument (view or in-place/out= return): no extra access


class Slot(NamedTuple):
    index: int  # positional index
    name: str  # keyword name
    write: bool
    is_list: bool


class OpInfo(NamedTuple):
    name: str  # "aten::add_.Tensor"
    view: bool  # no event at all
    slots: Tuple[Slot, ...]  # tensor-bearing arguments to look at
    returns: Tuple[int, ...]  # RET_* per return
    list_return: bool  # returns Tensor[] (new tensors)
    record_stream: bool
    #: A c10d collective (:class:`~.collectives.Spec`): recorded as its process group runs it.
    collective: Any = None
    #: ``_c10d_functional::wait_tensor``: the wait of a functional collective.
    wait_tensor: bool = False
    #: ``aten::_local_scalar_dense`` (``t.item()``, ``float(t)``, ``bool(t)``): the host
    #: reads a device value, which synchronizes the current stream (no memory event).
    host_read: bool = False


def _is_tensorish(t) -> Tuple[bool, bool]:
    """(holds tensors, is a list) for a schema type."""
    s = str(t)
    if "Tensor" not in s:
        return False, False
    return True, s.startswith("List[") or s.endswith("[]")


def classify(func: Any) -> OpInfo:
    """Build the :class:`OpInfo` of an ``OpOverload`` from its schema (uncached)."""
    schema = func._schema
    base = schema.name.split("::", 1)[-1]
    name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
    if schema.name == "aten::record_stream":
        return OpInfo(name, False, (), (), False, True)
    from .collectives import WAIT_TENSOR, spec_of

    spec = spec_of(schema.name)
    if spec is not None:
        return OpInfo(name, False, (), (), False, False, collective=spec)
    if schema.name == WAIT_TENSOR:
        return OpInfo(name, True, (), (), False, False, wait_tensor=True)
    if schema.name == "aten::_local_scalar_dense":
        return OpInfo(name, True, (), (), False, False, host_read=True)
    metadata_inputs = base.startswith("new_") or base.endswith("_like")
    slots: List[Slot] = []
    any_write = False
    for i, a in enumerate(schema.arguments):
        tensorish, is_list = _is_tensorish(a.type)
        if not tensorish:
            continue
        ai = a.alias_info
        write = bool(ai is not None and ai.is_write) or (base, a.name) in _UNANNOTATED_WRITES
        any_write |= write
        if metadata_inputs and not write:
            continue
        slots.append(Slot(i, a.name, write, is_list))
    rets: List[int] = []
    all_alias = True
    list_return = False
    for r in schema.returns:
        tensorish, is_list = _is_tensorish(r.type)
        if not tensorish:
            rets.append(RET_ALIAS)  # not a tensor: nothing to record
            continue
        if r.alias_info is not None:
            rets.append(RET_ALIAS)
        else:
            all_alias = False
            rets.append(RET_NEW)
            list_return |= is_list
    view = (bool(schema.returns) and all_alias and not any_write) or base in _NO_ACCESS_NAMES
    return OpInfo(name, view, tuple(slots), tuple(rets), list_return, False)


def op_info(func: Any) -> OpInfo:
    """Cached :func:`classify` (stored on the overload object itself)."""
    info = getattr(func, "_npusan_info", None)
    if info is None:
        info = classify(func)
        try:
            func._npusan_info = info
        except Exception:
            pass
    return info


#: Shapes of non-contiguous layouts seen so far: ``(sizes, strides, itemsize) -> (extent, view)``.
_VIEWS: dict = {}
_VIEWS_MAX = 4096


def view_of(sizes: Tuple[int, ...], strides: Tuple[int, ...], itemsize: int) -> Tuple[int, Optional[tuple]]:
    """``(byte extent, view)`` of a non-empty layout; ``view`` is None for a plain range,
    else ``(run, dims)`` (:func:`~npusan.trace_format.strided.normalize`).

    Cached per layout: a training step repeats the same few layouts, so this is a dict
    lookup after the first step. Strides are never negative in PyTorch, so the view starts
    at the storage offset.
    """
    key = (sizes, strides, itemsize)
    r = _VIEWS.get(key)
    if r is None:
        shape = normalize(0, sizes, strides, itemsize)
        r = (shape.hi, (shape.run, shape.dims) if shape.dims else None)
        if len(_VIEWS) >= _VIEWS_MAX:
            _VIEWS.clear()
        _VIEWS[key] = r
    return r


def span(t: Any) -> Optional[Tuple[int, int, int, int, Optional[tuple]]]:
    """``(storage base ptr, byte offset, byte extent, storage nbytes, view)`` of a tensor's view.

    ``view`` is None for a contiguous range, else ``(run, dims)`` (:func:`view_of`). None
    for a zero-size tensor or one without storage memory.
    """
    n = t.numel()
    if n == 0:
        return None
    st = t.untyped_storage()
    base = st.data_ptr()
    if base == 0:
        return None
    isz = t.element_size()
    off = t.storage_offset() * isz
    if t.is_contiguous():
        return base, off, n * isz, st.nbytes(), None
    ext, view = view_of(t.shape, t.stride(), isz)
    return base, off, ext, st.nbytes(), view
