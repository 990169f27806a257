"""Write docs/cli.md, the command-line reference, from the click commands themselves.

    python scripts/cli_reference.py          # rewrite docs/cli.md
    python scripts/cli_reference.py --check  # exit 1 if docs/cli.md is out of date

The reference is each command's own ``--help`` text (so it cannot drift from the code),
rendered at a fixed width; ``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "cli.md"
WIDTH = 100

INTRO = """\
# Command-line reference

This page is generated from the commands' own help texts by `scripts/cli_reference.py`
(`make docs`); a test fails when the two disagree. `python -m npusan ...` is the same
command as `npusan ...`.

Exit status of every command: 0 success (for `analyze`: no findings), 1 findings
(`analyze` only), 2 unusable input or usage error, with one line on stderr.
`npusan record` exits with the recorded command's status. When the reader of the output goes
away (`npusan analyze T | head`), a command ends quietly with status 141 (128 + SIGPIPE, what
the shell reports for git or cat there).

## Shell completion

The `npusan` command completes its subcommands, options and option values (report formats,
`--fail-on` finding kinds, backends, and file names for traces and files) in bash, zsh and
fish (click's completion, driven by the `_NPUSAN_COMPLETE` variable):

| shell | add to | line |
| --- | --- | --- |
| bash | `~/.bashrc` | `eval "$(_NPUSAN_COMPLETE=bash_source npusan)"` |
| zsh | `~/.zshrc` | `eval "$(_NPUSAN_COMPLETE=zsh_source npusan)"` |
| fish | `~/.config/fish/completions/npusan.fish` | `_NPUSAN_COMPLETE=fish_source npusan \\| source` |

The script is generated each time the shell starts; to start faster, write it to a file
once (`_NPUSAN_COMPLETE=bash_source npusan > ~/.npusan-complete.bash`) and source that.
"""


def _context(cmd: click.Command, name: str, parent=None) -> click.Context:
    # The command's own context settings (its -h alias), as running it would apply them.
    return click.Context(cmd, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH,
                         **cmd.context_settings)


def _help(cmd: click.Command, name: str, parent=None) -> str:
    return cmd.get_help(_context(cmd, name, parent))


def render() -> str:
    """The whole of docs/cli.md."""
    from npusan.cli import cli

    root = _context(cli, "npusan")
    parts = [INTRO, "## `npusan`\n", "```\n" + _help(cli, "npusan") + "\n```\n"]
    commands = cli.all_commands()  # the verbs are imported lazily: load them all here
    for name in sorted(commands):
        cmd = commands[name]
        if cmd.hidden:
            continue
        parts += [f"## `npusan {name}`\n", "```\n" + _help(cmd, name, root) + "\n```\n"]
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that docs/cli.md is up to date")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            sys.exit(f"{OUT.relative_to(ROOT)} is out of date: run python scripts/cli_reference.py")
        return
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
