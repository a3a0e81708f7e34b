"""Label selectors against the upstream k8s.io/apimachinery/pkg/labels test tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.kube.selector import (
    Op,
    Requirement,
    SelectorError,
    from_label_selector,
    new_requirement,
    parse,
)

UPSTREAM = json.loads((Path(__file__).parents[1] / "data/upstream/label_selector.json").read_text())


def _ids(cases: list[dict[str, Any]], key: str) -> list[str]:
    return [repr(case[key]) for case in cases]


@pytest.mark.parametrize("case", UPSTREAM["parseGood"], ids=_ids(UPSTREAM["parseGood"], "in"))
def test_parse_good(case: dict[str, Any]) -> None:
    assert str(parse(case["in"])).replace(" ", "") == case["out"]


@pytest.mark.parametrize("case", UPSTREAM["parseBad"], ids=_ids(UPSTREAM["parseBad"], "in"))
def test_parse_bad(case: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        parse(case["in"])


def test_parse_is_deterministic() -> None:
    case = UPSTREAM["deterministicParse"]
    assert str(parse(case["a"])) == str(parse(case["b"]))


@pytest.mark.parametrize("case", UPSTREAM["matches"], ids=_ids(UPSTREAM["matches"], "selector"))
def test_matches(case: dict[str, Any]) -> None:
    assert parse(case["selector"]).matches(case["labels"]) is case["match"]


@pytest.mark.parametrize(
    "case", UPSTREAM["setSelectorParser"], ids=_ids(UPSTREAM["setSelectorParser"], "in")
)
def test_set_selector_parser(case: dict[str, Any]) -> None:
    if not case["valid"]:
        with pytest.raises(SelectorError):
            parse(case["in"])
        return
    parsed = parse(case["in"])
    if case["match"]:
        expected = sorted(
            (
                Requirement(r["key"], Op(r["operator"]), tuple(r["values"]))
                for r in case["requirements"]
            ),
            key=lambda r: r.key,
        )
        assert list(parsed.requirements) == expected


@pytest.mark.parametrize("case", UPSTREAM["errors"], ids=_ids(UPSTREAM["errors"], "selector"))
def test_operator_errors(case: dict[str, Any]) -> None:
    text = f"x {case['selector']} y" if case["error"] is None else f"x {case['selector']}"
    if case["error"] is None:
        parse(
            text.replace(" in y", " in (y)")
            .replace(" notin y", " notin (y)")
            .replace("> y", ">1")
            .replace("< y", "<1")
        )
    else:
        with pytest.raises(SelectorError) as raised:
            parse(text + " y")
        assert str(raised.value) == f"unable to parse requirement: {case['error']}"


@pytest.mark.parametrize(
    "case",
    UPSTREAM["requirementConstructor"],
    ids=[f"{c['key']}-{c['operator']}" for c in UPSTREAM["requirementConstructor"]],
)
def test_requirement_constructor(case: dict[str, Any]) -> None:
    if case["wantErr"]:
        with pytest.raises(SelectorError) as raised:
            new_requirement(case["key"], case["operator"], tuple(case["values"]))
        for want in case["wantErr"]:
            assert f"{want['field']}: " in str(raised.value)
    else:
        new_requirement(case["key"], case["operator"], tuple(case["values"]))


def test_the_api_servers_parse_error_for_an_unclosed_set() -> None:
    with pytest.raises(SelectorError) as raised:
        parse("a in (b")
    assert str(raised.value) == "unable to parse requirement: found '', expected: ',' or ')'"


def test_bad_key_error_has_the_nil_field_path_of_upstream() -> None:
    with pytest.raises(SelectorError) as raised:
        parse("a b")
    assert (
        str(raised.value)
        == "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    )
    with pytest.raises(SelectorError) as raised:
        parse("-a=b")
    assert str(raised.value).startswith(
        'unable to parse requirement: <nil>: Invalid value: "-a": name part'
    )


@pytest.mark.parametrize(
    ("selector", "labels", "match"),
    [
        ({"matchLabels": {"app": "trainer"}}, {"app": "trainer", "x": "y"}, True),
        ({"matchLabels": {"app": "trainer"}}, {"app": "other"}, False),
        ({}, {"anything": "goes"}, True),
        (None, {"anything": "goes"}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}, {}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {}, False),
    ],
)
def test_structured_label_selector(
    selector: dict[str, Any] | None, labels: dict[str, str], match: bool
) -> None:
    assert from_label_selector(selector).matches(labels) is match


def test_gt_and_lt_compare_as_64_bit_integers() -> None:
    assert parse("n>3").matches({"n": "4"})
    assert parse("n>3").matches({"n": "0004"})
    assert not parse("n>3").matches({"n": "3"})
    assert not parse("n>3").matches({"n": "4.0"})
    assert not parse("n>3").matches({"n": "9223372036854775808"})  # out of int64
    assert not parse("n>3").matches({})
    assert parse("n<1").matches({"n": "-5"})
    with pytest.raises(SelectorError, match="a valid label must be"):
        parse("n<-1")  # a threshold is a label value too: negative ones cannot be written
