"""Backward ops run on the stream their forward op ran on (CUDA's autograd rule).

On a GPU the autograd engine makes each backward node's stream current while it runs --
the stream that was current when its forward op ran -- and synchronizes streams where a
gradient crosses from one to another. The CPU engine does neither, so the emulator does
it with node hooks:

* while a stream other than the default one is current in a thread, the autograd
  sequence numbers handed out meanwhile are noted (``[start, end) -> stream``): every
  node created in that range was created by a forward op on that stream;
* when a backward starts (``torch.autograd.backward``/``grad`` both end in
  ``_engine_run_backward``) and such ranges exist, the graph is walked once from its
  roots and each node in a range gets a pre-hook (the node's stream becomes current,
  after waiting on the caller's stream for the gradients coming in) and a post-hook
  (the caller's stream waits on the node's stream, then becomes current again); a
  gradient crossing streams gets ``record_stream`` for the stream consuming it, as the
  engine's input buffer does.

Limits: the post-hook's wait is earlier than CUDA's (CUDA syncs where the gradient is
consumed and once at the end for leaf streams), so a race between a side-stream backward
node and a later op of the backward on another stream is not reported; nodes created in
another thread than the one calling backward keep the caller's stream (sequence numbers
are per thread); a program that never leaves the default stream pays nothing, one that
does pays a walk of the graph's newer nodes at each backward.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import cuda as _cuda
from . import tensor as _tensor

_seq = torch._C._autograd._get_sequence_nr
_tls = threading.local()
#: thread ident -> ([start, ...], [(end, stream), ...]), by start: nodes with a sequence
#: number in [start, end), created in that thread, belong to that stream.
_ranges: Dict[int, Tuple[List[int], List[Tuple[int, Any]]]] = {}
_MAX_RANGES = 4096  # per thread; older ranges are dropped (their nodes are long gone)
_hooked: set = set()  # (sequence number, thread) of nodes already hooked


def _switched(old: Any, new: Any) -> None:
    now = _seq()
    start = getattr(_tls, "start", None)
    if start is not None and now > start and old != _cuda.DEFAULT:
        tid = threading.get_ident()
        starts, rest = _ranges.setdefault(tid, ([], []))
        starts.append(start)
        rest.append((now, old))
        if len(starts) > _MAX_RANGES:
            cut = len(starts) - _MAX_RANGES
            del starts[:cut], rest[:cut]
            lo = starts[0]
            _hooked.difference_update([k for k in _hooked if k[1] == tid and k[0] < lo])
    _tls.start = now if new != _cuda.DEFAULT else None


def _stream_of(seq: int, tid: int) -> Optional[Any]:
    r = _ranges.get(tid)
    if r is not None:
        i = bisect.bisect_right(r[0], seq) - 1
        if i >= 0 and seq < r[1][i][0]:
            return r[1][i][1]
    start = getattr(_tls, "start", None)  # the range still open in this thread
    if start is not None and seq >= start:
        return _cuda.STATE.current()
    return None


def _lowest(tid: int) -> Optional[int]:
    r = _ranges.get(tid)
    lo = r[0][0] if r and r[0] else None
    start = getattr(_tls, "start", None)
    if start is not None and (lo is None or start < lo):
        lo = start
    return lo


def _pre(stream: Any) -> Any:
    def pre(grad_outputs: Any) -> None:
        caller = _cuda.STATE.current()
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(caller)
        if caller != stream:
            stream.wait_stream(caller)  # the gradients coming in are ready on the caller's stream
            _record(grad_outputs, stream)
            _cuda.STATE.tls.stream = stream
    return pre


def _record(grads: Any, stream: Any) -> None:
    """A gradient consumed on another stream than it was made on: the engine's input
    buffer calls ``record_stream`` for it (as well as the wait)."""
    for g in grads:
        if isinstance(g, torch.Tensor) and _tensor.is_device(g):
            g.record_stream(stream)


def _post(grad_inputs: Any, grad_outputs: Any) -> None:
    stack = getattr(_tls, "stack", None)
    if not stack:
        return
    caller = stack.pop()
    mine = _cuda.STATE.current()
    if caller != mine:
        caller.wait_stream(mine)
        _record(grad_inputs, caller)
        _cuda.STATE.tls.stream = caller


def _hook_graph(roots: Any) -> None:
    tid = threading.get_ident()
    # Called on a side stream, the nodes made on the default stream run on the default
    # stream: then every node is looked at.
    on_side = _cuda.STATE.current() != _cuda.DEFAULT
    lo = 0 if on_side else _lowest(tid)
    if lo is None:
        return
    todo = []
    for r in roots:
        fn = getattr(r, "grad_fn", None) if isinstance(r, torch.Tensor) else getattr(r, "node", None)
        if fn is not None:
            todo.append(fn)
    seen = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        seq = n._sequence_nr()
        if seq < lo:
            continue  # made before every noted range: so were all the nodes it leads to
        if (seq, tid) not in _hooked:
            s = _stream_of(seq, tid)
            if s is None and on_side:
                s = _cuda.DEFAULT
            if s is not None:
                n.register_prehook(_pre(s))
                n.register_hook(_post)
                _hooked.add((seq, tid))
        for nxt, _ in n.next_functions:
            if nxt is not None:
                todo.append(nxt)


def install() -> None:
    import torch.autograd as ag

    _cuda.on_switch = _switched
    orig = ag._engine_run_backward

    def run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if _ranges or getattr(_tls, "start", None) is not None or _cuda.STATE.current() != _cuda.DEFAULT:
            _hook_graph(t_outputs if isinstance(t_outputs, (list, tuple)) else (t_outputs,))
        return orig(t_outputs, *args, **kwargs)

    ag._engine_run_backward = run_backward
