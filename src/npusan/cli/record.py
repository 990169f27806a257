"""`npusan record [-o PATH] -- CMD...`: run a Python command line with recording on.

Every Python process the command starts records (a ``sitecustomize`` start-up hook on
``PYTHONPATH`` plus ``NPUSAN_TRACE``; see :mod:`npusan.recorder.activate` for how traces
are named per process). ``CMD`` may be ``script.py ARGS`` or ``-m module ARGS`` (run with
this Python), or any program (``python ...``, ``torchrun ...``). The exit status is the
command's (128 + N when a signal N ended it; 127 when the command is not found and 126
when it cannot be executed, as in a shell). A signal ignored when this command starts
(``nohup``, ``trap '' INT``) stays ignored here and in the command.

Each recorded process tells this command what it did (:mod:`npusan.recorder.status`), so
the closing line names exactly the traces written, and says why when there is none.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import click

from .errors import fail, one_line_errors


def _argv(cmd: tuple) -> list:
    first = cmd[0]
    if first in ("-m", "-c") or first.endswith(".py"):
        return [sys.executable, *cmd]
    return list(cmd)


#: Exit statuses of a shell for a command it cannot run.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


#: The signals ``npusan record`` passes on to the command (those left at their default here):
#: the ones a scheduler or supervisor sends to end, reload or checkpoint a job (SLURM's
#: ``--signal=USR1``, a hang-up), which would otherwise end this process and leave the
#: command's own handler unrun.
FORWARDED = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                  if hasattr(signal, n))
#: Those a terminal's keyboard sends to the whole foreground group (the command included).
_KEYBOARD = tuple(getattr(signal, n) for n in ("SIGINT", "SIGQUIT") if hasattr(signal, n))


def _from_terminal() -> bool:
    """Whether a keyboard signal here (Ctrl-C, Ctrl-\\) most likely came from the terminal,
    which sends it to the command too (it is in this process group): then it is not
    forwarded a second time."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _summary(items: list, *, online: bool, backend: str) -> list:
    """The closing lines: the traces written, and what went wrong where."""
    written, notes = [], []
    for it in items:
        pid = it.get("pid", "?")
        trace = it.get("trace")
        if "failed" in it:
            notes.append(f"process {pid}: no trace{f' at {trace}' if trace else ''}: {it['failed']}")
        elif "stopped" in it:
            notes.append(f"process {pid}: recording stopped early ({it['stopped']}); {trace} has what came before")
        elif "skipped" in it:
            notes.append(f"process {pid}: not recorded: {it['skipped']}")
        elif trace:
            written.append(str(trace))
    written = [t for t in dict.fromkeys(written) if os.path.isfile(t)]
    lines = [f"npusan: warning: {n}" for n in notes]
    if written:
        lines.append(f"npusan: trace{'s' if len(written) > 1 else ''} written: {', '.join(written)}")
    elif not items and not online:
        hint = "no Python process of the command imported torch"
        if backend == "auto":
            from ..recorder.backends import npu_installed

            if npu_installed():
                hint += (" (with torch_npu installed, recording starts when the program imports"
                         " torch_npu; use --backend sim or cuda for a program that does not)")
        lines.append(f"npusan: no trace was written: {hint}")
    elif not online and not any("failed" in it for it in items):  # (a failure's note says it already)
        lines.append("npusan: no trace was written")
    return lines


def check_device(backend: str) -> None:
    """Fail (exit 2, one line) before running anything when the named device is not here:
    a recording of a program that cannot reach its device holds no device work."""
    from ..recorder.backends import device_problem

    problem = device_problem(backend)
    if problem is not None:
        fail(f"--backend {backend}: {problem}; record on the simulated device with --backend sim")


class _RecordCommand(click.Command):
    """``record``'s own options come first; the command starts at its first word, at ``--``,
    or at ``-m``/``-c`` (a Python command line without the interpreter).

    An unknown option before that is a usage error with click's "did you mean"
    (``--outptu`` must not run a program called ``--outptu``); everything from the command on
    is the command's, options included.
    """

    def parse_args(self, ctx: click.Context, args: list) -> list:
        takes_value = {name for p in self.params if isinstance(p, click.Option) and not p.is_flag for name in p.opts}
        args = list(args)
        i = 0
        while i < len(args):
            word = args[i]
            if word == "--" or not word.startswith("-") or word == "-":
                break
            if word in ("-m", "-c"):
                args.insert(i, "--")
                break
            i += 2 if word in takes_value else 1
        return super().parse_args(ctx, args)


@click.command(cls=_RecordCommand, context_settings={"allow_interspersed_args": False})
@click.option("-o", "--output", default="trace.npusan", show_default=True, metavar="PATH",
              help="Trace path; {pid}, {rank} and {local_rank} are expanded per process.")
@click.option("--backend", type=click.Choice(["auto", "cuda", "npu", "sim"]), default="auto", show_default=True)
@click.option("--online", "online", is_flag=True, help="Also analyze live and warn at each race.")
@click.option("--online-raise", "online_raise", is_flag=True,
              help="Analyze live and stop the program (npusan.RaceError) at the first race.")
@click.option("--stack-depth", type=click.IntRange(0, 1000), default=32, show_default=True)
@click.option("--keep-internal-frames", is_flag=True, help="Keep torch's and npusan's own frames in stacks.")
@click.option("--emulate", type=click.Choice(["cuda", "npu"]), default=None,
              help="Run the program's CUDA (or torch_npu) work on an emulated device on the CPU (no GPU/NPU needed).")
@click.option("--emulate-devices", "emulate_devices", type=click.IntRange(1, 64), default=None, metavar="N",
              help="With --emulate cuda: how many devices the machine has (default 1); a torchrun rank uses "
                   "cuda:LOCAL_RANK after set_device.")
@click.option("--print-env", is_flag=True, help="Print the environment that makes a Python process record, and exit.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@one_line_errors
def record(output, backend, online, online_raise, stack_depth, keep_internal_frames, emulate, emulate_devices,
           print_env, cmd) -> None:
    """Run CMD (a Python command line) and record a trace of each Python process it starts.

    \b
    Examples:
      npusan record -o out/train.npusan -- python train.py --epochs 1
      npusan record -o out/t.npusan -- torchrun --nproc_per_node=8 train.py   # out/t.rank<R>.npusan
      npusan record --backend sim -- python -m npusan.examples.multistream
      npusan record --emulate cuda -- python train.py   # a CUDA program, no GPU
      npusan record --emulate npu -- python train.py    # a torch_npu program, no NPU
      eval "$(npusan record --print-env -o t.npusan)"; python train.py
    """
    from ..recorder.activate import child_env

    mode = "raise" if online_raise else ("warn" if online else None)
    if emulate is not None:
        if backend not in ("auto", emulate):
            fail(f"--emulate {emulate} records with --backend {emulate}, not --backend {backend}")
        backend = emulate
    elif emulate_devices is not None:
        fail("--emulate-devices needs --emulate cuda")
    env = child_env(output, online=mode, backend=backend, stack_depth=stack_depth,
                    keep_internal_frames=keep_internal_frames, base={})
    if emulate is not None:
        env["NPUSAN_EMULATE"] = emulate
        if emulate_devices is not None:
            env["NPUSAN_EMULATE_DEVICES"] = str(emulate_devices)
    if print_env:
        for k in sorted(env):
            v = env[k]
            if k == "PYTHONPATH" and os.environ.get("PYTHONPATH"):
                v = v.split(os.pathsep, 1)[0] + os.pathsep + "$PYTHONPATH"
                click.echo(f'export {k}="{v}"')
            else:
                click.echo(f"export {k}={shlex.quote(v)}")
        return
    if not cmd:
        fail("nothing to run: give a command after --, e.g. npusan record -- python train.py")
    if backend in ("cuda", "npu") and emulate is None:
        check_device(backend)
    if os.path.isdir(output) or output.endswith(("/", os.sep)):
        fail(f"-o {output} names a directory; give a file path such as {os.path.join(output, 'trace.npusan')}")
    env = child_env(output, online=mode, backend=backend, stack_depth=stack_depth,
                    keep_internal_frames=keep_internal_frames)
    if emulate is not None:
        env["NPUSAN_EMULATE"] = emulate
        if emulate_devices is not None:
            env["NPUSAN_EMULATE_DEVICES"] = str(emulate_devices)
        else:
            env.pop("NPUSAN_EMULATE_DEVICES", None)
    else:
        env.pop("NPUSAN_EMULATE", None)
        env.pop("NPUSAN_EMULATE_DEVICES", None)
    from ..recorder import status

    status_dir = tempfile.mkdtemp(prefix="npusan-record-")
    env[status.ENV] = status_dir
    try:
        rc, started = _run(_argv(cmd), env, output, status_dir)
        if started:
            for line in _summary(status.read(status_dir), online=mode is not None, backend=backend):
                click.echo(line, err=True)
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)
    sys.exit(rc)


def _run(argv: list, env: dict, output: str, status_dir: str) -> tuple:
    """Run the command with signals forwarded: (its exit status as a shell reports it,
    whether it started at all).

    A SIGINT sent to the whole process group (``kill -INT -PGID``, a job runner's cancel)
    reaches the command directly too, and the forwarded copy would be a second
    ``KeyboardInterrupt``: each forwarded SIGINT is noted in the run directory, and the
    command's recorder drops a copy that follows one it has just handled
    (``signals.ECHO_WINDOW``). Ctrl-C (and Ctrl-\\) on a terminal is not forwarded at all;
    the other signals of :data:`FORWARDED` are, with no such de-duplication.
    """
    from ..recorder import status

    parent = os.path.dirname(os.path.abspath(output)) if "{" not in output else None
    if parent:
        os.makedirs(parent, exist_ok=True)
    proc = None
    sigints = 0

    def forward(signum, frame):
        nonlocal sigints
        if proc is None or (signum in _KEYBOARD and _from_terminal()):
            return
        if signum == signal.SIGINT:
            sigints += 1
            status.note_forwarded_sigint(status_dir, sigints, time.monotonic())
        try:
            proc.send_signal(signum)
        except Exception:
            pass

    # A signal ignored here (nohup, `trap '' INT`, a background job of a non-interactive
    # shell) stays ignored, in this process and in the command, which inherits it through
    # exec as it would without npusan; a handler installed here would be reset to the
    # default in the command. Only the signals left at their default are forwarded.
    old = {}
    for s in FORWARDED:
        if signal.getsignal(s) != signal.SIG_IGN:
            old[s] = signal.signal(s, forward)
    try:
        try:
            proc = subprocess.Popen(argv, env=env)
        except FileNotFoundError:
            click.echo(f"npusan: error: command not found: {argv[0]}", err=True)
            return EXIT_NOT_FOUND, False
        except OSError as e:  # PermissionError, a directory, ENOEXEC
            click.echo(f"npusan: error: cannot execute {argv[0]}: {e.strerror or e}", err=True)
            return EXIT_NOT_EXECUTABLE, False
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return (rc if rc >= 0 else 128 - rc), True
