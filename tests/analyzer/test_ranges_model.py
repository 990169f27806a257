"""Byte ranges against a brute-force model: per byte, CSAN's rules, on random programs.

The model keeps, for every byte of a few small blocks, the last write and the latest read
per stream since it, exactly as DESIGN.md states the race rules; a kernel races on a block
if any byte it touches conflicts. The engine keeps merged segments instead of bytes; as
long as it stays under MAX_SEGMENTS per block the two must agree on which (kernel, block)
pairs race.
"""

from __future__ import annotations

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from npusan.analyzer.findings import Kind

from .engine_prog import Prog

pytestmark = pytest.mark.usefixtures("engine")

STREAMS = [0, 1, 2]
SIZE = 24
PTRS = [0x1000, 0x2000]


class Model:
    def __init__(self):
        self.cur = {}
        self.host = {}
        self.events = {}
        self.seq = 0
        self.bytes = {p: [[None, {}] for _ in range(SIZE)] for p in PTRS}  # [write, {S: read}]
        self.races = set()

    def stream(self, s):
        if s not in self.cur:
            self.host[s] = 0
            self.cur[s] = dict(self.host)
        return self.cur[s]

    def ordered(self, s, prev):
        ps, pseq = prev
        return ps == s or self.stream(s).get(ps, -1) >= pseq

    def kernel(self, s, accesses):
        self.seq += 1
        self.stream(s)[s] = self.seq
        for ptr, lo, hi, write in accesses:
            for cell in self.bytes[ptr][lo:hi]:
                w, reads = cell
                if not write:
                    if w is not None and not self.ordered(s, w):
                        self.races.add((self.seq, ptr))
                    reads[s] = (s, self.seq)
                else:
                    prevs = list(reads.values()) if reads else ([w] if w is not None else [])
                    if any(not self.ordered(s, p) for p in prevs):
                        self.races.add((self.seq, ptr))
                    cell[0] = (s, self.seq)
                    cell[1] = {}

    def record(self, e, s):
        self.events[e] = dict(self.stream(s))

    def wait(self, e, s):
        vec = self.stream(s)
        for k, v in self.events.get(e, {}).items():
            vec[k] = max(vec.get(k, -1), v)

    def sync_stream(self, s):
        src = dict(self.stream(s))
        for vec in list(self.cur.values()) + [self.host]:
            for k, v in src.items():
                vec[k] = max(vec.get(k, -1), v)


access = st.tuples(
    st.sampled_from(PTRS),
    st.one_of(st.none(), st.tuples(st.integers(0, SIZE - 1), st.integers(1, SIZE))),
    st.booleans(),
)
op = st.one_of(
    st.tuples(st.just("kernel"), st.sampled_from(STREAMS), st.lists(access, min_size=1, max_size=3)),
    st.tuples(st.just("kernel"), st.sampled_from(STREAMS), st.lists(access, min_size=1, max_size=3)),
    st.tuples(st.just("kernel"), st.sampled_from(STREAMS), st.lists(access, min_size=1, max_size=3)),
    st.tuples(st.just("record"), st.integers(0, 1), st.sampled_from(STREAMS)),
    st.tuples(st.just("wait"), st.integers(0, 1), st.sampled_from(STREAMS)),
    st.tuples(st.just("sync"), st.sampled_from(STREAMS)),
)


def run_both(program):
    model = Model()
    p = Prog()
    for s in STREAMS:
        p.stream_created(s)
        model.stream(s)
    for ptr in PTRS:
        p.memory_allocated(ptr, 0, size=SIZE)
    for item in program:
        if item[0] == "kernel":
            s, accs = item[1], item[2]
            reads, writes, macc = [], [], []
            # The engine sees reads before writes (the encoder's order): so does the model.
            for ptr, rng, write in sorted(accs, key=lambda a: a[2]):
                if rng is None:
                    lo, hi = 0, SIZE
                    enc = ptr
                else:
                    lo, hi = rng[0], min(SIZE, rng[0] + rng[1])
                    enc = (ptr + lo, hi - lo)
                (writes if write else reads).append(enc)
                macc.append((ptr, lo, hi, write))
            p.kernel(s, "op", reads=reads, writes=writes)
            model.kernel(s, macc)
        elif item[0] == "record":
            p.event_recorded(item[1], item[2])
            model.record(item[1], item[2])
        elif item[0] == "wait":
            p.event_waited(item[1], item[2])
            model.wait(item[1], item[2])
        else:
            p.stream_synchronized(item[1])
            model.sync_stream(item[1])
    got = {(seq, addr) for f in p.findings() if f.kind is Kind.DATA_RACE for seq, _, addr in f.occurrences}
    return got, model.races


@settings(max_examples=300, deadline=None)
@given(st.lists(op, min_size=3, max_size=40))
def test_byte_ranges_agree_with_a_per_byte_model(program):
    got, expected = run_both(program)
    assert got == expected


def test_model_sees_what_csan_cannot():
    # A write to bytes [8, 16) on stream 1 and a whole-block read on stream 2.
    got, expected = run_both([("kernel", 1, [(PTRS[0], (8, 8), True)]), ("kernel", 2, [(PTRS[0], None, False)])])
    assert got == expected == {(2, PTRS[0])}
