"""What each recorded process did, told to the ``npusan record`` that started it.

``npusan record`` makes a private directory and names it in ``NPUSAN_STATUS``. Every
process started underneath appends one JSON line per outcome to a file of its own there:
the trace it writes (``trace``), why it records nothing (``skipped``: a torchrun launcher,
a program already recording itself, a backend that is not available), why it could not
start (``failed``: an unwritable path, a full disk) or why it stopped early (``stopped``).
After the command ends, ``npusan record`` reads them (:func:`read`) and says exactly which
traces were written and, when none was, why -- instead of guessing from file names.

It also holds the SIGINTs ``npusan record`` passed on to the command (:func:`forwarded_sigint`):
a SIGINT sent to the whole process group reaches the command directly and through
``npusan record``, and the command's recorder takes the second for the echo it is.

The directory also holds claims on trace paths (:func:`claim`): two processes of one run
that would write the same file (a ``{rank}`` template in a process without a rank) do not
overwrite each other; the second one is told to use another name.

Without ``NPUSAN_STATUS`` (recording from ``NPUSAN_TRACE`` alone) every function here does
nothing. Nothing here ever raises.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

ENV = "NPUSAN_STATUS"
#: Bytes read from one process's status file at most (a line is ~200 bytes).
MAX_STATUS_BYTES = 1 << 20


def report(**fields: Any) -> None:
    """Append ``{"pid": <this pid>, **fields}`` to this process's status file."""
    d = os.environ.get(ENV)
    if not d:
        return
    try:
        line = json.dumps({"pid": os.getpid(), **fields}, default=str) + "\n"
        fd = os.open(os.path.join(d, f"{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except Exception:
        pass


def claim(path: str) -> bool:
    """Whether this process may write ``path``: the first process of the run to ask gets
    it; True too when there is no run directory to coordinate through."""
    d = os.environ.get(ENV)
    if not d:
        return True
    key = hashlib.sha1(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()
    try:
        fd = os.open(os.path.join(d, f"claim-{key}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError:
        return True
    try:
        os.write(fd, str(os.getpid()).encode())
    finally:
        os.close(fd)
    return True


_SIGINT = "sigint"


def note_forwarded_sigint(directory: str, count: int, when: float) -> None:
    """``npusan record`` passed its ``count``-th SIGINT on to the command, having received it
    at ``when`` (``time.monotonic()``, one clock for every process of the machine)."""
    try:
        tmp = os.path.join(directory, f"{_SIGINT}.{os.getpid()}")
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{count} {when!r}")
        os.replace(tmp, os.path.join(directory, _SIGINT))  # readers see a whole line
    except Exception:
        pass


def forwarded_sigint() -> Optional[Tuple[int, float]]:
    """``(count, when)`` of the last SIGINT the ``npusan record`` above this process passed
    on, or None (none yet, or not run under it)."""
    d = os.environ.get(ENV)
    if not d:
        return None
    try:
        with open(os.path.join(d, _SIGINT), "r", encoding="ascii") as f:
            n, t = f.read(64).split()
        return int(n), float(t)
    except Exception:
        return None


def read(directory: str) -> List[Dict[str, Any]]:
    """Every reported line of a run, in pid order then file order (bad lines skipped)."""
    out: List[Dict[str, Any]] = []
    try:
        names = sorted((n for n in os.listdir(directory) if n.endswith(".jsonl")),
                       key=lambda n: int(n.split(".")[0]) if n.split(".")[0].isdigit() else 0)
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = f.read(MAX_STATUS_BYTES)
        except OSError:
            continue
        for raw in data.splitlines():
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
    return out
