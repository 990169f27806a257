"""Suppression files: format, validation (one clear sentence), matching, unused entries."""


import pytest

from npusan.analyzer.findings.suppressions import (
    SuppressionError,
    load_suppressions,
    parse_suppressions,
)
from tests.cli.npusan_scenarios import make_finding  # noqa: E402


def parse(text: str):
    return parse_suppressions(text.encode(), "s.toml")


def test_each_field_matches_on_its_own():
    race = make_finding()  # read by aten::sum on stream #1 (train.py:18) vs write on default
    other = make_finding("missing-record-stream", later_op="free", later_type="write",
                         later=("train.py", 12, "seed_example"), earlier=("other.py", 5, "helper"),
                         earlier_op="aten::mul.Tensor")
    cases = {
        'kind = "data-race"': (True, False),
        'op = "aten::s*"': (True, False),
        'op = "aten::mul.Tensor"': (False, True),
        'stream = "default"': (True, True),
        'stream = "train.py:18"': (True, True),
        'stream = "stream #1"': (True, True),
        'stream = "stream #7"': (False, False),
        'frame = "train.py:21"': (True, False),
        'frame = "*/other.py:*"': (False, False),
        'frame = "other.py:5"': (False, True),
        'frame = "helper"': (False, True),
        'frame = ["nothing", "helper"]': (False, True),
    }
    for fields, expected in cases.items():
        s = parse(f'[[suppress]]\n{fields}\nreason = "r"\n')
        got = (s.match(race) is not None, s.match(other) is not None)
        assert got == expected, fields


def test_all_given_fields_must_match():
    s = parse('[[suppress]]\nkind = "data-race"\nop = "aten::mul*"\nreason = "r"\n')
    assert s.match(make_finding()) is None
    assert s.match(make_finding(later_op="aten::mul.Tensor")) is not None


def test_absolute_paths_match_by_basename_or_glob():
    f = make_finding(later=("/home/u/proj/train.py", 21, "data_race"))
    assert parse('[[suppress]]\nframe = "train.py:21"\nreason = "r"\n').match(f) is not None
    assert parse('[[suppress]]\nframe = "*/proj/*"\nreason = "r"\n').match(f) is not None


def test_use_counts_and_unused_entries():
    s = parse(
        '[[suppress]]\nkind = "data-race"\nreason = "known race"\n'
        '[[suppress]]\nkind = "reuse-race"\nreason = "never happens"\n'
    )
    for _ in range(3):
        assert s.match(make_finding()).index == 1
    assert s.entries[0].used == 3
    assert [e.index for e in s.unused()] == [2]
    assert "never happens" in s.unused()[0].describe()


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[suppress]]\nkind = "data-race"\n', "has no 'reason'"),
        ('[[suppress]]\nkind = "data-race"\nreason = "  "\n', "'reason' is empty"),
        ('[[suppress]]\nfingerprint = 5\nreason = [1]\n', "'reason' must be a string, got an array"),
        ('[[suppress]]\nkind = "data-race"\nreason = 3\n', "'reason' must be a string, got an integer"),
        ('[[suppress]]\nreason = "r"\n', "matches everything"),
        ('[[suppress]]\nkind = "race"\nreason = "r"\n', "unknown kind 'race'"),
        ('[[suppress]]\nkinds = "data-race"\nreason = "r"\n', "unknown key 'kinds'"),
        ('[[suppress]]\nop = 3\nreason = "r"\n', "'op' must be"),
        ('[[suppress]]\nop = []\nreason = "r"\n', "'op' must be"),
        ("suppress = 3\n", "array of tables"),
        ('[other]\nx = 1\n', "unknown top-level key 'other'"),
        ("[[suppress]\n", "not valid TOML"),
        ('[[suppress]]\nfingerprint = "29907af2ba96"\nreason = "r"\n', "at least 16 hex digits"),
        ('[[suppress]]\nfingerprint = "29907af2ba9674zz"\nreason = "r"\n', "at least 16 hex digits"),
    ],
)
def test_malformed_files_fail_with_one_sentence(text, message):
    with pytest.raises(SuppressionError) as e:
        parse(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(SuppressionError, match="cannot read suppression file .*missing.toml"):
        load_suppressions(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[[")
    with pytest.raises(SuppressionError, match="bad.toml: is not UTF-8"):
        load_suppressions(str(bad))
    with pytest.raises(SuppressionError, match="cannot read"):
        load_suppressions(str(tmp_path))  # a directory


def test_empty_file_suppresses_nothing(tmp_path):
    p = tmp_path / "empty.toml"
    p.write_text("# nothing yet\n")
    s = load_suppressions(str(p))
    assert s.entries == [] and s.match(make_finding()) is None


def test_fingerprint_prefix_of_16_or_more_hex_digits_matches_that_finding_only():
    race = make_finding()
    other = make_finding(later_op="aten::mul.Tensor")
    fp = race.fingerprint()
    assert len(fp) == 32 and fp != other.fingerprint()
    for given in (fp[:16], fp[:16].upper(), fp, [fp[:20], "0" * 16]):
        value = repr(given).replace("'", '"')
        s = parse(f'[[suppress]]\nfingerprint = {value}\nreason = "r"\n')
        assert s.match(race) is not None, given
        assert s.match(other) is None, given
    s = parse(f'[[suppress]]\nfingerprint = "{fp[:16]}"\nkind = "reuse-race"\nreason = "r"\n')
    assert s.match(race) is None  # every given field must match
    assert "fingerprint=" + fp[:16] in s.entries[0].describe()
