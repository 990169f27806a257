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
the ordinary rules, reported at the captured record's op and stack.

Bounds, conservative past them: at most :data:`MAX_GRAPH_RECORDS` records of a graph and
those of :data:`MAX_GRAPHS` graphs are stored. The records of a capture past either cap
are not stored but *summarized*: per stream, each block they access, written or only read,
with the op and stack of one record that accessed it (a writer's when there is one). A
launch replays the stored records, then one kernel per (stream, op, stack) of the summary
that accesses each of its blocks whole (a write where any left-out record wrote it). So a
race a left-out record takes part in is still reported, at whole-block granularity and at
that op's line; what the summary loses -- the left-out event records and byte ranges --
can only add findings (a join back to the launching stream that the summary does not
replay), never hide one. The report says so. The summaries themselves are bounded by
:data:`MAX_SUMMARY_ENTRIES` (stream, block) entries in all: a capture past that too is
*unchecked*, and the report says how many launches of such graphs were not fully checked.

The Python engine applies the launched records itself; the compiled core's binding
(:mod:`.native`) packs them once per (graph, launching stream, dead blocks) and replays the
bytes, so a launch costs what its kernels cost and no Python per kernel.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Callable, NamedTuple, Optional

from ...trace_format import records as R

#: Graphs whose records are stored (a capture past it is summarized only: see above).
MAX_GRAPHS = 1024
#: Records stored per graph (past it the rest of the capture is summarized).
MAX_GRAPH_RECORDS = 1 << 20
#: (stream, block) entries summarizing the records left out of all graphs (see above).
MAX_SUMMARY_ENTRIES = 1 << 20
#: Launch expansions kept per graph (launching stream, dead blocks): one is the usual case.
MAX_EXPANSIONS = 8
#: Launches whose kernels a report can name the launch of (past it, later launches' kernels
#: are reported at their captured line only, as a trace of format 1.2 would have them).
MAX_LAUNCH_SITES = 1 << 20

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
    """One captured program: its records as the trace has them, its origin stream, and
    the summary of the records left out past the cap (see the module docstring)."""

    __slots__ = ("gid", "origin", "stack", "records", "blocks", "truncated", "expansions", "limit", "summary",
                 "unchecked", "_summary_records")

    def __init__(self, gid: int, origin: int, limit: int = MAX_GRAPH_RECORDS, stack: Optional[int] = None) -> None:
        self.gid = gid
        self.origin = origin
        self.stack = stack  # the GRAPH_BEGIN's stack id: where the capture began
        self.records: list = []
        self.blocks: set = set()  # the block ids its kernels access
        self.truncated = 0  # records left out past ``limit``
        self.expansions: dict = {}  # (stream, dead blocks) -> what an engine made of a launch
        self.limit = limit  # records stored (0: a graph past MAX_GRAPHS, summarized only)
        #: (stream, block) -> [written, op_sid, stack] of the kernels left out
        self.summary: dict = {}
        self.unchecked = False  # records left out and not summarized (past MAX_SUMMARY_ENTRIES)
        self._summary_records: Optional[list] = None

    def add(self, rec: list, budget: int = MAX_SUMMARY_ENTRIES) -> int:
        """Store one record of the capture, or summarize it past the cap. Returns how many
        summary entries it added (``budget``: how many more may be added)."""
        if len(self.records) < self.limit:
            self.records.append(rec)
            if rec[0] == _KERNEL:
                for a in rec[4:]:
                    x = a[0] if a.__class__ is list and a else a
                    if x.__class__ is int:
                        self.blocks.add(~x if x < 0 else x)
            return 0
        self.truncated += 1
        if rec[0] != _KERNEL or self.unchecked:
            return 0  # (event records and views: what a summary leaves out)
        added = 0
        stream, summary = rec[1], self.summary
        for a in rec[4:]:
            x = a[0] if a.__class__ is list and a else a
            if x.__class__ is not int:
                continue
            key = (stream, ~x if x < 0 else x)
            ent = summary.get(key)
            if ent is None:
                if added >= budget:
                    self.unchecked = True
                    return added
                summary[key] = [x < 0, rec[2], rec[3]]
                self.blocks.add(key[1])
                added += 1
            elif x < 0 and not ent[0]:
                summary[key] = [True, rec[2], rec[3]]  # a writer's op and stack
        return added

    def program(self) -> list:
        """The stored records, then the summary's kernels (one per stream, op and stack)."""
        if not self.summary:
            return self.records
        if self._summary_records is None:
            groups: dict = {}
            for (stream, block), (written, op, stack) in self.summary.items():
                groups.setdefault((stream, op, stack), []).append(~block if written else block)
            self._summary_records = [[_KERNEL, stream, op, stack, *accesses]
                                     for (stream, op, stack), accesses in groups.items()]
        return self.records + self._summary_records

    def launch(self, stream: int, live: Callable[[int], bool]) -> tuple:
        """``(key, records)``: the program as launched on ``stream`` (key: what the
        records depend on, for an engine's cache of what it makes of them)."""
        dead = frozenset(b for b in self.blocks if not live(b))
        key = (stream, dead)
        hit = self.expansions.get(key)
        if hit is not None:
            return key, hit[0]
        out = [self._mapped(rec, stream, dead) for rec in self.program()]
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


class LaunchSite(NamedTuple):
    """The launch a replayed kernel came from: a report names it, since that line (not the
    captured one) is where the kernel ran and where a wait for it, or before it, goes."""

    stream: int  # the launching stream S
    stack: Optional[int]  # the GRAPH_LAUNCH's stack id (``g.replay()``)
    captured: Optional[int]  # the GRAPH_BEGIN's stack id (``with torch.cuda.graph(g):``)


class Graphs:
    """The graphs of one trace and the capture open now (see the module docstring)."""

    __slots__ = ("graphs", "capturing", "truncated", "dropped", "launches", "unknown", "summarized",
                 "unchecked_launches", "unchecked_graphs", "_site_first", "_site_last", "_site_of", "_sites",
                 "_site_index")

    def __init__(self) -> None:
        self.graphs: dict = {}
        self.capturing: Optional[Graph] = None
        self.truncated = 0  # captured records summarized past MAX_GRAPH_RECORDS
        self.dropped = 0  # captures summarized only, past MAX_GRAPHS
        self.launches = 0
        self.unknown = 0  # launches of a graph never captured
        self.summarized = 0  # summary entries held by the kept graphs (MAX_SUMMARY_ENTRIES)
        self.unchecked_launches = 0  # launches of a graph with records neither kept nor summarized
        self.unchecked_graphs: set = set()
        # the launches' kernel sequence numbers [first, last] (last -1: still replaying) and
        # their sites (indexes into _sites, each distinct site once), in launch order: about
        # 20 bytes per launch, at most MAX_LAUNCH_SITES launches
        self._site_first = array("q")
        self._site_last = array("q")
        self._site_of = array("l")
        self._sites: list = []
        self._site_index: dict = {}

    def begin(self, gid: int, origin: int, stack: Optional[int] = None) -> Optional[str]:
        """A capture begins (a problem in words, or None)."""
        if self.capturing is not None:
            return f"graph {gid} begins while graph {self.capturing.gid} is being captured"
        full = gid not in self.graphs and len(self.graphs) >= MAX_GRAPHS
        g = Graph(gid, origin, 0 if full else MAX_GRAPH_RECORDS, stack)
        if full:
            self.dropped += 1
        self.capturing = g
        return None

    def end(self, gid: int) -> Optional[str]:
        g = self.capturing
        if g is None or g.gid != gid:
            return f"graph {gid} ends but is not being captured"
        self.capturing = None
        if g.limit:
            self.truncated += g.truncated
        old = self.graphs.get(gid)
        if old is not None:
            self.summarized -= len(old.summary)
        self.graphs[gid] = g  # a graph captured again replaces its program
        return None

    def capture(self, rec: list) -> bool:
        """Store ``rec`` in the open capture if it is device work (False: replay it now)."""
        g = self.capturing
        if g is None or rec[0] not in CAPTURED:
            return False
        self.summarized += g.add(rec, MAX_SUMMARY_ENTRIES - self.summarized)
        return True

    def find(self, gid: int) -> Optional[Graph]:
        self.launches += 1
        g = self.graphs.get(gid)
        if g is None:
            self.unknown += 1
        elif g.unchecked:
            self.unchecked_launches += 1
            self.unchecked_graphs.add(gid)
        return g

    def launch_begins(self, g: Graph, stream: int, stack: Optional[int], seq: int) -> None:
        """Graph ``g`` is launched on ``stream`` after kernel ``seq``: its kernels, numbered from
        ``seq + 1`` until :meth:`launch_ends`, came from this launch (:meth:`site`). A
        launch inside a capture runs nothing: it is not one."""
        if self.capturing is not None or len(self._site_first) >= MAX_LAUNCH_SITES:
            return
        key = (stream, stack if stack.__class__ is int else None, g.stack)
        k = self._site_index.get(key)
        if k is None:
            k = self._site_index[key] = len(self._sites)
            self._sites.append(LaunchSite(*key))
        self._site_first.append(seq + 1)
        self._site_last.append(-1)  # open: its kernels are being replayed
        self._site_of.append(k)

    def launch_ends(self, seq: int) -> None:
        """The launch :meth:`launch_begins` opened replayed its last kernel, ``seq``."""
        if not self._site_last or self._site_last[-1] != -1:
            return
        if seq < self._site_first[-1]:  # no kernel: nothing to name it for
            self._site_first.pop()
            self._site_last.pop()
            self._site_of.pop()
        else:
            self._site_last[-1] = seq

    def site(self, seq: int) -> Optional[LaunchSite]:
        """The launch kernel ``seq`` was replayed by, or None (a kernel the program ran itself)."""
        i = bisect_right(self._site_first, seq) - 1
        if i < 0:
            return None
        last = self._site_last[i]
        return self._sites[self._site_of[i]] if last == -1 or seq <= last else None

    def warning(self) -> Optional[str]:
        """What the report says when a cap left records out (None: nothing was)."""
        parts = []
        if self.truncated:
            parts.append(f"{self.truncated} captured graph records past the cap of {MAX_GRAPH_RECORDS} per graph")
        if self.dropped:
            parts.append(f"the records of {self.dropped} graph captures past the cap of {MAX_GRAPHS} graphs")
        if not parts:
            return None
        text = (" and ".join(parts) + " were replayed coarsely, as whole-block accesses of the blocks they "
                "touched on their streams, without their event records: races in them are still reported, "
                "and some reported on those graphs may be ordered by the events left out")
        if self.unchecked_launches:
            text += (f"; {self.unchecked_launches} launches of {len(self.unchecked_graphs)} graphs were NOT fully "
                     f"checked (their left-out records passed the cap of {MAX_SUMMARY_ENTRIES} summarized "
                     "accesses): races in those records are not reported")
        return text
