"""Where a pasted fix goes: never after a line that returns, at the end of the function whose
return freed a tensor when the streams have no name at the free, and at the line the
recorded source text is on now when the file was edited after recording."""

from __future__ import annotations

from dataclasses import replace

from npusan.analyzer.findings import Frame
from npusan.analyzer.reporters.describe import fix, wait_fix
from npusan.analyzer.sources import SourceCache

from .test_safe_fixes import SIM, line, missing_rs, program, race_at


RETURNS = """
    from npusan import sim
    def step(side, x):
        with sim.stream(side):
            out = x * 2
            return out.sum()
    """


def test_record_stream_goes_before_a_return_line(tmp_path):
    path = program(tmp_path, RETURNS)
    f = missing_rs(path, "return out.sum()", "return out.sum()", "out = x * 2")
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    at = line(path, "return out.sum()")
    assert lines[0].endswith(f"right before line {at} (it returns, so a line after it would not run) add")
    assert lines[1].strip().startswith("out.record_stream(sim.current_stream())")


def test_record_stream_before_a_raise_or_yield(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def gen(side, x):
            with sim.stream(side):
                out = x * 2
                yield out.sum()
            raise ValueError(out.max())
        """)
    for use in ("yield out.sum()", "raise ValueError"):
        f = missing_rs(path, "yield", use, "out = x * 2")
        first = fix(f, SIM, SourceCache([str(tmp_path)]))[0]
        assert f"right before line {line(path, use)} (it " in first, first


def test_record_stream_after_the_last_line_of_a_statement_that_spans_several(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def step(side, x):
            with sim.stream(side):
                out = x * 2
                y = torch.cat([
                    out.sum(0),
                    out.sum(1),
                ])
            return y
        """)
    f = missing_rs(path, "return y", "out.sum(0)", "out = x * 2")
    first = fix(f, SIM, SourceCache([str(tmp_path)]))[0]
    assert f"right after line {line(path, '])')} (where the statement at line {line(path, 'out.sum(0)')} ends)" in first


def test_a_return_line_is_recognized_from_the_recorded_text_when_the_file_is_unreadable(tmp_path):
    f = missing_rs(program(tmp_path, RETURNS), "return out.sum()", "return out.sum()", "out = x * 2")
    gone = Frame("/nonexistent/prog.py", 5, "step", text="        return out.sum()")
    f = replace(f, previous=replace(f.previous, stack=(gone,)))
    first = fix(f, SIM, SourceCache([str(tmp_path)]))[0]
    assert "right before line 5 (it returns" in first


MAIN = """
    import torch
    from npusan import sim

    def main():
        side = sim.Stream()
        with sim.stream(side):
            out = torch.ones(4)
        total = out.sum()
        return total

    main()
    """


def _freed_when_main_returns(path):
    """``out``, allocated on ``side`` in main(), used on the default stream there, freed when
    main() returns to the module-level call."""
    f = missing_rs(path, "main()", "total = out.sum()", "out = torch.ones(4)")
    call = Frame(path, len(open(path).read().splitlines()), "<module>")
    assert "main()" in open(path).read().splitlines()[call.lineno - 1]
    use = Frame(path, line(path, "total = out.sum()"), "main")
    side = replace(f.previous.stream, created_stack=(call, Frame(path, line(path, "side = sim.Stream()"), "main")))
    default = f.access.stream
    return replace(f, access=replace(f.access, stream=side, stack=(call,)),
                   previous=replace(f.previous, stream=default, stack=(call, use)),
                   block=replace(f.block, stream=side, stack=(call, Frame(path, line(path, "out = torch"), "main"))))


def test_a_free_at_a_function_return_waits_inside_that_function(tmp_path):
    path = program(tmp_path, MAIN)
    f = _freed_when_main_returns(path)
    text = "\n".join(fix(f, SIM, SourceCache([str(tmp_path)])))
    assert "`side.wait_stream(sim.default_stream(0))`" in text
    assert "before main() returns" in text
    assert "s1" not in text
    text = "\n".join(wait_fix(f, SIM, SourceCache([str(tmp_path)])))
    assert "before main() returns" in text and "side.wait_stream(sim.default_stream(0))" in text


EDITED_BEFORE = """
    from npusan import sim
    def step(side, x):
        out = x * 2
        with sim.stream(side):
            y = out.sum()
        del out
    """


def _recorded(path):
    """A missing record_stream whose frames carry the recorded text of their lines."""
    f = missing_rs(path, "del out", "y = out.sum()", "out = x * 2")
    src = open(path).read().splitlines()

    def rec(fr):
        return replace(fr, text=src[fr.lineno - 1]) if fr.filename == path else fr

    return replace(f, access=replace(f.access, stack=tuple(map(rec, f.access.stack))),
                   previous=replace(f.previous, stack=tuple(map(rec, f.previous.stack))),
                   block=replace(f.block, stack=tuple(map(rec, f.block.stack))))


def test_fix_follows_the_recorded_line_when_the_file_was_edited(tmp_path):
    path = program(tmp_path, EDITED_BEFORE)
    f = _recorded(path)
    before = line(path, "y = out.sum()")
    code = open(path).read().splitlines()
    code[2:2] = ["    # two lines", "    # added after recording"]
    open(path, "w").write("\n".join(code) + "\n")
    now = line(path, "y = out.sum()")
    assert now == before + 2
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    text = "\n".join(lines)
    assert f"right after line {now} add" in lines[0]
    assert lines[1].strip().startswith("out.record_stream(sim.current_stream())")
    assert f"changed since the trace was recorded: its line {before} `y = out.sum()` is line {now} now" in text


def test_a_line_that_is_gone_makes_the_file_unreadable_for_the_fix(tmp_path):
    path = program(tmp_path, EDITED_BEFORE)
    f = _recorded(path)
    at = line(path, "y = out.sum()")
    code = open(path).read().splitlines()
    code[at - 1] = "        y = out.mean()"
    code[2:2] = ["    out2 = None"]
    open(path, "w").write("\n".join(code) + "\n")
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    text = "\n".join(lines)
    assert "<x>.record_stream(" in lines[1]  # no name from a file that no longer has the line
    assert "changed since the trace was recorded, so the names and line numbers in this fix are not checked" in text
    assert f"line {at} `y = out.sum()` is no longer in it" in text


def test_locate_takes_the_nearest_copy_of_the_recorded_line_and_never_guesses_between_two(tmp_path):
    p = tmp_path / "m.py"
    fr = Frame(str(p), 5, "f", text="  y  = out.sum()")  # whitespace runs do not count
    cache = lambda: SourceCache([str(tmp_path)])  # noqa: E731 (one read per cache)
    p.write_text("a\nb\nc\nd\ny = out.sum()\n")
    assert cache().locate(fr) == 5
    p.write_text("y = out.sum()\nb\nc\nd\ne\nf\ny = out.sum()\n")
    assert cache().locate(fr) == 7  # two copies: the nearer one
    p.write_text("a\nb\ny = out.sum()\nd\ne\nf\ny = out.sum()\n")
    assert cache().locate(fr) is None  # equally near: not guessed
    p.write_text("a\nb\n")
    assert cache().locate(fr) is None
    assert cache().locate(replace(fr, text=None)) == 5  # nothing recorded: nothing to check
