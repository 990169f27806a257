"""Typo hints read the same everywhere: click's single-match form, extended to several."""

from __future__ import annotations

from npusan.typo_hints import did_you_mean, typo_hint


def test_one_and_several_matches_share_one_wording():
    assert did_you_mean(["json"]) == "Did you mean 'json'?"
    assert did_you_mean(["a", "b", "c"]) == "Did you mean 'a', 'b' or 'c'?"
    assert did_you_mean([]) == ""


def test_hint_is_appended_as_a_sentence_or_not_at_all():
    assert typo_hint("jsn", ["text", "json", "sarif"]) == ". Did you mean 'json'?"
    assert typo_hint("zzz", ["text", "json", "sarif"]) == ""
