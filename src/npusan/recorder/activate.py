"""Turning recording on: from the environment, in every Python process, one trace each.

Installing npusan puts ``npusan.pth`` into site-packages; Python runs its one line at every
start-up, and when ``NPUSAN_TRACE`` or ``NPUSAN_ONLINE`` is set it calls :func:`autostart`
(unset, the line costs two dictionary lookups and imports nothing). ``npusan record -- CMD``
sets ``NPUSAN_TRACE=PATH`` and also prepends :data:`BOOT_DIR` to ``PYTHONPATH``; that
directory holds a ``sitecustomize`` module which does the same, for Pythons that do not have
npusan installed in their own site-packages. :func:`autostart` starts a
:class:`~.session.Recorder` as soon as the process imports torch (a process that never
imports torch -- ``pip``, a shell helper -- pays nothing and writes nothing). Without
either, ``import npusan.auto`` at the top of a program does the same. ``NPUSAN_DISABLE=1``
turns all of this off.

Recording waits for the imports in :data:`WATCHED` to finish, so any order of
``import npusan.sim``, ``import torch`` and ``import torch_npu`` records.

With ``NPUSAN_BACKEND=auto`` on a machine where ``torch_npu`` is installed (and CUDA is not
usable), the start waits until the program imports ``torch_npu`` (see
:func:`_wait_for_torch_npu`), so that ``import torch`` followed by ``import torch_npu``
records the NPU and npusan never imports torch_npu itself.

Environment: ``NPUSAN_TRACE`` (trace path template), ``NPUSAN_ONLINE`` (``raise``/``warn``:
run the analyzer in process; alone it records to no file), ``NPUSAN_BACKEND``
(``auto``/``cuda``/``npu``/``sim``), ``NPUSAN_STACK_DEPTH`` (default 32, 0 = no stacks),
``NPUSAN_KEEP_INTERNAL_FRAMES`` (``1``: keep torch's and npusan's frames),
``NPUSAN_EMULATE`` (``cuda``: run the program on an emulated CUDA device, recorded by
the CUDA backend; ``npu``: on an emulated Ascend NPU with an emulated ``torch_npu``,
recorded by the NPU backend; see :mod:`npusan.emulate`).

One trace per process (:func:`trace_path_for_process`): ``{pid}``, ``{rank}`` and
``{local_rank}`` in the path are expanded (rank: ``RANK``, else ``LOCAL_RANK``, else 0;
local rank: ``LOCAL_RANK``, else 0; only plain non-negative integers are used). Without
them, a process launched with ``RANK`` set (``torchrun`` workers) writes
``STEM.rank<R>SUFFIX``; the first process that records writes ``PATH`` itself and notes
its pid in ``NPUSAN_TRACE_OWNER``, so any Python process it starts later writes
``STEM.pid<PID>SUFFIX`` instead of clobbering it. Under ``npusan record`` two processes
that would still write the same file (a ``{rank}`` template in processes without a rank)
never overwrite each other: the later one adds ``.pid<PID>`` (see :mod:`.status`).
Forked children (DataLoader workers) stop recording and write nothing (the first fork says so:
see :mod:`.process_hooks`); the children of a
multiprocessing forkserver, which are whole worker processes, record a trace each.

The torchrun launcher itself (``torchrun``, ``python -m torch.distributed.run``) does no
device work and is not recorded: each worker it starts records.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Optional

#: Set when a start had to wait for npusan.recorder.session to finish importing.
_start_after_session_import = False

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")
OWNER_ENV = "NPUSAN_TRACE_OWNER"
#: Set to 1 to turn off recording from the environment (the start-up hook stays inert).
DISABLE_ENV = "NPUSAN_DISABLE"
#: ``cuda``/``npu``: emulate a CUDA device or an Ascend NPU on the CPU (``npusan record --emulate``).
EMULATE_ENV = "NPUSAN_EMULATE"


def _env_index(var: str) -> Optional[str]:
    v = os.environ.get(var)
    if v is not None and v.strip().isdigit():
        return str(int(v.strip()))
    return None


def _rank() -> Optional[str]:
    for var in ("RANK", "LOCAL_RANK"):
        v = _env_index(var)
        if v is not None:
            return v
    return None


def _insert(path: str, tag: str) -> str:
    d, name = os.path.split(path)
    stem, dot, suffix = name.rpartition(".")
    if not dot or not stem:  # no suffix: append
        return os.path.join(d, f"{name}.{tag}")
    return os.path.join(d, f"{stem}.{tag}.{suffix}")


#: The placeholders a trace path may hold.
PLACEHOLDERS = ("{pid}", "{rank}", "{local_rank}")


def expand(template: str) -> str:
    """``template`` with ``{pid}``, ``{rank}`` and ``{local_rank}`` filled in for this process."""
    rank = _rank()
    local = _env_index("LOCAL_RANK")
    return (template.replace("{pid}", str(os.getpid()))
            .replace("{rank}", rank if rank is not None else "0")
            .replace("{local_rank}", local if local is not None else "0"))


def trace_path_for_process(template: str, *, claim: bool = True) -> str:
    """The trace path this process should write (see the module docstring)."""
    from . import status

    pid = os.getpid()
    rank = _rank()
    if any(p in template for p in PLACEHOLDERS):
        path = expand(template)
    elif os.environ.get("RANK") is not None and rank is not None:
        path = _insert(template, f"rank{rank}")
    else:
        owner = os.environ.get(OWNER_ENV)
        if owner and owner != str(pid):
            path = _insert(template, f"pid{pid}")
        else:
            if claim:
                os.environ[OWNER_ENV] = str(pid)
            path = template
    if claim and not status.claim(path):
        path = _insert(path, f"pid{pid}")
    return path


def is_launcher() -> bool:
    """Whether this process is the torchrun launcher (it starts the workers, runs no op)."""
    if os.environ.get("RANK") is not None:
        return False
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) in ("torch.distributed.run", "torch.distributed.launch"):
        return True
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "torchrun":
        return True
    if argv0 == "-m":  # python -m X: torch is imported while X is being found
        return _main_module() in _LAUNCHERS
    norm = argv0.replace(os.sep, "/")
    return norm.endswith(("torch/distributed/run.py", "torch/distributed/launch.py"))


_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def _main_module() -> Optional[str]:
    """The X of ``python [options] -m X`` from the interpreter's own command line (while X
    is being found, ``sys.argv[0]`` is ``-m`` and ``__main__`` is not X yet)."""
    argv = list(getattr(sys, "orig_argv", None) or [])[1:]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if a.startswith("-m"):
            return a[2:]
        if a in ("-X", "-W"):  # options that take the next argument
            i += 2
            continue
        if not a.startswith("-") or a in ("-c", "-"):
            return None  # a script, a command or stdin: not a module
        i += 1
    return None


_WARNED_ONLINE: set = set()


def config_from_env() -> Optional[dict]:
    """Recorder keyword arguments from the environment; None when nothing asks to record
    (or ``NPUSAN_DISABLE`` is set to anything but ``0``/empty)."""
    if os.environ.get(DISABLE_ENV, "0") not in ("", "0"):
        return None
    path = os.environ.get("NPUSAN_TRACE") or None
    online = (os.environ.get("NPUSAN_ONLINE") or "").strip().lower() or None
    if online in ("0", "off", "no", "false"):
        online = None
    if online is not None and online not in ("raise", "warn"):
        if online not in _WARNED_ONLINE:  # this is asked again at every start attempt: say it once
            _WARNED_ONLINE.add(online)
            sys.stderr.write(f"npusan: warning: NPUSAN_ONLINE={online!r} is not 'raise' or 'warn'; using 'warn'\n")
        online = "warn"
    if path is None and online is None:
        return None
    try:
        depth = int(os.environ.get("NPUSAN_STACK_DEPTH", "32"))
    except ValueError:
        depth = 32
    return {
        "path": path,
        "online": online,
        "backend": os.environ.get("NPUSAN_BACKEND", "auto") or "auto",
        "stack_depth": depth,
        "keep_internal_frames": os.environ.get("NPUSAN_KEEP_INTERNAL_FRAMES", "") not in ("", "0"),
    }


def _wait_for_torch_npu(cfg: dict) -> bool:
    """Whether ``auto`` must wait for the program to import ``torch_npu`` before choosing.

    Recording starts right after ``import torch``, but an NPU program imports
    ``torch_npu`` later (``import torch; import torch_npu``). When torch_npu is installed
    (found on the path, not imported: importing it on the program's behalf would change
    what the program does) and CUDA is not usable, the choice is put off until the
    program imports it; nothing device-side can run before that. A program that never
    imports it is not recorded (``--backend sim``/``cuda`` says what to record instead).
    """
    if cfg.get("backend", "auto") != "auto" or "torch_npu" in sys.modules:
        return False
    from .backends import npu_installed

    if not npu_installed():
        return False
    try:
        from .backends.cuda import CudaBackend

        if CudaBackend.available():
            return False
    except Exception:
        pass
    return True


def start_from_env() -> None:
    """Start a recorder as the environment says (never raises)."""
    from . import status

    try:
        cfg = config_from_env()
        if cfg is None:
            return
        session = sys.modules.get(__package__ + ".session")
        if session is not None and not hasattr(session, "_resume_start_from_env"):
            # torch is being imported by the recorder's own import (the program is starting
            # npusan.record() itself): start when that import ends (see session's last line).
            global _start_after_session_import
            _start_after_session_import = True
            return
        from . import session

        rec = session.current()
        if rec is not None:
            where = rec.path if isinstance(rec.path, (str, os.PathLike)) else None
            status.report(skipped="the program records itself" + (f" (to {os.fspath(where)})" if where else ""))
            return
        if is_launcher():
            status.report(skipped="the torchrun launcher runs no device work; its workers record")
            return
        # Under --emulate the emulated torch_npu is the one: never wait for an installed one.
        if not os.environ.get(EMULATE_ENV) and _wait_for_torch_npu(cfg):
            _watch_imports()  # the torch_npu watcher calls back when it is imported
            return
        emulate = os.environ.get(EMULATE_ENV) or None
        if emulate is not None:  # before the recorder: its mode must sit above the emulator's
            from ..emulate.install import install

            install(emulate)
            cfg["backend"] = emulate
        path = cfg.pop("path")
        if path is not None:
            path = trace_path_for_process(path)
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
        rec = session.Recorder(path, **cfg).start()
        if path is not None and not os.environ.get(status.ENV):  # (npusan record says it itself)
            import atexit

            atexit.register(_say_trace_written, rec, os.getpid())
    except Exception as e:  # never stop the program from starting
        status.report(failed=f"recording not started: {type(e).__name__}: {e}")
        try:
            sys.stderr.write(f"npusan: warning: recording not started: {type(e).__name__}: {e}\n")
        except Exception:
            pass


def _say_trace_written(rec, pid: int) -> None:
    """At exit: stop the recording (the trace is complete) and say where it is, on stderr,
    as ``npusan record`` does; a recording set up by NPUSAN_TRACE alone said nothing."""
    if os.getpid() != pid:
        return
    try:
        from .process_hooks import stop_at_exit

        stop_at_exit(rec)
        path = rec.path
        if isinstance(path, (str, os.PathLike)) and not rec.failed and os.path.isfile(path):
            sys.stderr.write(f"npusan: trace written: {os.fspath(path)}\n")
    except Exception:
        pass


#: Modules whose import is watched. Recording starts once torch is imported, but not while
#: one of these is half-way through its own import: ``import npusan.sim`` (or
#: ``import torch_npu``) as a program's first import loads torch from inside its own
#: module body, and the recorder needs the finished module (the backend it picks uses it).
WATCHED = ("torch", "torch_npu", "npusan.sim")

_importing: set = set()  # watched modules whose import has begun and not yet ended
_started = False  # this process's automatic start has run (recording or not)


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Wraps the loader of each watched module to tell :func:`_try_start` when it ends."""

    def __init__(self) -> None:
        self.names = set(WATCHED)
        self._resolving: set = set()

    def find_spec(self, name, path=None, target=None):
        if name not in self.names or name in self._resolving:
            return None
        self._resolving.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._resolving.discard(name)
        loader = spec.loader if spec is not None else None
        if (loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module")
                or getattr(loader, "_npusan_watched", False)):
            return spec
        # find_spec is also called just to look a module up (npu_installed does): the
        # name stays watched until a loader actually runs it.
        orig = loader.exec_module

        def exec_module(module):
            self.names.discard(name)
            _importing.add(name)
            try:
                orig(module)
            finally:
                _importing.discard(name)
                _try_start()

        try:
            loader.exec_module = exec_module
            loader._npusan_watched = True
        except (AttributeError, TypeError):  # a loader that cannot be wrapped: start at the end of torch
            pass
        return spec


def _watch_imports() -> None:
    if not any(isinstance(f, _ImportWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportWatcher())


def _unwatch() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _ImportWatcher)]


def _try_start() -> None:
    """Start recording if torch is imported and no watched import is half-way."""
    global _started
    if _started or "torch" not in sys.modules or _importing:
        return
    _started = True
    start_from_env()
    from . import session

    current = getattr(session, "current", None)  # absent while the recorder itself is importing
    if current is not None and current() is None and _waiting_for_torch_npu():
        _started = False  # torch_npu's import will call back
    else:
        _unwatch()


def _waiting_for_torch_npu() -> bool:
    cfg = config_from_env()
    return cfg is not None and _wait_for_torch_npu(cfg)


def disarm() -> None:
    """Never start recording in this process from the environment (the ``npusan`` command
    itself: with ``NPUSAN_TRACE`` exported, its own ``import torch`` must not record)."""
    global _started
    _started = True
    _unwatch()


def autostart() -> None:
    """Start recording now if torch is imported, else as soon as it is (idempotent)."""
    if config_from_env() is None:
        return
    _try_start()
    if not _started:
        _watch_imports()


def child_env(path: Optional[str], *, online: Optional[str] = None, backend: str = "auto",
              stack_depth: Optional[int] = None, keep_internal_frames: bool = False,
              base: Optional[dict] = None) -> dict:
    """The environment that makes every Python process started with it record."""
    env = dict(os.environ if base is None else base)
    env.pop(OWNER_ENV, None)
    env.pop(DISABLE_ENV, None)  # asking npusan record to record overrides it
    env.pop("NPUSAN_STATUS", None)  # npusan record sets its own (see .status)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + pp if pp else "")
    if path is not None:
        # Absolute now: a process that changes directory before it imports torch still
        # writes where npusan record looks.
        env["NPUSAN_TRACE"] = os.path.abspath(path)
    else:
        env.pop("NPUSAN_TRACE", None)
    if online:
        env["NPUSAN_ONLINE"] = online
    env["NPUSAN_BACKEND"] = backend
    if stack_depth is not None:
        env["NPUSAN_STACK_DEPTH"] = str(stack_depth)
    if keep_internal_frames:
        env["NPUSAN_KEEP_INTERNAL_FRAMES"] = "1"
    return env
