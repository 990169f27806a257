"""The seed's scenarios written as traces with the public TraceWriter, for report tests.

Stacks point at ``tests/data/src/train.py`` by the relative name ``train.py`` (tests copy
the file next to the trace and run from there, so source quoting is exercised and nothing
machine-specific reaches the output). Line numbers are looked up by the text of the line,
so editing train.py does not silently shift them. Header fields that would vary between
runs (pid, host, start time, argv) are fixed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from npusan.trace_format.writer import TraceWriter

DATA = Path(__file__).resolve().parents[1] / "data"
SOURCE = DATA / "src" / "train.py"
TORCH_TENSOR = "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py"
TORCH_OVERRIDES = "/opt/venv/lib/python3.11/site-packages/torch/overrides.py"

FIXED_HEADER = {
    "pid": 4242,
    "host": "testhost",
    "start_time": 1767225600.0,
    "argv": ["train.py"],
    "torch": "2.13.0",
    "device_count": 1,
    "rank": None,
    "writer": "npusan-tests",
}

DEFAULT = 0
SIDE = 0x5A5A00
SIDE2 = 0x6B6B00


def _lines() -> list[str]:
    return SOURCE.read_text().splitlines()


def line_of(function: str, text: str) -> int:
    """The line number of ``text`` inside ``def function`` of train.py."""
    lines = _lines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"def {function}("))
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("def "):
            break
        if text in lines[i]:
            return i + 1
    raise LookupError(f"{text!r} not in {function}()")


def stack(function: str, text: str, *, torch_frames: int = 0, step_line: str = "") -> list:
    """main() -> function() at ``text``, then ``torch_frames`` internal frames."""
    frames = [("train.py", line_of("main", step_line or f"{function}()"), "main"),
              ("train.py", line_of(function, text), function)]
    internals = [(TORCH_TENSOR, 1512, "__torch_function__"), (TORCH_OVERRIDES, 1720, "handle_torch_function"),
                 (TORCH_TENSOR, 41, "wrapped")]
    frames += internals[:torch_frames]
    return frames


def copy_source(directory: Path) -> None:
    shutil.copy(SOURCE, Path(directory) / "train.py")


def writer(path, **header) -> TraceWriter:
    return TraceWriter(str(path), backend="cuda", header={**FIXED_HEADER, "default_streams": {0: DEFAULT}, **header})


def wait_stream(w: TraceWriter, event: int, waiter: int, waited: int, st) -> None:
    """What PyTorch's ``waiter.wait_stream(waited)`` does: create, record, wait."""
    w.event_created(event, stack=st)
    w.event_recorded(event, waited, stack=st)
    w.event_waited(event, waiter, stack=st)


def seed_example(path, *, base: int = 0x7F0000000000, side: int = SIDE, steps: int = 1) -> Path:
    """Seed section 4, steps 1-6: a missing record_stream (x freed on default after a side use)."""
    f = "seed_example"
    with writer(path) as w:
        w.stream_created(side, stack=stack(f, "side = torch.cuda.Stream()"))
        for i in range(steps):
            x = base  # the caching allocator hands out the same block each step
            w.memory_allocated(x, DEFAULT, 4096, stack=stack(f, "x = torch.empty", torch_frames=1))
            w.kernel(DEFAULT, "aten::fill_.Scalar", writes=[x], stack=stack(f, "x.fill_(1.0)", torch_frames=3))
            wait_stream(w, 100 + i, side, DEFAULT, stack(f, "side.wait_stream"))
            w.kernel(side, "aten::mul.Tensor", reads=[x], writes=[], stack=stack(f, "y = x * 2", torch_frames=3))
            w.memory_freed(x, stack=stack(f, "del x"))
    return Path(path)


def data_race(path, *, base: int = 0x7F0000100000, side: int = SIDE) -> Path:
    f = "data_race"
    with writer(path) as w:
        w.memory_allocated(base, DEFAULT, 4096, stack=stack(f, "x = torch.empty"))
        w.stream_created(side, stack=stack(f, "side = torch.cuda.Stream()"))
        w.kernel(DEFAULT, "aten::fill_.Scalar", writes=[base], stack=stack(f, "x.fill_(1.0)", torch_frames=3))
        w.kernel(side, "aten::sum", reads=[base], stack=stack(f, "y = x.sum()", torch_frames=2))
    return Path(path)


def view_race(path, *, base: int = 0x7F0000200000, side: int = SIDE) -> Path:
    """A write to a view x[256:] on one stream, a read of all of x on another (CSAN misses it)."""
    f = "view_race"
    with writer(path) as w:
        w.memory_allocated(base, DEFAULT, 4096, stack=stack(f, "x = torch.empty"))
        w.stream_created(side, stack=stack(f, "side = torch.cuda.Stream()"))
        w.kernel(side, "aten::zero_", writes=[(base + 1024, 3072)], stack=stack(f, "x[256:].zero_()"))
        w.kernel(DEFAULT, "aten::sum", reads=[base], stack=stack(f, "return x.sum()"))
    return Path(path)


def reuse_race(path, *, base: int = 0x7F0000300000, side: int = SIDE) -> Path:
    f = "reuse_race"
    with writer(path) as w:
        w.stream_created(side, stack=stack(f, "side = torch.cuda.Stream()"))
        w.memory_allocated(base, DEFAULT, 4096, stack=stack(f, "x = torch.empty"))
        w.kernel(DEFAULT, "aten::fill_.Scalar", writes=[base], stack=stack(f, "x.fill_(0.0)"))
        wait_stream(w, 7, side, DEFAULT, stack(f, "side.wait_stream"))
        w.kernel(side, "aten::mul.Tensor", reads=[base], stack=stack(f, "y = x * 2"))
        w.memory_freed(base, stack=stack(f, "del x"))
        w.memory_allocated(base, DEFAULT, 4096, stack=stack(f, "z = torch.empty"))
        w.kernel(DEFAULT, "aten::fill_.Scalar", writes=[base], stack=stack(f, "z.fill_(1.0)"))
    return Path(path)


def correct(path, *, base: int = 0x7F0000400000, side: int = SIDE) -> Path:
    """Seed section 6: wait_stream for the race, record_stream for the free; then a sync."""
    f = "correct"
    with writer(path) as w:
        w.memory_allocated(base, DEFAULT, 4096, stack=stack(f, "x = torch.empty"))
        w.kernel(DEFAULT, "aten::fill_.Scalar", writes=[base], stack=stack(f, "x.fill_(1.0)"))
        w.stream_created(side, stack=stack(f, "side = torch.cuda.Stream()"))
        wait_stream(w, 9, side, DEFAULT, stack(f, "side.wait_stream"))
        w.kernel(side, "aten::mul.Tensor", reads=[base], stack=stack(f, "y = x * 2"))
        w.record_stream(base, side, stack=stack(f, "x.record_stream(side)"))
        w.memory_freed(base, stack=stack(f, "del x"))
        w.device_synchronized(stack=stack(f, "torch.cuda.synchronize()"))
    return Path(path)


def truncate(path, keep_fraction: float = 0.8) -> Path:
    """Cut a trace file (a crashed run): keep the first part of its bytes."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * keep_fraction)])
    return Path(path)


SCENARIOS = {
    "seed_example": seed_example,
    "data_race": data_race,
    "view_race": view_race,
    "reuse_race": reuse_race,
    "correct": correct,
}


# -- hand-built findings (no trace needed) -------------------------------------------------

def make_finding(
    kind="data-race",
    *,
    later=("train.py", 21, "data_race"),
    earlier=("train.py", 19, "data_race"),
    later_op="aten::sum",
    earlier_op="aten::fill_.Scalar",
    later_type="read",
    earlier_type="write",
    later_seq=2,
    earlier_seq=1,
    address=0x7F0000100000,
    side_handle=SIDE,
    side_index=1,
    side_number=1,
    trace=0,
    count=1,
    first_seq=None,
    last_seq=None,
    occurrences=None,
    extra_frames=(),
):
    """A Finding as the engine would build it, from plain values."""
    from npusan.analyzer.findings.model import (
        AccessInfo,
        BlockInfo,
        Finding,
        Frame,
        Kind,
        StreamRef,
    )

    kind = Kind(kind)
    main = Frame("train.py", 60, "main")
    default = StreamRef(0, DEFAULT, 0, True, (), trace)
    side = StreamRef(0, side_handle, side_index, False, (main, Frame("train.py", 18, "data_race")), trace,
                     ordinal=side_number)
    later_stream, earlier_stream = (side, default)
    if kind is not Kind.DATA_RACE:
        later_stream, earlier_stream = (default, side)
    access = AccessInfo(later_stream, later_op, later_type, later_seq,
                        (main, Frame(*later)) + tuple(Frame(*x) for x in extra_frames))
    previous = AccessInfo(earlier_stream, earlier_op, earlier_type, earlier_seq, (main, Frame(*earlier)))
    block = BlockInfo(address, 4096, default, (main, Frame("train.py", 17, "data_race")))
    return Finding(
        kind, access, previous, block, count=count, addresses=[address],
        first_seq=later_seq if first_seq is None else first_seq,
        last_seq=later_seq if last_seq is None else last_seq,
        trace=trace, traces=[trace],
        occurrences=[(later_seq, earlier_seq, address)] if occurrences is None else occurrences,
    )


def make_result(findings, *, paths=("a.bin",), truncated=()):
    from npusan.analyzer.findings.model import AnalysisResult, TraceSummary

    traces = [
        TraceSummary(p, {"backend": "cuda", "device_count": 1, **FIXED_HEADER}, events=10, kernels=3,
                     truncated=p in truncated)
        for p in paths
    ]
    return AnalysisResult(list(findings), traces)


# -- pytest fixtures for the CLI tests (imported by the test modules: a conftest.py here
# would be imported as the module "conftest" and shadow other directories' conftests for
# their `from conftest import ...`) ------------------------------------------------------

@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A project folder (pyproject.toml: its source root) holding train.py, so reports may
    read it, and quote it by a relative name."""
    copy_source(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'scenario'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    return tmp_path


@pytest.fixture
def scenario(workdir):
    """``scenario("data_race")`` writes that trace into the working directory; returns its name."""

    def make(name: str, file: str = "", **kw) -> str:
        file = file or f"{name}.bin"
        SCENARIOS[name](workdir / file, **kw)
        return file

    return make


@pytest.fixture
def run():
    """Invoke ``npusan ARGS...``; the result has exit_code, stdout and stderr."""
    from npusan.cli import cli

    def invoke(*args):
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert "Traceback" not in result.output
        return result

    return invoke
