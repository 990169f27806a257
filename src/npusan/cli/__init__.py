"""The ``npusan`` command line: one module per verb, registered on one click group.

Each verb's module is imported only when that verb runs (or when ``--help`` lists them):
``npusan analyze`` never pays for ``record``'s or ``info``'s imports (see
:class:`LazyGroup`; issue: start-up of ``npusan analyze`` on a tiny trace within 0.3 s).
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn, Optional

import click

from .._version import __version__

#: Verb name -> "module:attribute" of its click command, relative to this package.
COMMANDS = {
    "record": ".record:record",
    "analyze": ".analyze:analyze",
    "info": ".info:info",
    "export": ".export:export",
    "redact": ".redact:redact",
    "history": ".history:history",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (``lazy``: name -> "module:attr")."""

    def __init__(self, *args, lazy: Optional[dict] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attr = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module, __name__), attr)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    # Usage errors (of the group or of a verb: its arguments are parsed in Group.invoke)
    # become one line; see errors.OneLineUsageError. A reader of the output that went away
    # (--help, --version or a verb's output piped into head) ends the command quietly, here
    # for every verb: click's own handling would exit 1, which npusan analyze uses for findings.
    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.ClickException as e:
            raise _one_line(e) from None
        except BrokenPipeError:
            _reader_gone()

    def invoke(self, ctx: click.Context):
        try:
            try:
                return super().invoke(ctx)
            finally:
                sys.stdout.flush()  # output still buffered fails here, not at exit
        except click.ClickException as e:
            raise _one_line(e) from None
        except BrokenPipeError:
            _reader_gone()

    def all_commands(self) -> dict:
        """Every command by name, importing the lazy ones (for documentation and tests)."""
        ctx = click.Context(self)
        return {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}


def engine_description() -> str:
    """Which replay engine ``npusan analyze`` uses here, and why when it is not the compiled core."""
    from ..analyzer.replay import native

    if native.engine_choice() == "python":
        built = "built" if native.available() else f"not available: {native.IMPORT_ERROR}"
        return f"Python (selected by NPUSAN_ENGINE=python; the compiled core is {built})"
    if native.available():
        return "compiled core (npusan.analyzer.replay._core)"
    return (f"Python, much slower: the compiled core is not available ({native.IMPORT_ERROR}); "
            "reinstall npusan with a C compiler and the Python headers to build it")


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"npusan, version {__version__}")
    click.echo(f"replay engine: {engine_description()}")
    ctx.exit()


def _one_line(error: click.ClickException) -> click.ClickException:
    from .errors import as_one_line

    return as_one_line(error)


def _reader_gone() -> NoReturn:
    from .errors import reader_gone

    reader_gone()


@click.group("npusan", cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the version and the replay engine in use (compiled core or Python), then exit.")
def cli() -> None:
    """Find stream-synchronization bugs in PyTorch programs (CUDA and Ascend NPU)."""


def main() -> None:
    """Console-script entry point."""
    # The start-up hook armed this process if NPUSAN_TRACE/NPUSAN_ONLINE are exported; the
    # command itself is not the program to record (record --backend cuda imports torch).
    activate = sys.modules.get("npusan.recorder.activate")
    if activate is not None:
        activate.disarm()
    cli(prog_name="npusan")
