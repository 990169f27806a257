"""Which names a Python source file binds where, so that a suggested fix can be pasted.

A fix like ``sim.current_stream().wait_stream(copy)`` is only safe if, at the line it
goes to, ``sim`` is the program's own name for the module and ``copy`` is not some other
object, and a placeholder the fix invents is not already a variable there (a pasted
``x.record_stream(...)`` that compiles and records the wrong tensor is worse than no fix).
This module answers those questions from the program's source text with :mod:`ast`
(parsed, never executed); when the file cannot be read or parsed it answers nothing, and
the caller says it is unsure.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Optional, Sequence

#: A name bound by something other than an import (an assignment, a parameter, a def).
OTHER = ""

_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Scope:
    """The names visible at one line: ``{name: dotted import path, or OTHER}``.

    Inner scopes override outer ones, as Python resolves them. ``function`` and ``cls``
    identify the innermost enclosing def and class (by their first line), to tell whether
    two lines share local variables or ``self``.
    """

    names: dict
    function: Optional[int] = None
    cls: Optional[int] = None
    params: frozenset = frozenset()  # the innermost function's parameters
    local: frozenset = frozenset()  # every name the innermost function binds itself

    def binds(self, name: str) -> bool:
        return name in self.names or name in _BUILTINS

    def expression(self, dotted: Sequence[str]) -> Optional[str]:
        """The shortest expression that evaluates to one of ``dotted`` (e.g. ``torch.cuda``)
        through the imports visible here, or None."""
        best: Optional[str] = None
        for target in dotted:
            for name, path in self.names.items():
                if not path:
                    continue
                if target == path:
                    expr = name
                elif target.startswith(path + "."):
                    expr = name + target[len(path):]
                else:
                    continue
                if best is None or (len(expr), expr) < (len(best), best):
                    best = expr
        return best

    def fresh(self, base: str) -> str:
        """``base``, or ``base_2``, ``base_3``...: the first name nothing here binds."""
        name, n = base, 1
        while self.binds(name):
            n += 1
            name = f"{base}_{n}"
        return name


def _import_bindings(node: ast.stmt) -> list[tuple]:
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.asname:
                out.append((a.asname, a.name))
            else:
                root = a.name.split(".")[0]
                out.append((root, root))
    elif isinstance(node, ast.ImportFrom):
        base = ("." * node.level) + (node.module or "")
        for a in node.names:
            if a.name != "*":
                out.append((a.asname or a.name, f"{base}.{a.name}" if node.module else base + a.name))
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_AST = ast.AST


def _children(node: ast.AST) -> list:
    """``list(ast.iter_child_nodes(node))``, without a generator per node (reports walk
    the trees of every file they quote)."""
    out = []
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, _AST):
            out.append(value)
        elif isinstance(value, list):
            out.extend([v for v in value if isinstance(v, _AST)])
    return out


def _walk(node: ast.AST) -> list:
    """``list(ast.walk(node))``: the same nodes in the same order (breadth first)."""
    out = [node]
    i = 0
    while i < len(out):
        out.extend(_children(out[i]))
        i += 1
    return out
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _binding_nodes(body: Sequence[ast.AST]):
    """``(name, import path or OTHER, node)`` for each binding a scope's own statements make
    (not descending into nested scopes), ``node`` being where it happens."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, path in _import_bindings(node):
                yield name, path, node
            continue
        if isinstance(node, _SCOPES):
            if not isinstance(node, ast.Lambda):
                yield node.name, OTHER, node
            stack.extend(getattr(node, "decorator_list", []))
            continue
        if isinstance(node, _COMPREHENSIONS):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id, OTHER, node
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, OTHER, node
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name, OTHER, node
        stack.extend(_children(node))


def _walk_binding(tree: ast.Module) -> tuple:
    """``(list(ast.walk(tree)), {id(scope): its bindings})`` in one pass: the nodes in
    :func:`ast.walk`'s order, and for the module and each def and class what
    :func:`_binding_nodes` of its body yields (in another order: every use of them is
    indifferent to it). Each node is walked with the scope whose bindings it may make, or
    None where :func:`_binding_nodes` does not look (imports' parts, comprehensions,
    lambdas, a def's arguments and annotations, a class's bases)."""
    nodes: list = [tree]
    owners: list = [tree]
    bound: dict = {id(tree): []}
    i = 0
    while i < len(nodes):
        node, owner = nodes[i], owners[i]
        i += 1
        scope = isinstance(node, _SCOPES)
        if owner is not None:
            out = bound[id(owner)]
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out.extend((name, path, node) for name, path in _import_bindings(node))
                owner = None
            elif scope:
                if not isinstance(node, ast.Lambda):
                    out.append((node.name, OTHER, node))
            elif isinstance(node, _COMPREHENSIONS):
                owner = None
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                out.append((node.id, OTHER, node))
            elif isinstance(node, ast.ExceptHandler) and node.name:
                out.append((node.name, OTHER, node))
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                out.append((node.name, OTHER, node))
        if scope and not isinstance(node, ast.Lambda):
            bound[id(node)] = []
        for field in node._fields:
            value = getattr(node, field, None)
            if scope:  # its decorators are the enclosing scope's, its body its own
                who = owner if field == "decorator_list" else node if field == "body" \
                    and not isinstance(node, ast.Lambda) else None
            else:
                who = owner
            if isinstance(value, _AST):
                nodes.append(value)
                owners.append(who)
            elif isinstance(value, list):
                for v in value:
                    if isinstance(v, _AST):
                        nodes.append(v)
                        owners.append(who)
    return nodes, bound


#: Statements whose own expressions bind nothing when the file has no ``:=`` (a name is
#: bound in an expression only by an assignment expression).
_NO_TARGETS = (ast.Expr, ast.Return, ast.Raise, ast.Assert, ast.Pass, ast.Break, ast.Continue, ast.Global,
               ast.Nonlocal, ast.If, ast.While, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) \
    + ((ast.Match,) if hasattr(ast, "Match") else ())
#: Statements that bind through targets: their fields that hold them.
_TARGETS = {ast.Assign: "targets", ast.AugAssign: "target", ast.AnnAssign: "target", ast.For: "target",
            ast.AsyncFor: "target", ast.Delete: "targets"}
_MATCH_CASE = getattr(ast, "match_case", ())


def _walk_statements(tree: ast.Module) -> tuple:
    """:func:`_walk_binding` for a file without ``:=``, walking statements only (several
    times fewer nodes): ``(its statements, {id(scope): its bindings})``. Names are bound
    outside expressions, and inside them only at assignment targets, ``with ... as``
    targets and match patterns, which are walked as :func:`_binding_nodes` does; any other
    statement has every expression walked. The statements come breadth first by statement
    nesting, not by :func:`ast.walk`'s order: no answer depends on it (no two loops,
    ``with`` blocks or defs start on one line, and statements sharing a line are siblings,
    kept in order)."""
    stmts: list = []
    bound: dict = {id(tree): []}
    queue = list(tree.body)
    owner_of = [tree] * len(queue)
    i = 0
    while i < len(queue):
        node, owner = queue[i], owner_of[i]
        i += 1
        stmts.append(node)
        out = bound[id(owner)]
        inner = owner
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.extend((name, path, node) for name, path in _import_bindings(node))
            continue
        if isinstance(node, _SCOPES[:3]):
            out.append((node.name, OTHER, node))  # (its decorators are expressions)
            inner = node
            bound[id(node)] = []
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            out.extend(_binding_nodes([it.optional_vars for it in node.items if it.optional_vars is not None]))
        elif type(node) in _TARGETS:
            target = getattr(node, _TARGETS[type(node)])
            out.extend(_binding_nodes(target if isinstance(target, list) else [target]))
        elif not isinstance(node, _NO_TARGETS):  # another statement: all its expressions
            parts = []
            for field in node._fields:
                value = getattr(node, field, None)
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, _AST) and not isinstance(v, (ast.stmt, ast.excepthandler) + (_MATCH_CASE or ())):
                        parts.append(v)
            out.extend(_binding_nodes(parts))
        for field in node._fields:
            value = getattr(node, field, None)
            if not isinstance(value, list):
                continue
            for v in value:
                if isinstance(v, ast.stmt):
                    queue.append(v)
                    owner_of.append(inner)
                elif isinstance(v, ast.ExceptHandler):
                    if v.name:
                        out.append((v.name, OTHER, v))
                    queue.extend(v.body)
                    owner_of.extend([inner] * len(v.body))
                elif _MATCH_CASE and isinstance(v, _MATCH_CASE):
                    out.extend(_binding_nodes([v.pattern]))  # (its guard is an expression)
                    queue.extend(v.body)
                    owner_of.extend([inner] * len(v.body))
    return stmts, bound


def _bindings(body: Sequence[ast.AST], listed: Optional[list] = None) -> dict:
    """Names a scope's own statements bind (not descending into nested scopes); ``listed``:
    what :func:`_binding_nodes` of ``body`` yields, when known."""
    names: dict = {}
    for name, path, _node in (_binding_nodes(body) if listed is None else listed):
        if name in names and names[name] != path:
            names[name] = OTHER  # bound two ways: not a reliable module name
        else:
            names[name] = path
    return names


def _params(fn) -> list[str]:
    a = fn.args
    out = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    out += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return out


class _FileIndex:
    """What the questions about one parsed file look for, collected in one walk of its tree.

    A report asks about thousands of lines of one file; walking the whole tree for each
    question made rendering quadratic. Every answer (ties included) is the one a walk of
    the tree per question gives. ``walrus``: whether the file may hold ``:=`` (else only its
    statements are walked, :func:`_walk_statements`).
    """

    def __init__(self, tree: ast.Module, walrus: bool = True) -> None:
        self.nodes, self.bindings = _walk_binding(tree) if walrus else _walk_statements(tree)
        self.loops = [n for n in self.nodes if isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and n.body]
        self.stream_withs = [n for n in self.nodes if isinstance(n, (ast.With, ast.AsyncWith)) and n.body
                             and any(_calls_stream(item.context_expr) for item in n.items)]
        self.functions = [n for n in self.nodes if isinstance(n, _SCOPES[:2])]
        self.function_at: dict[int, ast.AST] = {}  # first line -> the first def there, in walk order
        for n in self.functions:
            self.function_at.setdefault(n.lineno, n)
        #: line -> the innermost simple statement the line is part of (``statement_at``).
        self.statement: dict[int, ast.stmt] = {}
        for n in self.nodes:
            if not isinstance(n, ast.stmt) or isinstance(n, _COMPOUND):
                continue
            for line in range(n.lineno, (n.end_lineno or n.lineno) + 1):
                best = self.statement.get(line)
                if best is None or n.lineno >= best.lineno:
                    self.statement[line] = n
        self._inner: dict[int, list] = {}  # id(node) -> the defs and classes under it (walk order)

    def inner_scopes(self, node: ast.AST) -> list:
        """The defs and classes in ``node``'s subtree (itself included), in walk order."""
        out = self._inner.get(id(node))
        if out is None:
            out = self._inner[id(node)] = [n for n in _walk(node) if isinstance(n, _SCOPES[:3])]
        return out


class ScopeIndex:
    """Parses each file once and answers :meth:`scope_at` for its lines."""

    def __init__(self, sources) -> None:
        self.sources = sources  # a SourceCache
        self._trees: dict[str, Optional[ast.Module]] = {}
        self._walrus: dict[str, bool] = {}  # filename -> whether its text holds ':='
        #: id(scope node) -> its bindings: a report asks about thousands of lines of one file
        #: (the trees stay in ``_trees``, so their ids stay theirs).
        self._bound: dict[int, dict] = {}
        self._scopes: dict[tuple, Optional[Scope]] = {}  # (filename, lineno) -> scope_at's answer
        self._files: dict[str, Optional[_FileIndex]] = {}
        self._binding_lists: dict[int, list] = {}  # id(scope node) -> list(_binding_nodes(its body))
        self._chains: dict[tuple, Scope] = {}  # ids of a tree and the defs around a line -> its Scope

    def _file(self, filename: str) -> Optional[_FileIndex]:
        """The file's :class:`_FileIndex` (built once), or None when it cannot be parsed."""
        if filename not in self._files:
            tree = self._tree(filename)
            index = self._files[filename] = _FileIndex(tree, self._walrus.get(filename, True)) \
                if tree is not None else None
            if index is not None:
                self._binding_lists.update(index.bindings)
        return self._files[filename]

    def _binding_list(self, scope: ast.AST, body: Sequence[ast.AST]) -> list:
        """``list(_binding_nodes(body))``, computed once per scope (the caller must not change it)."""
        out = self._binding_lists.get(id(scope))
        if out is None:
            out = self._binding_lists[id(scope)] = list(_binding_nodes(body))
        return out

    def _bindings_of(self, scope: ast.AST, body: Sequence[ast.AST]) -> dict:
        """:func:`_bindings` of ``body``, computed once per scope (the caller must not change it)."""
        out = self._bound.get(id(scope))
        if out is None:
            out = self._bound[id(scope)] = _bindings(body, self._binding_lists.get(id(scope)))
        return out

    def _tree(self, filename: str) -> Optional[ast.Module]:
        if filename in self._trees:
            return self._trees[filename]
        tree = None
        lines = self.sources.lines(filename) if self.sources is not None else None
        if lines is not None:
            text = "\n".join(lines)
            self._walrus[filename] = ":=" in text  # (a name bound inside an expression)
            try:
                tree = ast.parse(text, filename=filename)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
        self._trees[filename] = tree
        return tree

    def scope_at(self, filename: str, lineno: int) -> Optional[Scope]:
        """The names visible at ``filename:lineno``, or None when the source is unavailable
        (computed once per line: a scope is frozen, and fixes ask about a line repeatedly)."""
        key = (filename, lineno)
        if key not in self._scopes:
            self._scopes[key] = self._scope_at(filename, lineno)
        return self._scopes[key]

    def _scope_at(self, filename: str, lineno: int) -> Optional[Scope]:
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return None
        self._file(filename)  # (its walk lists every scope's bindings)
        chain = []  # the defs and classes around the line, outermost first
        body: Sequence[ast.AST] = tree.body
        while True:
            inner = next(
                (n for n in body if isinstance(n, _SCOPES[:3])
                 and n.lineno <= lineno <= (n.end_lineno or n.lineno)),
                None,
            )
            if inner is None:
                # Not directly in this body: look inside compound statements (if/with/try).
                inner = _enclosing_def(body, lineno)
            if inner is None:
                break
            chain.append(inner)
            body = inner.body
        key = (id(tree), *map(id, chain))  # (the trees stay in ``_trees``: their ids stay theirs)
        scope = self._chains.get(key)
        if scope is None:
            scope = self._chains[key] = self._scope_of(tree, chain)
        return scope

    def _scope_of(self, tree: ast.Module, chain: Sequence[ast.AST]) -> Scope:
        """The :class:`Scope` of a line inside ``chain``, the defs and classes around it
        (the same for every line of the innermost one's own body: shared, never changed)."""
        names = dict(self._bindings_of(tree, tree.body))
        function = cls = None
        params: frozenset = frozenset()
        local: dict = {}
        for inner in chain:
            if isinstance(inner, ast.ClassDef):
                cls = inner.lineno  # class bodies do not enclose their methods' names
            else:
                function = inner.lineno
                params = frozenset(_params(inner))
                local = {p: OTHER for p in params}
                local.update(self._bindings_of(inner, inner.body))
                names.update(local)
        return Scope(names, function, cls, params, frozenset(local))


    def rebound(self, filename: str, function: Optional[int], name: str, origin: int, site: int) -> bool:
        """Whether ``name`` may be bound to something else at ``site`` than at ``origin``.

        True when the scope (the def starting at line ``function``, or the module for None)
        binds ``name`` anywhere other than at ``origin``, between ``origin`` and ``site``
        (``site`` included: a binding on the fix line itself may run before the pasted
        code). When ``site`` comes first (a loop), any other binding counts. Conservative:
        the order of execution is not followed, only the order of lines.
        """
        fn = self._function(filename, function)
        if fn is None:
            return True
        for bound, _path, node in self._binding_list(fn, fn.body):
            if bound != name:
                continue
            start, end = node.lineno, node.end_lineno or node.lineno
            if start <= origin <= end:
                continue  # the binding the trace points at
            if origin <= site:
                if origin < start <= site or origin < end <= site:
                    return True
            else:
                return True
        return False

    def stream_block_at(self, filename: str, lineno: int) -> Optional[ast.AST]:
        """The innermost ``with`` statement around line ``lineno`` (not on its header line,
        and not outside the def the line is in) one of whose items calls ``...stream(...)``
        (``with torch.cuda.stream(s):``), or None."""
        fi = self._file(filename)
        if fi is None or not isinstance(lineno, int):
            return None
        best = None
        for node in fi.stream_withs:
            if not (node.body[0].lineno <= lineno <= (node.end_lineno or node.lineno)):
                continue
            if best is None or node.lineno > best.lineno:
                best = node
        if best is not None:  # a def between the block and the line: the block is not around it
            for node in fi.inner_scopes(best):
                if isinstance(node, _SCOPES[:2]) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
                    return None
        return best

    def _function(self, filename: str, function: Optional[int]):
        """The def starting at line ``function`` (the module for None), or None."""
        index = self._file(filename)
        if index is None or function is None:
            return self._tree(filename)
        return index.function_at.get(function)

    def names_read(self, filename: str, lineno: int) -> frozenset:
        """The plain names the statement at line ``lineno`` reads (``acc += cur @ w``: acc,
        cur, w), not those of nested defs or lambdas; empty when unknown."""
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return frozenset()
        stmt = self.statement_at(filename, lineno)
        first, last = (stmt.lineno, stmt.end_lineno or stmt.lineno) if stmt is not None else (lineno, lineno)
        out = set()
        stack = [stmt] if stmt is not None else list(ast.walk(tree))
        while stack:
            node = stack.pop()
            if stmt is not None and isinstance(node, _SCOPES):
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and first <= node.lineno <= last:
                out.add(node.id)
            if stmt is not None:
                stack.extend(ast.iter_child_nodes(node))
        return frozenset(out)

    def returns_value_of(self, filename: str, lineno: int, name: Optional[str]) -> Optional[bool]:
        """Whether the function around line ``lineno`` hands the value made there to its
        caller: that line is a ``return``, or the function returns ``name`` (the variable
        the line assigns) and never something else. None when the source is unavailable."""
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return None
        stmt = self.statement_at(filename, lineno)
        if isinstance(stmt, ast.Return):
            return True
        fn = self._innermost_function(filename, lineno)
        if fn is None or name is None:
            return False
        values = [n.value for n in _own_nodes(fn.body) if isinstance(n, ast.Return)]
        return bool(values) and all(isinstance(v, ast.Name) and v.id == name for v in values)

    def aliases(self, filename: str, function: Optional[int], seeds: dict, producers: frozenset) -> dict:
        """Names of the scope (the def at line ``function``, the module for None) that may
        hold a tensor known as ``seeds`` (``{name: line where it is assigned}``), through
        plain assignments (``cur = nxt``, ``a, b = b, a``): ``{name: only}``, ``only`` saying
        whether each of its bindings is one of those (a seed's line, an assignment from such
        a name, or a call of one of ``producers``, the functions that made the tensor)."""
        fn = self._function(filename, function)
        if fn is None:
            return {}
        body = fn.body
        pairs = []  # (target name, line range, source: a Name id, a producer call, or None)
        others = []  # (name, node) bound some other way
        assigned = set()
        for node in _own_nodes(body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for t, v in _pairs(target, node.value):
                        assigned.add(id(t))
                        pairs.append((t.id, t.lineno, v))
        for name, _path, node in self._binding_list(fn, body):
            if id(node) not in assigned and not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del)):
                others.append((name, node))  # (``del name`` unbinds: reading it after that fails)
        found = {n for n in seeds}
        changed = True
        while changed:
            changed = False
            for target, _line, v in pairs:
                if target not in found and isinstance(v, ast.Name) and v.id in found:
                    found.add(target)
                    changed = True
        out = {}
        for name in found:
            only = not any(n == name for n, _node in others)
            for target, line, v in pairs:
                if target != name or not only:
                    continue
                if seeds.get(name) == line:
                    continue
                if isinstance(v, ast.Name) and v.id in found:
                    continue
                if isinstance(v, ast.Call) and _called(v) in producers:
                    continue
                only = False
            out[name] = only
        return out

    def in_one_loop(self, filename: str, a: int, b: int) -> bool:
        """Whether lines ``a`` and ``b`` are in the body of one ``for``/``while`` loop of the
        same function (so one may run again between two runs of the other)."""
        fi = self._file(filename)
        if fi is None:
            return True
        for node in fi.loops:
            lo, hi = node.body[0].lineno, node.end_lineno or node.lineno
            if lo <= a <= hi and lo <= b <= hi:
                inner = [n for n in fi.inner_scopes(node)
                         if (n.lineno <= a <= (n.end_lineno or n.lineno)) != (n.lineno <= b <= (n.end_lineno or n.lineno))]
                if not inner:
                    return True
        return False

    def loop_at(self, filename: str, lineno: int) -> Optional[tuple]:
        """``(header line, first body line, last line)`` of the innermost ``for``/``while``
        loop whose body holds line ``lineno`` with no def between them, or None."""
        fi = self._file(filename)
        if fi is None or not isinstance(lineno, int):
            return None
        best = None
        for node in fi.loops:
            lo, hi = node.body[0].lineno, node.end_lineno or node.lineno
            if lo <= lineno <= hi and (best is None or node.lineno > best.lineno):
                best = node
        if best is None or any(n.lineno <= lineno <= (n.end_lineno or n.lineno) for n in fi.inner_scopes(best)):
            return None
        return best.lineno, best.body[0].lineno, best.end_lineno or best.lineno

    def fixture_name(self, filename: str, lineno: int, name: Optional[str]) -> Optional[str]:
        """The name a test receives the object made at line ``lineno`` under, when that line is
        in a ``@pytest.fixture`` function that returns or yields it (``name``: the variable the
        line assigns): the fixture's ``name=`` or its function's name. Else None."""
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return None
        fn = self._innermost_function(filename, lineno)
        if fn is None:
            return None
        fixture = None
        for dec in fn.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call is not None else dec
            if _called_name(target) == "fixture":
                fixture = fn.name
                for kw in (call.keywords if call is not None else []):
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        fixture = kw.value.value
        if fixture is None:
            return None
        stmt = self.statement_at(filename, lineno)
        if ends_here(stmt) and not isinstance(stmt, ast.Raise):
            return fixture  # ``return sim.Stream()`` / ``yield sim.Stream()``
        outs = [n.value for n in _own_nodes(fn.body) if isinstance(n, (ast.Return, ast.Yield))]
        outs = [v for v in outs if v is not None]
        if name and outs and all(isinstance(v, ast.Name) and v.id == name for v in outs):
            return fixture
        return None

    def statement_at(self, filename: str, lineno: int) -> Optional[ast.stmt]:
        """The innermost simple statement (not a def, class, if, loop or with) that line
        ``lineno`` of ``filename`` is part of, or None."""
        fi = self._file(filename)
        if fi is None or not isinstance(lineno, int):
            return None
        return fi.statement.get(lineno)

    def _innermost_function(self, filename: str, lineno: int):
        """The innermost def (not class) whose lines hold line ``lineno``, or None."""
        fn = None
        for node in self._file(filename).functions:
            if node.lineno <= lineno <= (node.end_lineno or node.lineno):
                if fn is None or node.lineno > fn.lineno:
                    fn = node
        return fn


#: Statements with a body of statements: a line in one is in one of its simple statements.
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
             ast.While, ast.With, ast.AsyncWith, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) \
            + ((ast.Match,) if hasattr(ast, "Match") else ())


def _own_nodes(body: Sequence[ast.AST]):
    """Every node of a scope's own statements (not descending into nested defs, classes,
    lambdas)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        stack.extend([child for child in _children(node) if not isinstance(child, _SCOPES)])


def _pairs(target: ast.AST, value: ast.AST):
    """``(Name target, value expression)`` for a plain assignment, element-wise for
    ``a, b = c, d``; a target bound to an unknown part gets None."""
    if isinstance(target, ast.Name):
        yield target, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
            and not any(isinstance(e, ast.Starred) for e in target.elts + value.elts)
        for i, t in enumerate(target.elts):
            t = t.value if isinstance(t, ast.Starred) else t
            yield from _pairs(t, value.elts[i] if same else None)


def _called_name(func: ast.AST) -> Optional[str]:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _called(call: ast.Call) -> Optional[str]:
    return _called_name(call.func)


def _calls_stream(expr: ast.AST) -> bool:
    if not isinstance(expr, ast.Call):
        return False
    f = expr.func
    return (isinstance(f, ast.Attribute) and f.attr == "stream") or (isinstance(f, ast.Name) and f.id == "stream")


def ends_here(stmt: Optional[ast.stmt]) -> bool:
    """Whether nothing after ``stmt`` runs once it ran (``return``, ``raise``), or not
    surely (``yield``: the generator may never be resumed)."""
    if isinstance(stmt, (ast.Return, ast.Raise)):
        return True
    value = getattr(stmt, "value", None)
    return isinstance(value, (ast.Yield, ast.YieldFrom))


#: Statements that cannot hold a def (not walked when looking for one).
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Delete, ast.Raise, ast.Assert,
           ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Pass, ast.Break, ast.Continue)


def _enclosing_def(body: Sequence[ast.AST], lineno: int):
    for node in body:
        if isinstance(node, _SCOPES[:3] + _SIMPLE):
            continue
        if not (getattr(node, "lineno", 0) <= lineno <= (getattr(node, "end_lineno", 0) or 0)):
            continue
        for child in ast.walk(node):
            if isinstance(child, _SCOPES[:3]) and child.lineno <= lineno <= (child.end_lineno or child.lineno):
                return child
    return None


__all__ = ["OTHER", "Scope", "ScopeIndex", "ends_here"]
