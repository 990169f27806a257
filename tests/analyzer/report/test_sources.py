"""Source quoting is best effort, and library frames are told from user code."""

from npusan.analyzer.findings.model import Frame
from npusan.analyzer.report.sources import (
    Folded,
    SourceCache,
    display_path,
    fold,
    internal_category,
    user_site,
)

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"


def test_quotes_existing_lines_and_skips_missing_ones(tmp_path):
    src = tmp_path / "train.py"
    src.write_text("import torch\n\n    x = y + 1   \n")
    cache = SourceCache([str(tmp_path)])
    assert cache.line(str(src), 1) == "import torch"
    assert cache.line(str(src), 3) == "x = y + 1"
    assert cache.line(str(src), 2) is None  # blank
    assert cache.line(str(src), 99) is None
    assert cache.line(str(src), 0) is None
    assert cache.line(str(tmp_path / "gone.py"), 1) is None
    assert cache.line("<frozen runpy>", 1) is None


def test_binary_directories_and_unreadable_files_are_not_quoted(tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"abc\0def\n")
    cache = SourceCache([str(tmp_path)])
    assert cache.line(str(binary), 1) is None
    assert cache.line(str(tmp_path), 1) is None
    locked = tmp_path / "locked.py"
    locked.write_text("secret = 1\n")
    locked.chmod(0)
    try:
        import os

        if os.access(locked, os.R_OK):  # running as root: permissions do not apply
            return
        assert cache.line(str(locked), 1) is None
    finally:
        locked.chmod(0o644)


def test_relative_files_are_found_under_source_roots(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("a = 1\nb = 2\n")
    assert SourceCache([str(tmp_path)]).line("pkg/m.py", 2) == "b = 2"


def test_long_lines_are_cut(tmp_path):
    src = tmp_path / "long.py"
    src.write_text("x = '" + "a" * 500 + "'\n")
    line = SourceCache([str(tmp_path)]).line(str(src), 1)
    assert line is not None and len(line) == 160 and line.endswith("…")


def test_internal_categories():
    assert internal_category(Frame(TORCH, 1, "_call_impl")) == "torch"
    assert internal_category(Frame("/home/u/pytorch/torch/nn/functional.py", 1, "linear")) == "torch"
    assert internal_category(Frame("/x/site-packages/torch_npu/npu/streams.py", 1, "f")) == "torch"
    assert internal_category(Frame("/usr/lib/python3.11/threading.py", 1, "run")) == "python"
    assert internal_category(Frame("<frozen runpy>", 1, "_run_code")) == "python"
    import npusan.recorder

    assert internal_category(Frame(npusan.recorder.__file__, 1, "f")) == "npusan"
    import npusan.examples

    examples = npusan.examples.__file__.replace("__init__.py", "multistream.py")
    assert internal_category(Frame(examples, 1, "main")) is None  # shipped examples are user code
    assert internal_category(Frame("/home/u/project/train.py", 1, "main")) is None
    assert internal_category(Frame("/home/u/torchvision_tools/train.py", 1, "main")) is None
    assert internal_category(Frame("/x/lib/python3.11/site-packages/mylib/m.py", 1, "f")) is None


def test_fold_runs_of_library_frames():
    stack = (
        Frame("train.py", 60, "main"),
        Frame(TORCH, 1, "a"),
        Frame(TORCH, 2, "b"),
        Frame("/usr/lib/python3.11/contextlib.py", 3, "c"),
        Frame("model.py", 10, "forward"),
        Frame(TORCH, 4, "d"),
    )
    folded = fold(stack)
    assert folded[0] == stack[0]
    assert folded[1] == Folded(3, ("torch", "python"))
    assert str(folded[1]) == "… 3 torch/python frames"
    assert folded[2] == stack[4]
    assert str(folded[3]) == "… 1 torch frame"
    assert fold(stack, full=True) == list(stack)
    only_library = (Frame(TORCH, 1, "a"), Frame(TORCH, 2, "b"))
    assert fold(only_library) == list(only_library)  # nothing to fold it into
    long_library = tuple(Frame(TORCH, i, f"f{i}") for i in range(10))
    assert fold(long_library) == [Folded(7, ("torch",)), *long_library[7:]]  # the innermost three stay
    assert user_site(stack) == stack[4]
    assert user_site((Frame(TORCH, 1, "a"),)) == Frame(TORCH, 1, "a")
    assert user_site(()) is None


def test_display_path_is_relative_inside_the_working_directory(tmp_path):
    assert display_path(str(tmp_path / "a" / "b.py"), cwd=str(tmp_path)) == "a/b.py"
    assert display_path("/elsewhere/b.py", cwd=str(tmp_path)) == "/elsewhere/b.py"
    assert display_path("rel/b.py", cwd=str(tmp_path)) == "rel/b.py"
