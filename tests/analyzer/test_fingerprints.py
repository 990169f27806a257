"""Fingerprints identify a bug by code, not by where or when it ran."""

from npusan.analyzer.findings import Frame
from npusan.analyzer.fingerprints import frame_identity, normalize_text, stable_path


def test_stable_path_is_relative_to_the_root_or_the_library():
    assert stable_path("/home/a/proj/pkg/train.py", "/home/a/proj") == "pkg/train.py"
    assert stable_path("/ci/checkout-7/pkg/train.py", "/ci/checkout-7/") == "pkg/train.py"
    site = "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    assert stable_path(site, None) == "torch/nn/modules/module.py"
    assert stable_path("/proj/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "/proj") == \
        "torch/nn/modules/module.py"
    assert stable_path("/usr/lib/python3.11/threading.py", None) == "threading.py"
    assert stable_path("/somewhere/else/script.py", None) == "script.py"  # no root: base name
    assert stable_path("<frozen runpy>", "/x") == "<frozen runpy>"


def test_frames_are_identified_by_text_not_line_number():
    a = Frame("/a/proj/t.py", 10, "step", text="y = x.sum()", root="/a/proj")
    b = Frame("/b/elsewhere/proj/t.py", 14, "step", text="y  =  x.sum()  ", root="/b/elsewhere/proj")
    assert frame_identity(a) == frame_identity(b)
    assert frame_identity(a) != frame_identity(Frame("/a/proj/t.py", 10, "step", text="y = x.sum() * 2", root="/a/proj"))
    assert frame_identity(a) != frame_identity(Frame("/a/proj/t.py", 10, "other", text="y = x.sum()", root="/a/proj"))
    # Without text the line number stands in.
    assert frame_identity(Frame("/a/t.py", 10, "f")) != frame_identity(Frame("/a/t.py", 11, "f"))
    assert normalize_text("  a\t=  b  ") == "a = b"
