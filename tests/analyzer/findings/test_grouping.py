"""Grouping: one entry per bug (kind + code locations), across occurrences and traces."""



from npusan.analyzer.findings.grouping import Occurrence, group_findings, ungrouped  # noqa: E402
from tests.cli.npusan_scenarios import make_finding  # noqa: E402


def test_same_bug_in_two_traces_with_different_pointers_and_handles_is_one_group():
    a = make_finding(trace=0, address=0x1000, side_handle=0xAAA, side_index=1, count=3, later_seq=5, last_seq=9)
    b = make_finding(trace=1, address=0x9000, side_handle=0xBBB, side_index=4, count=2, later_seq=2, last_seq=7)
    assert a.fingerprint() == b.fingerprint()
    (g,) = group_findings([b, a])
    assert g.count == 5
    assert g.traces == [0, 1]
    assert g.first == Occurrence(0, 5)
    assert g.last == Occurrence(1, 7)
    assert g.addresses == [0x1000, 0x9000]
    assert g.finding is a  # the earliest occurrence represents the group


def test_different_code_locations_or_kinds_stay_apart():
    a = make_finding()
    b = make_finding(later=("train.py", 30, "view_race"))
    c = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=3)
    d = make_finding(later_type="write")
    groups = group_findings([a, b, c, d])
    assert len(groups) == 4
    assert len({g.fingerprint for g in groups}) == 4


def test_groups_are_ordered_by_first_occurrence():
    late = make_finding(later=("train.py", 30, "x"), later_seq=50)
    early = make_finding(later=("train.py", 31, "y"), later_seq=3)
    other_trace = make_finding(later=("train.py", 32, "z"), later_seq=1, trace=1)
    assert [g.finding for g in group_findings([other_trace, late, early])] == [early, late, other_trace]


def test_ungrouped_lists_every_kept_occurrence_and_counts_the_rest():
    f = make_finding(count=5, later_seq=2, earlier_seq=1,
                     occurrences=[(2, 1, 0x10), (12, 11, 0x20), (22, 21, 0x10)])
    entries = ungrouped([f])
    assert [e.finding.access.seq for e in entries] == [2, 12, 22]
    assert [e.finding.previous.seq for e in entries] == [1, 11, 21]
    assert [e.addresses for e in entries] == [[0x10], [0x20], [0x10]]
    # each entry shows its own block, not the first occurrence's
    assert [e.finding.block.address for e in entries] == [0x10, 0x20, 0x10]
    assert all(e.count == 1 for e in entries)
    assert entries[-1].omitted == 2  # 5 counted, 3 kept
    assert {e.fingerprint for e in entries} == {f.fingerprint()}


def test_ungrouped_entries_show_their_own_byte_ranges():
    """A finding's occurrences may touch other bytes of the block (one line reading slice
    after slice): each entry shows its occurrence's ranges, not the first one's."""
    f = make_finding(count=2, later_seq=5, earlier_seq=2,
                     occurrences=[(5, 2, 0x10, 100, 100, 100, 100), (6, 4, 0x10, 300, 100, None, None)])
    a, b = ungrouped([f])
    assert (a.finding.access.offset, a.finding.access.nbytes) == (100, 100)
    assert (b.finding.access.offset, b.finding.access.nbytes) == (300, 100)
    assert (b.finding.previous.offset, b.finding.previous.nbytes) == (None, None)  # a whole-block write


def test_ungrouped_keeps_a_free_as_a_host_event():
    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0,
                     first_seq=4, occurrences=[(4, 2, 0x10), (9, 7, 0x10)], count=2)
    entries = ungrouped([f])
    assert [e.finding.access.seq for e in entries] == [0, 0]
    assert [e.first.seq for e in entries] == [4, 9]
    assert [e.finding.previous.seq for e in entries] == [2, 7]


def test_ungrouped_without_kept_occurrences_falls_back_to_the_finding():
    f = make_finding(count=3, occurrences=[])
    (e,) = ungrouped([f])
    assert e.count == 1 and e.omitted == 2


def test_a_group_of_two_tensors_lists_both_in_its_root_cause():
    from dataclasses import replace

    from npusan.analyzer.findings.model import Frame
    from npusan.analyzer.report.describe import tensors
    from npusan.analyzer.findings.rootcause import root_causes

    f = make_finding("missing-record-stream", later_op="free", later_type="write", later_seq=0, first_seq=4)
    a = replace(f, block=replace(f.block, address=0x10, stack=(Frame("/p/x.py", 6, "load"),)))
    b = replace(f, block=replace(f.block, address=0x20, stack=(Frame("/p/x.py", 7, "load"),)), first_seq=5)
    (g,) = group_findings([a, b])  # the same code: one group, two tensors
    (rc,) = root_causes([g])
    assert [t["allocated_at"].lineno for t in tensors(rc)] == [6, 7]
