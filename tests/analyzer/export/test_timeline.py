"""Timeline export: tracks per stream, kernels in launch order, sync flows, finding markers."""

import json

import pytest

import tests.cli.npusan_scenarios as S  # noqa: E402
from npusan.analyzer.replay import native
from npusan.analyzer.export.timeline import ExportLimits, ExportStats, export_chrome, write_chrome  # noqa: E402
from tests.analyzer.export.test_timeline_streaming import Sink, markers_sit_on_drawn_kernels, races_trace


def events(doc, ph=None, cat=None):
    return [e for e in doc["traceEvents"] if (ph is None or e["ph"] == ph) and (cat is None or e.get("cat") == cat)]


def track_names(doc):
    return {e["tid"]: e["args"]["name"] for e in events(doc, "M") if e["name"] == "thread_name"}


def test_tracks_slices_flows_and_markers(tmp_path):
    trace = S.seed_example(tmp_path / "seed.bin")
    doc = export_chrome(trace)
    json.loads(json.dumps(doc))  # plain JSON
    names = track_names(doc)
    assert names[0] == "host"
    assert sorted(names.values()) == ["default stream (cuda:0)", "host", "stream #1 (cuda:0), created at train.py:8"]
    tid = {v: k for k, v in names.items()}
    kernels = events(doc, "X", "kernel")
    assert [(k["name"], k["tid"], k["args"]["seq"]) for k in kernels] == [
        ("aten::fill_.Scalar", tid["default stream (cuda:0)"], 1),
        ("aten::mul.Tensor", tid["stream #1 (cuda:0), created at train.py:8"], 2),
    ]
    assert kernels[0]["ts"] < kernels[1]["ts"]
    assert all(k["dur"] > 0 for k in kernels)
    assert kernels[0]["args"]["accesses"] == ["W 0x7f0000000000"]
    # wait_stream: an arrow from the record on the default stream to the wait on the side stream.
    (start,) = events(doc, "s")
    (finish,) = events(doc, "f")
    assert start["id"] == finish["id"] and finish["bp"] == "e"
    assert start["tid"] == tid["default stream (cuda:0)"]
    assert finish["tid"] == tid["stream #1 (cuda:0), created at train.py:8"]
    assert start["ts"] < finish["ts"] < kernels[1]["ts"]
    record = next(e for e in events(doc, "X", "sync") if e["name"] == "record event")
    assert record["ts"] <= start["ts"] <= record["ts"] + record["dur"]  # the arrow binds to the slice
    # The missing record_stream, marked on the use and on the free.
    markers = events(doc, "i", "finding")
    assert len(markers) == 2
    use, free = sorted(markers, key=lambda e: e["ts"])
    assert use["tid"] == kernels[1]["tid"] and use["args"]["role"] == "earlier access"
    assert free["tid"] == tid["default stream (cuda:0)"] and free["args"]["role"] == "later access"
    assert free["ts"] > kernels[1]["ts"]
    for m in markers:
        assert m["args"]["kind"] == "missing-record-stream"
        assert m["args"]["fingerprint"] and m["args"]["fix"] and m["args"]["stack"]


def test_data_race_markers_sit_on_both_kernels(tmp_path):
    doc = export_chrome(S.data_race(tmp_path / "race.bin"))
    kernels = {k["args"]["seq"]: k for k in events(doc, "X", "kernel")}
    markers = events(doc, "i", "finding")
    assert sorted((m["args"]["seq"], m["tid"]) for m in markers) == [(1, kernels[1]["tid"]), (2, kernels[2]["tid"])]
    for m in markers:
        k = kernels[m["args"]["seq"]]
        assert k["ts"] <= m["ts"] <= k["ts"] + k["dur"]
    assert doc["otherData"]["findings"] == 1


@pytest.mark.skipif(not native.available(), reason="the compiled core is not built")
@pytest.mark.parametrize("make", [S.seed_example, S.data_race, S.view_race, S.reuse_race])
def test_findings_come_from_the_compiled_core_as_analyze_s_do(tmp_path, monkeypatch, make):
    """The first pass (the findings) replays with the engine ``npusan analyze`` uses: the
    compiled core when it is built (100x and more faster on range-heavy traces), with
    the same document as the Python engine gives."""
    trace = make(tmp_path / "t.bin")
    replayed = []
    real = native.NativeEngine.replay_file
    monkeypatch.setattr(native.NativeEngine, "replay_file", lambda self, *a, **k: replayed.append(1) or real(self, *a, **k))
    doc = export_chrome(trace)
    assert replayed == [1]
    assert events(doc, "i", "finding")
    monkeypatch.setenv("NPUSAN_ENGINE", "python")
    assert export_chrome(trace) == doc
    assert replayed == [1]


def test_syncs_are_instants(tmp_path):
    doc = export_chrome(S.correct(tmp_path / "ok.bin"))
    names = {e["name"]: e for e in events(doc, "i")}
    assert names["device synchronize"]["s"] == "g"
    assert "record_stream" in names
    assert events(doc, "i", "finding") == []


def test_around_findings_keeps_a_window(tmp_path):
    path = tmp_path / "long.bin"
    with S.writer(path) as w:
        w.memory_allocated(0x1000, S.DEFAULT, 64)
        w.memory_allocated(0x2000, S.DEFAULT, 64)
        w.stream_created(S.SIDE)
        for i in range(100):
            w.kernel(S.DEFAULT, f"op{i}", writes=[0x2000])
        w.kernel(S.DEFAULT, "racy_write", writes=[0x1000])  # seq 101
        for i in range(50):
            w.kernel(S.SIDE, f"side{i}", reads=[0x2000 + 8], writes=[])
        w.kernel(S.SIDE, "racy_read", reads=[0x1000])  # seq 152
        for i in range(100):
            w.kernel(S.SIDE, f"tail{i}")
    full = export_chrome(path)
    assert len(events(full, "X", "kernel")) == 252
    cut = export_chrome(path, around_findings=3)
    seqs = sorted(k["args"]["seq"] for k in events(cut, "X", "kernel"))
    # Every finding (the planted race, and races of op* vs side*) keeps 3 kernels on each side.
    assert 101 in seqs and 152 in seqs
    assert {98, 99, 100, 102, 103, 104, 149, 150, 151, 153, 154, 155} <= set(seqs)
    assert 1 not in seqs and 252 not in seqs
    assert len(events(cut, "i", "finding")) == len(events(full, "i", "finding"))
    zero = export_chrome(path, around_findings=0)
    marked = {m["args"]["seq"] for m in events(zero, "i", "finding") if m["args"]["seq"]}
    assert {k["args"]["seq"] for k in events(zero, "X", "kernel")} == marked


def test_flows_need_both_ends_in_the_window(tmp_path):
    path = tmp_path / "w.bin"
    with S.writer(path) as w:
        w.memory_allocated(0x1000, S.DEFAULT, 64)
        w.stream_created(S.SIDE)
        S.wait_stream(w, 5, S.SIDE, S.DEFAULT, None)  # early sync, far from the race
        for i in range(20):
            w.kernel(S.DEFAULT, f"op{i}")
        w.kernel(S.DEFAULT, "w", writes=[0x1000])
        w.kernel(S.SIDE, "r", reads=[0x1000])
    assert len(events(export_chrome(path), "s")) == 1
    assert events(export_chrome(path, around_findings=2), "s") == []


def test_truncated_trace_exports_what_it_has(tmp_path):
    path = S.seed_example(tmp_path / "cut.bin", steps=10)
    S.truncate(path, 0.7)
    doc = export_chrome(path)
    assert doc["otherData"]["truncated"] is True
    assert events(doc, "X", "kernel")


def test_a_window_over_the_cap_is_narrowed_so_the_findings_are_drawn(tmp_path):
    """A race at kernels 1503/1504, a window of 1000 and a cap of 10: the cap used to keep
    kernels 503-512 and pile both markers up after them, on no kernel. The window is
    narrowed instead, to the widest that fits: 4 kernels each side, the race in the middle."""
    path = races_trace(tmp_path / "t.bin", 2000, [1503])
    doc = export_chrome(path, around_findings=1000, max_kernels=10)
    assert [k["args"]["seq"] for k in events(doc, "X", "kernel")] == list(range(1499, 1509))
    assert sorted(m["args"]["seq"] for m in markers_sit_on_drawn_kernels(doc)) == [1503, 1504]
    other = doc["otherData"]
    assert (other["around_findings"], other["around_findings_narrowed_from"]) == (4, 1000)
    assert (other["findings_left_out"], other["markers_left_out"]) == (0, 0)
    assert export_chrome(path, around_findings=3, max_kernels=10)["otherData"]["around_findings_narrowed_from"] is None


def test_windows_are_narrowed_alike_and_merged_ones_count_once(tmp_path):
    # races at 100/101 and 110/111, one at 500/501: with radius r the first two windows
    # overlap once r >= 4 (one window of 2r + 12 kernels), the third holds 2r + 2.
    path = races_trace(tmp_path / "t.bin", 1000, [100, 110, 500])
    doc = export_chrome(path, around_findings=100, max_kernels=40)
    assert doc["otherData"]["around_findings"] == 6  # 24 + 14 = 38 kernels; 7 would be 42
    seqs = {k["args"]["seq"] for k in events(doc, "X", "kernel")}
    assert seqs == set(range(94, 118)) | set(range(494, 508))
    assert len(markers_sit_on_drawn_kernels(doc)) == 6


def test_findings_past_the_cap_lose_their_markers_not_their_place(tmp_path):
    """More findings' kernels than the cap even at radius 0: the first ones in trace order
    are drawn with their markers; the others' markers are left out and counted, with the
    --max-kernels that draws them all."""
    path = races_trace(tmp_path / "t.bin", 300, [20, 60, 100, 140, 180])
    stats = write_chrome(path, Sink(), ExportLimits(50, 4))
    doc = export_chrome(path, around_findings=50, max_kernels=4)
    assert [k["args"]["seq"] for k in events(doc, "X", "kernel")] == [20, 21, 60, 61]
    assert sorted(m["args"]["seq"] for m in markers_sit_on_drawn_kernels(doc)) == [20, 21, 60, 61]
    other = doc["otherData"]
    assert other["around_findings"] == 0 and other["around_findings_narrowed_from"] == 50
    assert (other["findings"], other["findings_left_out"], other["markers_left_out"]) == (5, 3, 6)
    assert stats.describe() == (
        "kept 4 of 300 kernels (only the kernels of the 5 findings' accesses, narrowed from 50 by the cap "
        "of 4 kernels); left out 296, and 6 finding markers (of 3 findings) on kernels past the cap: "
        "--max-kernels 10 draws every marker, --all everything")
    full = export_chrome(path, around_findings=50, max_kernels=10)
    assert len(markers_sit_on_drawn_kernels(full)) == 10 and full["otherData"]["markers_left_out"] == 0


def test_without_a_window_the_cap_keeps_the_first_kernels_and_no_stray_markers(tmp_path):
    path = races_trace(tmp_path / "t.bin", 2000, [1503])
    doc = export_chrome(path, max_kernels=10)
    assert [k["args"]["seq"] for k in events(doc, "X", "kernel")] == list(range(1, 11))
    assert events(doc, "i", "finding") == []
    assert (doc["otherData"]["findings_left_out"], doc["otherData"]["markers_left_out"]) == (1, 2)
    stats = write_chrome(path, Sink(), ExportLimits(None, 10))
    assert "2 finding markers (of 1 finding) on kernels past the cap" in stats.describe()
    assert "--max-kernels 1504 draws every marker" in stats.describe()


@pytest.mark.parametrize("stats, line", [
    (ExportStats(kernels=54, drawn=6, findings=1, limits=ExportLimits(2, None)),
     "kept 6 of 54 kernels (the 2 kernels before and after the finding's accesses); left out 48; "
     "--all exports everything"),
    (ExportStats(kernels=54, drawn=3, findings=2, limits=ExportLimits(1, None)),
     "kept 3 of 54 kernels (the 1 kernel before and after each of the 2 findings' accesses); left out 51; "
     "--all exports everything"),
    (ExportStats(kernels=9, drawn=2, findings=1, limits=ExportLimits(0, 5)),
     "kept 2 of 9 kernels (only the kernels of the finding's accesses); left out 7; --all exports everything"),
    (ExportStats(kernels=9, drawn=1, findings=1, limits=ExportLimits(0, 1), narrowed_from=3,
                 markers_left_out=1, findings_left_out=1, markers_need=2),
     "kept 1 of 9 kernels (only the kernels of the finding's accesses, narrowed from 3 by the cap of 1 kernel); "
     "left out 8, and 1 finding marker (of 1 finding) on a kernel past the cap: "
     "--max-kernels 2 draws every marker, --all everything"),
    (ExportStats(kernels=1, drawn=1), "exported the trace's 1 kernel"),
    (ExportStats(kernels=2_000, drawn=2_000), "exported all 2,000 kernels"),
])
def test_what_was_left_out_reads_right_in_the_singular_too(stats, line):
    assert stats.describe() == line


def _free_in_the_middle(path, after: int = 100):
    """A missing record_stream whose free comes after kernel 2, then ``after`` more kernels."""
    with S.writer(path) as w:
        w.stream_created(S.SIDE)
        w.memory_allocated(0x7F0000000000, S.DEFAULT, 4096)
        w.kernel(S.DEFAULT, "aten::fill_", writes=[0x7F0000000000])
        w.event_created(1)
        w.event_recorded(1, S.DEFAULT)
        w.event_waited(1, S.SIDE)
        w.kernel(S.SIDE, "aten::sum", reads=[0x7F0000000000])  # kernel 2, no record_stream
        w.memory_freed(0x7F0000000000)
        for _ in range(after):
            w.kernel(S.DEFAULT, "aten::add", writes=[0x7F0000100000])
    return path


def test_a_free_s_marker_sits_at_the_free_not_at_the_end(tmp_path):
    """A free is host-side (seq 0): its marker goes right after its FREE record, between the
    kernel before it and the one after (a trial found it drawn at the end of the timeline)."""
    doc = export_chrome(_free_in_the_middle(tmp_path / "t.bin"))
    kernels = {k["args"]["seq"]: k for k in events(doc, "X", "kernel")}
    (free,) = [m for m in events(doc, "i", "finding") if m["args"]["role"] == "later access"]
    assert kernels[2]["ts"] < free["ts"] < kernels[3]["ts"]
    assert doc["otherData"]["markers_left_out"] == 0


def test_a_free_past_the_cap_loses_its_marker_and_is_counted(tmp_path):
    doc = export_chrome(_free_in_the_middle(tmp_path / "t.bin"), max_kernels=1)
    assert events(doc, "i", "finding") == []
    assert doc["otherData"]["markers_left_out"] == 2 and doc["otherData"]["findings_left_out"] == 1


def test_a_trace_that_grew_between_the_passes_is_drawn_as_the_first_pass_saw_it(tmp_path, monkeypatch):
    """A trace still being written is longer when the export reads it again to draw it: the
    drawing stops where the findings stopped, and the export says the trace was cut (a trial
    got the whole, later trace drawn with no finding on it and no warning)."""
    import io

    from npusan.analyzer.export import timeline
    from tests.trace_format.conftest import growing_trace

    whole, first = growing_trace(50)  # the races come after the first pass read the trace
    trace = tmp_path / "live.npusan"
    trace.write_bytes(whole[:first])
    real = timeline.replay_reader

    def then_the_writer_writes(*args, **kwargs):
        out = real(*args, **kwargs)
        trace.write_bytes(whole)
        return out

    monkeypatch.setattr(timeline, "replay_reader", then_the_writer_writes)
    out = io.StringIO()
    stats = write_chrome(trace, out, ExportLimits.default())
    doc = json.loads(out.getvalue())
    assert [k["args"]["seq"] for k in events(doc, "X", "kernel")] == list(range(1, 51))
    assert doc["otherData"]["kernels"] == 50 and doc["otherData"]["truncated"] is True
    assert events(doc, "i", "finding") == []
    assert stats.truncated and "trace ends without an end record after" in stats.warnings[0]
