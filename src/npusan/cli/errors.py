"""How every verb fails: one clear line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, NoReturn, TypeVar

import click

from ..trace_format.errors import TraceFormatError
from ..trace_format.safe_text import clean
from ..typo_hints import close_matches, did_you_mean

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_UNUSABLE = 2
#: The reader of the output went away (``npusan analyze | head``): what the shell reports for
#: a program killed by SIGPIPE (128 + 13), as for git or cat; 1 would read as findings.
EXIT_READER_GONE = 141
#: Interrupted (Ctrl-C): what the shell reports for a program killed by SIGINT (128 + 2), as
#: ``npusan record`` exits when its command was; 1 would read as findings.
EXIT_INTERRUPTED = 130

F = TypeVar("F", bound=Callable)


class UsageProblem(Exception):
    """Unusable user input other than a trace (a bad suppression file, an unwritable path...)."""


def fail(message: str) -> NoReturn:
    click.echo(f"npusan: error: {clean(message)}", err=True)
    sys.exit(EXIT_UNUSABLE)


def refuse_like_analyze(path: str) -> None:
    """Refuse a trace exactly when, and as, ``npusan analyze`` would: replay it as analyze
    does (the findings are not used), raising analyze's :class:`TraceFormatError`.

    For the verbs that read fields leniently or copy records (``info``, ``redact``): without
    this they would describe, or write a redacted copy of, a trace whose records analyze
    refuses as malformed. Only a regular file is replayed (a pipe cannot be read twice);
    other inputs get the reader's checks only.
    """
    import os
    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
    except OSError:
        return  # the verb's own read says why it cannot be read
    from ..analyzer.replay.traces import analyze_trace

    analyze_trace(path)


def reader_gone() -> NoReturn:
    """End quietly, as Unix tools do, when whoever reads the output has gone away.

    Python ignores SIGPIPE, so a write to a pipe whose reader exited (``| head``) raises
    BrokenPipeError; the verbs let it through (it is no failure of theirs) and the
    command group calls this once for all of them. Nothing is printed: the user stopped
    reading on purpose. Standard output becomes /dev/null so that the flush at exit does
    not fail again and print "Exception ignored" (the ``signal`` module's note on SIGPIPE).
    """
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor: a captured stdout (click's CliRunner)
        pass
    sys.exit(EXIT_READER_GONE)


def interrupted() -> NoReturn:
    """End a verb stopped by Ctrl-C (a ``KeyboardInterrupt``) with status 130 and one line.

    click's own handling prints "Aborted!" and exits 1, the status of ``npusan analyze``
    for findings. What the verbs write goes through temporary files (see
    :mod:`.output`), so nothing half-written is left under the names asked for.
    """
    click.echo(f"{chr(10) if _is_terminal(sys.stderr) else ''}npusan: interrupted", err=True)
    sys.exit(EXIT_INTERRUPTED)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def one_line_errors(fn: F) -> F:
    """Turn the expected failures of a verb into ``npusan: error: ...`` and exit 2.

    A BrokenPipeError is not one: it goes on to :func:`reader_gone`.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise
        except TraceFormatError as e:
            fail(str(e))
        except UsageProblem as e:
            fail(str(e))
        except OSError as e:
            name = getattr(e, "filename", None)
            fail(f"{e.strerror}: {name}" if e.strerror and name else e.strerror or str(e))
        except MemoryError:
            fail("out of memory while reading the input")

    return wrapper  # type: ignore[return-value]


class OneLineUsageError(click.UsageError):
    """A click usage error (unknown option, missing argument, bad value...) shown as the
    project's one line, ``npusan: error: ... (try 'npusan analyze --help')``, exit 2,
    instead of click's usage line, hint line and ``Error:`` line."""

    def show(self, file=None) -> None:
        hint = f" (try '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"npusan: error: {clean(_sentence(self.format_message()))}{hint}", err=True)


class OneLineClickError(click.ClickException):
    """Any other click error, as one ``npusan: error: ...`` line with its exit status."""

    def show(self, file=None) -> None:
        click.echo(f"npusan: error: {clean(_sentence(self.format_message()))}", err=True)


def _sentence(message: str) -> str:
    """``"No such option '--bogus'."`` -> ``"no such option '--bogus'"`` (the project's style)."""
    message = " ".join(message.split()).rstrip(".")
    if len(message) > 1 and message[0].isupper() and message[1].islower():
        message = message[0].lower() + message[1:]
    return message


#: click's errors for an unknown option or command (``NoSuchCommand`` since click 8.4).
_NO_SUCH_NAME = tuple(
    c for c in (click.NoSuchOption, getattr(click.exceptions, "NoSuchCommand", None)) if c is not None
)


def _with_one_hint_wording(error: click.UsageError) -> str:
    """The error's message, its "did you mean" hint worded as every other npusan hint.

    click words its hint two ways by the number of matches, and for an unknown verb offers
    only the verbs imported so far (none: :class:`LazyGroup` imports them on use), so the
    matches are taken again here from every verb's name.
    """
    if not isinstance(error, _NO_SUCH_NAME):
        return error.format_message()
    matches = list(getattr(error, "possibilities", None) or ())
    name = getattr(error, "option_name", None) or getattr(error, "command_name", "")
    group = error.ctx.command if error.ctx is not None else None
    if not matches and isinstance(group, click.Group) and not isinstance(error, click.NoSuchOption):
        matches = close_matches(name, group.list_commands(error.ctx))
    hint = did_you_mean(sorted(matches))
    return f"{error.message.rstrip('.')}. {hint}" if hint else error.message


#: ``npusan`` alone prints the help (click >= 8.2 raises this usage error to do it).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def as_one_line(error: click.ClickException) -> click.ClickException:
    """``error`` as the one-line kind above (``--help`` for a bare group is left as click shows it)."""
    if isinstance(error, (OneLineUsageError, OneLineClickError, _NO_ARGS_IS_HELP)):
        return error
    if isinstance(error, click.UsageError):
        return OneLineUsageError(_with_one_hint_wording(error), ctx=error.ctx)
    one = OneLineClickError(error.format_message())
    one.exit_code = error.exit_code
    return one
