"""Patch a module right after it is executed, whether it is imported already or later.

The recorder's hooks into Triton and Inductor, and the emulator's into Triton, must change a
class of a module the program may import only after the hook is installed, and must not
import it themselves (importing Triton or Inductor is slow, and may fail where the program
would never have used them). :func:`patch_after_import` patches a module at once when it is
imported already, and otherwise puts one finder on ``sys.meta_path`` that wraps the module's
loader so the patch runs right after the module's code; the finder leaves ``sys.meta_path``
once all the modules it waits for are imported.

The finder takes its spec from the finders after it on ``sys.meta_path`` (the path finder,
but also an editable install's or a zip import's), not from the path finder alone. Several
such finders can wait for one module (the recorder's and the emulator's for Triton), each
asking the others: a finder that is asked again during its own lookup, in the same thread,
answers None, so they never ask each other forever.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
from types import ModuleType
from typing import Any, Callable, ContextManager, Iterable, Optional, Set

#: Guards the finders' coming onto and leaving ``sys.meta_path``.
_meta_lock = threading.Lock()
#: Per thread: ids of the finders looking up a spec now (asked again, they answer None).
_busy = threading.local()


def patch_after_import(names: Iterable[str], patch: Callable[[ModuleType], None], *,
                       lock: Optional[ContextManager[Any]] = None) -> None:
    """Call ``patch(module)`` for each module of ``names``: at once for those imported
    already (an exception from ``patch`` then reaches the caller), right after its code
    is executed for the others (see :func:`hook_after_import`). ``lock``, when given, is
    held around each call of ``patch``."""
    names = tuple(names)
    with lock if lock is not None else contextlib.nullcontext():
        for name in names:
            mod = sys.modules.get(name)
            if mod is not None:
                patch(mod)
        hook_after_import(names, patch, lock=lock)


def hook_after_import(names: Iterable[str], patch: Callable[[ModuleType], None], *,
                      lock: Optional[ContextManager[Any]] = None) -> bool:
    """Have ``patch(module)`` called right after the code of each module of ``names`` is
    executed (an exception from it is swallowed: the import goes on, unpatched). Puts one
    finder first on ``sys.meta_path`` unless all of ``names`` are imported or a finder for
    ``patch`` is there already; whether one is there now. Modules imported already are
    not patched here; ``lock`` is not taken here (the caller may hold it), only by the
    finder, around its leaving ``sys.meta_path`` and the call of ``patch``."""
    names = frozenset(names)
    with _meta_lock:
        if any(isinstance(f, _Finder) and f.patch is patch for f in sys.meta_path):
            return True
        if all(n in sys.modules for n in names):
            return False
        sys.meta_path.insert(0, _Finder(names, patch, lock))
        return True


def unhook_after_import(patch: Callable[[ModuleType], None]) -> None:
    """Take the finders for ``patch`` off ``sys.meta_path`` (a module imported later is
    left alone)."""
    with _meta_lock:
        sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _Finder) and f.patch is patch)]


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of each module of ``names`` to call ``patch`` after executing it."""

    def __init__(self, names: frozenset, patch: Callable[[ModuleType], None],
                 lock: Optional[ContextManager[Any]]) -> None:
        self.names = names
        self.patch = patch
        self.lock = lock

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        busy: Set[int] = _busy.__dict__.setdefault("finders", set())
        if id(self) in busy:  # asked again by another finder we asked
            return None
        busy.add(id(self))
        try:
            spec = self._spec_of_others(fullname, path, target)
        finally:
            busy.discard(id(self))
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):  # (a class serves every module it loads)
            return spec
        loader.exec_module = self._exec_and_patch(fullname, exec_module)  # (mostly one loader per spec)
        return spec

    def _spec_of_others(self, fullname: str, path: Any, target: Any) -> Any:
        for other in list(sys.meta_path):
            if other is self or not hasattr(other, "find_spec"):
                continue
            spec = other.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _exec_and_patch(self, fullname: str,
                        exec_module: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            if module.__name__ != fullname:  # a loader shared by several modules (a zip import's)
                return
            with self.lock if self.lock is not None else contextlib.nullcontext():
                if all(n in sys.modules for n in self.names):
                    with _meta_lock:
                        if self in sys.meta_path:
                            sys.meta_path.remove(self)
                try:
                    self.patch(module)
                except Exception:  # the module stays unpatched; the import goes on
                    pass

        return exec_and_patch
