"""Fixes safe to paste: the program's own names for the module, streams and tensors; never a
placeholder that is already a variable at that line; a plain "not checked" when unsure."""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace

import pytest

from npusan.analyzer.findings.model import Frame
from npusan.analyzer.report.pynames import OTHER, ScopeIndex
from npusan.analyzer.report.describe import fix, wait_fix
from npusan.analyzer.report.sources import SourceCache
from tests.cli.npusan_scenarios import make_finding
from tests.recorder.conftest import analyze, run_record


def program(tmp_path, code: str, name: str = "prog.py") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(code).lstrip("\n"))
    return str(p)


def line(path: str, text: str) -> int:
    return next(i for i, l in enumerate(open(path).read().splitlines(), 1) if text in l)


def race_at(path: str, later: str, earlier: str, created: str, *, later_file=None):
    """A data race: read at ``later`` on the default stream after a write at ``earlier`` on
    a side stream created at ``created`` (lines found by their text)."""
    lf = later_file or path
    f = make_finding(later=(lf, line(lf, later), "f"), earlier=(path, line(path, earlier), "g"))
    side = replace(f.access.stream, created_stack=(Frame(path, line(path, created), "main"),))
    return replace(f, access=replace(f.access, stream=f.previous.stream), previous=replace(f.previous, stream=side))


def missing_rs(path: str, free: str, use: str, allocated: str):
    """A missing record_stream: allocated at ``allocated``, used on a side stream at ``use``,
    freed at ``free`` (lines found by their text)."""
    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=2,
                     later=(path, line(path, free), "f"), earlier=(path, line(path, use), "f"),
                     earlier_op="aten::mul.Tensor", earlier_type="read")
    return replace(f, block=replace(f.block, stack=(Frame(path, line(path, allocated), "f"),)))


SIM = {"backend": "sim"}


@pytest.mark.parametrize(
    "imports, expect",
    [
        ("from npusan import sim", "sim.current_stream()"),
        ("import npusan.sim as S", "S.current_stream()"),
        ("import npusan", "npusan.sim.current_stream()"),
        ("from npusan import sim as device", "device.current_stream()"),
    ],
)
def test_module_is_called_by_the_name_the_program_imports(tmp_path, imports, expect):
    path = program(tmp_path, f"""
        {imports}
        def main():
            side = make_stream()
            out.fill_(1)
            y = out.sum()
        """)
    lines = fix(race_at(path, "y = out.sum()", "out.fill_(1)", "side = make_stream()"), SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == f"{expect}.wait_stream(side)"
    assert "does not import" not in "\n".join(lines)


def test_npu_module_through_torch_npu_alias(tmp_path):
    path = program(tmp_path, """
        import torch_npu as tnpu
        def main():
            s = tnpu.npu.Stream()
            out.fill_(1)
            y = out.sum()
        """)
    lines = fix(race_at(path, "y = out.sum()", "out.fill_(1)", "s = tnpu"), {"backend": "npu"}, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "tnpu.npu.current_stream().wait_stream(s)"


def test_a_module_the_file_does_not_import_is_named_in_full_and_said_so(tmp_path):
    path = program(tmp_path, """
        import torch
        def main(sim):          # a parameter named like the module is not the module
            side = make()
            out.fill_(1)
            y = out.sum()
        """)
    lines = fix(race_at(path, "y = out.sum()", "out.fill_(1)", "side = make()"), SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "npusan.sim.current_stream().wait_stream(side)"
    assert any("does not import npusan.sim under a name visible at line 5: add `import npusan.sim`" in x
               for x in lines)


def test_stream_variable_not_visible_at_the_fix_line_becomes_a_fresh_placeholder(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def consume(out, s1):
            return out.sum()
        def main():
            side = sim.Stream()
            out.fill_(1)
        """)
    f = race_at(path, "return out.sum()", "out.fill_(1)", "side = sim.Stream()")
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    # ``side`` is not a variable in consume(), and ``s1`` (a parameter) is another object: the
    # placeholder is visibly one, whatever the program's names
    assert lines[1].strip() == "sim.current_stream().wait_stream(<s1>)"
    assert "where <s1> is stream #1 (sim:0), created at" in "\n".join(lines)
    # the event variant needs both lines in one function: not offered here
    assert not any("record_event" in x for x in lines)


def test_a_variable_holding_a_list_of_streams_is_not_named_as_the_stream(tmp_path):
    """``streams = [sim.Stream() for _ in range(2)]`` creates the side stream, but
    ``streams`` holds a list: a fix that passes it where a stream goes would fail when
    pasted, so the stream gets a placeholder (a new user's program)."""
    path = program(tmp_path, """
        from npusan import sim
        def main(out):
            streams = [sim.Stream() for _ in range(2)]
            for s in streams:
                with sim.stream(s):
                    out.fill_(1)
                total = out.sum()
        """)
    f = race_at(path, "total = out.sum()", "out.fill_(1)", "streams = [sim.Stream()")
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(<s1>)"
    assert "streams" not in "\n".join(lines[:2])


#: ``x`` in use() is made by make(), where the allocation line calls it ``buf``.
HELPER_MADE = """
    from npusan import sim
    def make():
        buf = sim_alloc()
        return buf
    def use(side):
        x = make()
        with sim.stream(side):
            y = x * 2
        del x
    """


def test_placeholder_tensor_never_collides_with_a_variable(tmp_path):
    path = program(tmp_path, HELPER_MADE)
    f = missing_rs(path, "del x", "y = x * 2", "buf = sim_alloc()")
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    # the allocation line calls it ``buf``, but that variable lives in make(); the stack does not
    # say which of use()'s variables holds it (``x`` is one), so the placeholder is visibly one
    assert lines[1].strip().startswith("<x>.record_stream(sim.current_stream())    # <x>: the 4.0 KiB tensor")
    assert "buf" not in lines[1]


def test_tensor_allocated_in_the_same_function_is_called_by_its_variable(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def step(side):
            tmp = sim_alloc()
            with sim.stream(side):
                y = tmp * 2
            del tmp
        """)
    f = missing_rs(path, "del tmp", "y = tmp * 2", "tmp = sim_alloc()")
    side = replace(f.previous.stream, created_stack=())
    f = replace(f, previous=replace(f.previous, stream=side))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip().startswith("tmp.record_stream(sim.current_stream())")
    assert "sim.default_stream(0).wait_stream(<s1>)" in lines[2]


def test_self_attributes_are_used_within_the_same_class(tmp_path):
    path = program(tmp_path, """
        import torch
        class Loader:
            def __init__(self):
                self.copy_stream = torch.cuda.Stream()
            def next(self, out):
                out.fill_(1)
                return out.sum()
        """)
    f = race_at(path, "return out.sum()", "out.fill_(1)", "self.copy_stream = ")
    lines = fix(f, {"backend": "cuda"}, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "torch.cuda.current_stream().wait_stream(self.copy_stream)"
    assert "`event = torch.cuda.current_stream().record_event()`" in lines[2]


def test_unreadable_source_gives_placeholders_that_cannot_compile(tmp_path):
    f = race_at(program(tmp_path, "a = 1\nb = 2\nc = 3\n"), "c = 3", "b = 2", "a = 1")
    f = replace(f, access=replace(f.access, stack=(Frame("/nonexistent/t.py", 3, "f"),)),
                previous=replace(f.previous, stack=(Frame("/nonexistent/t.py", 2, "f"),)))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "npusan.sim.current_stream().wait_stream(<s1>)"
    # the event is a new variable: a real name (as when the source is read), unchecked like the rest
    assert "`event = npusan.sim.current_stream().record_event()`" in lines[2]
    assert ("(/nonexistent/t.py was not found under the source root, so the names in this fix are not "
                         "checked against it: --map-path OLD=NEW says where files recorded under OLD lie here)") in lines


def test_an_unread_sources_event_is_valid_python_and_avoids_the_recorded_lines_names(tmp_path):
    f = race_at(program(tmp_path, "a = 1\nb = 2\nc = 3\n"), "c = 3", "b = 2", "a = 1")
    f = replace(f, access=replace(f.access, stack=(Frame("/nonexistent/t.py", 3, "f", text="y = event.sum()"),)),
                previous=replace(f.previous, stack=(Frame("/nonexistent/t.py", 2, "f", text="event_2.fill_(1)"),)))
    lines = fix(f, SIM, SourceCache([str(tmp_path)]))
    assert "`event_3 = npusan.sim.current_stream().record_event()`" in lines[2]
    assert "wait_event(event_3)`" in lines[2]
    for code in re.findall(r"`([^`]*event[^`]*)`", lines[2]):
        compile(code, "<fix>", "exec")  # pasted as it is, it runs


def test_a_file_outside_the_source_root_is_named_as_such(tmp_path):
    (tmp_path / "root").mkdir()
    f = race_at(program(tmp_path, "a = 1\nb = 2\nc = 3\n"), "c = 3", "b = 2", "a = 1")
    lines = fix(f, SIM, SourceCache([str(tmp_path / "root")]))
    assert lines[1].strip() == "npusan.sim.current_stream().wait_stream(<s1>)"
    assert any(x.endswith("prog.py is outside the source root, so the names in this fix are not checked against it: "
                          "--source-root DIR lets npusan read it)") for x in lines)


def test_scope_index_bindings(tmp_path):
    path = program(tmp_path, """
        import os.path
        from . import helpers
        import torch as T, numpy
        x = 1
        def f(a, *args, k=1, **kw):
            import npusan.sim as sim
            for i in range(3):
                y = i
            with open(a) as fh:
                pass
            try:
                pass
            except OSError as err:
                pass
            def inner():
                z = 1
            return [q for q in args]
        class C:
            attr = 1
            def m(self):
                pass
        """)
    idx = ScopeIndex(SourceCache([str(tmp_path)]))
    top = idx.scope_at(path, line(path, "x = 1"))
    assert top.names["os"] == "os" and top.names["T"] == "torch" and top.names["helpers"] == ".helpers"
    assert top.names["x"] == OTHER and "a" not in top.names
    body = idx.scope_at(path, line(path, "y = i"))
    for name in ("a", "args", "k", "kw", "i", "y", "fh", "err", "inner"):
        assert body.names[name] == OTHER, name
    assert body.names["sim"] == "npusan.sim" and "z" not in body.names and "q" not in body.names
    method = idx.scope_at(path, line(path, "def m(self)") + 1)
    assert method.cls == line(path, "class C:") and "attr" not in method.names and method.names["self"] == OTHER
    assert body.fresh("y") == "y_2" and body.fresh("len") == "len_2" and body.fresh("w") == "w"
    assert idx.scope_at(str(tmp_path / "missing.py"), 1) is None
    bad = program(tmp_path, "def (:\n", name="bad.py")
    assert idx.scope_at(bad, 1) is None


def test_root_cause_fix_before_a_free_names_the_allocating_stream(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def step(side):
            tmp = alloc()
            del tmp
        """)
    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=2,
                     later=(path, line(path, "del tmp"), "step"), earlier=(path, 1, "x"))
    lines = wait_fix(f, SIM, SourceCache([str(tmp_path)]))
    assert "before the free at" in lines[0]
    assert lines[1].strip() == "sim.default_stream(0).wait_stream(<s1>)"


PASTE_PROGRAM = """
import torch
import npusan.sim as nsim


def scale(x, out, side):
    side.wait_stream(nsim.current_stream())
    with nsim.stream(side):
        torch.mul(x, 2.0, out=out)
    return out.sum()


def main():
    side = nsim.Stream()
    x = torch.ones(64)
    out = torch.empty(64)
    print(float(scale(x, out, side)))


main()
"""


def test_pasting_the_suggested_fix_removes_the_race(tmp_path):
    """Record a real race, paste the fix's code line where it says, record again: clean."""
    proc, trace = run_record(tmp_path, PASTE_PROGRAM)
    assert proc.returncode == 0, proc.stderr
    found = analyze(trace)
    # a data race, and missing record_stream for x and out when main() returns: one root cause
    assert sorted(f.kind.value for f in found) == ["data-race", "missing-record-stream", "missing-record-stream"]
    race = next(f for f in found if f.kind.value == "data-race")
    src = tmp_path / "prog.py"
    lines = fix(race, {"backend": "sim"}, SourceCache([str(tmp_path)]))
    at = int(lines[0].split("right before line ")[1].split()[0])
    code = lines[1].strip()
    assert code == "nsim.current_stream().wait_stream(side)"
    text = src.read_text().splitlines()
    indent = text[at - 1][: len(text[at - 1]) - len(text[at - 1].lstrip())]
    text.insert(at - 1, indent + code)
    fixed = "\n".join(text) + "\n"
    proc, trace = run_record(tmp_path, fixed, trace=tmp_path / "fixed.npusan")
    assert proc.returncode == 0, proc.stderr
    assert analyze(trace) == []  # the one wait fixed all three
    # and the program still computes the same thing
    assert proc.stdout.strip().splitlines()[-1] == "128.0"


def test_a_stream_name_is_trusted_only_as_a_parameter_or_an_unshadowed_global(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        copy = sim.Stream()
        def use_global(out):
            return out.sum()
        def shadowed(out):
            copy = out.clone()      # a tensor named like the stream
            return out.sum()
        def other():
            side = sim.Stream()
            out.fill_(1)
        def passed(out, side):
            return out.sum()
        def unrelated(out):
            side = out * 2          # not the stream created in other()
            return side.sum()
        """)
    lines = fix(race_at(path, "return out.sum()", "out.fill_(1)", "copy = sim.Stream()"), SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(copy)"
    f = race_at(path, "return out.sum()", "out.fill_(1)", "copy = sim.Stream()")
    at = line(path, "copy = out.clone()") + 1
    f = replace(f, access=replace(f.access, stack=(Frame(path, at, "shadowed"),)))
    assert fix(f, SIM, SourceCache([str(tmp_path)]))[1].strip() == "sim.current_stream().wait_stream(<s1>)"
    f = race_at(path, "return out.sum()", "out.fill_(1)", "side = sim.Stream()")
    at = line(path, "def passed(") + 1
    f = replace(f, access=replace(f.access, stack=(Frame(path, at, "passed"),)))
    assert fix(f, SIM, SourceCache([str(tmp_path)]))[1].strip() == "sim.current_stream().wait_stream(side)"
    f = replace(f, access=replace(f.access, stack=(Frame(path, line(path, "return side.sum()"), "unrelated"),)))
    assert fix(f, SIM, SourceCache([str(tmp_path)]))[1].strip() == "sim.current_stream().wait_stream(<s1>)"


@pytest.mark.parametrize("rebinding", ["s = sim.Stream()  # another stream", 's = "done"', "for s in range(2): pass"])
def test_a_stream_variable_assigned_again_before_the_fix_line_becomes_a_placeholder(tmp_path, rebinding):
    path = program(tmp_path, f"""
        from npusan import sim
        def main():
            s = sim.Stream()
            out.fill_(1)
            {rebinding}
            y = out.sum()
        """)
    lines = fix(race_at(path, "y = out.sum()", "out.fill_(1)", "s = sim.Stream()"), SIM, SourceCache([str(tmp_path)]))
    # ``s`` at the fix line is no longer the stream that raced: waiting on it would paste and be wrong
    assert lines[1].strip() == "sim.current_stream().wait_stream(<s1>)"
    assert "where <s1> is stream #1 (sim:0), created at" in "\n".join(lines)


def test_a_stream_variable_assigned_again_after_the_fix_line_is_still_used(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def main():
            s = sim.Stream()
            out.fill_(1)
            y = out.sum()
            s = None
        """)
    lines = fix(race_at(path, "y = out.sum()", "out.fill_(1)", "s = sim.Stream()"), SIM, SourceCache([str(tmp_path)]))
    assert lines[1].strip() == "sim.current_stream().wait_stream(s)"


def test_a_tensor_variable_assigned_again_before_the_use_becomes_a_placeholder(tmp_path):
    path = program(tmp_path, """
        from npusan import sim
        def step(side):
            tmp = sim_alloc()
            keep = tmp
            tmp = other()
            with sim.stream(side):
                y = keep * 2
            del keep
        """)
    lines = fix(missing_rs(path, "del keep", "y = keep * 2", "tmp = sim_alloc()"), SIM, SourceCache([str(tmp_path)]))
    # ``tmp`` is another tensor at the use; ``keep = tmp`` holds it, and the use line reads it
    assert lines[1].strip().startswith("keep.record_stream(sim.current_stream())    # keep: the 4.0 KiB tensor")


def test_a_tensor_made_by_a_helper_is_called_by_the_callers_variable(tmp_path):
    path = program(tmp_path, HELPER_MADE)
    f = missing_rs(path, "del x", "y = x * 2", "buf = sim_alloc()")
    stack = (Frame(path, line(path, "x = make()"), "use"), Frame(path, line(path, "buf = sim_alloc()"), "make"))
    lines = fix(replace(f, block=replace(f.block, stack=stack)), SIM, SourceCache([str(tmp_path)]))
    # the allocation stack passes through ``x = make()`` in the fix's own function
    assert lines[1].strip().startswith("x.record_stream(sim.current_stream())    # x: the 4.0 KiB tensor")


def test_scope_index_rebound(tmp_path):
    path = program(tmp_path, """
        g = 1
        def f(a):
            s = 1
            t = 2
            s += 1
            return s
        g = 2
        """)
    idx = ScopeIndex(SourceCache([str(tmp_path)]))
    assert idx.rebound(path, 2, "s", 3, 4) is False
    assert idx.rebound(path, 2, "s", 3, 5) is True      # ``s += 1`` on the fix line counts
    assert idx.rebound(path, 2, "t", 4, 6) is False
    assert idx.rebound(path, 2, "a", 2, 6) is False     # the parameter is never reassigned
    assert idx.rebound(path, 2, "s", 5, 3) is True      # fix line first (a loop): any other binding
    assert idx.rebound(path, None, "g", 1, 0) is True
