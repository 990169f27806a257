"""The user documentation stays true: the CLI reference matches the commands, shell
completion works as documented, no internal jargon, and every repository file a document
names exists."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_reference_is_up_to_date():
    expected = _cli_reference().render()
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == expected, (
        "docs/cli.md is out of date: run `make docs` (python scripts/cli_reference.py)")


def test_cli_reference_covers_every_command():
    from npusan.cli import cli

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name in cli.all_commands():
        assert f"## `npusan {name}`" in text and f"Usage: npusan {name} [OPTIONS]" in text


def _complete(words: str, cword: int) -> list:
    env = {**os.environ, "_NPUSAN_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    out = subprocess.run([sys.executable, "-m", "npusan"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line.split(",", 1)[1] for line in out.stdout.splitlines()]


def test_shell_completion_works_as_documented():
    source = subprocess.run([sys.executable, "-m", "npusan"], env={**os.environ, "_NPUSAN_COMPLETE": "bash_source"},
                            capture_output=True, text=True, timeout=120)
    assert "_npusan_completion()" in source.stdout and "complete -o nosort -F _npusan_completion npusan" in source.stdout
    assert _complete("npusan an", 1) == ["analyze"]
    assert "--format" in _complete("npusan analyze --for", 2)
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for shell in ("bash", "zsh", "fish"):
        assert f"_NPUSAN_COMPLETE={shell}_source npusan" in text


JARGON = [
    (r"\bseed\b", "the seed"),
    (r"manual flush", "manual flush"),
    (r"\banchors?\b", "anchor"),
    (r"\bissue \d+", "issue N"),
    (r"DESIGN\.md", "DESIGN.md"),
    (r"\bturn \d+", "turn N"),
    (r"\.\./shared", "../shared"),
]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_internal_jargon(doc):
    text = doc.read_text(encoding="utf-8")
    found = [(what, text[:m.start()].count("\n") + 1) for pattern, what in JARGON
             for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert not found, f"{doc.name}: internal terms (term, line): {found}"


TOP_DIRS = "|".join(re.escape(d) for d in ("docs", "src", "tests", "benchmarks", "scripts", ".ci"))
REPO_PATH = re.compile(rf"(?<![\w/.$-])((?:{TOP_DIRS})/[\w./-]*)")
MARKDOWN = re.compile(r"(?<![\w/.$-])([\w-]+\.md)\b")


def mentioned_paths(text: str) -> set:
    """Repository paths a document names: under a top-level directory, or a Markdown file."""
    out = set()
    for m in REPO_PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if not re.search(r"[{}<>*]", text[m.end():m.end() + 1] + path):
            out.add(path)
    out.update(m.group(1) for m in MARKDOWN.finditer(text))
    return out


def test_mentioned_paths_are_found_in_real_text():
    text = "see `docs/api.md`, run benchmarks/bench_startup.py; `src/npusan/` and README.md; out/x.npusan"
    assert mentioned_paths(text) == {"docs/api.md", "benchmarks/bench_startup.py", "src/npusan/", "README.md"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_file_a_document_names_exists(doc):
    missing = [p for p in sorted(mentioned_paths(doc.read_text(encoding="utf-8")))
               if not (ROOT / p).exists() and not (doc.parent / p).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


def _normalized_report(text: str) -> str:
    """A report without what differs from run to run: addresses, pid, host, time, argv."""
    text = re.sub(r"block 0x[0-9a-f]+", "block 0x…", text)
    text = re.sub(r"torch [^,]+,", "torch …,", text)
    return re.sub(r"recorded by npusan .*", "recorded by …", text)


@pytest.mark.slow
def test_the_readme_shows_what_make_example_prints(tmp_path):
    """The sample report in the README is what the bundled example gives today (a trial found
    its line numbers and event count stale after the example changed)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"\$ npusan analyze out/example\.npusan\n(.*?)```", readme, re.S).group(1)
    trace = tmp_path / "example.npusan"
    bin_dir = Path(sys.executable).parent
    subprocess.run([str(bin_dir / "npusan"), "record", "--backend", "sim", "-o", str(trace), "--",
                    sys.executable, "-m", "npusan.examples.multistream"], cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    r = subprocess.run([str(bin_dir / "npusan"), "analyze", str(trace)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    got = r.stdout.replace(str(trace), "out/example.npusan")
    assert _normalized_report(got) == _normalized_report(shown), (
        "README.md's sample report is stale: run `make example` and paste what it prints")


def test_every_public_trace_writer_method_is_documented():
    """docs/trace-format.md lists TraceWriter's methods with their signatures (a trial had to
    use dir() to find device_synchronized and found its device keyword-only)."""
    import inspect

    from npusan.trace_format import TraceWriter

    text = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    for name, fn in inspect.getmembers(TraceWriter, inspect.isfunction):
        if name.startswith("_") or name == "close_after_error":
            continue
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        shown = []
        for i, p in enumerate(params):
            if p.kind is p.KEYWORD_ONLY and (i == 0 or params[i - 1].kind is not p.KEYWORD_ONLY):
                shown.append("*")
            shown.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}".replace("'", '"'))
        if name in ("flush", "close", "stats"):
            assert f"`{name}(" in text, name
        else:
            assert f"`{name}({', '.join(shown)})`" in text, f"{name}({', '.join(shown)})"
