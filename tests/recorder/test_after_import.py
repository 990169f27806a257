"""The shared import hook: a module is patched right after its code runs (or at once when
imported already), the finder leaves ``sys.meta_path`` once all its modules are imported,
and finders for one module do not ask each other forever."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import itertools
import sys
import threading

import pytest

from npusan.recorder import after_import
from npusan.recorder.after_import import hook_after_import, patch_after_import, unhook_after_import

_count = itertools.count()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Writes fake modules (unique names) into a directory on ``sys.path``; each test's
    finders and modules are gone after it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    meta = list(sys.meta_path)
    _before[:] = [f for f in meta if isinstance(f, after_import._Finder)]  # other tests' hooks (Triton's)
    made: list = []

    def write(body: str = "VALUE = 1\n") -> str:
        name = f"npusan_fake_after_import_{next(_count)}"
        (tmp_path / f"{name}.py").write_text(body)
        importlib.invalidate_caches()
        made.append(name)
        return name

    yield write
    sys.meta_path[:] = meta
    for name in made:
        sys.modules.pop(name, None)


#: The finders other tests in this process left installed (not this test's).
_before: list = []


def _ours():
    return [f for f in sys.meta_path if isinstance(f, after_import._Finder) and not any(f is b for b in _before)]


def _mark(mod):
    mod.patched = getattr(mod, "patched", 0) + 1


def test_patched_right_after_import_then_finder_leaves(fake):
    name = fake("VALUE = 41\n")
    seen = []

    def patch(mod):
        seen.append(mod.VALUE)  # the module's code ran before the patch
        mod.VALUE += 1

    patch_after_import([name], patch)
    assert len(_ours()) == 1 and name not in sys.modules
    mod = importlib.import_module(name)
    assert seen == [41] and mod.VALUE == 42
    assert _ours() == []


def test_imported_already_is_patched_at_once_without_a_finder(fake):
    name = fake()
    mod = importlib.import_module(name)
    patch_after_import([name], _mark)
    assert mod.patched == 1
    assert _ours() == []


def test_finder_stays_until_all_names_are_imported(fake):
    first, second = fake(), fake()
    patch_after_import([first, second], _mark)
    assert importlib.import_module(first).patched == 1
    assert len(_ours()) == 1
    assert importlib.import_module(second).patched == 1
    assert _ours() == []


def test_two_hooks_for_one_module_do_not_recurse_and_both_patch(fake):
    name = fake()
    order = []
    patch_after_import([name], lambda m: order.append("first"))
    patch_after_import([name], lambda m: order.append("second"))
    assert len(_ours()) == 2
    importlib.import_module(name)
    assert sorted(order) == ["first", "second"]
    assert _ours() == []


def test_a_lookup_without_import_patches_nothing_and_keeps_the_finder(fake):
    name = fake()
    patch_after_import([name], _mark)
    assert importlib.util.find_spec(name) is not None  # through the finder, no import
    assert len(_ours()) == 1
    assert importlib.import_module(name).patched == 1


def test_spec_comes_from_the_other_finders_not_only_the_path(fake):
    """A module that only another meta path finder serves (as an editable install or a zip
    import would) is found and patched."""
    name = f"npusan_fake_after_import_{next(_count)}"

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.VALUE = 7

    class Serves(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            return importlib.util.spec_from_loader(fullname, Loader()) if fullname == name else None

    sys.meta_path.append(Serves())
    try:
        patch_after_import([name], _mark)
        mod = importlib.import_module(name)
        assert (mod.VALUE, mod.patched) == (7, 1)
        assert _ours() == []
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, Serves)]
        sys.modules.pop(name, None)


def test_a_loader_shared_with_other_modules_patches_only_the_named_one():
    """One loader serves several modules (as a zip import's does): the others are not patched."""
    hooked, other = (f"npusan_fake_after_import_{next(_count)}" for _ in range(2))

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.VALUE = 7

    shared = Loader()

    class Serves(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            return importlib.util.spec_from_loader(fullname, shared) if fullname in (hooked, other) else None

    sys.meta_path.append(Serves())
    try:
        patch_after_import([hooked], _mark)
        assert importlib.import_module(hooked).patched == 1
        assert not hasattr(importlib.import_module(other), "patched")
    finally:
        mine = _ours()
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, Serves) and not any(f is m for m in mine)]
        sys.modules.pop(hooked, None)
        sys.modules.pop(other, None)


def test_a_failing_patch_at_import_is_swallowed(fake):
    name = fake("VALUE = 3\n")

    def broken(mod):
        raise RuntimeError("boom")

    patch_after_import([name], broken)
    assert importlib.import_module(name).VALUE == 3
    assert _ours() == []


def test_a_failing_patch_at_once_reaches_the_caller(fake):
    name = fake()
    importlib.import_module(name)

    def broken(mod):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        patch_after_import([name], broken)


def test_hook_is_installed_once_per_patch_and_unhooked(fake):
    name = fake()
    assert hook_after_import([name], _mark) is True
    assert hook_after_import([name], _mark) is True
    assert len(_ours()) == 1
    unhook_after_import(_mark)
    assert _ours() == []
    assert not hasattr(importlib.import_module(name), "patched")


def test_hook_without_names_to_wait_for_installs_nothing(fake):
    name = fake()
    importlib.import_module(name)
    assert hook_after_import([name], _mark) is False
    assert _ours() == []


def test_the_lock_is_held_around_the_patch(fake):
    name = fake()
    lock = threading.Lock()
    held = []
    hook_after_import([name], lambda m: held.append(lock.locked()), lock=lock)
    importlib.import_module(name)
    assert held == [True] and not lock.locked()


def test_a_failing_import_is_not_patched_and_keeps_the_finder(fake):
    name = fake("raise ImportError('no')\n")
    patch_after_import([name], _mark)
    with pytest.raises(ImportError, match="no"):
        importlib.import_module(name)
    assert len(_ours()) == 1
