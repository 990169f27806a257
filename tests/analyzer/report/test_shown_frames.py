"""How much of a stack reports show: real stacks whole, forged or very deep ones bounded."""

from __future__ import annotations

from npusan.analyzer.findings.model import Frame
from npusan.analyzer.report.shown_frames import MAX_FRAMES_SHOWN, MAX_NAME_SHOWN, Omitted, shown


def fr(i: int, name: str = "f") -> Frame:
    return Frame(f"/src/m{i}.py", i, name)


def test_a_real_stack_is_shown_as_it_is():
    stack = [fr(i) for i in range(40)] + [fr(40)] * 3  # shallow recursion included
    assert shown(stack) == stack


def test_a_repeated_frame_is_shown_once_with_its_count():
    out = shown([fr(0)] + [fr(1)] * 20_000 + [fr(2)])
    assert out == [fr(0), fr(1), Omitted(19_999, repeated=True), fr(2)]
    assert str(out[2]) == "… the frame above, 19,999 more times"


def test_a_deep_stack_keeps_its_outermost_and_innermost_frames():
    stack = [fr(i) for i in range(1000)]
    out = shown(stack)
    assert len(out) == MAX_FRAMES_SHOWN
    note = out[16]
    assert note == Omitted(1000 - MAX_FRAMES_SHOWN + 1)
    assert out[:16] == stack[:16] and out[17:] == stack[-(MAX_FRAMES_SHOWN - 17):]


def test_an_alternating_cycle_is_bounded_too():
    out = shown([fr(0), fr(1)] * 100_000)
    assert len(out) == MAX_FRAMES_SHOWN
    assert sum(x.count if isinstance(x, Omitted) else 1 for x in out) == 200_000


def test_long_names_are_cut():
    long = Frame("/" + "a" * 4095, 1, "g" * 4096)
    (out,) = shown([long])
    assert len(out.filename) < MAX_NAME_SHOWN + 40 and "more characters" in out.filename
    assert out.function.startswith("g" * MAX_NAME_SHOWN) and out.lineno == 1
