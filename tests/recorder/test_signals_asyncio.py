"""Ctrl-C in ``asyncio.run`` while recording: the main task is cancelled (its cleanup runs),
as without npusan, and npusan's SIGINT handler is back once ``asyncio.run`` returns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from npusan.recorder.activate import child_env

from .conftest import NPUSAN, write_script

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11) or os.name != "posix",
                                reason="asyncio.Runner (3.11+) and POSIX signals")

# ``import torch`` starts the recording (the sim backend records from there on).
SERVER = """
import asyncio, torch

async def main():
    try:
        print("READY", flush=True)
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        print("cancelled: draining", flush=True)
        raise

asyncio.run(main())
"""

#: The main task handles its cancellation and returns: without npusan, ``asyncio.run`` then
#: returns normally; a raw KeyboardInterrupt in the event loop would end the program instead.
GRACEFUL = """
import asyncio, torch

async def main():
    try:
        print("READY", flush=True)
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(0.01)
        print("drained", flush=True)
    return "done"

print(asyncio.run(main()), flush=True)
"""


def _interrupt(script, env):
    p = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "READY"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return p.returncode, out, err


@pytest.mark.parametrize("code", [SERVER, GRACEFUL], ids=["reraise", "graceful"])
def test_ctrl_c_in_asyncio_run_cancels_the_main_task_as_without_npusan(tmp_path, code):
    script = write_script(tmp_path, code)
    plain_env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN")}
    plain = _interrupt(script, plain_env)
    recorded = _interrupt(script, child_env(str(tmp_path / "t.npusan"), backend="sim"))
    assert "cancelled: draining" in plain[1] or "drained" in plain[1], plain
    assert recorded[:2] == plain[:2], (recorded, plain)
    # the same exceptions, in the same order (a KeyboardInterrupt raised in the event loop
    # would have no CancelledError before it)
    assert _tb(recorded[2]) == _tb(plain[2]), recorded[2]
    assert "/npusan/" not in "".join(_tb(recorded[2], frames=True)), recorded[2]


def _tb(stderr, frames=False):
    """The exceptions of a traceback in order (with ``frames``: its frame lines too), less
    npusan's own message lines."""
    return [ln for ln in stderr.splitlines()
            if ln and not ln.startswith("npusan: ") and (frames or not ln.startswith(" "))]


AFTER_RUN = """
import asyncio, signal, torch
from npusan.recorder import session, signals

async def main():
    return signal.getsignal(signal.SIGINT)

assert session.current() is not None
during = asyncio.run(main())
print("during:", getattr(getattr(during, "func", during), "__qualname__", during))
print("after ours:", signal.getsignal(signal.SIGINT) is signals._on_signal)
session.current().stop()
print("stopped default:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print("unpatched:", not getattr(asyncio.Runner.run, "_npusan_wrapped", False))
"""


def test_npusan_handler_is_back_after_asyncio_run_and_gone_after_stop(tmp_path):
    script = write_script(tmp_path, AFTER_RUN)
    out = subprocess.run([sys.executable, str(script)], env=child_env(str(tmp_path / "t.npusan"), backend="sim"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["during: Runner._on_sigint", "after ours: True", "stopped default: True",
                                       "unpatched: True"], out.stdout


STOP_INSIDE = """
import asyncio, signal, torch
from npusan.recorder import session, signals

async def main():
    session.current().stop()       # recording ends while asyncio.run is running

asyncio.run(main())
print("default:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_recording_stopped_inside_asyncio_run_leaves_the_default_handler(tmp_path):
    script = write_script(tmp_path, STOP_INSIDE)
    out = subprocess.run([sys.executable, str(script)], env=child_env(str(tmp_path / "t.npusan"), backend="sim"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["default: True"], out.stdout


SLOW_CLEANUP = """
import asyncio, torch

async def main():
    try:
        print("READY", flush=True)
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.sleep(1.5)     # the copy npusan record passes on arrives meanwhile
        print("drained", flush=True)
    return "done"

print(asyncio.run(main()), flush=True)
"""


def test_sigint_to_the_group_under_npusan_record_is_one_ctrl_c_for_asyncio(tmp_path):
    """The copy of a group SIGINT that ``npusan record`` passes on is not a second Ctrl-C
    (which would raise KeyboardInterrupt in the middle of the cleanup)."""
    script = write_script(tmp_path, SLOW_CLEANUP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPUSAN")}
    p = subprocess.Popen([*NPUSAN, "record", "-o", str(tmp_path / "t.npusan"), "--backend", "sim", "--",
                          sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, cwd=str(tmp_path))
    try:
        assert p.stdout.readline().strip() == "READY"
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert (p.returncode, out) == (0, "drained\ndone\n"), err
