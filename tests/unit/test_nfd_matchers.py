"""node-feature-discovery's matcher tests (expression-api_test.go: TestMatchKeys,
TestMatchValues, TestMatchInstances, TestMatchKeyNames, TestMatchValueNames,
TestMatchInstanceAttributeNames, TestMatchMulti, TestMatchNamesMulti), ported as data
(tests/data/nfd/expression_api_test.json, written by tools/nfd_tables.py), run through
the functions of reconcile.nfd.expression that port them and, where a case is one term
over one feature, through `reconcile nfd eval`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile.nfd import expression, model
from reconcile.nfd.expression import ExpressionError, MatchedElement
from tests.support import REPO
from tests.unit.test_nfd_tables import _eval

TABLE = REPO / "tests" / "data" / "nfd" / "expression_api_test.json"
FEATURE = "test.feat"

Keys = set[str] | None
Values = dict[str, str] | None
Instances = list[dict[str, str]] | None
Outcome = tuple[bool, list[MatchedElement]]


def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


def _cases() -> list[Any]:
    return [pytest.param(case, id=case["name"]) for case in _table()["cases"]]


def _expression(raw: dict[str, Any]) -> model.Expression:
    return model.Expression(
        op=raw["op"], value=tuple(raw.get("value", ())), type=raw.get("type", "")
    )


def _expressions(raw: dict[str, Any]) -> expression.Expressions:
    return tuple((name, _expression(e)) for name, e in raw.items())


def _inputs(case: dict[str, Any]) -> tuple[Keys, Values, Instances]:
    keys = None if case["keys"] is None else set(case["keys"])
    values = case["values"]
    instances = None if case["instances"] is None else [i["attributes"] for i in case["instances"]]
    return keys, values, instances


def _run(case: dict[str, Any]) -> Outcome:
    """The Python counterpart of the Go function the case's test calls."""
    keys, values, instances = _inputs(case)
    calls: dict[str, Callable[[], Outcome]] = {
        "TestMatchKeys": lambda: expression.match_keys(_expressions(case["mes"]), keys),
        "TestMatchValues": lambda: expression.match_values(_expressions(case["mes"]), values),
        "TestMatchInstances": lambda: expression.match_instances(
            _expressions(case["mes"]), instances
        ),
        "TestMatchKeyNames": lambda: expression.match_key_names(_expression(case["me"]), keys),
        "TestMatchValueNames": lambda: expression.match_value_names(
            _expression(case["me"]), values
        ),
        "TestMatchInstanceAttributeNames": lambda: expression.match_instance_attribute_names(
            _expression(case["me"]), instances
        ),
        "TestMatchMulti": lambda: expression.match_multi(
            _expressions(case["mes"]), keys, values, instances
        ),
        "TestMatchNamesMulti": lambda: expression.match_names_multi(
            _expression(case["me"]), keys, values, instances
        ),
    }
    return calls[case["test"]]()


@pytest.mark.parametrize("case", _cases())
def test_matcher_case(case: dict[str, Any]) -> None:
    if "reason" in case:
        pytest.skip(case["reason"])
    try:
        result, output = _run(case)
    except ExpressionError:
        # Go returns (false, nil, err): nothing matched, no elements.
        assert case["error"], case["name"]
        assert case["result"] is False and case["output"] is None
        return
    assert not case["error"], f"{case['name']}: no error, Go expects one"
    assert result is case["result"]
    # Go tells a nil slice (a failed match in MatchGetKeys and MatchGetValues) from an
    # empty one; a Python list cannot, so null is compared as [].
    assert output == (case["output"] or [])


def _features(case: dict[str, Any]) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for kind, field in (("flags", "keys"), ("attributes", "values"), ("instances", "instances")):
        if case[field] is not None:  # a nil set: the feature has no elements of that type
            features[kind] = {FEATURE: {"elements": case[field]}}
    return features


@pytest.mark.parametrize(
    "case", [c for c in _cases() if not c.values[0]["error"] and "reason" not in c.values[0]]
)
def test_matcher_case_through_nfd_eval(case: dict[str, Any], tmp_path: Path) -> None:
    """nfd-master's evaluateFeatureMatcher gives a term's feature to MatchMulti
    (matchExpressions) or MatchNamesMulti (matchName): the rule matches as the Go function
    does on the same sets."""
    if "cli" in case:
        pytest.skip(case["cli"])
    term: dict[str, Any] = {"feature": FEATURE}
    if "mes" in case:
        term["matchExpressions"] = case["mes"]
    else:
        term["matchName"] = case["me"]
    rules = [{"name": "case", "labels": {"matched": "true"}, "matchFeatures": [term]}]
    result = _eval(tmp_path, _features(case), rules=rules)
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["rules"] == [{"rule": "table/case", "matched": case["result"]}]


def test_the_table_names_its_source_and_counts() -> None:
    table = _table()
    assert table["source"]["path"] == "pkg/apis/nfd/nodefeaturerule/expression-api_test.go"
    counts: dict[str, int] = {}
    for case in table["cases"]:
        counts[case["test"]] = counts.get(case["test"], 0) + 1
    assert counts == {
        "TestMatchKeys": 7,
        "TestMatchValues": 6,
        "TestMatchInstances": 6,
        "TestMatchKeyNames": 8,
        "TestMatchValueNames": 7,
        "TestMatchInstanceAttributeNames": 4,
        "TestMatchMulti": 22,
        "TestMatchNamesMulti": 14,
    }
    assert not [c["name"] for c in table["cases"] if "reason" in c]


def test_an_instance_name_that_does_not_compare_is_an_error_after_one_that_matched() -> None:
    # MatchInstanceAttributeNames calls MatchValueNames, which evaluates every name of
    # the instance: "abc" is not a number for Gt even though "10" is greater than 5.
    gt = model.Expression(op="Gt", value=("5",))
    with pytest.raises(ExpressionError, match="not a number 'abc'"):
        expression.match_instance_attribute_names(gt, [{"10": "", "abc": ""}])
    with pytest.raises(ExpressionError, match="not a number 'abc'"):
        expression.match_names_multi(gt, None, None, [{"10": "", "abc": ""}])


def test_such_a_match_name_is_an_error_of_nfd_eval(tmp_path: Path) -> None:
    features = {"instances": {FEATURE: {"elements": [{"attributes": {"10": "", "abc": ""}}]}}}
    term = {"feature": FEATURE, "matchName": {"op": "Gt", "value": ["5"]}}
    rules = [{"name": "case", "labels": {"matched": "true"}, "matchFeatures": [term]}]
    result = _eval(tmp_path, features, rules=rules)
    assert result.code == 2, result.stdout
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'rules.json'}:1:168: NodeFeatureRule/table rule 'case': "
        "not a number 'abc'"
    ]
