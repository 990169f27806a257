"""The compiled stack walk (``_stackkey``) gives the Python loop's keys, frame for frame."""

from __future__ import annotations

import pytest

from npusan.recorder import stacks
from npusan.recorder.stacks import StackCapture

walk = pytest.importorskip("npusan.recorder._stackkey").walk


def _both(cap: StackCapture, skip: int = 0) -> tuple:
    """(compiled key, Python key) of the caller's stack, ``skip`` frames up."""
    compiled = cap.key(skip + 1)
    cap._walk = None
    try:
        python = cap.key(skip + 1)
    finally:
        cap._walk = walk
    return compiled, python


def _deep(n, fn):
    return _deep(n - 1, fn) if n else fn()


class _Sub:
    @classmethod
    def __torch_dispatch__(cls, fn):  # a subclass's own code: it and what it calls folded away
        return _deep(3, fn)


@pytest.mark.parametrize("depth, keep_internal", [(32, False), (3, False), (1, False), (64, True), (2, True)])
def test_compiled_walk_gives_the_python_keys(depth, keep_internal):
    cap = StackCapture(depth=depth, keep_internal=keep_internal)
    assert cap._walk is walk or stacks._walk is None
    for n in (0, 5, 40):
        c, p = _deep(n, lambda: _both(cap))
        assert c == p and 0 < len(c) // 2 <= depth
        assert cap.resolve(c) == cap.resolve(p)
    c, p = _Sub.__torch_dispatch__(lambda: _both(cap))  # the folding of a __torch_dispatch__
    assert c == p
    if not keep_internal:
        assert cap.resolve(c)[-1][2] == "test_compiled_walk_gives_the_python_keys"


def test_compiled_walk_skips_frames_and_survives_a_bad_classifier():
    cap = StackCapture(depth=8)
    c, p = _deep(4, lambda: _both(cap, skip=2))
    assert c == p and [f[2] for f in cap.resolve(c)][-1] == "_deep"

    def boom(code):
        raise RuntimeError("classify failed")

    import sys

    with pytest.raises(RuntimeError, match="classify failed"):
        walk(sys._getframe(), 8, {}, boom)
    with pytest.raises(TypeError):
        walk(None, 8, {}, boom)
