"""A trace read while its program still writes it: read up to what was written, with a warning.

A mapped writer grows the file ahead of its records (the space is zero bytes until it is
written). A reader that meets those zeros checks that the rest of the file is zeros too;
if the writer wrote there in the meantime, the check must not call the trace corrupt.
"""

from __future__ import annotations

import io

import pytest

from npusan.analyzer.replay.traces import analyze_trace
from npusan.trace_format import TraceReader

from .conftest import growing_trace


class _WrittenMeanwhile(io.FileIO):
    """The trace file, and its writer: the first time the reader seeks back (to check the
    zeros it met), the records the writer had not written yet appear in the file."""

    def __init__(self, path, rest: bytes, at: int) -> None:
        super().__init__(path, "r")
        self._rest, self._at = rest, at

    def seek(self, pos, whence=0):
        if self._rest:
            with open(self.name, "r+b") as f:
                f.seek(self._at)
                f.write(self._rest)
            self._rest = b""
        return super().seek(pos, whence)


def _live_trace(tmp_path):
    """A file holding a trace's first records then zeros, and the bytes that later fill them."""
    data, written = growing_trace(100)
    live = tmp_path / "live.npusan"
    live.write_bytes(data[:written] + bytes(len(data) - written))
    return live, data[written:], written


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_trace_written_while_it_is_read_is_read_up_to_there(tmp_path, monkeypatch, engine):
    if engine == "python":
        monkeypatch.setenv("NPUSAN_ENGINE", "python")
    live, rest, at = _live_trace(tmp_path)
    found, summary = analyze_trace(_WrittenMeanwhile(live, rest, at))
    assert found == [] and summary.kernels == 100 and summary.truncated
    assert summary.warnings == ["the trace is still being written (it grew while it was read): "
                                "analyzed the 102 events written so far"]


def test_zeros_followed_by_data_that_did_not_change_are_still_corrupt(tmp_path):
    live, rest, at = _live_trace(tmp_path)
    data = bytearray(live.read_bytes())
    data[-1] = 0x90  # a non-zero byte far past the zero record start; the start stays zero
    live.write_bytes(bytes(data))
    reader = TraceReader(str(live))
    with pytest.raises(Exception, match="is not a record"):
        list(reader.records())
