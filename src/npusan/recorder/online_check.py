"""Online mode: the analyzer's engine fed in process, and what is done with its findings.

The recorder reaches the analyzer through :mod:`npusan.analyzer.replay.online` only.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from .errors import RaceError

#: Live, there is no --full-stacks to pass: the folded frames are in a recorded trace.
ONLINE_FOLDED_HINT = " (to see them: record a trace and run `npusan analyze --full-stacks` on it)"


class OnlineCheck:
    """The live engine of one recording and its findings.

    ``pending``: findings the engine reported and nobody took yet (the dispatch mode looks
    at it after every op); ``found``: every distinct finding reported so far, in order (the
    pytest plugin fails a test on them even when the test caught the RaceError). Both lists
    are only ever changed in place, so the recorder shares them.
    """

    def __init__(self, mode: Optional[str]) -> None:
        self.mode = mode
        self.engine: Any = None
        self.pending: list = []
        self.found: list = []
        self._reported: set = set()

    def start(self, header: dict) -> Any:
        """The engine, made for a recording whose trace has ``header``."""
        from ..analyzer.replay import online

        self.engine = online.make_engine(header, self.pending.append)
        return self.engine

    def take_new(self) -> list:
        """The engine's findings since last time that were not reported yet (also kept in
        ``found``), their streams numbered as the report of this run's trace numbers them."""
        pending = self.pending[:]
        self.pending.clear()
        new = []
        for f in pending:
            fp = f.fingerprint()
            if fp not in self._reported:
                self._reported.add(fp)
                new.append(f)
        if self.engine is not None and new:
            from ..analyzer.replay import online

            online.number_streams(self.engine, new)
        self.found.extend(new)
        return new

    def report(self, allow_raise: bool = True) -> None:
        """Raise (mode "raise") or warn about findings the engine reported since last time."""
        from ..analyzer.replay import online

        for f in self.take_new():
            msg = online.render_finding(f, self.engine.header if self.engine is not None else None,
                                        folded_hint=ONLINE_FOLDED_HINT)
            if self.mode == "raise" and allow_raise:
                raise RaceError(msg, f)
            try:
                sys.stderr.write(f"npusan: warning: {msg}\n")
            except Exception:
                pass
