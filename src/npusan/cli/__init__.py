"""The ``npusan`` command line: one module per verb, registered on one click group."""

from __future__ import annotations

import sys

import click

from .. import __version__
from .analyze import analyze
from .export import export
from .info import info
from .record import record
from .redact import redact


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="npusan")
def cli() -> None:
    """Find stream-synchronization bugs in PyTorch programs (CUDA and Ascend NPU)."""


for _cmd in (record, analyze, info, export, redact):
    cli.add_command(_cmd)


def main() -> None:
    """Console-script entry point."""
    # The start-up hook armed this process if NPUSAN_TRACE/NPUSAN_ONLINE are exported; the
    # command itself is not the program to record (record --backend cuda imports torch).
    activate = sys.modules.get("npusan.recorder.activate")
    if activate is not None:
        activate.disarm()
    cli(prog_name="npusan")
