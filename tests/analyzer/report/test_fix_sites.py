"""Where a pasted fix goes: never after a line that returns, at the end of the function whose
return freed a tensor when the streams have no name at the free, and at the line the
recorded source text is on now when the file was edited after recording."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

from npusan.analyzer.findings.grouping import group_findings
from npusan.analyzer.findings.model import Frame
from npusan.analyzer.findings.rootcause import root_causes
from npusan.analyzer.report.describe import fix, fix_site, root_cause_fix, wait_fix
from npusan.analyzer.report.sources import SourceCache

from tests.recorder.conftest import analyze, run_record

from .test_safe_fixes import SIM, line, missing_rs, program


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
    assert lines[0].endswith(f"right before line {at} (it returns, so a line after it would not run), inside the "
                             "`with sim.stream(side):` block (after it, the current stream is another one) add")
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
    assert f"right after line {now}, inside the `with sim.stream(side):` block" in lines[0]
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


STAGE = """
import torch
from npusan import sim


def stage(side, outs):
    tmp = torch.ones(64)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        outs.append(tmp * 2)


def main():
    side = sim.Stream()
    outs = []
    stage(side, outs)
    outs.append(torch.ones(64) * 3)
    sim.synchronize()
    print(float(outs[0].sum()))


main()
"""


def _paste_at_end_of(code: str, function: str, stmt: str) -> str:
    """``stmt`` as the last line of ``function``'s body (at its first body line's indent)."""
    lines = code.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"def {function}("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
    while not lines[end - 1].strip():
        end -= 1
    body = lines[start + 1]
    indent = body[: len(body) - len(body.lstrip())]
    lines.insert(end, indent + stmt)
    return "\n".join(lines) + "\n"


def test_a_free_when_a_callee_returns_waits_inside_the_callee(tmp_path):
    """Recorded: ``tmp`` of stage() is used on ``side`` and freed when stage() returns to
    main()'s line 15. The wait goes at the end of stage(), not before the call line (where
    the use has not happened yet); pasted there, the program records clean."""
    proc, trace = run_record(tmp_path, STAGE)
    assert proc.returncode == 0, proc.stderr
    [f] = analyze(trace)
    assert f.kind.value == "missing-record-stream"
    src = SourceCache([str(tmp_path)])
    call = f"{tmp_path / 'prog.py'}:{line(str(tmp_path / 'prog.py'), '    stage(side, outs)')}"
    for lines in (fix(f, SIM, src), wait_fix(f, SIM, src)):
        text = "\n".join(lines)
        assert f"before stage() returns (the free at {call} is of its local variables" in text
        assert f"before the free at {call}" not in text
        assert "sim.default_stream(0).wait_stream(side)" in text
    proc, fixed = run_record(tmp_path, _paste_at_end_of(STAGE, "stage", "sim.default_stream(0).wait_stream(side)"),
                             trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze(fixed) == []


IN_BLOCK = """
import torch
from npusan import sim


def main():
    side = sim.Stream()
    streams = [side]
    tmp = torch.ones(64)
    side.wait_stream(sim.current_stream())
    with sim.stream(STREAM):
        out = tmp * 2
    del tmp
    more = torch.ones(64)
    sim.current_stream().wait_stream(side)
    print(float(out.sum() + more.sum()))


main()
"""


def _after_the_block(code: str, stmt: str) -> str:
    """``stmt`` pasted after the ``with`` block, at the ``with``'s indentation (a natural
    reading of "right after line N")."""
    lines = code.splitlines()
    at = next(i for i, l in enumerate(lines) if "out = tmp * 2" in l)
    lines.insert(at + 1, "    " + stmt)
    return "\n".join(lines) + "\n"


def test_record_stream_names_the_using_stream_so_it_is_right_at_any_indentation(tmp_path):
    code = IN_BLOCK.replace("STREAM", "side")
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    [f] = analyze(trace)
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip().startswith("tmp.record_stream(side)    # tmp:")
    assert "current_stream" not in lines[1]
    # pasted after the block, where the current stream is the default one: still right
    proc, fixed = run_record(tmp_path, _after_the_block(code, lines[1].strip()), trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze(fixed) == []


def test_record_stream_on_the_current_stream_says_inside_which_block(tmp_path):
    code = IN_BLOCK.replace("STREAM", "streams[0]")
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    [f] = analyze(trace)
    f = replace(f, previous=replace(f.previous, stream=replace(f.previous.stream, created_stack=())))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    at = line(str(tmp_path / "prog.py"), "out = tmp * 2")
    assert lines[0].endswith(f"right after line {at}, inside the `with sim.stream(streams[0]):` block "
                             "(after it, the current stream is another one) add")
    assert lines[1].strip().startswith("tmp.record_stream(sim.current_stream())")


def test_record_stream_on_the_current_stream_outside_a_with_block(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def consume(x):
            return x * 2
        """)
    f = missing_rs(path, "def consume", "return x * 2", "def consume")
    f = replace(f, previous=replace(f.previous, stream=replace(f.previous.stream, created_stack=())))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert "(it returns, so a line after it would not run), while stream #1 (sim:0) is the current stream" in lines[0]
    assert ".record_stream(sim.current_stream())" in lines[1]


PREFETCH = """
import torch
from npusan import sim


def load(i, side):
    with sim.stream(side):
        x = torch.full((64,), float(i))
    return x


def main():
    side = sim.Stream()
    w = torch.ones(64, 64)
    acc = torch.zeros(64)
    nxt = load(0, side)
    for i in range(4):
        sim.current_stream().wait_stream(side)
        cur = nxt
        nxt = load(i + 1, side)
        acc += cur @ w
    sim.synchronize()
    print(float(acc.sum()))


main()
"""


def test_a_tensor_made_by_a_helper_in_a_loop_is_called_by_the_name_the_use_line_reads(tmp_path):
    """Recorded prefetch loop: the tensor is ``x`` in load(), returned as ``nxt``, used as
    ``cur`` (``cur = nxt``) at ``acc += cur @ w``. ``x`` is no variable of main(), and ``nxt``
    holds the next tensor by then: the fix says ``cur``, and pasted, records clean."""
    proc, trace = run_record(tmp_path, PREFETCH)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)  # one per iteration that freed a prefetched tensor
    missing = [f for f in found if f.kind.value == "missing-record-stream"]
    # When the allocator hands a freed block back at once, the reuse it allows is reported too.
    assert missing and {f.kind.value for f in found} <= {"missing-record-stream", "reuse-race"}
    for f in missing:
        lines = fix(f, SIM, SourceCache([str(tmp_path)]))
        assert lines[1].strip().startswith("cur.record_stream(sim.default_stream(0))    # cur: the 256 B tensor")
    code = PREFETCH.splitlines()
    at = next(i for i, l in enumerate(code) if "acc += cur @ w" in l)
    code.insert(at + 1, "        " + lines[1].strip().split("    #")[0])
    proc, fixed = run_record(tmp_path, "\n".join(code) + "\n", trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze(fixed) == []


def test_a_tensor_whose_helper_returns_something_else_is_a_placeholder(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def make(keep):
            buf = sim_alloc()
            keep.append(buf)
            return buf.sum()
        def use(side, keep):
            x = make(keep)
            with sim.stream(side):
                y = x * 2
            del x
        """)
    f = missing_rs(path, "del x", "y = x * 2", "buf = sim_alloc()")
    stack = (Frame(path, line(path, "x = make(keep)"), "use"), Frame(path, line(path, "buf = sim_alloc()"), "make"))
    lines = fix(replace(f, block=replace(f.block, stack=stack)), SIM, SourceCache([str(tmp_path)]))
    # make() returns another tensor than the one its line 3 made: ``x`` is not it
    assert lines[1].strip().startswith("<x>.record_stream(")


CONFTEST = """
import pytest
from npusan import sim


@pytest.fixture
def side():
    s = sim.Stream()
    yield s
    sim.synchronize()
"""

FIXTURE_TEST = """
import torch
from npusan import sim


def test_scale(side):
    out = torch.empty(64)
    side.wait_stream(sim.current_stream())
    with sim.stream(side):
        out.fill_(2.0)
    assert float(out.sum()) == 128.0
"""


def test_a_stream_a_fixture_yields_is_called_by_the_fixture_name(tmp_path):
    """Recorded with the pytest plugin: the stream is ``s`` in the fixture ``side`` of
    conftest.py; the test takes ``side``, so the fix says ``side``, not a placeholder."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST.lstrip("\n"))
    (tmp_path / "tests" / "test_prog.py").write_text(FIXTURE_TEST.lstrip("\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NPUSAN_", "PYTEST_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--npusan",
                           "--npusan-backend", "sim", "--npusan-trace-dir", "traces", "tests"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    [trace] = (tmp_path / "traces").glob("*.npusan")
    [f] = analyze(trace)
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(side)", (lines, proc.stdout)
    assert "where side is stream #1 (sim:0), created at" in "\n".join(lines)
    # a parameter of another name is not the fixture's stream
    test = tmp_path / "tests" / "test_prog.py"
    test.write_text(FIXTURE_TEST.lstrip("\n").replace("(side)", "(side, s1)").replace("def test_scale", "def other"))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(side)"
    test.write_text(FIXTURE_TEST.lstrip("\n").replace("def test_scale(side):", "def test_scale(other):"))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(<s1>)"
    assert "where <s1> is stream #1 (sim:0), created at" in "\n".join(lines)


LOOP = """
import torch
from npusan import sim


def prefetch(i, side):
    with sim.stream(side):
        x = torch.full((64,), float(i))
    return x


def main():
    side = sim.Stream()
    w = torch.ones(64, 64)
    acc = torch.zeros(64)
    nxt = prefetch(0, side)
    for i in range(4):
        cur = nxt
        nxt = prefetch(i + 1, side)
        acc += cur @ w
        cur.record_stream(sim.current_stream())
    sim.synchronize()
    print(float(acc.sum()))


main()
"""


def test_a_wait_in_a_prefetch_loop_goes_before_the_next_prefetch(tmp_path):
    """Recorded prefetch loop with no wait: the read at ``acc += cur @ w`` races with the copy
    an earlier iteration queued. Right before that line, ``nxt = prefetch(i + 1, side)`` has
    already queued the next copy, and a wait there would wait for it too (serializing what
    the loop overlaps): the wait goes right before the prefetch line, where ``side`` holds
    only the copy the read needs; pasted there, the program records clean."""
    proc, trace = run_record(tmp_path, LOOP)
    assert proc.returncode == 0, proc.stderr
    path = str(tmp_path / "prog.py")
    use, queue = line(path, "acc += cur @ w"), line(path, "nxt = prefetch(i + 1, side)")
    src = SourceCache([str(tmp_path)])
    found = analyze(trace)
    assert {f.kind.value for f in found} == {"data-race"}
    in_loop = [f for f in found if f.count > 1]  # the copies of earlier iterations
    [f] = in_loop
    lines = fix(f, SIM, src)
    assert f"right before line {queue} (the loop queues more work on that stream there, after the work line {use} " \
           "needs" in lines[0], lines
    assert lines[1].strip() == "sim.current_stream().wait_stream(side)"
    assert not any("record_event" in x for x in lines)  # the event form is not offered in a loop
    # the root cause (with the copy made before the loop) gets the same single wait
    [rc] = root_causes(group_findings(found))
    text = root_cause_fix(rc, SIM, src)
    assert f"right before line {queue} of {path} (where the loop queues more work on stream #1 (sim:0)" in text[0]
    assert fix_site(rc, SIM, src).lineno == queue
    code = LOOP.splitlines()
    at = next(i for i, l in enumerate(code) if "nxt = prefetch(i + 1, side)" in l)
    code.insert(at, "        " + lines[1].strip())
    proc, fixed = run_record(tmp_path, "\n".join(code) + "\n", trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze(fixed) == []


def test_a_wait_in_a_loop_that_uses_what_it_just_queued_stays_before_the_use(tmp_path):
    """The same loop without the prefetch (``cur = prefetch(i, side)`` then the read): the
    write the read needs is this iteration's, so the wait stays right before the read."""
    code = LOOP.replace("        cur = nxt\n        nxt = prefetch(i + 1, side)\n",
                        "        cur = prefetch(i, side)\n")
    proc, trace = run_record(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    src = SourceCache([str(tmp_path)])
    use = line(str(tmp_path / "prog.py"), "acc += cur @ w")
    for f in analyze(trace):
        assert fix(f, SIM, src)[0].endswith(f"right before line {use} add")
