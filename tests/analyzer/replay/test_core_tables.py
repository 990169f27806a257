"""The compiled core's tables come from the Python ones (csrc/gen_tables.py): the header the
build wrote and the tables the built core exports must agree with records.py and
core_codes.py, so that an edit on either side without a rebuild fails here."""

import importlib.util
import os

import pytest

from npusan.analyzer.replay import core_codes, native
from npusan.trace_format import records as R

CSRC = os.path.join(os.path.dirname(native.__file__), "csrc")


def _gen():
    spec = importlib.util.spec_from_file_location("_gen_tables", os.path.join(CSRC, "gen_tables.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generator_reads_every_record_type():
    types = _gen().record_types(R)
    assert sorted(types.values()) == sorted(R.RECORD_NAMES)
    assert all(getattr(R, name) == t for name, t in types.items())


def test_header_is_what_the_generator_writes_now():
    path = os.path.join(CSRC, "_tables.h")
    if not os.path.exists(path):
        pytest.skip("the core's header is written at build time and was not (no build here)")
    with open(path, encoding="utf-8") as f:
        assert f.read() == _gen().render(), "_tables.h is stale or edited by hand: rebuild (setup.py build_ext)"


def test_error_codes_are_numbered_from_one():
    assert sorted(core_codes.codes().values()) == list(range(1, len(core_codes.ERRORS) + 1))


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built")
def test_built_core_exports_the_python_tables():
    from npusan.analyzer.replay import _core

    assert _core.ERRORS == core_codes.codes()
    assert _core.RECORD_TYPES == _gen().record_types(R)
    assert _core.MIN_LENGTH == R.MIN_LENGTH
    assert _core.STACK_FIELD == R.STACK_FIELD
    assert native.ERROR_CODES == _core.ERRORS
