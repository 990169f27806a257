"""docs/trace-format.md's worked example is real: the writer produces exactly those bytes."""

from __future__ import annotations

import io
import re
from pathlib import Path

from npusan.trace_format import TraceReader, TraceWriter
from npusan.trace_format import records as R

DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"
HEX = re.compile(r"^[0-9a-f]{2}$")


def doc_example_bytes() -> bytes:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("The 256 bytes of the file", 1)[1].split("```", 2)[1]
    out = bytearray()
    for line in block.splitlines():
        tokens = line.split()
        if tokens and re.fullmatch(r"[0-9a-f]{8}", tokens[0]):
            assert int(tokens[0], 16) == len(out), line
            tokens = tokens[1:]
        for tok in tokens:
            if not HEX.match(tok):
                break
            out.append(int(tok, 16))
    return bytes(out)


def test_worked_example_matches_the_writer():
    buf = io.BytesIO()
    w = TraceWriter(buf, backend="cuda", header={"writer": "npusan 0.1.0", "device_count": 1,
                                                 "default_streams": {0: 0}, "pid": 1234, "rank": None,
                                                 "host": "gpu1", "argv": ["t.py"], "start_time": 1.7e9,
                                                 "torch": None})
    w.memory_allocated(0x7F0000000000, 0, 512, stack=[("t.py", 3, "<module>")])
    w.kernel(0x51, "aten::add", reads=[0x7F0000000000], writes=[(0x7F0000000100, 256)])
    w.memory_freed(0x7F0000000000)
    w.stats = lambda: {"events": 3}  # the doc shortens the END statistics
    w.close()
    doc = doc_example_bytes()
    assert len(doc) == 256
    assert doc == buf.getvalue()
    r = TraceReader(io.BytesIO(doc))
    recs = list(r.records())
    assert [x[0] for x in recs] == [R.ALLOC, R.KERNEL, R.FREE] and r.ended_cleanly
    assert recs[1][4:] == [0, [-1, 256, 256]]
    assert r.symbols.frames_of(recs[0][5]) == (("t.py", 3, "<module>"),)


def test_doc_lists_every_record_type():
    text = DOC.read_text(encoding="utf-8")
    for t, name in R.RECORD_NAMES.items():
        const = [k for k, v in vars(R).items() if v == t and k.isupper() and k not in ("FORMAT_MAJOR", "FORMAT_MINOR")]
        row = re.search(rf"^\| {t} \| ([A-Z_]+) \| `\[{t}(, ([^`]*))?\]`", text, re.M)
        assert row, f"record type {t} ({name}) missing from the spec tables"
        assert row.group(1) in const
        rest = re.sub(r"\[[^\]]*\]", "list", row.group(3) or "")
        fields = 1 + (len(rest.split(",")) if rest else 0)
        if t not in (R.KERNEL, R.HOST_ACCESS):  # (their accesses: any number)
            assert fields == R.MIN_LENGTH[t], (t, fields)
    assert R.MAGIC.hex(" ") in text
