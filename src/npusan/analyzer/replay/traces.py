"""Replay trace files through the engine: what ``npusan analyze`` runs.

Each trace is read with :class:`~npusan.trace_format.reader.TraceReader` and replayed by
its own engine (streams, events and blocks are per process, so traces never share state):
the compiled core (:mod:`npusan.analyzer.replay.native`), which parses the file's bytes itself,
or, when it is not built, the Python engine (:mod:`npusan.analyzer.replay.engine`), which reads
the msgpack unpacker directly. Findings are not grouped across traces here; that is
done after replay, before reporting (:mod:`npusan.analyzer.findings.grouping`).
"""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
from typing import Callable, Optional, Sequence

from ...trace_format.errors import TraceFormatError
from ...trace_format.header import is_default_stream
from ...trace_format.input_files import trace_name
from ...trace_format.reader import TraceReader
from .engine import Engine, RecordError, SourceError
from .native import NativeEngine, make_engine, newer_than_core
from ..findings.model import AnalysisResult, Kind, TraceSummary, attach_recorded_sources, number_streams, stream_numbers

#: Records replayed between two progress callbacks.
PROGRESS_EVERY = 1 << 16


def analyze_traces(
    paths: Sequence,
    *,
    check_leaks: bool = False,
    progress: Optional[Callable] = None,
) -> AnalysisResult:
    """Analyze each trace in ``paths``; return every finding (``trace`` set) and summaries.

    ``progress``, if given, is called about every 64k records with
    ``(trace_index, bytes_done, bytes_total)`` (``bytes_total`` may be None), or with
    ``(bytes_done, bytes_total)`` if it takes two arguments. Unusable input raises
    :class:`TraceFormatError` naming the file.
    """
    report = _progress_adapter(progress)
    findings: list = []
    summaries: list = []
    for i, path in enumerate(paths):
        found, summary = analyze_trace(path, i, check_leaks=check_leaks, report=report)
        summaries.append(summary)
        findings.extend(found)
    return AnalysisResult(findings=findings, traces=summaries)


def analyze_trace(path, index: int = 0, *, check_leaks: bool = False, report=None) -> tuple:
    """Replay one trace (a path or a binary file object) as trace number ``index``.

    Returns ``(findings, TraceSummary)``: plain, picklable data, so that traces can be
    analyzed in other processes or on other machines and merged. ``report`` is a progress
    callback ``(index, bytes_done, bytes_total)``. Unusable input raises
    :class:`TraceFormatError` naming the file. Which engine replays it: see
    ``native.make_engine`` (the compiled core, VIEWS records of format 1.1 included).
    """
    name = trace_name(path) or str(path)
    try:
        reader = TraceReader(path)
    except OSError as e:
        raise TraceFormatError(f"{name}: cannot read the trace: {e.strerror or e}") from None
    except TraceFormatError as e:
        raise type(e)(f"{name}: {e}") from None
    with reader:
        try:
            engine, found = replay_reader(reader, index, check_leaks=check_leaks, report=report)
        except TraceFormatError as e:
            raise type(e)(f"{name}: {e}") from None
        except OSError as e:
            raise TraceFormatError(f"{name}: cannot read the trace: {e.strerror or e}") from None
        warnings = list(reader.warnings)
        slower = newer_than_core(reader.header)
        if slower:
            warnings.append(slower)
        if engine.dropped:
            warnings.append(
                f"{engine.dropped} occurrences of further distinct findings were not kept "
                "(too many distinct findings in one trace)"
            )
        if any(f.kind is Kind.DATA_RACE for f in found):  # (no race: nothing to doubt)
            if engine.capped:
                warnings.append(capped_warning(engine.capped))
            if engine.hulled:
                warnings.append(hulled_warning(engine.hulled))
        graphs = getattr(engine, "graphs", None)  # captured graphs (format 1.3, both engines)
        if graphs is not None and graphs.warning():
            warnings.append(graphs.warning())
        budget = getattr(engine, "overlap_budget", None)  # strided views (both engines)
        if budget is not None and budget.gave_up:
            warnings.append(
                f"{budget.gave_up} comparisons of strided views were too costly to "
                "answer exactly and counted as overlapping (a race reported there may be false)"
            )
        summary = TraceSummary(
            path=name,
            header=reader.header,
            events=engine.events,
            kernels=engine.seq,
            truncated=reader.truncated,
            warnings=warnings,
            end_reason=reader.end_reason,
            notes=list(getattr(engine, "notes", ())),
        )
    return found, summary


def replay_reader(reader: TraceReader, index: int = 0, *, check_leaks: bool = False, report=None) -> tuple:
    """Replay the records of an open ``reader`` with the engine ``make_engine`` picks;
    return ``(engine, findings)``, the findings' streams and recorded sources named.

    What ``analyze`` and ``export`` share. A bad record raises :class:`RecordError` with
    its position (``reader.where()``), not yet the file's name.
    """
    engine = make_engine(reader.symbols, header=reader.header, check_leaks=check_leaks, trace_index=index)
    try:
        _replay(engine, reader, index, report)
    except RecordError as e:
        raise RecordError(f"{reader.where()}: {e}") from None
    found = engine.finish()
    name_streams_and_sources(found, reader)
    return engine, found


def capped_warning(blocks: int) -> str:
    """The warning for blocks whose byte ranges were merged past the cap of segments (given
    when the trace has data races: without one there is nothing to doubt)."""
    from .engine import MAX_SEGMENTS

    return (f"{blocks} block{'s' if blocks != 1 else ''} had more than {MAX_SEGMENTS} separately accessed "
            "byte ranges: neighbouring ranges were merged there, so a race reported on such a block "
            "between ranges that do not overlap may be false")


def hulled_warning(blocks: int) -> str:
    """The warning for blocks that had more strided views in use at once than are kept
    exactly (the oldest was merged into the block's byte ranges as its whole span)."""
    from .strided import MAX_VIEWS

    return (f"{blocks} block{'s' if blocks != 1 else ''} had more than {MAX_VIEWS} strided views in use at "
            "once: the oldest were kept as their whole span (first to last byte), so a race reported on such "
            "a block between bytes the views do not share may be false")


def name_streams_and_sources(found: list, reader: TraceReader) -> None:
    """Give a trace's findings what reports show: streams numbered as reports number them
    ("stream #1" is the first non-default stream) and the source lines the trace recorded
    (FRAME 1.1; the reader defined them for both engines). ``analyze`` and ``export`` alike."""
    is_default = functools.partial(is_default_stream, reader.header)
    number_streams(found, stream_numbers(reader.symbols.streams, is_default), is_default,
                   reader.symbols.stream_labels)
    attach_recorded_sources(found, reader.symbols.recorded_sources())


def _replay(engine, reader: TraceReader, index: int, report) -> None:
    if isinstance(engine, NativeEngine):
        total = reader.size
        engine.replay_file(reader, None if report is None else lambda done: report(index, done, total))
        return
    # Replay allocates one container per record and keeps some of them alive for a while,
    # which makes the cyclic GC scan over and over; nothing in replay forms a cycle, so
    # reference counting frees everything and the collector is paused meanwhile.
    enabled = gc.isenabled()
    gc.disable()
    try:
        _replay_records(engine, reader, index, report)
    finally:
        if enabled:
            gc.enable()


def _replay_records(engine: Engine, reader: TraceReader, index: int, report) -> None:
    # The engine reads the unpacker directly (no generator between them: a quarter of the
    # reading cost); the reader sees only the records that are not kernels, and the
    # engine's kernel count tells it the record index when an error needs one.
    source = reader.direct_begin(engine.seq)
    if source is None:
        return
    absorb = reader.direct_absorb
    ended = False
    try:
        if report is None:
            ended = engine.run_direct(source, absorb)
        else:
            total = reader.size
            report(index, reader.position, total)
            while not ended:
                before = reader.records_read
                ended = engine.run_direct(itertools.islice(source, PROGRESS_EVERY), absorb)
                reader.direct_sync(engine.direct_tail[1])
                report(index, reader.position, total)
                if reader.records_read - before < PROGRESS_EVERY:  # the data ran out
                    break
    except SourceError as e:
        reader.direct_sync(engine.direct_tail[1])
        reader.direct_failed(e.__cause__)
    except BaseException:
        reader.direct_sync(engine.direct_tail[1], engine.direct_tail[0])
        raise
    reader.direct_sync(engine.direct_tail[1])
    if not ended:
        reader.direct_exhausted()


def _progress_adapter(progress):
    if progress is None:
        return None
    try:
        params = [
            p
            for p in inspect.signature(progress).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        two = len(params) == 2 and not any(
            p.kind is p.VAR_POSITIONAL for p in inspect.signature(progress).parameters.values()
        )
    except (TypeError, ValueError):
        two = False
    if two:
        return lambda index, done, total: progress(done, total)
    return progress
