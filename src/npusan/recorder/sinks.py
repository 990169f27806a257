"""Where a recording's records go: a trace file, the online engine, or both.

A trace file on a regular file is written through a shared mapping
(:class:`~npusan.trace_format.writer.MappedFileSink`): *durable*, every op's records are
committed into the mapping before the op returns (see :mod:`.event_queue`), so a SIGKILL
right after a racing op leaves the race in the trace. A buffered output (a file object, a
pipe, a compressed trace) is written now and then. Online, the encoder's records are fed
to the engine too (:class:`Tee`), and a trace, if any, is committed as a buffered one.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..trace_format.encoder import RecordEncoder


class Tee:
    """A sink that hands each record to every one of ``sinks``, in order."""

    def __init__(self, *sinks: Callable[[list], None]) -> None:
        self.sinks = sinks

    def __call__(self, rec: list) -> None:
        for s in self.sinks:
            s(rec)


def open_trace(path: Any, backend: str, metadata: Optional[dict], header: Mapping, *, flush_bytes: int,
               flush_interval: float):
    """The trace writer for ``path`` (raises ``OSError`` for an unwritable path or a full disk)."""
    from ..trace_format.writer import TraceWriter

    return TraceWriter(path, backend=backend, metadata=metadata, header=header, flush_bytes=flush_bytes,
                       flush_interval=flush_interval)


def connect(writer: Any, engine: Any) -> RecordEncoder:
    """The encoder of a recording to ``writer`` and/or ``engine`` (either may be None, not
    both): the writer's own encoder, its records fed to the engine as well when both are."""
    sinks = []
    if writer is not None:
        sinks.append(writer.sink)
    if engine is not None:
        sinks.append(engine.feed)
    if writer is None:
        return RecordEncoder(sinks[0])
    enc = writer.encoder
    if len(sinks) > 1:
        enc.sink = Tee(*sinks)
    return enc
