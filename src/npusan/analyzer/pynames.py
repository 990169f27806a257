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
        stack.extend(ast.iter_child_nodes(node))


def _bindings(body: Sequence[ast.AST]) -> dict:
    """Names a scope's own statements bind (not descending into nested scopes)."""
    names: dict = {}
    for name, path, _node in _binding_nodes(body):
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


class ScopeIndex:
    """Parses each file once and answers :meth:`scope_at` for its lines."""

    def __init__(self, sources) -> None:
        self.sources = sources  # a SourceCache
        self._trees: dict[str, Optional[ast.Module]] = {}

    def _tree(self, filename: str) -> Optional[ast.Module]:
        if filename in self._trees:
            return self._trees[filename]
        tree = None
        lines = self.sources.lines(filename) if self.sources is not None else None
        if lines is not None:
            try:
                tree = ast.parse("\n".join(lines), filename=filename)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
        self._trees[filename] = tree
        return tree

    def scope_at(self, filename: str, lineno: int) -> Optional[Scope]:
        """The names visible at ``filename:lineno``, or None when the source is unavailable."""
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return None
        names = dict(_bindings(tree.body))
        function = cls = None
        params: frozenset = frozenset()
        local: dict = {}
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
            if isinstance(inner, ast.ClassDef):
                cls = inner.lineno  # class bodies do not enclose their methods' names
            else:
                function = inner.lineno
                params = frozenset(_params(inner))
                local = {p: OTHER for p in params}
                local.update(_bindings(inner.body))
                names.update(local)
            body = inner.body
        return Scope(names, function, cls, params, frozenset(local))


    def rebound(self, filename: str, function: Optional[int], name: str, origin: int, site: int) -> bool:
        """Whether ``name`` may be bound to something else at ``site`` than at ``origin``.

        True when the scope (the def starting at line ``function``, or the module for None)
        binds ``name`` anywhere other than at ``origin``, between ``origin`` and ``site``
        (``site`` included: a binding on the fix line itself may run before the pasted
        code). When ``site`` comes first (a loop), any other binding counts. Conservative:
        the order of execution is not followed, only the order of lines.
        """
        tree = self._tree(filename)
        if tree is None:
            return True
        if function is None:
            body: Sequence[ast.AST] = tree.body
        else:
            fn = next((n for n in ast.walk(tree) if isinstance(n, _SCOPES[:2]) and n.lineno == function), None)
            if fn is None:
                return True
            body = fn.body
        for bound, _path, node in _binding_nodes(body):
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

    def statement_at(self, filename: str, lineno: int) -> Optional[ast.stmt]:
        """The innermost simple statement (not a def, class, if, loop or with) that line
        ``lineno`` of ``filename`` is part of, or None."""
        tree = self._tree(filename)
        if tree is None or not isinstance(lineno, int):
            return None
        best = None
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt) or isinstance(node, _COMPOUND):
                continue
            if node.lineno <= lineno <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
        return best


#: Statements with a body of statements: a line in one is in one of its simple statements.
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor,
             ast.While, ast.With, ast.AsyncWith, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) \
            + ((ast.Match,) if hasattr(ast, "Match") else ())


def ends_here(stmt: Optional[ast.stmt]) -> bool:
    """Whether nothing after ``stmt`` runs once it ran (``return``, ``raise``), or not
    surely (``yield``: the generator may never be resumed)."""
    if isinstance(stmt, (ast.Return, ast.Raise)):
        return True
    value = getattr(stmt, "value", None)
    return isinstance(value, (ast.Yield, ast.YieldFrom))


def _enclosing_def(body: Sequence[ast.AST], lineno: int):
    for node in body:
        if isinstance(node, _SCOPES[:3]):
            continue
        if not (getattr(node, "lineno", 0) <= lineno <= (getattr(node, "end_lineno", 0) or 0)):
            continue
        for child in ast.walk(node):
            if isinstance(child, _SCOPES[:3]) and child.lineno <= lineno <= (child.end_lineno or child.lineno):
                return child
    return None


__all__ = ["OTHER", "Scope", "ScopeIndex", "ends_here"]
