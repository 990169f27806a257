"""Captured graphs (format 1.3): what both engines store at a capture and replay at a launch.

A CUDA graph (``torch.cuda.CUDAGraph``, ``NPUGraph``) is recorded once and launched many
times; the trace holds its program once, between GRAPH_BEGIN and GRAPH_END, and one
GRAPH_LAUNCH record per replay. The rules (docs/semantics.md, "Graphs"):

* Between GRAPH_BEGIN ``[gid, S0, stack]`` and GRAPH_END ``[gid]``, the device work --
  KERNEL, VIEWS, EVENT_RECORD and EVENT_WAIT records -- is the graph's program: stored, not
  replayed (a capture runs nothing). Everything else the host does meanwhile (streams and
  events created, allocations in the graph's private pool, frees, record_stream, host
  accesses, synchronizations) happens then, and is replayed at once as usual.
* GRAPH_LAUNCH ``[gid, S, stack]`` replays the program, each record in its order, with the
  capture's origin stream S0 replaced by S; the side streams a capture forked to (an
  EVENT_WAIT on a side stream of an event recorded on S0) stay themselves. So a launch is
  ordered after S's earlier work, its side-stream work after what S had done when the
  capture forked, and S's later work after the side streams' only where the capture
  joined back (an EVENT_WAIT on S0) -- as the real graph's dependencies are.
* A launch skips the accesses of blocks not live at that point (an intermediate
  allocated and freed inside the capture: its memory is the graph's to reuse, and nothing
  outside the graph can name the block).

Each replayed kernel is a kernel of the engine: a sequence number of its own, checked by
the ordinary rules, reported at the captured record's op and stack. Bounds: at most
:data:`MAX_GRAPHS` graphs and :data:`MAX_GRAPH_RECORDS` records per graph are stored; a
capture past either cap is not replayed in full and the engine counts it (the report
warns: races in the records left out are not reported).

The Python engine applies the launched records itself; the compiled core's binding
(:mod:`.native`) packs them once per (graph, launching stream, dead blocks) and replays the
bytes, so a launch costs what its kernels cost and no Python per kernel.
"""

from __future__ import annotations

from typing import Callable, Optional

from ...trace_format import records as R

#: Graphs kept per trace (a capture past it is counted, its launches replay nothing).
MAX_GRAPHS = 1024
#: Records kept per graph (past it the rest of the capture is counted and left out).
MAX_GRAPH_RECORDS = 1 << 20
#: Launch expansions kept per graph (launching stream, dead blocks): one is the usual case.
MAX_EXPANSIONS = 8

#: The device work a capture stores, and the field of each that names its stream.
CAPTURED = {R.KERNEL: 1, R.VIEWS: None, R.EVENT_RECORD: 2, R.EVENT_WAIT: 2}
_KERNEL = R.KERNEL
_VIEWS = R.VIEWS


def graph_id_problem(g) -> Optional[str]:
    """Why a graph id field is malformed (None: it is an unsigned 64-bit int)."""
    if g.__class__ is not int or not 0 <= g < (1 << 64):
        return f"graph id {g!r:.60} is not an unsigned 64-bit integer"
    return None


class Graph:
    """One captured program: its records as the trace has them, its origin stream."""

    __slots__ = ("gid", "origin", "records", "blocks", "truncated", "expansions")

    def __init__(self, gid: int, origin: int) -> None:
        self.gid = gid
        self.origin = origin
        self.records: list = []
        self.blocks: set = set()  # the block ids its kernels access
        self.truncated = 0  # records left out past MAX_GRAPH_RECORDS
        self.expansions: dict = {}  # (stream, dead blocks) -> what an engine made of a launch

    def add(self, rec: list) -> bool:
        """Store one record of the capture (False: past the cap, left out)."""
        if len(self.records) >= MAX_GRAPH_RECORDS:
            self.truncated += 1
            return False
        self.records.append(rec)
        if rec[0] == _KERNEL:
            for a in rec[4:]:
                x = a[0] if a.__class__ is list and a else a
                if x.__class__ is int:
                    self.blocks.add(~x if x < 0 else x)
        return True

    def launch(self, stream: int, live: Callable[[int], bool]) -> tuple:
        """``(key, records)``: the program as launched on ``stream`` (key: what the
        records depend on, for an engine's cache of what it makes of them)."""
        dead = frozenset(b for b in self.blocks if not live(b))
        key = (stream, dead)
        hit = self.expansions.get(key)
        if hit is not None:
            return key, hit[0]
        out = [self._mapped(rec, stream, dead) for rec in self.records]
        if len(self.expansions) >= MAX_EXPANSIONS:
            self.expansions.clear()
        self.expansions[key] = [out, None]
        return key, out

    def _mapped(self, rec: list, stream: int, dead: frozenset) -> list:
        f = CAPTURED.get(rec[0])
        remap = f is not None and rec[f].__class__ is int and rec[f] == self.origin
        strip = bool(dead) and rec[0] == _KERNEL
        if not remap and not strip:
            return rec
        rec = list(rec)
        if remap:
            rec[f] = stream
        if strip:
            rec[4:] = [a for a in rec[4:] if _bid(a) not in dead]
        return rec


def _bid(a) -> object:
    x = a[0] if a.__class__ is list and a else a
    return ~x if x.__class__ is int and x < 0 else x


class Graphs:
    """The graphs of one trace and the capture open now (see the module docstring)."""

    __slots__ = ("graphs", "capturing", "truncated", "dropped", "launches", "unknown")

    def __init__(self) -> None:
        self.graphs: dict = {}
        self.capturing: Optional[Graph] = None
        self.truncated = 0  # captured records left out past MAX_GRAPH_RECORDS
        self.dropped = 0  # captures not kept past MAX_GRAPHS
        self.launches = 0
        self.unknown = 0  # launches of a graph not kept (past the cap, or never captured)

    def begin(self, gid: int, origin: int) -> Optional[str]:
        """A capture begins (a problem in words, or None)."""
        if self.capturing is not None:
            return f"graph {gid} begins while graph {self.capturing.gid} is being captured"
        g = Graph(gid, origin)
        if gid not in self.graphs and len(self.graphs) >= MAX_GRAPHS:
            self.dropped += 1
            g.truncated = -1  # not kept: GRAPH_END drops it
        self.capturing = g
        return None

    def end(self, gid: int) -> Optional[str]:
        g = self.capturing
        if g is None or g.gid != gid:
            return f"graph {gid} ends but is not being captured"
        self.capturing = None
        if g.truncated < 0:
            return None
        self.truncated += g.truncated
        self.graphs[gid] = g  # a graph captured again replaces its program
        return None

    def capture(self, rec: list) -> bool:
        """Store ``rec`` in the open capture if it is device work (False: replay it now)."""
        g = self.capturing
        if g is None or rec[0] not in CAPTURED:
            return False
        if g.truncated >= 0:
            g.add(rec)
        return True

    def find(self, gid: int) -> Optional[Graph]:
        self.launches += 1
        g = self.graphs.get(gid)
        if g is None:
            self.unknown += 1
        return g

    def warning(self) -> Optional[str]:
        """What the report says when a cap left records out (None: nothing was)."""
        parts = []
        if self.truncated:
            parts.append(f"{self.truncated} captured graph records past the cap of {MAX_GRAPH_RECORDS} per graph")
        if self.dropped:
            parts.append(f"{self.dropped} graph captures past the cap of {MAX_GRAPHS} graphs")
        if not parts:
            return None
        return " and ".join(parts) + " were not replayed: races in them are not reported"
