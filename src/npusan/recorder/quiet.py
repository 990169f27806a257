"""Work the recorder must not see: what a runtime does on the user's behalf while it
stands in for one kernel.

Triton's interpreter (``TRITON_INTERPRET=1``) runs a kernel launch on the host: it copies
every tensor argument to host memory, runs the kernel there and copies every argument
back. Seen op by op, those copies would be a write of every argument (a read-only input
included) and, on a device, a synchronization of the stream at each launch -- neither of
which the compiled kernel does. :mod:`.triton_kernels` records the launch as the one
kernel it stands for and mutes the recording, in that thread only, while it runs.

Muted: the dispatch mode's ops (:mod:`.dispatch`) and the runtime hooks that carry a stack
(:mod:`.callbacks`: stream, event and device synchronizations, stream creation). Allocations and frees are not muted: a block
the runtime allocates is real memory.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class _Quiet(threading.local):
    #: How many :func:`muted` blocks the calling thread is in (0: recording as usual).
    depth = 0


#: The calling thread's mute depth (a thread-local: costly to read, so read it only when
#: :data:`ANY` says some thread is muted).
QUIET = _Quiet()
#: ``[n]``: how many threads are in a :func:`muted` block now -- the per-op check on the
#: dispatch mode's path is ``ANY[0] and QUIET.depth``, one list look-up when none is.
ANY = [0]
_lock = threading.Lock()


def is_muted() -> bool:
    """Whether the calling thread is muted."""
    return bool(ANY[0] and QUIET.depth)


@contextmanager
def muted() -> Iterator[None]:
    """Mute the recording in the calling thread for the block (nests)."""
    q = QUIET
    if q.depth == 0:
        with _lock:
            ANY[0] += 1
    q.depth += 1
    try:
        yield
    finally:
        q.depth -= 1
        if q.depth == 0:
            with _lock:
                ANY[0] -= 1
