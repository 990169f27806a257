"""The per-file index of report/pynames.py answers as a walk of the whole tree per question.

Reports quote thousands of lines of one file, so each file is walked once: all its nodes
when it may hold ``:=``, else only its statements. Both walks must find exactly the
bindings :func:`_binding_nodes` finds in each scope's body, and the same loops, ``with``
blocks, defs and statement of each line.
"""

from __future__ import annotations

import ast
import collections
import glob
import os
import textwrap

import pytest

from npusan.analyzer.report import pynames as P

SAMPLE = textwrap.dedent('''
    import os, torch.cuda as tc
    from npusan import sim as s
    from . import x

    @decorate(lambda q: q)
    class A(Base, metaclass=M):
        k = 1
        def m(self, a, *b, c=[d for d in e], **f):
            g: int
            h: int = 2
            i, (j, *k) = l
            m.n = o[p] = 3
            q += 1
            del r, t.u
            for v, w in x:
                with torch.cuda.stream(y) as (z, aa), open(bb) as cc:
                    pass
            else:
                dd = 4
            try:
                ee = 5
            except (E1, E2) as ff:
                gg = [hh for hh in ii]
            except E3:
                pass
            else:
                jj = 6
            finally:
                kk = 7
            while ll:
                mm = lambda nn: nn
                break
            match oo:
                case [pp, *qq] if pp > 0:
                    rr = 8
                case {"k": ss, **tt}:
                    pass
                case Point(x=uu) | vv:
                    pass
                case _:
                    pass
            global ww
            nonlocal xx

    async def b():
        async for yy in zz:
            async with cm() as aaa:
                bbb = await ccc
        def inner():
            ddd = 1
            return ddd
        return inner
''')


def _same(tree: ast.Module) -> None:
    full = P._FileIndex(tree, walrus=True)
    stmts = P._FileIndex(tree, walrus=False)
    scopes = {id(tree): tree.body}
    scopes.update({id(n): n.body for n in ast.walk(tree) if isinstance(n, P._SCOPES[:3])})
    for index in (full, stmts):
        assert set(index.bindings) == set(scopes)
        for key, body in scopes.items():
            want = collections.Counter((name, path, id(node)) for name, path, node in P._binding_nodes(body))
            assert collections.Counter((name, path, id(node)) for name, path, node in index.bindings[key]) == want
    for attr in ("loops", "stream_withs", "functions"):
        assert sorted(map(id, getattr(full, attr))) == sorted(map(id, getattr(stmts, attr)))
    assert {k: id(v) for k, v in full.function_at.items()} == {k: id(v) for k, v in stmts.function_at.items()}
    assert {k: id(v) for k, v in full.statement.items()} == {k: id(v) for k, v in stmts.statement.items()}
    # the full walk is ast.walk's order
    assert list(map(id, full.nodes)) == list(map(id, ast.walk(tree)))


def test_both_walks_find_what_a_walk_per_scope_finds():
    tree = ast.parse(SAMPLE)
    _same(tree)
    index = P._FileIndex(tree, walrus=False)
    m = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "m")
    names = {name for name, _path, _node in index.bindings[id(m)]}
    assert {"g", "h", "i", "j", "k", "q", "r", "v", "w", "z", "aa", "cc", "dd", "ee", "ff", "gg", "jj", "kk", "mm",
            "pp", "qq", "rr", "ss", "uu", "vv"} <= names
    assert not {"d", "hh", "nn", "ww", "xx", "o", "p"} & names  # comprehensions, lambdas, not bindings
    module = {name: path for name, path, _node in index.bindings[id(tree)]}
    assert module["tc"] == "torch.cuda" and module["s"] == "npusan.sim" and module["A"] == P.OTHER


def test_the_walrus_form_needs_the_full_walk():
    tree = ast.parse("def f(a):\n    if (n := len(a)) > 1:\n        return n\n")
    fn = tree.body[0]
    full = {name for name, _path, _node in P._FileIndex(tree, walrus=True).bindings[id(fn)]}
    assert "n" in full
    assert "n" not in {name for name, _path, _node in P._FileIndex(tree, walrus=False).bindings[id(fn)]}


@pytest.mark.parametrize("folder", ["src/npusan/analyzer", "src/npusan/recorder", "tests/analyzer/report"])
def test_both_walks_agree_on_real_files(folder):
    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", folder)
    files = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
    assert files
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if ":=" not in text:
            _same(ast.parse(text))
