"""Reading the small files a user hands the analyzer (baselines, suppressions).

They are untrusted and optional: a size cap keeps a wrong path (a trace, a disk image)
from being read into memory, and every failure becomes the caller's own error type so the
CLI prints one line.
"""

from __future__ import annotations

import os


def read_user_file(path: str, label: str, limit: int, error: type) -> bytes:
    """The bytes of ``path``; raise ``error("<label> <path>: ...")`` if unreadable or over ``limit``."""
    try:
        if os.path.getsize(path) > limit:
            raise error(f"{label} {path}: larger than {limit >> 20} MiB")
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise error(f"cannot read {label} {path}: {e.strerror or e}") from None
