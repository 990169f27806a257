"""How every verb fails: one clear line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import functools
import sys
from typing import Callable, NoReturn, TypeVar

import click

from ..trace_format.errors import TraceFormatError
from ..trace_format.safe_text import clean

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_UNUSABLE = 2

F = TypeVar("F", bound=Callable)


class UsageProblem(Exception):
    """Unusable user input other than a trace (a bad suppression file, an unwritable path...)."""


def fail(message: str) -> NoReturn:
    click.echo(f"npusan: error: {clean(message)}", err=True)
    sys.exit(EXIT_UNUSABLE)


def one_line_errors(fn: F) -> F:
    """Turn the expected failures of a verb into ``npusan: error: ...`` and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TraceFormatError as e:
            fail(str(e))
        except UsageProblem as e:
            fail(str(e))
        except OSError as e:
            name = f" {e.filename}" if getattr(e, "filename", None) else ""
            fail(f"{e.strerror or e}:{name}" if e.strerror else str(e))
        except MemoryError:
            fail("out of memory while reading the input")

    return wrapper  # type: ignore[return-value]
