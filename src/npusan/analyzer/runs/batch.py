"""Analyzing many traces: one at a time, in a local process pool, or on a Dask cluster.

A nightly job analyzes one trace per rank. Each trace is replayed on its own
(:func:`analyze_one`: a path in, plain picklable data out, an unreadable trace becoming an
error entry instead of an exception), and :func:`merge` puts the per-trace results together
in input order, so a run on 16 processes or 100 Dask workers reports exactly what a serial
run reports. :func:`analyze_inputs` is the whole pipeline (what ``npusan analyze`` and the
Python API run): expand the inputs, analyze, merge, complete the frames from local source.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

from ...trace_format.compression import decompressed
from ...trace_format.errors import TraceFormatError
from ...trace_format.info import no_device_work
from ...trace_format.input_files import trace_name
from ...trace_format.inputs import find_traces
from ..findings.model import AnalysisResult, TraceSummary
from ..report.sources import SourceSettings, attach_local_sources


@dataclass(frozen=True)
class BatchOptions:
    """How to run an analysis; the defaults are a serial local run."""

    check_leaks: bool = False
    #: Local worker processes (1: analyze in this process).
    jobs: int = 1
    #: A Dask cluster instead of local processes: ``tcp://host:port`` of its scheduler, or a
    #: connected ``distributed.Client`` (used as it is and left open).
    scheduler: Optional[object] = None
    #: With a scheduler: send each trace's bytes from here instead of letting workers open the path.
    send_bytes: bool = False
    #: Where local source may be read from (quotes, fingerprints); None: nowhere.
    sources: Optional[SourceSettings] = None
    #: Seconds the Dask scheduler may take to answer, and a cluster may go without a
    #: worker or without its scheduler, before the run fails.
    scheduler_timeout: float = 15.0


class SchedulerError(Exception):
    """The Dask scheduler cannot be used (not installed, unreachable); one line for the user."""


def analyze_one(source, index: int, check_leaks: bool = False, name: Optional[str] = None, report=None) -> tuple:
    """Analyze one trace as trace number ``index``: ``(findings, TraceSummary)``.

    ``source`` is a path or a binary file object; ``name`` is what reports call it (default:
    the path). A trace that cannot be read yields no findings and a summary whose ``error``
    says why; nothing is raised for unusable input.
    """
    from ..replay.traces import analyze_trace  # the engine is imported in the worker, not before

    if name is None:
        name = trace_name(source) or f"trace {index}"
    try:
        found, summary = analyze_trace(source, index, check_leaks=check_leaks, report=report)
    except (TraceFormatError, OSError, MemoryError, RecursionError) as e:
        return [], TraceSummary(path=name, header={}, error=_reason(e, source, name))
    summary.path = name
    if summary.truncated and not summary.warnings:
        summary.warnings.append("the trace ends without an end record; analyzed up to its last complete record")
    empty = no_device_work(summary.kernels, summary.header)
    if empty:  # a clean result would say nothing: every report and the API carry the warning
        summary.warnings.append(empty)
    return found, summary


def _analyze_bytes(data: bytes, index: int, check_leaks: bool, name: str) -> tuple:
    """On a worker: analyze a trace whose bytes the client sent (plain or compressed)."""
    buf = io.BytesIO(data)
    buf.name = name  # what errors are prefixed with (and stripped again)
    return analyze_one(decompressed(buf, name), index, check_leaks, name)


def _reason(e: BaseException, source, name: str) -> str:
    """The error without the file name the replay put in front (the entry names the trace)."""
    if isinstance(e, MemoryError):
        return "out of memory while reading the trace"
    if isinstance(e, RecursionError):
        return "the trace is nested too deeply to read"
    if isinstance(e, OSError) and not isinstance(e, TraceFormatError):
        return f"cannot read the trace: {e.strerror or e}"
    text = str(e)
    for prefix in {str(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else None, name}:
        if prefix and text.startswith(prefix + ": "):
            return text[len(prefix) + 2:]
    return text


def merge(outcomes: Iterable[tuple], sources: Optional[SourceSettings] = None) -> AnalysisResult:
    """Put per-trace results (in input order) together as one run's result.

    Frames the traces did not describe get their source text and root from allowed local
    files here, where the report is made, so fingerprints do not depend on where the
    traces were analyzed.
    """
    findings: list = []
    summaries: list = []
    for found, summary in outcomes:
        findings.extend(found)
        summaries.append(summary)
    if sources is not None:
        attach_local_sources(findings, sources)
    return AnalysisResult(findings=findings, traces=summaries)


def analyze_paths(paths: Sequence["str | os.PathLike[str]"], options: BatchOptions,
                  progress: Optional[Callable] = None) -> list:
    """``[(findings, TraceSummary)]`` for ``paths``, in order, run as ``options`` say.

    ``progress`` (serial runs only) is called as in :func:`~npusan.analyzer.replay.traces.analyze_traces`.
    """
    paths = list(paths)
    if options.scheduler:
        return _on_dask(paths, options)
    jobs = max(1, min(options.jobs, len(paths)))
    if jobs == 1:
        return [analyze_one(p, i, options.check_leaks, report=progress) for i, p in enumerate(paths)]
    from concurrent.futures import ProcessPoolExecutor  # imported here: a serial run needs no pool

    from ..replay.native import engine_class

    engine_class()  # says here, once, when the compiled core is not available (the workers do not)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_start_method(), initializer=_engine_noted)
    try:
        futures = [pool.submit(analyze_one, p, i, options.check_leaks) for i, p in enumerate(paths)]
        results = [f.result() for f in futures]
    except BaseException:  # Ctrl-C or a failed trace: stop now, not after every queued trace
        _stop_workers(pool)
        raise
    pool.shutdown()
    return results


def _stop_workers(pool) -> None:
    """End a pool's workers at once (a worker may be an hour into a trace): cancel what is
    queued and terminate what runs, instead of ``shutdown(wait=True)`` waiting for it.

    The workers are listed before ``shutdown``, which forgets them (``_processes`` becomes
    None): listed after, none was terminated, and the exit handler of
    ``concurrent.futures`` then waited for each running worker to finish its trace (Ctrl-C
    with ``-j 2`` took 16-18 s instead of a moment).
    """
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()  # lists the workers, then shuts the pool down (cancelling what is queued)
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:  # reaped here, so that the pool's exit handler finds them gone
        process.join(timeout=1.0)


def _engine_noted() -> None:
    """A worker's start: the parent already said which engine runs (``engine_class``'s note
    on stderr when the compiled core is not available), so the worker's own note is dropped.

    Ctrl-C reaches the workers too (one process group): they ignore it, and the parent,
    which handles it, ends them (:func:`_stop_workers`) without a traceback from each."""
    import contextlib
    import io
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from ..replay.native import engine_class

    with contextlib.redirect_stderr(io.StringIO()):
        engine_class()


def _start_method():
    """fork when this process has one thread (workers start at once, imports inherited);
    otherwise forkserver or spawn, since forking a threaded process can inherit held locks."""
    import multiprocessing
    import threading

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _check_reachable(address: str) -> None:
    """Fail at once on a scheduler that refuses connections (Dask itself retries until its
    timeout); addresses other than ``tcp://host:port`` are left to Dask."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        return
    if parts.scheme != "tcp" or not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {e.strerror or e}") from None


def _on_dask(paths: list, options: BatchOptions) -> list:
    if not isinstance(options.scheduler, str):  # a connected Client of the caller's
        return _analyze_on(options.scheduler, paths, options)
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise SchedulerError(
            "--scheduler needs Dask distributed, which is not installed (pip install 'npusan[cluster]')"
        ) from None
    _check_reachable(options.scheduler)
    client = _connect(options.scheduler, options.scheduler_timeout)
    with client:
        return _analyze_on(client, paths, options)


def _connect(address: str, timeout: float):
    """A ``distributed.Client`` connected to ``address``, or :class:`SchedulerError` within
    ``timeout`` seconds.

    Dask's own ``timeout`` does not cover a server that accepts the connection and never
    answers (the client waits forever), so the client is made in a daemon thread that is
    given up on after ``timeout``; a reply that is not Dask's protocol fails in whatever way
    decoding it fails, which is said as such.
    """
    import threading

    from distributed import Client

    made: dict = {}

    def connect() -> None:
        try:
            made["client"] = Client(address, timeout=f"{timeout}s")
        except BaseException as e:  # reported below, in the caller's thread
            made["error"] = e

    thread = threading.Thread(target=connect, name="npusan-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 1)
    if thread.is_alive():
        raise SchedulerError(f"the Dask scheduler at {address} accepted the connection but did not answer "
                             f"within {timeout:g} s")
    error = made.get("error")
    if isinstance(error, (OSError, TimeoutError)):
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {error}")
    if error is not None:
        raise SchedulerError(f"the server at {address} did not answer as a Dask scheduler "
                             f"({type(error).__name__}: {_short(error)})")
    return made["client"]


def _short(error: BaseException) -> str:
    return " ".join(str(error).split())[:200] or "no message"


def _analyze_on(client, paths: list, options: BatchOptions) -> list:
    """``analyze_paths`` on a Dask ``client``: one task per trace, results in input order.

    Failures of the cluster (its scheduler gone, no worker left for ``scheduler_timeout``
    seconds, a task lost) become one :class:`SchedulerError`; Dask would otherwise wait
    for a worker forever or raise its own exceptions.
    """
    try:
        return _run_on(client, paths, options)
    except SchedulerError:
        raise
    except Exception as e:  # distributed's CommClosedError, TimeoutError, KilledWorker, ...
        raise SchedulerError(f"the Dask cluster failed during the analysis ({type(e).__name__}: {_short(e)})") from None


def _run_on(client, paths: list, options: BatchOptions) -> list:
    names = [trace_name(p) for p in paths]
    results: list = [None] * len(paths)
    watch = _ClusterWatch(client, options.scheduler_timeout)
    if not options.send_bytes:
        # Workers open the traces themselves (shared storage): absolute paths, reported
        # under the names given here. One map call: the tasks go to the scheduler at once.
        n = len(paths)
        futures = client.map(analyze_one, [os.path.abspath(p) for p in paths], range(n),
                             [options.check_leaks] * n, names, pure=False)
        pending = dict(zip(futures, range(n)))
        while pending:
            _collect(pending, results, watch, everything=True)
        return results
    window = max(2, 2 * len(client.scheduler_info().get("workers", {})))
    pending = {}
    for i, p in enumerate(paths):
        try:
            with open(p, "rb") as f:
                data = f.read()
        except OSError as e:
            results[i] = ([], TraceSummary(path=names[i], header={}, error=f"cannot read the trace: {e.strerror or e}"))
            continue
        pending[client.submit(_analyze_bytes, data, i, options.check_leaks, names[i], pure=False)] = i
        del data
        while len(pending) >= window:  # bound what the client holds in flight
            _collect(pending, results, watch, everything=False)
    while pending:
        _collect(pending, results, watch, everything=True)
    return results


def _collect(pending: dict, results: list, watch: "_ClusterWatch", everything: bool) -> None:
    """Wait a little for ``pending`` futures (all of them, or the first), move the finished
    ones' results into ``results``, and let ``watch`` judge the cluster when none finished."""
    from distributed import wait

    try:
        done, _ = wait(list(pending), timeout=watch.poll,
                       return_when="ALL_COMPLETED" if everything else "FIRST_COMPLETED")
    except TimeoutError:  # raised by wait when the time is up: see which finished meanwhile
        done = {fut for fut in pending if fut.done()}
    for fut in done:
        results[pending.pop(fut)] = fut.result()
    if done:
        watch.progress()
    else:
        watch.check()


class _ClusterWatch:
    """Tells a slow cluster from a dead one while tasks are pending.

    A trace may take long to analyze, so time alone fails nothing; the run fails when the
    client has lost its scheduler, or the scheduler has had no worker, for ``timeout``
    seconds in a row.
    """

    def __init__(self, client, timeout: float) -> None:
        import time

        self.client = client
        self.timeout = timeout
        self.poll = min(1.0, timeout / 4)
        self._clock = time.monotonic
        self._bad_since: Optional[float] = None

    def progress(self) -> None:
        self._bad_since = None

    def check(self) -> None:
        problem = self._problem()
        if problem is None:
            self._bad_since = None
            return
        now = self._clock()
        if self._bad_since is None:
            self._bad_since = now
        elif now - self._bad_since >= self.timeout:
            raise SchedulerError(f"{problem} for {self.timeout:g} s; the analysis was given up")

    def _problem(self) -> Optional[str]:
        status = getattr(self.client, "status", "running")
        if status != "running":
            return "the Dask client lost its scheduler"
        if not self.client.scheduler_info().get("workers"):
            return "the Dask cluster has had no worker"
        return None


def analyze_inputs(
    inputs: Sequence[str],
    options: BatchOptions = BatchOptions(),
    progress: Optional[Callable] = None,
) -> AnalysisResult:
    """The whole pipeline: files, directories and glob patterns in, one merged result out.

    Arguments that name no trace and traces that cannot be read are listed in the
    result's ``errors``; everything readable is analyzed.
    """
    found = find_traces(inputs)
    outcomes = analyze_paths(found.paths, options, progress)
    result = merge(outcomes, options.sources)
    result.input_problems = list(found.problems)
    return result
