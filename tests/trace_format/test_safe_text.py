"""The sanitizer's JSON shortcut: exactly what cleaning every string and then encoding gives."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from npusan.trace_format.safe_text import MAX_TEXT, clean_json, clean_tree

# Text drawn mostly from the characters the sanitizer cares about, and the JSON escapes.
RISKY = st.sampled_from(["\x00", "\x07", "\n", "\t", "\x1b", "\x7f", "\x9b", "\u202e", "\u2066", "\ufeff",
                         "\ud800", "\uffff", "\\", '"', "u", "n", "a", "é", "中"])
TEXT = st.one_of(st.text(), st.lists(RISKY, max_size=12).map("".join))
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4),
                            st.dictionaries(st.integers(), inner, max_size=2)),
    max_leaves=12,
)


def slow(value, limit=MAX_TEXT):
    return json.dumps(clean_tree(value, limit), separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=600, deadline=None)
@given(JSONISH, st.sampled_from([MAX_TEXT, 8]))
def test_clean_json_is_clean_tree_then_dumps(value, limit):
    assert clean_json(value, limit) == slow(value, limit)


def test_each_unsafe_character_is_replaced_wherever_it_stands():
    for ch in ("\x1b", "\x00", "\n", "\x9b", "\u202e", "\ud800"):
        doc = {"name": f"op{ch}", "args": {f"k{ch}": [f"v{ch}"]}}
        text = clean_json(doc)
        assert json.loads(text) == {"name": "op\ufffd", "args": {"k\ufffd": ["v\ufffd"]}}


def test_a_long_string_is_cut_as_clean_cuts_it():
    text = clean_json({"name": "x" * (MAX_TEXT + 5)})
    assert json.loads(text)["name"].endswith("… (5 more characters)")
