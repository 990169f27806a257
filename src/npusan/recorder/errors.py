"""The exception online mode raises.

Importing this module never imports torch (``npusan.RaceError`` is public). How a finding
reads in its message is the analyzer's (:func:`npusan.analyzer.report.live.format_finding`).
"""

from __future__ import annotations

from typing import Any


class RaceError(RuntimeError):
    """Online mode (``mode="raise"``) found a synchronization bug at the op that caused it.

    ``finding`` is the :class:`npusan.analyzer.findings.model.Finding`; the message names both
    accesses with their streams and stacks.
    """

    def __init__(self, message: str, finding: Any = None) -> None:
        super().__init__(message)
        self.finding = finding
