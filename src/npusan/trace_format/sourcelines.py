"""Finding a file's source root: the folder paths in reports are relative to.

The source root of a file is the nearest enclosing folder that holds ``.git`` or
``pyproject.toml`` (a checkout, or a project). Code-scanning reports (SARIF, JUnit) name
files relative to it, so results land on the right lines whatever the checkout's location.
"""

from __future__ import annotations

import os
from typing import Optional

#: Files whose presence makes a folder a source root.
ROOT_MARKERS = (".git", "pyproject.toml")


def find_source_root(path: str, cache: Optional[dict] = None) -> Optional[str]:
    """The nearest folder enclosing ``path`` (a file or folder) with ``.git`` or ``pyproject.toml``."""
    if not path or path.startswith("<"):
        return None
    start = os.path.abspath(path)
    d = start if os.path.isdir(start) else os.path.dirname(start)
    seen = []
    root = None
    while True:
        if cache is not None and d in cache:
            root = cache[d]
            break
        seen.append(d)
        if any(os.path.exists(os.path.join(d, m)) for m in ROOT_MARKERS):
            root = d
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if cache is not None:
        for s in seen:
            cache[s] = root
    return root
