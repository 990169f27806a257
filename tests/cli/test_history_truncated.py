"""History across nights when a rank's trace is cut (the run crashed): a trace that stops
before the kernel where a finding was seen cannot say it is fixed; one that got past it can.

Found in a user trial: night 1 had a race at kernel 50,102 of rank0, night 2's rank0 died
at kernel 45,154 and the history called the race fixed; night 3 called it new."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3

from . import npusan_scenarios as S
from .npusan_scenarios import run, workdir  # noqa: F401  (fixtures)

#: Filler kernels before the race: the race's later access is kernel BEFORE + 2.
BEFORE, AFTER = 1500, 1500
RACE_KERNEL = BEFORE + 2


def rank_trace(path, rank: int, *, race: bool = True) -> None:
    """A rank's night: BEFORE filler kernels, x.fill_ then x.sum() on a side stream (a data
    race unless ``race`` is False: then the side stream waits first), AFTER filler kernels."""
    f, x, other = "data_race", 0x7F0000100000, 0x7F0000500000
    with S.writer(path, rank=rank) as w:
        w.memory_allocated(x, S.DEFAULT, 4096, stack=S.stack(f, "x = torch.empty"))
        w.memory_allocated(other, S.DEFAULT, 4096, stack=S.stack("correct", "x = torch.empty"))
        w.stream_created(S.SIDE, stack=S.stack(f, "side = torch.cuda.Stream()"))
        filler = S.stack("correct", "x.fill_(1.0)")
        for _ in range(BEFORE):
            w.kernel(S.DEFAULT, "aten::fill_.Scalar", writes=[other], stack=filler)
        w.kernel(S.DEFAULT, "aten::fill_.Scalar", writes=[x], stack=S.stack(f, "x.fill_(1.0)", torch_frames=3))
        if not race:
            S.wait_stream(w, 9, S.SIDE, S.DEFAULT, S.stack("correct", "side.wait_stream"))
        w.kernel(S.SIDE, "aten::sum", reads=[x], stack=S.stack(f, "y = x.sum()", torch_frames=2))
        for _ in range(AFTER):
            w.kernel(S.DEFAULT, "aten::fill_.Scalar", writes=[other], stack=filler)


def night(workdir, label: str, *, race: bool = True, cut: float = 1.0) -> str:
    """nights/<label>/rank0.npusan and rank1.npusan (a folder per night, as CI keeps them);
    rank0 has the race (unless ``race`` is False) and is cut to ``cut`` of its bytes; rank1
    never has it."""
    folder = workdir / "nights" / label
    folder.mkdir(parents=True)
    rank_trace(folder / "rank0.npusan", 0, race=race)
    rank_trace(folder / "rank1.npusan", 1, race=False)
    if cut < 1.0:
        S.truncate(folder / "rank0.npusan", cut)
    return str(folder)


def analyze(run, folder: str, label: str) -> tuple:
    """The JSON and the text report of one night, recorded in h.db (the text report against
    a copy of the history, so that the night is recorded once)."""
    if os.path.exists("h.db"):
        shutil.copy("h.db", "h-text.db")
    text = run("analyze", folder, "--history", "h-text.db", "--no-color")
    r = run("analyze", folder, "--history", "h.db", "--run-label", label, "--format", "json")
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout), text.stdout


def rank0(doc: dict) -> dict:
    return next(t for t in doc["traces"] if t["path"].endswith("rank0.npusan"))


def test_a_trace_cut_before_the_finding_leaves_it_unchecked_and_it_comes_back_persisting(workdir, run):
    n1, _ = analyze(run, night(workdir, "n1"), "n1")
    assert [(f["kind"], f["status"]) for f in n1["findings"]] == [("data-race", "new")]
    db = sqlite3.connect("h.db")
    assert db.execute("SELECT trace, kernel FROM first_kernels").fetchall() == [
        (str(workdir / "nights" / "n1" / "rank0.npusan"), RACE_KERNEL)]

    # Night 2: rank0 crashed before the race's kernel; the race is not seen, and not fixed.
    n2, text = analyze(run, night(workdir, "n2", cut=0.4), "n2")
    cut = rank0(n2)["kernels"]
    assert rank0(n2)["truncated"] is True and 100 < cut < RACE_KERNEL
    why = f"cut at kernel {cut:,} now, before this finding's kernel {RACE_KERNEL:,}"
    assert n2["findings"] == [] and n2["fixed"] == []
    assert [(k["kind"], k["traces"], k["why"]) for k in n2["unchecked"]] == [
        ("data-race", [str(workdir / "nights" / "n1" / "rank0.npusan")], [why])]
    assert (n2["comparison"]["fixed"], n2["comparison"]["unchecked"]) == (0, 1)
    assert "0 new, 0 persisting, 0 fixed, 1 unchecked:" in text
    line = next(l for l in text.splitlines() if l.strip().startswith("?"))
    assert "[data-race]" in line and f"last seen only in {workdir}/nights/n1/rank0.npusan, {why}" in line
    assert re.search(r"cut at kernel \d,\d{3} now", line)  # kernels with thousands separators

    # Night 3: rank0 complete again, the race is there: known since night 1, not new.
    n3, text = analyze(run, night(workdir, "n3"), "n3")
    assert [(f["kind"], f["status"]) for f in n3["findings"]] == [("data-race", "persisting")]
    assert n3["comparison"]["new"] == 0 and n3["fixed"] == [] and n3["unchecked"] == []
    assert "[new]" not in text and "[persisting]" in text
    hist = json.loads(run("history", "h.db", "--format", "json").stdout)
    assert [r["unchecked"] for r in hist["runs"]] == [0, 1, 0]
    (fp,) = hist["fingerprints"]
    assert (fp["first_run"], fp["last_run"]) == ("n1", "n3")


def test_a_finding_unchecked_twice_keeps_its_kernel(workdir, run):
    analyze(run, night(workdir, "n1"), "n1")
    analyze(run, night(workdir, "n2", cut=0.3), "n2")
    # Night 3 is cut again, this time past the race's kernel of night 1: it was fixed.
    n3, text = analyze(run, night(workdir, "n3", race=False, cut=0.85), "n3")
    assert rank0(n3)["truncated"] is True and rank0(n3)["kernels"] > RACE_KERNEL
    assert [k["kind"] for k in n3["fixed"]] == ["data-race"] and n3["unchecked"] == []
    assert "0 new, 0 persisting, 1 fixed:" in text


def test_a_trace_cut_after_the_finding_says_it_is_fixed(workdir, run):
    analyze(run, night(workdir, "n1"), "n1")
    # Night 2: the race was fixed, and rank0 crashed later, past the race's kernel.
    n2, text = analyze(run, night(workdir, "n2", race=False, cut=0.85), "n2")
    assert rank0(n2)["truncated"] is True and rank0(n2)["kernels"] > RACE_KERNEL
    assert [k["kind"] for k in n2["fixed"]] == ["data-race"] and n2["unchecked"] == []
    assert "0 new, 0 persisting, 1 fixed:" in text and "unchecked" not in text
    # Night 3 without the race: nothing left to compare.
    n3, _ = analyze(run, night(workdir, "n3", race=False), "n3")
    assert n3["fixed"] == [] and n3["unchecked"] == [] and n3["findings"] == []


def test_a_history_without_kernels_lets_no_cut_trace_confirm_a_fix(workdir, run):
    """Runs recorded before the history kept kernels (or by an older npusan) load; a cut
    trace cannot confirm that their findings are fixed, however far it got."""
    analyze(run, night(workdir, "n1"), "n1")
    db = sqlite3.connect("h.db")
    db.execute("DROP TABLE first_kernels")  # as an older npusan wrote it
    db.commit()
    db.close()
    n2, text = analyze(run, night(workdir, "n2", race=False, cut=0.85), "n2")
    cut = rank0(n2)["kernels"]
    assert cut > RACE_KERNEL and n2["fixed"] == []
    why = f"cut at kernel {cut:,} now (the history does not know this finding's kernel)"
    assert [k["why"] for k in n2["unchecked"]] == [[why]]
    assert why in text
    # This night's run recorded the kernel it carried over: none, so still unknown; a
    # complete trace then checks it.
    n3, _ = analyze(run, night(workdir, "n3", race=False), "n3")
    assert [k["kind"] for k in n3["fixed"]] == ["data-race"] and n3["unchecked"] == []


def test_a_rank_without_a_trace_tonight_checked_nothing(workdir, run):
    """A rank that crashed before writing its trace leaves no file: its findings are not
    fixed (a second trial got 'fixed: 1'). The history knows each trace's rank."""
    analyze(run, night(workdir, "n1"), "n1")
    folder = workdir / "nights" / "n2"
    folder.mkdir(parents=True)
    rank_trace(folder / "rank1.npusan", 1, race=False)  # rank0 wrote nothing
    n2, text = analyze(run, str(folder), "n2")
    assert [(k["kind"], k["why"]) for k in n2["unchecked"]] == [("data-race", ["no trace of rank 0 now"])]
    assert n2["fixed"] == [] and "1 unchecked" in text


def test_a_renamed_rank_trace_is_still_that_rank_s(workdir, run):
    """rank0.npusan last night, rank0.npusan.zst tonight (cut before the race): matched by
    the rank in its header, so the cut leaves the race unchecked, not fixed."""
    analyze(run, night(workdir, "n1"), "n1")
    folder = workdir / "nights" / "n2"
    folder.mkdir(parents=True)
    rank_trace(folder / "rank0.npusan.zst", 0)
    rank_trace(folder / "rank1.npusan", 1, race=False)
    data = (folder / "rank0.npusan.zst").read_bytes()
    (folder / "rank0.npusan.zst").write_bytes(data[: len(data) // 3])  # a crash: cut short
    n2, _ = analyze(run, str(folder), "n2")
    assert n2["fixed"] == []
    ((why,),) = [k["why"] for k in n2["unchecked"]]
    assert why.startswith("cut at kernel ") and why.endswith(f"before this finding's kernel {RACE_KERNEL:,}")


def test_the_short_format_tags_findings_new_or_persisting_too(workdir, run):
    """--format short with --history keeps the text report's [new] / [persisting] (trial)."""
    lines = []
    for label in ("n1", "n2"):
        r = run("analyze", night(workdir, label), "--history", "h.db", "--format", "short")
        assert r.exit_code == 1, r.stderr
        lines.append(r.stdout.splitlines())
    assert [line.endswith(" [new]") for line in lines[0]] == [True]
    assert [line.endswith(" [persisting]") for line in lines[1]] == [True]
