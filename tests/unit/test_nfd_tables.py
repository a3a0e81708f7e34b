"""node-feature-discovery's rule, group rule, template, validate and nfd-master tests, ported
as data (tests/data/nfd/*_test.json, written by tools/nfd_tables.py, each naming the
commit, file and Go test it comes from), run through `reconcile nfd eval` and through the
functions it calls (rule.execute, rule.execute_group_rule, validate, master.Master) where
the Go test asserts what the command does not print: a rule's vars, an unprefixed key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.nfd import master, model, rule, template, validate
from tests.support import REPO, run_cli
from tools import nfd_tables

DATA = REPO / "tests" / "data" / "nfd"
NS: str = validate.FEATURE_NS
SENTINELS: dict[str, type[validate.ValidationError]] = {
    "ErrNSNotAllowed": validate.NSNotAllowed,
    "ErrUnprefixedKeysNotAllowed": validate.UnprefixedKeysNotAllowed,
    "ErrEmptyTaintEffect": validate.EmptyTaintEffect,
    "ErrInvalidTaintEffect": validate.InvalidTaintEffect,
}


def _table(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return data


def _cases(name: str) -> list[Any]:
    return [pytest.param(case, id=case["name"]) for case in _table(name)["cases"]]


def _eval(
    tmp_path: Path,
    features: dict[str, Any],
    *,
    rules: list[dict[str, Any]] | None = None,
    group_rules: list[dict[str, Any]] | None = None,
    args: tuple[str, ...] = (),
    output: tuple[str, ...] = ("-o", "json"),
) -> Any:
    node = tmp_path / "node.json"  # JSON is YAML: the reader takes it as it is
    node.write_text(
        json.dumps(
            {
                "apiVersion": model.API_VERSION,
                "kind": "NodeFeature",
                "metadata": {"name": "node-1"},
                "spec": {"features": features},
            }
        )
    )
    objects = []
    if rules is not None:
        objects.append(
            {
                "apiVersion": model.API_VERSION,
                "kind": "NodeFeatureRule",
                "metadata": {"name": "table"},
                "spec": {"rules": rules},
            }
        )
    if group_rules is not None:
        objects.append(
            {
                "apiVersion": model.API_VERSION,
                "kind": "NodeFeatureGroup",
                "metadata": {"name": "table"},
                "spec": {"featureGroupRules": group_rules},
            }
        )
    rule_file = tmp_path / "rules.json"
    rule_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return run_cli("nfd", "eval", "--features", str(node), *args, str(rule_file), *output)


def _one_error(result: Any, what: str) -> str:
    assert result.code == 2, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "rules.json:" in lines[0] and what in lines[0], lines[0]
    return str(lines[0])


def _features(raw: dict[str, Any]) -> model.Features:
    return model.parse_features(raw, "table")


def test_the_tables_are_what_the_converter_writes() -> None:
    for name, build in nfd_tables.TABLES.items():
        assert (DATA / name).read_text(encoding="utf-8") == nfd_tables.render(build), name


def test_each_table_names_its_source() -> None:
    for name in [*nfd_tables.TABLES, "expression_test.json"]:
        source = _table(name)["source"]
        assert source["repository"] == "kubernetes-sigs/node-feature-discovery"
        assert source["commit"] == "76e6cc8cc0d54b8bce037098b72611ffdf66ef5a"
        assert source["path"].endswith("_test.go")


# ---- rule_test.go -----------------------------------------------------------------------


@pytest.mark.parametrize("case", _cases("rule_test.json"))
def test_rule_table(case: dict[str, Any], tmp_path: Path) -> None:
    raw = case["rule"]
    result = _eval(tmp_path, case["features"], rules=[raw])
    expect = case["expect"]
    if expect == "error":
        _one_error(result, f"NodeFeatureRule/table rule {raw['name']!r}")
        return
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    assert "groups" not in found  # only when NodeFeatureGroups are given
    assert found["rules"] == [{"rule": f"table/{raw['name']}", "matched": expect["matched"]}]
    out = rule.execute(model.parse_rule(raw, "table", 0), _features(case["features"]))
    assert out.matched is expect["matched"]
    if "labels" in expect:
        labels = expect["labels"] or {}
        # nfd-master writes them under its namespace, less those validate.Label refuses
        # (`vf-`: a label value ends with a letter or digit).
        written = {f"{NS}/{k}": v for k, v in sorted(labels.items())}
        assert found["labels"] == {
            k: v for k, v in written.items() if _caught(validate.label, k, v) is None
        }
        assert out.labels == labels
    if "vars" in expect:
        assert out.vars == (expect["vars"] or {})


# ---- grouprule_test.go ------------------------------------------------------------------


@pytest.mark.parametrize("case", _cases("grouprule_test.json"))
def test_group_rule_table(case: dict[str, Any], tmp_path: Path) -> None:
    raw = case["groupRule"]
    result = _eval(tmp_path, case["features"], group_rules=[raw])
    expect = case["expect"]
    if expect == "error":
        _one_error(result, f"NodeFeatureGroup/table rule {raw['name']!r}")
        return
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["rules"] == [] and found["labels"] == {}
    assert found["groups"] == [
        {"group": "table", "rule": raw["name"], "matched": expect["matched"]}
    ]
    out = rule.execute_group_rule(
        model.parse_group_rule(raw, "table", 0), _features(case["features"])
    )
    assert out.matched is expect["matched"]
    assert out.vars == (expect["vars"] or {})


# ---- template_test.go -------------------------------------------------------------------


def _template_text(spec: Any) -> str:
    return spec if isinstance(spec, str) else str(spec["repeat"]) * int(spec["times"])


@pytest.mark.parametrize("case", _cases("template_test.json"))
def test_template_table(case: dict[str, Any], tmp_path: Path) -> None:
    text = _template_text(case["template"])
    problem = template.parse_error(text)
    features: dict[str, Any] = {"attributes": {"test.feature": {"elements": {}}}}
    raw = {
        "name": "t",
        "labelsTemplate": text,
        "matchFeatures": [{"feature": "test.feature", "matchExpressions": {}}],
    }
    result = _eval(tmp_path, features, rules=[raw])
    if case["expect"] == "refused":
        assert problem is not None and case["error"] in problem
        line = _one_error(result, "NodeFeatureRule/table rule 't'")
        assert f"labelsTemplate: failed to parse template: {problem}" in line
    else:
        assert problem is None
        # Accepted: it runs (what it expands to need not be `key=value` lines).
        assert result.code == 0 or "failed to parse template" not in result.stderr


# ---- validate_test.go -------------------------------------------------------------------


def _check_want(problem: Exception | None, want: Any) -> None:
    if want is None:
        assert problem is None, problem
    elif "is" in want:
        assert type(problem) is SENTINELS[want["is"]], problem
    elif "contains" in want:
        assert problem is not None and want["contains"] in str(problem)
    else:
        assert problem is not None and str(problem) == want["message"]


def _caught(check: Any, *args: Any) -> Exception | None:
    try:
        check(*args)
    except validate.ValidationError as e:
        return e
    return None


_ONE = {
    "Label": (validate.label, "labels", "label"),
    "Annotation": (validate.annotation, "annotations", "annotation"),
    "ExtendedResource": (validate.extended_resource, "extendedResources", "extendedResource"),
}
_SEVERAL = {"Labels": "Label", "Annotations": "Annotation", "ExtendedResources": "ExtendedResource"}
_IGNORED = {
    "labels": "label",
    "annotations": "annotation",
    "extendedResources": "extended resource",
}


def _written_or_ignored(
    tmp_path: Path, field: str, items: dict[str, str], problems: dict[str, Exception | None]
) -> None:
    """Through `nfd eval`: each key with a namespace written when validate.go takes it,
    ignored (with validate.go's message, or nfd-master's own for a namespace) when not."""
    prefixed = {k: v for k, v in items.items() if "/" in k}
    if not prefixed:
        return
    result = _eval(tmp_path, {}, rules=[{"name": "case", field: prefixed}], output=())
    assert result.code == 0, result.stderr
    shown = _ONE[next(f for f, v in _ONE.items() if v[1] == field)][2]
    for key, value in prefixed.items():
        problem = problems[key]
        ignored = [
            line for line in result.lines if line.startswith(f"ignored {_IGNORED[field]} {key}: ")
        ]
        if problem is None:
            assert f"{shown} {key}={value}" in result.lines and not ignored
        else:
            assert len(ignored) == 1, result.stdout
            if not isinstance(problem, validate.NSNotAllowed):
                assert ignored[0].endswith(f": {problem}")


def _go_q(text: str) -> str:
    return json.dumps(text)


@pytest.mark.parametrize("case", _cases("validate_test.json"))
def test_validate_table(case: dict[str, Any], tmp_path: Path) -> None:
    function, want = case["function"], case["want"]
    if function in _ONE:
        check, field, _ = _ONE[function]
        problem = _caught(check, case["key"], case["value"])
        _check_want(problem, want)
        _written_or_ignored(tmp_path, field, {case["key"]: case["value"]}, {case["key"]: problem})
    elif function in _SEVERAL:
        check, field, _ = _ONE[_SEVERAL[function]]
        problems = {k: _caught(check, k, v) for k, v in case["items"].items()}
        # validate.Labels and the others wrap each error with its key and value; the Go
        # test sorts them by that message.
        what = _SEVERAL[function].lower().replace("extendedresource", "extended resource")
        found = sorted(
            (f"invalid {what} {_go_q(k)}:{_go_q(case['items'][k])} {p}", p)
            for k, p in problems.items()
            if p is not None
        )
        assert len(found) == len(want)
        for (_, problem), expected in zip(found, want, strict=True):
            _check_want(problem, expected)
        _written_or_ignored(tmp_path, field, case["items"], problems)
    elif function in ("Taint", "Taints"):
        raws = [case["taint"]] if function == "Taint" else case["items"]
        taints = [model.Taint(t["key"], t.get("value", ""), t.get("effect", "")) for t in raws]
        taint_problems = [_caught(validate.taint, t) for t in taints]
        if function == "Taint":
            _check_want(taint_problems[0], want)
        else:
            failed = [p for p in taint_problems if p is not None]
            assert len(failed) == len(want)
            for problem, expected in zip(failed, want, strict=True):
                _check_want(problem, expected)
        prefixed = [
            (t, r, p) for t, r, p in zip(taints, raws, taint_problems, strict=True) if "/" in t.key
        ]
        if prefixed:
            result = _eval(
                tmp_path,
                {},
                rules=[{"name": "case", "taints": [r for _, r, _ in prefixed]}],
                args=("--enable-taints",),
                output=(),
            )
            assert result.code == 0, result.stderr
            ignored = [line for line in result.lines if line.startswith("ignored taint ")]
            assert ignored == [f"ignored taint {t.key}: {p}" for t, _, p in prefixed if p]
            written = [line for line in result.lines if line.startswith("taint ")]
            assert written == [
                f"taint {t.key}={t.value}:{t.effect}" for t, _, p in prefixed if not p
            ]
    elif function in ("MatchFeatures", "MatchAny"):
        if function == "MatchFeatures":
            raw: dict[str, Any] = {"name": "case", "matchFeatures": case["items"]}
        else:
            raw = {"name": "case", "matchAny": case["items"]}
        parsed = model.parse_rule(raw, "table", 0)
        messages = validate.match_features(parsed.match_features) + validate.match_any(
            parsed.match_any
        )
        assert messages == [w["message"] for w in want]
        result = _eval(tmp_path, {}, rules=[raw], output=())
        assert result.code == 0, result.stderr
        warnings = [line for line in result.lines if line.startswith("warning ")]
        assert warnings == [f"warning rule table/case: {w['message']}" for w in want]
    else:
        assert function == "Template"
        assert validate.template_errors(case["items"]) == [w["message"] for w in want]
        raw = {"name": "case", "labelsTemplate": case["items"]}
        result = _eval(tmp_path, {}, rules=[raw])
        if want:
            line = _one_error(result, "NodeFeatureRule/table rule 'case'")
            assert want[0]["message"] in line
        else:
            assert result.code == 0, result.stderr


# ---- nfd-master-internal_test.go --------------------------------------------------------


def _config(raw: dict[str, Any]) -> tuple[master.MasterConfig, tuple[str, ...]]:
    config = master.MasterConfig(
        extra_label_ns=frozenset(raw["extraLabelNs"]),
        deny_label_ns=frozenset(raw["denyLabelNs"]),
        disable_auto_prefix=raw["disableAutoPrefix"],
    )
    args = [a for ns in raw["extraLabelNs"] for a in ("--extra-label-ns", ns)]
    args += [a for ns in raw["denyLabelNs"] for a in ("--deny-label-ns", ns)]
    if raw["disableAutoPrefix"]:
        args += ["--feature-gates", "DisableAutoPrefix=true"]
    return config, tuple(args)


def _value_or_error(check: Any, *args: Any) -> str | None:
    try:
        return str(check(*args))
    except ValueError:
        return None


@pytest.mark.parametrize("case", _cases("nfd_master_test.json"))
def test_nfd_master_table(case: dict[str, Any], tmp_path: Path) -> None:
    function, want = case["function"], case["want"]
    features = _features(case["features"])
    if function == "getDynamicValue":
        got = _value_or_error(master.dynamic_value, case["value"], features)
        assert got == (None if want == "error" else want["value"])
        result = _eval(
            tmp_path,
            case["features"],
            rules=[{"name": "case", "labels": {"x.io/d": case["value"]}}],
        )
        assert result.code == 0, result.stderr
        assert json.loads(result.stdout)["labels"].get("x.io/d") == got
        return
    config, args = _config(case["config"])
    m = master.Master(config)
    cli = config.disable_auto_prefix
    if function == "filterFeatureLabel":
        got = _value_or_error(m.label, case["key"], case["value"], features)
        assert got == (None if want == "error" else want["value"])
        if "/" in case["key"] or cli:
            raw = {"name": "case", "labels": {case["key"]: case["value"]}}
            result = _eval(tmp_path, case["features"], rules=[raw], args=args)
            assert result.code == 0, result.stderr
            assert json.loads(result.stdout)["labels"].get(case["key"]) == got
        return
    field, check = {
        "filterExtendedResources": (
            "extendedResources",
            lambda k, v: m.extended_resource(k, v, features),
        ),
        "filterFeatureAnnotations": ("annotations", m.annotation),
    }[function]
    written = {k: v for k, v in case["items"].items() if _value_or_error(check, k, v) is not None}
    assert written == want
    if cli:
        result = _eval(
            tmp_path, case["features"], rules=[{"name": "case", field: case["items"]}], args=args
        )
        assert result.code == 0, result.stderr
        assert json.loads(result.stdout)[field] == want


def test_the_counts() -> None:
    counts = {name: len(_table(name)["cases"]) for name in nfd_tables.TABLES}
    assert counts == {
        "rule_test.json": 34,
        "grouprule_test.json": 31,
        "template_test.json": 9,
        "validate_test.json": 42,
        "nfd_master_test.json": 16,
        "expression_api_test.json": 74,
    }
