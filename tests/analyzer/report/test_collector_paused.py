"""Reporters render with Python's cyclic garbage collector paused, and leave it as it was."""

from __future__ import annotations

import gc

import pytest

from npusan.analyzer.report import base


@pytest.fixture
def probe():
    seen = []

    @base.register
    class Probe(base.Reporter):
        name = "probe-gc"

        def render(self, report, options):
            seen.append(gc.isenabled())
            if report == "raise":
                raise ValueError("boom")
            return "ok"

    yield seen
    del base._REGISTRY["probe-gc"]


def test_the_collector_is_paused_while_rendering_and_enabled_again(probe):
    assert gc.isenabled()
    assert base.get_reporter("probe-gc").render(None, None) == "ok"
    assert probe == [False] and gc.isenabled()
    with pytest.raises(ValueError):
        base.get_reporter("probe-gc").render("raise", None)
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled(probe):
    gc.disable()
    try:
        base.get_reporter("probe-gc").render(None, None)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert probe == [False]


def test_every_format_renders_paused():
    for name in base.format_names():
        assert base._REGISTRY[name].render.__wrapped__ is not None
