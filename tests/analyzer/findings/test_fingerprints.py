"""Fingerprints identify a bug by code, not by where or when it ran."""

from npusan.analyzer.findings.model import Frame
from npusan.analyzer.findings.fingerprints import frame_identity, normalize_text, stable_path


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


def _identity(text, line=10, function="step"):
    return frame_identity(Frame("/a/proj/t.py", line, function, text=text, root="/a/proj"))


def test_comments_and_spacing_between_tokens_do_not_change_a_frame():
    base = _identity("return x.sum()")
    assert _identity("return x.sum()                      # the racing read") == base
    assert _identity("return x.sum( )") == base
    assert _identity("return  x .sum ()  # formatter was here") == base
    assert _identity("step(x, side)  # caller") == _identity("step(x,side)")
    # A line that opens a bracket is still read token by token, comment and all.
    assert _identity("y = f(a,  # first argument") == _identity("y = f( a ,")
    assert normalize_text("y = x.sum()  # c") == "y = x . sum ( )"


def test_code_changes_still_change_a_frame():
    base = _identity("return x.sum()")
    assert _identity("return x.sum() * 2") != base
    assert _identity("return x.mean()") != base
    assert _identity("return x.sum(dim=0)") != base
    # Inside a string literal, spacing and '#' are code.
    assert _identity('log("a  b")') != _identity('log("a b")')
    assert _identity('log("a # b")') != _identity('log("a")')
    assert _identity('f"{a}  b"') != _identity('f"{a} b"')


def test_lines_that_do_not_tokenize_fall_back_to_collapsed_whitespace():
    assert normalize_text('x = """abc  def') == 'x = """abc def'  # an unterminated string
    assert normalize_text("x = a + \\") == "x = a + \\"
    assert normalize_text("x = $y  # c") == "x = $y # c"
    assert _identity('x = """abc') != _identity('x = """abd')


def test_a_huge_stack_counts_as_its_digest_and_others_frame_by_frame():
    """A stack past HUGE_STACK_BYTES of frames enters the fingerprint as the SHA-256 of its
    frames (worked out once per stack); a smaller one frame by frame, as always."""
    import hashlib

    from npusan.analyzer.findings import fingerprints as F
    from npusan.analyzer.findings.model import Frame

    class Acc:
        def __init__(self, stack):
            self.op, self.type, self.stack = "op", "write", stack

    def plain(stack) -> str:  # the definition for stacks of any real program
        h = hashlib.sha256(b"race")
        for _ in range(2):
            h.update(b"\0op\0write")
            for fr in stack:
                h.update(b"\0" + F.frame_identity(fr).encode())
        return h.hexdigest()[:32]

    small = tuple(Frame(f"m{i}.py", i, "f" * 100) for i in range(500))
    assert F.fingerprint_of("race", (Acc(small), Acc(small))) == plain(small)
    huge = tuple(Frame(f"m{i}.py", i, "f" * 1000) for i in range(500))
    assert F.fingerprint_of("race", (Acc(huge), Acc(huge))) != plain(huge)
    digest = hashlib.sha256(b"".join(b"\0" + F.frame_identity(fr).encode() for fr in huge)).digest()
    h = hashlib.sha256(b"race")
    for _ in range(2):
        h.update(b"\0op\0write\0\0" + digest)
    assert F.fingerprint_of("race", (Acc(huge), Acc(huge))) == h.hexdigest()[:32]
    assert F.fingerprint_of("race", (Acc(tuple(huge)), Acc(huge[:]))) == h.hexdigest()[:32]
