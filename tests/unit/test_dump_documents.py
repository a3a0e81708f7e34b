"""`dump_documents` writes YAML that reads back as the data it was given, under YAML 1.1
(kubectl's reading) and 1.2, with comments where their paths say."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconcile.desired.writer import dump_documents


def test_comments_go_before_documents_items_and_keys_at_their_column() -> None:
    documents = [
        {"kind": "A", "metadata": {"name": "a"}},
        {
            "kind": "B",
            "spec": {"rules": [{"verbs": ["get", "list"]}, {"verbs": ["create"]}]},
        },
    ]
    comments = {
        (0,): "first\nsecond",
        (1, "spec", "rules", 1): "why the second rule",
        (1, "spec"): "the spec",
    }

    assert dump_documents(documents, comments) == (
        "# first\n"
        "# second\n"
        "kind: A\n"
        "metadata:\n"
        "  name: a\n"
        "---\n"
        "kind: B\n"
        "# the spec\n"
        "spec:\n"
        "  rules:\n"
        "  - verbs: [get, list]\n"
        "  # why the second rule\n"
        "  - verbs: [create]\n"
    )


def test_strings_another_reader_would_take_for_something_else_are_double_quoted() -> None:
    words = ["", "yes", "On", "null", "~", "0123", "1e3", "0x1F", "2001-12-14", "1:20", "a b"]

    text = dump_documents([{"names": words, "plain": "pods/eviction", "flag": False}])

    assert text == (
        'names: ["", "yes", "On", "null", "~", "0123", "1e3", "0x1F", "2001-12-14", "1:20", '
        '"a b"]\nplain: pods/eviction\nflag: false\n'
    )


scalars = st.one_of(st.booleans(), st.integers(), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=4), max_size=3))
def test_what_is_written_reads_back_the_same_in_yaml_1_1_and_1_2(
    documents: list[dict[str, Any]],
) -> None:
    text = dump_documents(documents)

    assert list(yaml.safe_load_all(text)) == documents
    assert [_plain(d) for d in YAML(typ="safe").load_all(text)] == documents


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
