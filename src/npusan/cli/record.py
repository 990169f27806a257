"""`npusan record [-o PATH] -- CMD...`: run a Python command line with recording on.

Every Python process the command starts records (a ``sitecustomize`` start-up hook on
``PYTHONPATH`` plus ``NPUSAN_TRACE``; see :mod:`npusan.recorder.activate` for how traces
are named per process). ``CMD`` may be ``script.py ARGS`` or ``-m module ARGS`` (run with
this Python), or any program (``python ...``, ``torchrun ...``). The exit status is the
command's.
"""

from __future__ import annotations

import glob
import os
import shlex
import signal
import subprocess
import sys
import time

import click

from .errors import fail, one_line_errors


def _argv(cmd: tuple) -> list:
    first = cmd[0]
    if first in ("-m", "-c") or first.endswith(".py"):
        return [sys.executable, *cmd]
    return list(cmd)


def _outputs(path: str, since: float) -> list:
    if "{" in path:
        pattern = path.replace("{pid}", "*").replace("{rank}", "*")
        cands = glob.glob(pattern)
    else:
        d, name = os.path.split(path)
        stem, dot, suffix = name.rpartition(".")
        cands = [path] + glob.glob(
            os.path.join(d, f"{stem}.rank*.{suffix}" if dot and stem else f"{name}.rank*")
        ) + glob.glob(os.path.join(d, f"{stem}.pid*.{suffix}" if dot and stem else f"{name}.pid*"))
    out = []
    for p in cands:
        try:
            if os.path.getmtime(p) >= since - 1:
                out.append(p)
        except OSError:
            pass
    return sorted(set(out))


def check_device(backend: str) -> None:
    """Fail (exit 2, one line) before running anything when the named device is not here:
    a recording of a program that cannot reach its device holds no device work."""
    import importlib.util

    from ..recorder.backends import backend_class, npu_installed

    if importlib.util.find_spec("torch") is None:
        return  # this Python cannot tell; the program's own Python may have torch
    if backend_class(backend).available():
        return
    if backend == "cuda":
        fail("--backend cuda: no usable CUDA device here (torch.cuda.is_available() is False, or this "
             "torch has no GPU trace hooks); record on the simulated device with --backend sim")
    if not npu_installed():
        fail("--backend npu: torch_npu is not installed here; record on the simulated device with --backend sim")
    fail("--backend npu: torch_npu reports no usable NPU here; record on the simulated device with --backend sim")


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default="trace.npusan", show_default=True, metavar="PATH",
              help="Trace path; {pid} and {rank} are expanded per process.")
@click.option("--backend", type=click.Choice(["auto", "cuda", "npu", "sim"]), default="auto", show_default=True)
@click.option("--online", "online", is_flag=True, help="Also analyze live and warn at each race.")
@click.option("--online-raise", "online_raise", is_flag=True,
              help="Analyze live and stop the program (npusan.RaceError) at the first race.")
@click.option("--stack-depth", type=click.IntRange(0, 1000), default=32, show_default=True)
@click.option("--keep-internal-frames", is_flag=True, help="Keep torch's and npusan's own frames in stacks.")
@click.option("--print-env", is_flag=True, help="Print the environment that makes a Python process record, and exit.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@one_line_errors
def record(output, backend, online, online_raise, stack_depth, keep_internal_frames, print_env, cmd) -> None:
    """Run CMD (a Python command line) and record a trace of each Python process it starts.

    \b
    Examples:
      npusan record -o out/train.npusan -- python train.py --epochs 1
      npusan record -o out/t.npusan -- torchrun --nproc_per_node=8 train.py   # out/t.rank<R>.npusan
      npusan record --backend sim -- python -m npusan.examples.multistream
      eval "$(npusan record --print-env -o t.npusan)"; python train.py
    """
    from ..recorder.activate import child_env

    mode = "raise" if online_raise else ("warn" if online else None)
    env = child_env(output, online=mode, backend=backend, stack_depth=stack_depth,
                    keep_internal_frames=keep_internal_frames, base={})
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
    if backend in ("cuda", "npu"):
        check_device(backend)
    env = child_env(output, online=mode, backend=backend, stack_depth=stack_depth,
                    keep_internal_frames=keep_internal_frames)
    parent = os.path.dirname(os.path.abspath(output)) if "{" not in output else None
    if parent:
        os.makedirs(parent, exist_ok=True)
    argv = _argv(cmd)
    start = time.time()
    try:
        proc = subprocess.Popen(argv, env=env)
    except FileNotFoundError:
        fail(f"command not found: {argv[0]}")
    except PermissionError:
        fail(f"cannot execute: {argv[0]}")

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except Exception:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    traces = _outputs(output, start)
    if traces:
        click.echo(f"npusan: trace{'s' if len(traces) > 1 else ''} written: {', '.join(traces)}", err=True)
    elif mode is None:
        hint = "did the command import torch?"
        if backend == "auto":
            from ..recorder.backends import npu_installed

            if npu_installed():
                hint += (" With torch_npu installed, recording starts when the program imports"
                         " torch_npu; use --backend sim or cuda for a program that does not")
        click.echo(f"npusan: no trace was written ({hint})", err=True)
    sys.exit(rc if rc >= 0 else 128 - rc)
