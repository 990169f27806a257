"""The ``engine`` fixture: run a test module against both engines (Python and compiled)."""

from __future__ import annotations

import pytest

from npusan.analyzer.replay import native

from . import engine_prog


@pytest.fixture(scope="module", params=["python", "native"])
def engine(request):
    """The engine class the module's programs replay through (``engine_prog.ENGINE``)."""
    if request.param == "native":
        if not native.available():
            pytest.skip(f"the compiled core is not built ({native.IMPORT_ERROR})")
        cls = native.NativeEngine
    else:
        from npusan.analyzer.replay.engine import Engine as cls
    saved = engine_prog.ENGINE
    engine_prog.ENGINE = cls
    yield cls
    engine_prog.ENGINE = saved
