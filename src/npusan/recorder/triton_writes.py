"""Which pointer arguments a ``@triton.jit`` kernel writes, read from its source.

A Triton kernel receives tensors as pointers and writes memory only through ``tl.store``,
the ``tl.atomic_*`` operations and a tensor descriptor's ``store``/``atomic_*``. So a
parameter is written when a pointer derived from it reaches the pointer operand of one of
these; every other tensor argument is only read. The kernel's code is never run for this:
its source is parsed (``ast``) once per kernel and a flow-insensitive taint analysis
follows each parameter through assignments, pointer arithmetic (``p + offs``), indexing,
``tl.where``/``tl.broadcast_to``/``tl.reshape``-style shape functions, block pointers
(``tl.make_block_ptr``, ``tl.advance``), tensor descriptors (``tl.make_tensor_descriptor``)
and tensor methods (``.to()``...). A value loaded from memory carries no parameter.

Where the source does not say, the answer is conservative -- the parameter counts as
written -- and the reason is kept so the recording can say it was coarse:

* a pointer passed to a function the analysis does not follow: another ``@triton.jit``
  function, a ``tl`` function it does not model (``tl.inline_asm_elementwise``...), any
  other call;
* a pointer put into a tuple, list or other container, or into a nested function;
* a store through a pointer that derives from no parameter (loaded from memory, cast from
  an integer): then *every* pointer argument counts as written;
* no readable source (a kernel built from a string, a stripped install): the same.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
import threading
import weakref
from typing import Any, Dict, FrozenSet, NamedTuple, Optional, Tuple

_EMPTY: FrozenSet[str] = frozenset()

#: ``tl`` functions whose first operand is a pointer (or descriptor) the call writes through.
STORES = frozenset({"store", "store_tensor_descriptor", "atomic_add", "atomic_and", "atomic_cas",
                    "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor"})
#: ``tl`` functions that read through their pointer operand and return values.
LOADS = frozenset({"load", "load_tensor_descriptor", "gather"})
#: ``tl`` functions that hand back (a reshaped, selected, annotated or advanced form of)
#: the pointers they are given: the result carries every operand's parameters.
KEEPS = frozenset({"where", "broadcast_to",
                   "broadcast", "reshape", "view", "expand_dims", "multiple_of", "max_contiguous",
                   "max_constancy", "permute", "trans", "ravel", "split", "join", "cat", "interleave",
                   "cast", "to", "pointer_type", "minimum", "maximum", "clamp"})
#: ``tl`` functions that build a block pointer or descriptor from (or advance) their
#: ``base`` operand: the result carries that operand's parameters (not its shape's).
BASED = frozenset({"make_block_ptr", "make_tensor_descriptor", "advance"})
#: ``tl`` functions that neither access memory nor return a pointer.
VALUES = frozenset({
    "program_id", "num_programs", "arange", "zeros", "zeros_like", "full", "full_like", "cdiv", "dot",
    "dot_scaled", "sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "associative_scan",
    "cumsum", "cumprod", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos", "abs",
    "fma", "sigmoid", "softmax", "erf", "floor", "ceil", "div_rn", "fdiv", "umulhi", "rand", "randn",
    "randint", "randint4x", "device_print", "static_print", "device_assert", "static_assert",
    "debug_barrier", "sort", "flip", "histogram", "swizzle2d", "range", "static_range", "constexpr",
    "assume", "tensor", "dtype", "float32", "float16", "bfloat16", "int32", "int64", "int8", "int16",
    "uint8", "uint32", "uint64", "int1", "float64", "float8e4nv", "float8e5", "topk", "philox",
})
#: Python builtins that return values, never a pointer (``range(n)``, ``len(t)``...).
_BUILTIN_VALUES = frozenset({"range", "len", "isinstance", "print", "int", "float", "bool", "str",
                             "hasattr", "type"})
#: Attributes of a pointer (or any value) that describe it and are no pointer themselves.
_METADATA = frozenset({"dtype", "type", "shape", "element_ty", "numel", "ndim", "primitive_bitwidth",
                       "block_shape", "value"})
#: Tensor-descriptor and tensor methods that store through the object they are called on.
_METHOD_STORES = STORES - {"store_tensor_descriptor"}


class KernelWrites(NamedTuple):
    """What the analysis of one kernel found."""

    #: Parameter names the kernel may write (stores and atomics, and the unclear ones).
    #: Integer parameters that enter an address (strides, offsets) are among them: the
    #: source does not say which parameters are pointers; a launch keeps the tensors.
    written: FrozenSet[str]
    #: Parameter name -> why it counts as written without a store through it being seen.
    unclear: Dict[str, str]
    #: Non-empty: why every pointer argument counts as written.
    blind: str


_cache: "weakref.WeakKeyDictionary[Any, KernelWrites]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def writes_of(fn: Any) -> KernelWrites:
    """The :class:`KernelWrites` of the Python function behind a kernel (cached per
    function; never raises: an unreadable kernel is all written)."""
    fn = getattr(fn, "__func__", fn)  # a bound method is a new object at each access
    try:
        with _lock:
            got = _cache.get(fn)
        if got is not None:
            return got
    except TypeError:  # not weak-referenceable: analyze every time (never happens for functions)
        return analyze(fn)
    got = analyze(fn)
    with _lock:
        _cache[fn] = got
    return got


def analyze(fn: Any) -> KernelWrites:
    """Analyze ``fn``'s source (see the module docstring); never raises."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError) as e:
        return KernelWrites(_EMPTY, {}, f"its source could not be read ({type(e).__name__})")
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return KernelWrites(_EMPTY, {}, "its source holds no function definition")
    try:
        flow = _Flow(node, getattr(fn, "__globals__", {}), max(first, 1) - 1)
        flow.run()
    except RecursionError:
        return KernelWrites(_EMPTY, {}, "its source is too deeply nested to analyze")
    written = set(flow.written) | set(flow.unclear)
    return KernelWrites(frozenset(written), dict(flow.unclear), flow.blind)


def _constexpr(annotation: Optional[ast.expr]) -> bool:
    """Whether a parameter annotation says ``tl.constexpr`` (a compile-time value, never a pointer)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "constexpr"
    if isinstance(annotation, ast.Name):
        return annotation.id == "constexpr"
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.endswith("constexpr")
    return False


class _Flow:
    """The taint analysis of one kernel body: ``env`` maps each local name to the
    parameters it may derive from; calls add to ``written``/``unclear``/``blind``."""

    #: Passes over the body before giving up on a fixed point (each pass only adds).
    MAX_PASSES = 32

    def __init__(self, node: ast.FunctionDef, fn_globals: dict, line_offset: int) -> None:
        self.node = node
        self.globals = fn_globals
        self.line_offset = line_offset
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        if a.vararg is not None:
            params.append(a.vararg)
        self.env: Dict[str, FrozenSet[str]] = {
            p.arg: frozenset({p.arg}) for p in params if not _constexpr(p.annotation)
        }
        self.written: set = set()
        self.unclear: Dict[str, str] = {}
        self.blind = ""
        self._changed = False

    # -- driver

    def run(self) -> None:
        for _ in range(self.MAX_PASSES):
            self._changed = False
            self._block(self.node.body)
            if not self._changed:
                return
        self.blind = self.blind or "its pointer flow did not settle"  # (monotone: never seen)

    def _line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 0) + self.line_offset

    def _mark_unclear(self, taint: FrozenSet[str], why: str, node: ast.AST) -> None:
        for p in taint:
            if p not in self.unclear:
                self.unclear[p] = f"{p} {why} (line {self._line(node)})"
                self._changed = True

    def _store(self, target: FrozenSet[str], node: ast.AST, what: str) -> None:
        if not target:
            if not self.blind:
                self.blind = (f"{what} at line {self._line(node)} writes through a pointer that "
                              "derives from no argument")
                self._changed = True
            return
        new = target - self.written
        if new:
            self.written |= new
            self._changed = True

    def _bind(self, name: str, taint: FrozenSet[str]) -> None:
        old = self.env.get(name, _EMPTY)
        if not taint <= old:
            self.env[name] = old | taint
            self._changed = True

    # -- statements

    def _block(self, body: list) -> None:
        for s in body:
            self._stmt(s)

    def _stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            t = self._expr(s.value)
            for target in s.targets:
                self._assign(target, t, s.value)
        elif isinstance(s, ast.AugAssign):
            self._assign(s.target, self._expr(s.value) | self._expr(s.target), None)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self._assign(s.target, self._expr(s.value), s.value)
        elif isinstance(s, ast.Expr):
            self._expr(s.value)
        elif isinstance(s, (ast.If, ast.While)):
            self._expr(s.test)
            self._block(s.body)
            self._block(s.orelse)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self._assign(s.target, self._expr(s.iter), None)
            self._block(s.body)
            self._block(s.orelse)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                t = self._expr(item.context_expr)
                if item.optional_vars is not None:
                    self._assign(item.optional_vars, t, None)
            self._block(s.body)
        elif isinstance(s, ast.Try):
            self._block(s.body)
            for h in s.handlers:
                self._block(h.body)
            self._block(s.orelse)
            self._block(s.finalbody)
        elif isinstance(s, (ast.Return, ast.Assert, ast.Raise)):
            for child in ast.iter_child_nodes(s):
                if isinstance(child, ast.expr):
                    self._expr(child)
        elif isinstance(s, (ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Delete,
                            ast.Import, ast.ImportFrom)):
            pass
        else:  # a nested def or class, match...: what it does with a pointer is not followed
            self._opaque(s, "used in a nested definition or statement")

    def _assign(self, target: ast.expr, taint: FrozenSet[str], value: Optional[ast.expr]) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, taint)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            if (isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts)
                    and not any(isinstance(e, ast.Starred) for e in (*elts, *value.elts))):
                for t_el, v_el in zip(elts, value.elts):  # a, b = p + 1, q + 1: pairwise
                    self._assign(t_el, self._expr(v_el), v_el)
            else:
                for t_el in elts:
                    self._assign(t_el, taint, None)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, taint, None)
        elif taint:  # x[i] = p, obj.attr = p
            self._mark_unclear(taint, "is stored into an object", target)

    # -- expressions

    def _opaque(self, node: ast.AST, why: str) -> FrozenSet[str]:
        """Every parameter a construct the analysis does not follow mentions: unclear."""
        taint = frozenset().union(*(self.env.get(n.id, _EMPTY) for n in ast.walk(node)
                                    if isinstance(n, ast.Name)))
        if taint:
            self._mark_unclear(taint, why, node)
        return taint

    def _union(self, nodes) -> FrozenSet[str]:
        out = _EMPTY
        for n in nodes:
            if n is not None:
                out = out | self._expr(n)
        return out

    def _expr(self, e: ast.expr) -> FrozenSet[str]:
        if isinstance(e, ast.Name):
            return self.env.get(e.id, _EMPTY)
        if isinstance(e, ast.Constant):
            return _EMPTY
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.BinOp):
            return self._expr(e.left) | self._expr(e.right)
        if isinstance(e, ast.UnaryOp):
            return self._expr(e.operand)
        if isinstance(e, ast.BoolOp):
            return self._union(e.values)
        if isinstance(e, ast.Compare):
            self._union([e.left, *e.comparators])
            return _EMPTY  # a comparison is a mask, never a pointer
        if isinstance(e, ast.IfExp):
            self._expr(e.test)
            return self._expr(e.body) | self._expr(e.orelse)
        if isinstance(e, ast.Attribute):
            t = self._expr(e.value)
            return _EMPTY if e.attr in _METADATA else t  # p.dtype.element_ty: no pointer; p.T: one
        if isinstance(e, ast.Subscript):  # p[:, None], a tuple parameter's t[0]
            return self._expr(e.value) | self._expr(e.slice)
        if isinstance(e, ast.Slice):
            return self._union([e.lower, e.upper, e.step])
        if isinstance(e, ast.Starred):
            return self._expr(e.value)
        if isinstance(e, ast.NamedExpr):
            t = self._expr(e.value)
            self._assign(e.target, t, e.value)
            return t
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            t = self._union(e.elts)
            if t:
                self._mark_unclear(t, "is put into a tuple or list", e)
            return t
        if isinstance(e, ast.Dict):
            t = self._union([*e.keys, *e.values])
            if t:
                self._mark_unclear(t, "is put into a dict", e)
            return t
        if isinstance(e, (ast.JoinedStr, ast.FormattedValue)):
            return _EMPTY
        return self._opaque(e, "is used where the analysis does not follow it")  # lambda, comprehension

    def _call(self, c: ast.Call) -> FrozenSet[str]:
        args = c.args
        kw = {k.arg: k.value for k in c.keywords if k.arg is not None}
        arg_taints = [self._arg(a) for a in args]
        kw_taints = {k: self._arg(v) for k, v in kw.items()}
        for k in c.keywords:
            if k.arg is None:  # **kwargs
                kw_taints["**"] = self._expr(k.value)
        every = frozenset().union(*arg_taints, *kw_taints.values())
        kind, name, receiver = self._resolve(c.func)
        if kind == "tl":
            if name in STORES:
                first = arg_taints[0] if arg_taints else kw_taints.get("pointer", kw_taints.get("desc", _EMPTY))
                self._store(first, c, f"tl.{name}")
                return _EMPTY
            if name in LOADS:
                return _EMPTY
            if name in BASED:
                return arg_taints[0] if arg_taints else kw_taints.get("base", _EMPTY)
            if name in KEEPS:
                return every
            if name in VALUES:
                return _EMPTY
            if every:
                self._mark_unclear(every, f"is passed to tl.{name}, which npusan does not model", c)
            return every
        if kind == "method":
            recv = self._expr(receiver)
            if name in _METHOD_STORES:  # desc.store(offsets, value), desc.atomic_add(...)
                self._store(recv, c, f".{name}()")
                return _EMPTY
            if name in LOADS:
                return _EMPTY
            return recv | every  # p.to(...), x.reshape(...): a pointer stays one
        if kind == "builtin":
            return _EMPTY if name in _BUILTIN_VALUES else every
        if every:
            what = f"{name}()" if name else "a call"
            self._mark_unclear(every, f"is passed to {what}, which npusan does not follow", c)
        return every

    def _arg(self, a: ast.expr) -> FrozenSet[str]:
        """A call operand: a tuple or list written out in the call (a block's shape,
        ``boundary_check=(0, 1)``) is the call's to model, not a container the pointer
        escapes into (a call npusan does not model counts its operands unclear anyway)."""
        if isinstance(a, (ast.Tuple, ast.List)):
            return self._union(a.elts)
        return self._expr(a)

    def _resolve(self, func: ast.expr) -> Tuple[str, str, Optional[ast.expr]]:
        """``(kind, name, receiver)`` of a call's callee: ``tl`` (a ``triton.language``
        function), ``method`` (called on a local value: ``receiver``), ``builtin``, ``jit``
        (another kernel function) or ``other``."""
        if isinstance(func, ast.Attribute):
            base = self._static(func.value)
            if base is _UNKNOWN:
                return "method", func.attr, func.value
            if inspect.ismodule(base):
                if base.__name__.startswith("triton.language"):
                    return "tl", func.attr, None
                return self._classify(getattr(base, func.attr, _UNKNOWN), func.attr)
            return self._classify(getattr(base, func.attr, _UNKNOWN), func.attr)
        if isinstance(func, ast.Name):
            if func.id in self.env:
                return "other", func.id, None
            return self._classify(self._static(func), func.id)
        return "other", "", None

    _BUILTINS = vars(builtins)

    def _static(self, e: ast.expr) -> Any:
        """The object a name or dotted name of the kernel's globals denotes (_UNKNOWN if
        it is a local, or not found)."""
        if isinstance(e, ast.Name):
            if e.id in self.env:
                return _UNKNOWN
            if e.id in self.globals:
                return self.globals[e.id]
            return self._BUILTINS.get(e.id, _UNKNOWN)
        if isinstance(e, ast.Attribute):
            base = self._static(e.value)
            if base is _UNKNOWN:
                return _UNKNOWN
            try:
                return getattr(base, e.attr)
            except Exception:
                return _UNKNOWN
        return _UNKNOWN

    def _classify(self, obj: Any, attr: str) -> Tuple[str, str, Optional[ast.expr]]:
        if obj is _UNKNOWN:
            return "other", attr, None
        module = getattr(obj, "__module__", None) or ""
        name = getattr(obj, "__name__", None) or getattr(getattr(obj, "fn", None), "__name__", None) or attr
        if isinstance(module, str) and module.startswith("triton.language"):
            return "tl", name, None
        if obj is self._BUILTINS.get(attr):
            return "builtin", attr, None
        if hasattr(obj, "fn") and hasattr(obj, "run"):  # another @triton.jit function
            return "jit", name, None
        return "other", name, None


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN: Any = _Unknown()
