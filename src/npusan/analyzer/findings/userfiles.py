"""Reading the small files a user hands the analyzer (baselines, suppressions).

They are untrusted and optional: the read itself is capped (a size check would read 0 for
``/dev/zero`` or a pipe, and then an unbounded ``read()`` follows), devices and FIFOs
without a writer are refused, and every failure becomes the caller's own error type so the
CLI prints one line.
"""

from __future__ import annotations

from ...trace_format.input_files import open_input, read_limited


def read_user_file(path: str, label: str, limit: int, error: type) -> bytes:
    """The bytes of ``path``; raise ``error("<label> <path>: ...")`` if unreadable or over ``limit``."""
    try:
        with open_input(path) as f:
            data = read_limited(f, limit)
    except OSError as e:
        raise error(f"cannot read {label} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(f"{label} {path}: larger than {limit >> 20} MiB")
    return data
