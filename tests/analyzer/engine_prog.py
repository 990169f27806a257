"""Helpers for engine tests: build a program with RecordEncoder and replay it live.

A module with its own name (not conftest.py): several test directories have a conftest,
and ``from conftest import ...`` would pick whichever was imported first.
"""

from __future__ import annotations

from npusan.analyzer.replay.engine import Engine
from npusan.analyzer.findings.model import Kind
from npusan.trace_format.encoder import RecordEncoder
from npusan.trace_format.symbols import SymbolTable


#: The engine class programs replay through; the ``engine`` fixture (conftest.py) sets it.
ENGINE: type = Engine


def new_engine(symbols: SymbolTable, **kwargs):
    return ENGINE(symbols, **kwargs)


class Prog:
    """A trace under construction, fed record by record into an Engine.

    Methods of :class:`RecordEncoder` are available directly (``p.kernel(...)``); streams
    are raw handles on device 0 unless ``device=`` is given. ``p.records`` keeps every
    record so a test can replay the same program into a second engine.
    """

    def __init__(self, *, check_leaks: bool = False, header: dict | None = None, on_finding=None):
        self.symbols = SymbolTable()
        self.engine = new_engine(self.symbols, header=header, check_leaks=check_leaks, on_finding=on_finding)
        self.records: list = []
        self.enc = RecordEncoder(self._sink)

    def _sink(self, rec: list) -> None:
        self.records.append(list(rec))
        self.engine.feed(rec)
        self.engine.flush()  # record by record (the compiled core would replay in batches)

    def __getattr__(self, name):
        return getattr(self.enc, name)

    # Shorthands -----------------------------------------------------------------------

    def write(self, stream: int, *ptrs, op: str = "aten::fill_", stack=None, device: int = 0) -> None:
        self.enc.kernel(stream, op, writes=list(ptrs), device=device, stack=self._stack(stack))

    def read(self, stream: int, *ptrs, op: str = "aten::sum", stack=None, device: int = 0) -> None:
        self.enc.kernel(stream, op, reads=list(ptrs), device=device, stack=self._stack(stack))

    def wait_stream(self, waiter: int, other: int, event: int) -> None:
        """``waiter.wait_stream(other)`` as PyTorch does it: create, record, wait."""
        self.enc.event_created(event)
        self.enc.event_recorded(event, other)
        self.enc.event_waited(event, waiter)

    def _stack(self, stack):
        if stack is None:
            return None
        if isinstance(stack, str):
            stack = [("prog.py", 1, stack)]
        return self.enc.stack(stack)

    def findings(self):
        return self.engine.finish()

    def kinds(self) -> list:
        return sorted(f.kind.value for f in self.findings())

    def races(self):
        return [f for f in self.findings() if f.kind is Kind.DATA_RACE]

