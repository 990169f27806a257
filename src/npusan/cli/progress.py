"""A progress bar on stderr for long commands, shown only on a terminal and after a moment.

Short runs and CI logs never see it; it disappears when the work is done.
"""

from __future__ import annotations

import time
from typing import Hashable, Optional

#: Show a progress bar only once the work has taken this long (and stderr is a TTY).
PROGRESS_AFTER_S = 0.5


class LazyProgress:
    """One rich progress bar with a task per key, started on the first late update."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.monotonic()
        self.bar = None
        self.tasks: dict = {}

    def update(self, key: Hashable, description: str, done: int, total: Optional[int]) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.monotonic() - self.start < PROGRESS_AFTER_S:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
        if key not in self.tasks:
            self.tasks[key] = self.bar.add_task(description, total=total)
        self.bar.update(self.tasks[key], completed=done, total=total, description=description)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
