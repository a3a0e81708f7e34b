"""Write node-feature-discovery's rule, group rule, template, validate, nfd-master and
expression API test tables as data:
tests/data/nfd/{rule,grouprule,template,validate,nfd_master,expression_api}_test.json.

Each Go test below is transcribed step by step, in its order: the features and rule of
every Execute (or ExecuteGroupRule, NewHelper, validate.X, filterX) call as it is made,
and what the Go test asserts of it, nothing more. Go tests that mutate their features or
rules between calls are followed as they mutate them. Every case records its Go test
(and step); every table the repository, commit and file it comes from. The expression
API tests are tables in Go already: one case per t.Run.

    python -m tools.nfd_tables        # rewrite the tables
    python -m tools.nfd_tables --check  # exit 1 when a table is not what this writes
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from reconcile.nfd import NFD_COMMIT, NFD_REPOSITORY

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "nfd"
RULE_GO = "pkg/apis/nfd/nodefeaturerule/rule_test.go"
GROUP_GO = "pkg/apis/nfd/nodefeaturerule/grouprule_test.go"
TEMPLATE_GO = "pkg/apis/nfd/template/template_test.go"
VALIDATE_GO = "pkg/apis/nfd/validate/validate_test.go"
MASTER_GO = "pkg/nfd-master/nfd-master-internal_test.go"
API_GO = "pkg/apis/nfd/nodefeaturerule/expression-api_test.go"

Features = dict[str, Any]


def me(op: str, *values: str) -> dict[str, Any]:
    """newMatchExpression."""
    return {"op": op, "value": list(values)} if values else {"op": op}


def term(feature: str, **expressions: dict[str, Any]) -> dict[str, Any]:
    return {"feature": feature, "matchExpressions": dict(expressions)}


def terms(feature: str, expressions: dict[str, Any]) -> dict[str, Any]:
    """A term whose keys are not Python names (`key-1`)."""
    return {"feature": feature, "matchExpressions": expressions}


def features() -> Features:
    return {"flags": {}, "attributes": {}, "instances": {}}


def flags(*names: str) -> dict[str, Any]:
    return {"elements": {n: {} for n in names}}


def attrs(values: dict[str, str]) -> dict[str, Any]:
    return {"elements": dict(values)}


def instances(*items: dict[str, str]) -> dict[str, Any]:
    return {"elements": [{"attributes": dict(i)} for i in items]}


class Table:
    def __init__(self, path: str, note: str) -> None:
        self.path = path
        self.note = note
        self.cases: list[dict[str, Any]] = []
        self.steps: dict[str, int] = {}

    def add(self, test: str, what: str, **case: Any) -> None:
        n = self.steps[test] = self.steps.get(test, 0) + 1
        self.cases.append({"name": f"{test}/{n:02d}", "test": test, "step": what, **case})

    def document(self) -> dict[str, Any]:
        return {
            "source": {"repository": NFD_REPOSITORY, "commit": NFD_COMMIT, "path": self.path},
            "note": self.note,
            "cases": self.cases,
        }


# ---- rule_test.go ---------------------------------------------------------------------


def _rule_table() -> Table:
    table = Table(
        RULE_GO,
        "One case per Execute(rule, features, true) of the Go tests, in their order. "
        "`expect` holds what the Go test asserts: `matched` (a nil Labels map is no match), "
        "the rule's own `labels` and `vars` as Execute returns them (unprefixed), or "
        '"error". A case runs as one NodeFeatureRule through `reconcile nfd eval`.',
    )

    def run(test: str, what: str, rule: dict[str, Any], f: Features, **expect: Any) -> None:
        table.add(test, what, features=copy.deepcopy(f), rule=copy.deepcopy(rule), expect=expect)

    def error(test: str, what: str, rule: dict[str, Any], f: Features) -> None:
        table.add(test, what, features=copy.deepcopy(f), rule=copy.deepcopy(rule), expect="error")

    t = "TestRule"
    f: Features = {}
    r1: dict[str, Any] = {"name": "r1", "labels": {"label-1": "", "label-2": "true"}}
    r2: dict[str, Any] = {
        "name": "r2",
        "labels": {"label-1": "label-val-1"},
        "vars": {"var-1": "var-val-1"},
        "matchFeatures": [terms("domain-1.kf-1", {"key-1": me("Exists")})],
    }
    run(t, "totally empty features: r1", r1, f, matched=True, labels=r1["labels"])
    run(t, "totally empty features: r2", r2, f, matched=False, labels={}, vars={})
    f = features()
    run(t, "NewFeatures: r1", r1, f, matched=True, labels=r1["labels"], vars={})
    run(t, "NewFeatures: r2", r2, f, matched=False, labels={}, vars={})
    f["flags"]["domain-1.kf-1"] = flags()
    f["attributes"]["domain-1.vf-1"] = attrs({})
    f["instances"]["domain-1.if-1"] = instances()
    run(t, "empty feature sets: r1", r1, f, matched=True, labels=r1["labels"])
    run(t, "empty feature sets: r2", r2, f, matched=False, labels=None)
    f["flags"]["domain-1.kf-1"]["elements"]["key-x"] = {}
    f["attributes"]["domain-1.vf-1"]["elements"]["key-1"] = "val-x"
    f["instances"]["domain-1.if-1"] = instances({"attr-1": "val-x"})
    run(t, "non-empty feature sets: r1", r1, f, matched=True, labels=r1["labels"])
    r1["matchFeatures"] = [terms("domain-1.kf-1", {})]
    run(t, "empty MatchExpressions", r1, f, matched=True, labels=r1["labels"])
    run(t, "key features: no match", r2, f, matched=False, labels=None)
    f["flags"]["domain-1.kf-1"]["elements"]["key-1"] = {}
    run(t, "key features: match", r2, f, matched=True, labels=r2["labels"], vars=r2["vars"])
    r3: dict[str, Any] = {
        "name": "r3",
        "labels": {"label-3": "label-val-3", "empty": ""},
        "matchFeatures": [terms("domain-1.vf-1", {"key-1": me("In", "val-1")})],
    }
    run(t, "value features: no match", r3, f, matched=False, labels=None)
    f["attributes"]["domain-1.vf-1"]["elements"]["key-1"] = "val-1"
    run(t, "value features: match", r3, f, matched=True, labels=r3["labels"])
    r3 = {
        "name": "r3",
        "labels": {"label-4": "label-val-4"},
        "matchFeatures": [terms("domain-1.if-1", {"attr-1": me("In", "val-1")})],
    }
    run(t, "instance features: no match", r3, f, matched=False, labels=None)
    f["instances"]["domain-1.if-1"]["elements"][0]["attributes"]["attr-1"] = "val-1"
    run(t, "instance features: match", r3, f, matched=True, labels=r3["labels"])
    f2 = features()
    f2["flags"]["dom.feat"] = flags("k-1", "k-2")
    f2["attributes"]["dom.feat"] = attrs({"a-1": "v-1", "a-2": "v-2"})
    f2["instances"]["dom.feat"] = instances({"ia-1": "iv-1"}, {"ia-2": "iv-2"})
    r3 = {
        "name": "r3",
        "labels": {"feat": "val-1"},
        "matchFeatures": [terms("dom.feat", {"k-1": me("Exists")})],
    }
    run(t, "multi-type feature: key", r3, f2, matched=True, labels=r3["labels"])
    for what, expressions in (
        ("multi-type feature: attribute", {"a-1": me("In", "v-1")}),
        ("multi-type feature: instance attribute", {"ia-1": me("In", "iv-1")}),
        ("multi-type feature: flag and attribute", {"k-2": me("Exists"), "a-2": me("In", "v-2")}),
        ("multi-type feature: instance", {"ia-2": me("In", "iv-2")}),
    ):
        r3["matchFeatures"] = [terms("dom.feat", expressions)]
        run(t, what, r3, f2, matched=True, labels=r3["labels"])
    r3 = {
        "name": "r3",
        "labels": {"label-5": "label-val-5"},
        "matchFeatures": [
            terms("domain-1.vf-1", {"key-1": me("In", "val-x")}),
            terms("domain-1.if-1", {"attr-1": me("In", "val-1")}),
        ],
    }
    run(t, "multiple feature matchers: no match", r3, f, matched=False, labels=None)
    r3["matchFeatures"][0]["matchExpressions"]["key-1"] = me("In", "val-1")
    run(t, "multiple feature matchers: match", r3, f, matched=True, labels=r3["labels"])
    r3["matchAny"] = [{"matchFeatures": [terms("domain-1.kf-1", {"key-na": me("Exists")})]}]
    run(t, "matchAny: no element matches", r3, f, matched=False, labels=None)
    r3["matchAny"].append({"matchFeatures": [terms("domain-1.kf-1", {"key-1": me("Exists")})]})
    r3["matchFeatures"][0]["matchExpressions"]["key-1"] = me("In", "val-1")
    run(t, "matchAny: the second element matches", r3, f, matched=True, labels=r3["labels"])

    t = "TestTemplating"
    ft = _templating_features()
    r1 = {
        "name": "r1",
        "labels": {"label-1": "label-val-1"},
        "labelsTemplate": "\nlabel-1=will-be-overridden\nlabel-2=\n"
        "{{range .domain_1.kf_1}}kf-{{.Name}}=present\n{{end}}\n"
        "{{range .domain_1.vf_1}}vf-{{.Name}}=vf-{{.Value}}\n{{end}}\n"
        '{{range .domain_1.if_1}}if-{{index . "attr-1"}}_{{index . "attr-2"}}=present\n{{end}}',
        "vars": {"var-1": "var-val-1"},
        "varsTemplate": "\nvar-1=value-will-be-overridden-by-vars\nvar-2=\n"
        "{{range .domain_1.kf_1}}kf-{{.Name}}=true\n{{end}}",
        "matchFeatures": _templating_terms(),
    }
    r3 = copy.deepcopy(r1)
    r3["name"] = "r3"
    r3["matchAny"] = [{"matchFeatures": r3.pop("matchFeatures")}]
    labels = {
        "label-1": "label-val-1",
        "label-2": "",
        "kf-key-a": "present",
        "kf-key-c": "present",
        "kf-foo": "present",
        "vf-key-1": "vf-val-1",
        "vf-bar": "vf-",
        "if-1_val-2": "present",
        "if-10_val-20": "present",
        "if-1000_val-2000": "present",
    }
    vars_ = {
        "var-1": "var-val-1",
        "var-2": "",
        "kf-key-a": "true",
        "kf-key-c": "true",
        "kf-foo": "true",
    }
    run(t, "templates on matchFeatures", r1, ft, matched=True, labels=labels, vars=vars_)
    run(t, "templates on matchAny", r3, ft, matched=True, labels=labels, vars=vars_)
    r3 = {
        "name": "r3",
        "labelsTemplate": "\n{{range .domain.mf}}mf-{{.Name}}=found\n{{end}}",
        "matchFeatures": [terms("domain.mf", {"key-a": me("Exists"), "key-d": me("In", "val-d")})],
    }
    run(
        t,
        "multi-type feature",
        r3,
        ft,
        matched=True,
        labels={"mf-key-a": "found", "mf-key-d": "found"},
        vars={},
    )
    r2 = {
        "name": "r2",
        "matchFeatures": [terms("domain_1.kf_1", {"key-a": me("Exists")})],
    }
    r2["labelsTemplate"] = "foo=bar"
    run(t, "labelsTemplate foo=bar", r2, ft, matched=True, labels={"foo": "bar"}, vars={})
    r2["labelsTemplate"] = "foo"
    error(t, "labelsTemplate without =", r2, ft)
    r2["labelsTemplate"] = "{{"
    error(t, "labelsTemplate that does not parse", r2, ft)
    r2["labelsTemplate"] = ""
    r2["varsTemplate"] = "bar=baz"
    run(t, "varsTemplate bar=baz", r2, ft, matched=True, labels={}, vars={"bar": "baz"})
    r2["varsTemplate"] = "bar"
    error(t, "varsTemplate without =", r2, ft)
    r2["varsTemplate"] = "{{"
    error(t, "varsTemplate that does not parse", r2, ft)
    r4: dict[str, Any] = {
        "name": "r4",
        "labelsTemplate": "{{range .domain_1.vf_1}}{{.Name}}={{.Value}}\n{{end}}",
        "matchFeatures": [
            {
                "feature": "domain_1.vf_1",
                "matchExpressions": {"key-5": me("DoesNotExist")},
                "matchName": me("In", "key-1", "key-4"),
            }
        ],
    }
    run(
        t,
        "matchName",
        r4,
        ft,
        matched=True,
        labels={"key-1": "val-1", "key-4": "val-4", "key-5": ""},
    )
    r4 = {
        "name": "r4",
        "labels": {"should-not-match": "true"},
        "matchFeatures": [{"feature": "domain_1.vf_1", "matchName": me("In", "key-not-exists")}],
    }
    run(t, "matchName that matches nothing", r4, ft, matched=False, labels=None)
    return table


def _templating_features() -> Features:
    f = features()
    f["flags"]["domain_1.kf_1"] = flags("key-a", "key-b", "key-c")
    f["flags"]["domain.mf"] = flags("key-a", "key-b", "key-c")
    f["attributes"]["domain_1.vf_1"] = attrs(
        {"key-1": "val-1", "keu-2": "val-2", "key-3": "val-3", "key-4": "val-4"}
    )
    f["attributes"]["domain.mf"] = attrs({"key-d": "val-d", "key-e": "val-e"})
    f["instances"]["domain_1.if_1"] = instances(
        {"attr-1": "1", "attr-2": "val-2"},
        {"attr-1": "10", "attr-2": "val-20"},
        {"attr-1": "100", "attr-2": "val-200"},
        {"attr-1": "1000", "attr-2": "val-2000", "attr-3": "3000"},
    )
    return f


def _templating_terms() -> list[dict[str, Any]]:
    return [
        terms(
            "domain_1.kf_1",
            {"key-a": me("Exists"), "key-c": me("Exists"), "foo": me("DoesNotExist")},
        ),
        terms("domain_1.vf_1", {"key-1": me("In", "val-1", "val-2"), "bar": me("DoesNotExist")}),
        terms("domain_1.if_1", {"attr-1": me("Lt", "100")}),
        terms(
            "domain_1.if_1",
            {"attr-1": me("Exists"), "attr-2": me("Exists"), "attr-3": me("Exists")},
        ),
    ]


# ---- grouprule_test.go ----------------------------------------------------------------


def _group_table() -> Table:
    table = Table(
        GROUP_GO,
        "One case per ExecuteGroupRule(rule, features, true) of the Go tests, in their "
        "order. `expect` holds what the Go test asserts: `matched` (a nil Vars map is no "
        'match) and the rule\'s `vars`, or "error". A case runs as a NodeFeatureGroup of '
        "that one rule through `reconcile nfd eval`.",
    )

    def run(test: str, what: str, rule: dict[str, Any], f: Features, **expect: Any) -> None:
        table.add(
            test, what, features=copy.deepcopy(f), groupRule=copy.deepcopy(rule), expect=expect
        )

    def error(test: str, what: str, rule: dict[str, Any], f: Features) -> None:
        table.add(
            test, what, features=copy.deepcopy(f), groupRule=copy.deepcopy(rule), expect="error"
        )

    t = "TestGroupRule"
    f: Features = {}
    r1: dict[str, Any] = {"name": "r1", "vars": {"var-1": "var-val-1"}}
    r2: dict[str, Any] = {
        "name": "r2",
        "vars": {"var-2": "var-val-2"},
        "matchFeatures": [terms("domain-1.kf-1", {"key-1": me("Exists")})],
    }
    run(t, "totally empty features: r1", r1, f, matched=True, vars=r1["vars"])
    run(t, "totally empty features: r2", r2, f, matched=False, vars={})
    f = features()
    run(t, "NewFeatures: r1", r1, f, matched=True, vars=r1["vars"])
    run(t, "NewFeatures: r2", r2, f, matched=False, vars={})
    f["flags"]["domain-1.kf-1"] = flags()
    f["attributes"]["domain-1.vf-1"] = attrs({})
    f["instances"]["domain-1.if-1"] = instances()
    run(t, "empty feature sets: r1", r1, f, matched=True, vars=r1["vars"])
    run(t, "empty feature sets: r2", r2, f, matched=False, vars=None)
    f["flags"]["domain-1.kf-1"]["elements"]["key-x"] = {}
    f["attributes"]["domain-1.vf-1"]["elements"]["key-1"] = "val-x"
    f["instances"]["domain-1.if-1"] = instances({"attr-1": "val-x"})
    run(t, "non-empty feature sets: r1", r1, f, matched=True, vars=r1["vars"])
    r1["matchFeatures"] = [terms("domain-1.kf-1", {})]
    run(t, "empty MatchExpressions", r1, f, matched=True, vars=r1["vars"])
    run(t, "key features: no match", r2, f, matched=False, vars=None)
    f["flags"]["domain-1.kf-1"]["elements"]["key-1"] = {}
    run(t, "key features: match", r2, f, matched=True, vars=r2["vars"])
    r3: dict[str, Any] = {
        "name": "r3",
        "vars": {"var-3": "var-val-3", "empty": ""},
        "matchFeatures": [terms("domain-1.vf-1", {"key-1": me("In", "val-1")})],
    }
    run(t, "value features: no match", r3, f, matched=False, vars=None)
    f["attributes"]["domain-1.vf-1"]["elements"]["key-1"] = "val-1"
    run(t, "value features: match", r3, f, matched=True, vars=r3["vars"])
    r4: dict[str, Any] = {
        "name": "r4",
        "vars": {"var-4": "var-val-4"},
        "matchFeatures": [terms("domain-1.if-1", {"attr-1": me("In", "val-1")})],
    }
    run(t, "instance features: no match", r4, f, matched=False, vars=None)
    f["instances"]["domain-1.if-1"]["elements"][0]["attributes"]["attr-1"] = "val-1"
    run(t, "instance features: match", r4, f, matched=True, vars=r4["vars"])
    f2 = features()
    f2["flags"]["dom.feat"] = flags("k-1", "k-2")
    f2["attributes"]["dom.feat"] = attrs({"a-1": "v-1", "a-2": "v-2"})
    f2["instances"]["dom.feat"] = instances({"ia-1": "iv-1"}, {"ia-2": "iv-2"})
    r5: dict[str, Any] = {"name": "r5", "vars": {"feat": "val-1"}}
    for what, expressions in (
        ("multi-type feature: key", {"k-1": me("Exists")}),
        ("multi-type feature: attribute", {"a-1": me("In", "v-1")}),
        ("multi-type feature: instance attribute", {"ia-1": me("In", "iv-1")}),
        ("multi-type feature: flag and attribute", {"k-2": me("Exists"), "a-2": me("In", "v-2")}),
        ("multi-type feature: instance", {"ia-2": me("In", "iv-2")}),
    ):
        r5["matchFeatures"] = [terms("dom.feat", expressions)]
        run(t, what, r5, f2, matched=True, vars=r5["vars"])
    r6: dict[str, Any] = {
        "name": "r6",
        "vars": {"var-6": "var-val-6"},
        "matchFeatures": [
            terms("domain-1.vf-1", {"key-1": me("In", "val-x")}),
            terms("domain-1.if-1", {"attr-1": me("In", "val-1")}),
        ],
    }
    run(t, "multiple feature matchers: no match", r6, f, matched=False, vars=None)
    r6["matchFeatures"][0]["matchExpressions"]["key-1"] = me("In", "val-1")
    run(t, "multiple feature matchers: match", r6, f, matched=True, vars=r6["vars"])
    r6["matchAny"] = [{"matchFeatures": [terms("domain-1.kf-1", {"key-na": me("Exists")})]}]
    run(t, "matchAny: no element matches", r6, f, matched=False, vars=None)
    r6["matchAny"].append({"matchFeatures": [terms("domain-1.kf-1", {"key-1": me("Exists")})]})
    # The Go test sets r3's expression here, not r6's: r6 is run as it already is.
    run(t, "matchAny: the second element matches", r6, f, matched=True, vars=r6["vars"])

    t = "TestGroupRuleTemplating"
    ft = _templating_features()
    g1: dict[str, Any] = {
        "name": "r1",
        "vars": {"var-1": "var-val-1"},
        "varsTemplate": "\nvar-1=will-be-overridden\nvar-2=\n"
        "{{range .domain_1.kf_1}}kf-{{.Name}}=true\n{{end}}\n"
        "{{range .domain_1.vf_1}}vf-{{.Name}}=vf-{{.Value}}\n{{end}}\n"
        '{{range .domain_1.if_1}}if-{{index . "attr-1"}}_{{index . "attr-2"}}=present\n{{end}}',
        "matchFeatures": _templating_terms(),
    }
    g2 = copy.deepcopy(g1)
    g2["name"] = "r2"
    g2["matchAny"] = [{"matchFeatures": g2.pop("matchFeatures")}]
    expected = {
        "var-1": "var-val-1",
        "var-2": "",
        "kf-key-a": "true",
        "kf-key-c": "true",
        "kf-foo": "true",
        "vf-key-1": "vf-val-1",
        "vf-bar": "vf-",
        "if-1_val-2": "present",
        "if-10_val-20": "present",
        "if-1000_val-2000": "present",
    }
    run(t, "varsTemplate on matchFeatures", g1, ft, matched=True, vars=expected)
    run(t, "varsTemplate on matchAny", g2, ft, matched=True, vars=expected)
    g3 = {
        "name": "r3",
        "varsTemplate": "\n{{range .domain.mf}}mf-{{.Name}}=found\n{{end}}",
        "matchFeatures": [terms("domain.mf", {"key-a": me("Exists"), "key-d": me("In", "val-d")})],
    }
    run(
        t,
        "multi-type feature",
        g3,
        ft,
        matched=True,
        vars={"mf-key-a": "found", "mf-key-d": "found"},
    )
    g4: dict[str, Any] = {
        "name": "r4",
        "matchFeatures": [terms("domain_1.kf_1", {"key-a": me("Exists")})],
    }
    g4["varsTemplate"] = "foo=bar"
    run(t, "varsTemplate foo=bar", g4, ft, matched=True, vars={"foo": "bar"})
    g4["varsTemplate"] = "foo"
    error(t, "varsTemplate without =", g4, ft)
    g4["varsTemplate"] = "{{"
    error(t, "varsTemplate that does not parse", g4, ft)
    g5: dict[str, Any] = {
        "name": "r5",
        "varsTemplate": "{{range .domain_1.vf_1}}{{.Name}}={{.Value}}\n{{end}}",
        "matchFeatures": [
            {
                "feature": "domain_1.vf_1",
                "matchExpressions": {"key-5": me("DoesNotExist")},
                "matchName": me("In", "key-1", "key-4"),
            }
        ],
    }
    run(
        t,
        "matchName",
        g5,
        ft,
        matched=True,
        vars={"key-1": "val-1", "key-4": "val-4", "key-5": ""},
    )
    g5 = {
        "name": "r5",
        "vars": {"should-not-match": "true"},
        "matchFeatures": [{"feature": "domain_1.vf_1", "matchName": me("In", "key-not-exists")}],
    }
    run(t, "matchName that matches nothing", g5, ft, matched=False, vars=None)
    return table


# ---- template_test.go -----------------------------------------------------------------


def _template_table() -> Table:
    table = Table(
        TEMPLATE_GO,
        "One case per NewHelper call of the Go tests. `template` is the text, or "
        "{repeat, times} for one repeated; `expect` is whether NewHelper accepts it, and "
        "`error` a part of its error. A case runs as a rule's labelsTemplate through "
        "`reconcile nfd eval`: a template NewHelper refuses is an exit 2 naming the parse.",
    )
    big = 64 * 1024
    table.add(
        "TestNewHelper_RejectsOverBoundary",
        "one byte over MaxTemplateSize",
        template={"repeat": "a", "times": big + 1},
        expect="refused",
        error="template exceeds maximum allowed size",
    )
    table.add(
        "TestNewHelper_AcceptsBoundary",
        "exactly MaxTemplateSize",
        template={"repeat": "a", "times": big},
        expect="accepted",
    )
    table.add(
        "TestNewHelper_RejectsLargeInput",
        "600,000 actions",
        template={"repeat": "{{if 1}}", "times": 600_000},
        expect="refused",
        error="template exceeds maximum allowed size",
    )
    for text in ('{{env "PATH"}}', '{{expandenv "$PATH"}}', '{{getHostByName "localhost"}}'):
        table.add(
            "TestNewHelper_DropsHostEnvFuncs",
            text,
            template=text,
            expect="refused",
            error="not defined",
        )
    for text in ('{{upper "x"}}', "{{add 1 2}}", '{{trim " x "}}'):
        table.add("TestNewHelper_KeepsUsefulSprigFuncs", text, template=text, expect="accepted")
    return table


# ---- validate_test.go -----------------------------------------------------------------


def _validate_table() -> Table:
    table = Table(
        VALIDATE_GO,
        "One case per t.Run of the Go tables. `function` is the validate.go function, "
        "`want` what the Go test asserts: null (no error), {contains} (a part of the "
        "message), {is} (a sentinel error), or a list of either for the functions "
        "returning several (sorted by message, as the Go test sorts them). A key with a "
        "namespace also runs through `reconcile nfd eval` (an unprefixed key there gets "
        "feature.node.kubernetes.io/, as nfd-master gives it): written, or ignored.",
    )
    ns = {"is": "ErrNSNotAllowed"}
    unprefixed = {"is": "ErrUnprefixedKeysNotAllowed"}

    def one(test: str, name: str, function: str, key: str, value: str, want: Any) -> None:
        table.add(test, name, function=function, key=key, value=value, want=want)

    t = "TestAnnotation"
    one(t, "Valid annotation", "Annotation", "feature.node.kubernetes.io/feature", "true", None)
    one(
        t,
        "Invalid annotation key",
        "Annotation",
        "_invalid-key_",
        "true",
        {"contains": 'invalid annotation key "_invalid-key_":'},
    )
    one(t, "Denied annotation key", "Annotation", "denied-key", "true", unprefixed)
    one(
        t,
        "Invalid annotation value",
        "Annotation",
        "feature.node.kubernetes.io/feature",
        "\x00" * 1100,
        {"contains": "invalid value: too long:"},
    )
    one(t, "Denied annotation key", "Annotation", "kubernetes.io/denied", "true", ns)

    def several(test: str, name: str, function: str, items: Any, want: list[Any]) -> None:
        table.add(test, name, function=function, items=items, want=want)

    t = "TestAnnotations"
    several(t, "Empty annotations", "Annotations", {}, [])
    several(
        t,
        "Valid annotations",
        "Annotations",
        {"feature.node.kubernetes.io/annotation": "true", "vendor.io/annotation": "true"},
        [],
    )
    several(
        t,
        "Invalid annotations",
        "Annotations",
        {"invalid-key": "true", "kubernetes.io/annotation": "true"},
        [unprefixed, ns],
    )

    def taint(key: str, effect: str) -> dict[str, str]:
        return {"key": key, "value": "true", "effect": effect}

    t = "TestTaint"
    for name, tn, want in (
        ("Valid taint", taint("feature.node.kubernetes.io/taint", "NoSchedule"), None),
        ("UNPREFIXED taint key", taint("invalid-key", "NoSchedule"), unprefixed),
        ("Invalid taint key", taint("invalid.kubernetes.io/invalid-key", "NoSchedule"), ns),
        (
            "Empty taint effect",
            taint("feature.node.kubernetes.io/taint", ""),
            {"is": "ErrEmptyTaintEffect"},
        ),
        (
            "Invalid taint effect",
            taint("feature.node.kubernetes.io/taint", "invalid-effect"),
            {"is": "ErrInvalidTaintEffect"},
        ),
    ):
        table.add(t, name, function="Taint", taint=tn, want=want)

    t = "TestTaints"
    several(t, "Empty taints", "Taints", [], [])
    several(
        t,
        "Valid taints",
        "Taints",
        [
            taint("feature.node.kubernetes.io/taint", "NoSchedule"),
            taint("vendor.io/taint", "NoExecute"),
        ],
        [],
    )
    several(
        t,
        "Invalid taints",
        "Taints",
        [
            taint("invalid-key", "NoSchedule"),
            taint("feature.node.kubernetes.io/taint", ""),
            taint("feature.node.kubernetes.io/taint", "invalid-effect"),
        ],
        # not sorted: TestTaints compares in the order of the taints
        [unprefixed, {"is": "ErrEmptyTaintEffect"}, {"is": "ErrInvalidTaintEffect"}],
    )

    t = "TestLabel"
    one(t, "Valid label", "Label", "feature.node.kubernetes.io/label", "true", None)
    one(t, "Valid vendor label", "Label", "vendor.io/label", "true", None)
    one(
        t,
        "Invalid label key",
        "Label",
        "invalid-key:",
        "true",
        {"contains": 'invalid label key "invalid-key:": '},
    )
    one(t, "Denied label with prefix", "Label", "kubernetes.io/label", "true", ns)
    one(t, "Denied label key unprefixed", "Label", "denied-key", "true", unprefixed)
    one(
        t,
        "Invalid label value",
        "Label",
        "feature.node.kubernetes.io/label",
        "invalid value",
        {"contains": 'invalid value "invalid value": '},
    )
    one(t, "Valid value label", "Label", "feature.node.kubernetes.io/label", "true", None)

    t = "TestLabels"
    several(t, "Empty labels", "Labels", {}, [])
    several(
        t,
        "Valid labels",
        "Labels",
        {"feature.node.kubernetes.io/label": "true", "vendor.io/label": "true"},
        [],
    )
    several(
        t,
        "Invalid labels",
        "Labels",
        {"invalid-key": "true", "kubernetes.io/label": "true"},
        [unprefixed, ns],
    )

    t = "TestExtendedResource"
    er = "ExtendedResource"
    one(
        t,
        "Valid extended resource",
        er,
        "feature.node.kubernetes.io/extended-resource",
        "123",
        None,
    )
    one(
        t,
        "Invalid extended resource name",
        er,
        "invalid-name~",
        "123",
        {"contains": 'invalid name "invalid-name~": '},
    )
    one(t, "Denied extended resource key", er, "denied-key", "123", unprefixed)
    one(
        t,
        "Invalid extended resource value",
        er,
        "feature.node.kubernetes.io/extended-resource",
        "invalid value",
        {"contains": 'invalid value "invalid value": '},
    )
    one(t, "Denied extended resource key", er, "kubernetes.io/extended-resource", "123", ns)

    t = "TestExtendedResources"
    several(t, "Empty extended resources", "ExtendedResources", {}, [])
    several(
        t,
        "Valid extended resources",
        "ExtendedResources",
        {
            "feature.node.kubernetes.io/extended-resource": "123",
            "vendor.io/extended-resource": "456",
        },
        [],
    )
    several(
        t,
        "Invalid extended resources",
        "ExtendedResources",
        {"invalid-key": "456", "kubernetes.io/extended-resource": "123"},
        [unprefixed, ns],
    )

    def invalid(name: str) -> dict[str, str]:
        return {
            "message": f"invalid feature name {name} (not <domain>.<feature>), cannot be used for templating"
        }

    def fs(*names: str) -> list[dict[str, str]]:
        return [{"feature": n} for n in names]

    t = "TestMatchFeatures"
    several(t, "Empty matchFeature", "MatchFeatures", [], [])
    several(
        t, "Valid matchFeature", "MatchFeatures", fs("domain1.feature1", "domain2.feature2"), []
    )
    several(
        t,
        "Invalid matchFeature",
        "MatchFeatures",
        fs("invalid-feature", "domain3", "prefix.domain.feature"),
        [invalid("invalid-feature"), invalid("domain3"), invalid("prefix.domain.feature")],
    )
    t = "TestMatchAny"
    several(t, "Empty matchAny", "MatchAny", [], [])
    several(
        t,
        "Valid matchAny",
        "MatchAny",
        [
            {"matchFeatures": fs("domain1.feature1", "domain2.feature2")},
            {"matchFeatures": fs("domain3.feature3", "domain4.feature4")},
        ],
        [],
    )
    several(
        t,
        "Invalid matchAny",
        "MatchAny",
        [
            {"matchFeatures": fs("invalid-feature", "domain3")},
            {"matchFeatures": fs("domain5.feature5", "invalid.domain.feature6")},
        ],
        [invalid("invalid-feature"), invalid("domain3"), invalid("invalid.domain.feature6")],
    )
    t = "TestTemplate"
    several(t, "Valid template", "Template", "key1=value1,key2=value2", [])
    several(
        t,
        "Invalid template",
        "Template",
        "{{.key1=value1,key2=value2}}",
        [{"message": "invalid template: template: :1: bad character U+003D '='"}],
    )
    return table


# ---- nfd-master-internal_test.go ------------------------------------------------------


def _master_table() -> Table:
    table = Table(
        MASTER_GO,
        "TestFilterLabels and TestGetDynamicValue: one case per filterFeatureLabel, "
        "filterExtendedResources, filterFeatureAnnotations and getDynamicValue call. "
        "`config` is the fake nfd-master's (extraLabelNs, denyLabelNs as its flags take "
        "them, the DisableAutoPrefix feature gate). Where nfd-master can meet the key as a "
        "rule's output (a key with a namespace, or the gate on), the case also runs "
        "through `reconcile nfd eval`.",
    )
    config = {
        "extraLabelNs": ["example.io"],
        # deniedNs{normal: {"", kubernetes.io, denied.ns}, wildcard: {.kubernetes.io, .denied.subns}}
        "denyLabelNs": ["", "kubernetes.io", "denied.ns", "*.kubernetes.io", "*.denied.subns"],
        "disableAutoPrefix": False,
    }
    lsm = {"attributes": {"test.feature": attrs({"LSM": "123"})}}
    t = "TestFilterLabels"
    for name, key, value, f, want in (
        ("Static value", "example.io/test", "test-val", {}, {"value": "test-val"}),
        ("Dynamic value", "example.io/testLabel", "@test.feature.LSM", lsm, {"value": "123"}),
        ("Unprefixed should be denied", "test-label", "test-value", {}, "error"),
        (
            "kubernetes.io ns should be denied",
            "kubernetes.io/test-label",
            "test-value",
            {},
            "error",
        ),
        (
            "*.kubernetes.io ns should be denied",
            "sub.ns.kubernetes.io/test-label",
            "test-value",
            {},
            "error",
        ),
        ("denied.ns ns should be denied", "denied.ns/test-label", "test-value", {}, "error"),
        (
            "*.denied.subns ns should be denied",
            "my.denied.subns/test-label",
            "test-value",
            {},
            "error",
        ),
    ):
        table.add(
            t,
            name,
            function="filterFeatureLabel",
            config=config,
            features=f,
            key=key,
            value=value,
            want=want,
        )
    resources = {"micromicrowaves": "10", "tooster": "5"}
    table.add(
        t,
        "Unprefixed extended resources should not be allowed",
        function="filterExtendedResources",
        config=config,
        features={},
        items=resources,
        want={},
    )
    table.add(
        t,
        "Unprefixed annotation should not be allowed",
        function="filterFeatureAnnotations",
        config=config,
        features={},
        items={"test-annotation": "bar"},
        want={},
    )
    gate = {"extraLabelNs": [], "denyLabelNs": [], "disableAutoPrefix": True}
    table.add(
        t,
        "Unprefixed label should be allowed (DisableAutoPrefix)",
        function="filterFeatureLabel",
        config=gate,
        features={},
        key="test-label",
        value="test-value",
        want={"value": "test-value"},
    )
    table.add(
        t,
        "Unprefixed annotation should be allowed (DisableAutoPrefix)",
        function="filterFeatureAnnotations",
        config=gate,
        features={},
        items={"test-annotation": "bar"},
        want={"test-annotation": "bar"},
    )
    table.add(
        t,
        "Unprefixed extended resources should be allowed (DisableAutoPrefix)",
        function="filterExtendedResources",
        config=gate,
        features={},
        items=resources,
        want=resources,
    )
    t = "TestGetDynamicValue"
    for name, value, f, want in (
        ("Valid dynamic value", "@test.feature.LSM", lsm, {"value": "123"}),
        ("Invalid feature name", "@invalid", {}, "error"),
        ("Element not found", "@test.feature.LSM", {}, "error"),
        ("Invalid dynamic value", "@test.feature.LSM", {}, "error"),
    ):
        table.add(t, name, function="getDynamicValue", features=f, value=value, want=want)
    return table


# ---- expression-api_test.go -----------------------------------------------------------


def _api_table() -> Table:
    table = Table(
        API_GO,
        "One case per t.Run of the Go tables, named as go test names it (a repeated name "
        "gets #01). `functions` are the expression.go functions the Go test calls; `mes` "
        "is the MatchExpressionSet (the YAML or the Go literal, in its written order) or "
        "`me` the one MatchExpression; `keys`, `values` and `instances` are the inputs as a "
        "NodeFeature's elements hold them (null: Go's nil map or slice, absent from the Go "
        "literal). `result`, `output` (null: Go's nil slice, [] an empty one; Go compares "
        "them with assert.Equal, in order) and `error` are what the Go test asserts. A case "
        "without `error` also runs as one term of a NodeFeatureRule through `reconcile nfd "
        "eval` over one feature holding the inputs, unless `cli` says why not.",
    )
    keys_fns = ["MatchGetKeys", "MatchKeys"]
    values_fns = ["MatchGetValues", "MatchValues"]
    instances_fns = ["MatchGetInstances", "MatchInstances"]
    nil_set = (
        "nfd-master calls MatchMulti for a term, and MatchMulti does not match an empty "
        "expression set against a nil flag or attribute set, as MatchGetKeys and "
        "MatchGetValues do"
    )

    def case(
        test: str,
        name: str,
        functions: list[str],
        *,
        keys: list[str] | None = None,
        values: dict[str, str] | None = None,
        instances: list[dict[str, str]] | None = None,
        result: bool,
        output: list[dict[str, str]] | None,
        error: bool = False,
        **expressions: Any,
    ) -> None:
        full = f"{test}/{name}"
        if any(c["name"] == full for c in table.cases):
            full += "#01"
        table.cases.append(
            {
                "name": full,
                "test": test,
                "functions": functions,
                **expressions,
                "keys": None if keys is None else {k: {} for k in keys},
                "values": None if values is None else dict(values),
                "instances": None
                if instances is None
                else [{"attributes": dict(i)} for i in instances],
                "result": result,
                "output": output,
                "error": error,
            }
        )

    def cli(reason: str) -> None:
        table.cases[-1]["cli"] = reason

    t = "TestMatchKeys"
    two: dict[str, Any] = {"foo": me("DoesNotExist"), "bar": me("Exists")}
    case(t, "empty expression and nil input", keys_fns, mes={}, result=True, output=[])
    cli(nil_set)
    case(t, "empty expression and empty input", keys_fns, mes={}, keys=[], result=True, output=[])
    case(
        t,
        "empty expression with non-empty input",
        keys_fns,
        mes={},
        keys=["foo"],
        result=True,
        output=[],
    )
    case(
        t,
        "expressions match",
        keys_fns,
        mes=two,
        keys=["bar", "baz", "buzz"],
        result=True,
        output=[{"Name": "bar"}, {"Name": "foo"}],
    )
    case(
        t,
        "expression does not match",
        keys_fns,
        mes=two,
        keys=["foo", "bar", "baz"],
        result=False,
        output=None,
    )
    case(
        t,
        "op that never matches",
        keys_fns,
        mes={"foo": me("In", "bar"), "bar": me("Exists")},
        keys=["bar", "baz"],
        result=False,
        output=None,
    )
    case(
        t,
        "error in expression",
        keys_fns,
        mes={"foo": me("Exists", "bar"), "bar": me("Exists")},
        keys=["bar"],
        result=False,
        output=None,
        error=True,
    )

    t = "TestMatchValues"
    three: dict[str, Any] = {
        "foo": me("Exists"),
        "bar": me("In", "val", "wal"),
        "baz": me("Gt", "10"),
    }
    case(t, "1", values_fns, mes={}, result=True, output=[])
    cli(nil_set)
    case(t, "2", values_fns, mes={}, values={}, result=True, output=[])
    case(t, "3", values_fns, mes={}, values={"foo": "bar"}, result=True, output=[])
    case(t, "4", values_fns, mes=three, values={"bar": "val"}, result=False, output=None)
    case(
        t,
        "5",
        values_fns,
        mes=three,
        values={"foo": "1", "bar": "val", "baz": "123", "buzz": "light"},
        result=True,
        output=[
            {"Name": "bar", "Value": "val"},
            {"Name": "baz", "Value": "123"},
            {"Name": "foo", "Value": "1"},
        ],
    )
    case(
        t,
        "5",
        values_fns,
        mes={"foo": me("Exists"), "bar": me("In", "val"), "baz": me("Gt", "10")},
        values={"foo": "1", "bar": "val", "baz": "123.0"},
        result=False,
        output=None,
        error=True,
    )

    t = "TestMatchInstances"
    lt: dict[str, Any] = {"foo": me("Exists"), "bar": me("Lt", "10")}
    case(t, "1", instances_fns, mes={}, result=False, output=[])
    case(t, "2", instances_fns, mes={}, instances=[], result=False, output=[])
    case(t, "3", instances_fns, mes={}, instances=[{}], result=True, output=[{}])
    case(
        t,
        "4",
        instances_fns,
        mes=lt,
        instances=[{"foo": "1"}, {"bar": "1"}],
        result=False,
        output=[],
    )
    case(
        t,
        "5",
        instances_fns,
        mes=lt,
        instances=[{"foo": "1"}, {"foo": "2", "bar": "1"}],
        result=True,
        output=[{"foo": "2", "bar": "1"}],
    )
    case(
        t,
        "6",
        instances_fns,
        mes={"bar": me("Lt", "10")},
        instances=[{"foo": "1"}, {"bar": "0x1"}],
        result=False,
        output=None,
        error=True,
    )

    t = "TestMatchKeyNames"
    fn = ["MatchKeyNames"]
    k12 = ["key1", "key2"]
    case(t, "empty input", fn, me=me("Any"), keys=[], result=False, output=[])
    for name, e, result, output in (
        ("MatchAny", me("Any"), True, [{"Name": "key1"}, {"Name": "key2"}]),
        ("MatchExists", me("Exists"), True, [{"Name": "key1"}, {"Name": "key2"}]),
        ("MatchDoesNotExist", me("DoesNotExist"), False, []),
        ("MatchIn matches", me("In", "key1"), True, [{"Name": "key1"}]),
        ("MatchIn no match", me("In", "key3"), False, []),
        ("MatchNotIn", me("NotIn", "key1"), True, [{"Name": "key2"}]),
    ):
        case(t, name, fn, me=e, keys=k12, result=result, output=output)
    case(t, "error", fn, me=me("Exists", "key1"), keys=k12, result=False, output=None, error=True)

    t = "TestMatchValueNames"
    fn = ["MatchValueNames"]
    v12 = {"key1": "val1", "key2": "val2"}
    case(t, "empty input", fn, me=me("Any"), values={}, result=False, output=[])
    for name, e, result, output in (
        (
            "MatchExists",
            me("Exists"),
            True,
            [{"Name": "key1", "Value": "val1"}, {"Name": "key2", "Value": "val2"}],
        ),
        ("MatchDoesNotExist", me("DoesNotExist"), False, []),
        ("MatchIn matches", me("In", "key1"), True, [{"Name": "key1", "Value": "val1"}]),
        ("MatchIn no match", me("In", "key3"), False, []),
        ("MatchNotIn", me("NotIn", "key1"), True, [{"Name": "key2", "Value": "val2"}]),
    ):
        case(t, name, fn, me=e, values=v12, result=result, output=output)
    case(t, "error", fn, me=me("NotIn"), values=v12, result=False, output=None, error=True)

    t = "TestMatchInstanceAttributeNames"
    fn = ["MatchInstanceAttributeNames"]
    three_instances = [{"foo": "1"}, {"bar": "2"}, {"foo": "3", "baz": "4"}]
    case(t, "empty input", fn, me=me("Any"), instances=[], result=False, output=[])
    case(
        t,
        "no match",
        fn,
        me=me("In", "foo"),
        instances=[{"bar": "1"}, {"baz": "2"}],
        result=False,
        output=[],
    )
    case(
        t,
        "match",
        fn,
        me=me("In", "foo"),
        instances=three_instances,
        result=True,
        output=[{"foo": "1"}, {"foo": "3", "baz": "4"}],
    )
    # result unset in the Go literal: false
    case(
        t,
        "error",
        fn,
        me=me("In"),
        instances=[{"foo": "1"}],
        result=False,
        output=None,
        error=True,
    )

    t = "TestMatchMulti"
    fn = ["MatchMulti"]
    case(t, "empty expression and nil input", fn, mes={}, result=False, output=[])
    case(
        t,
        "empty expression and empty input keys",
        fn,
        mes={},
        keys=[],
        values={},
        instances=[],
        result=True,
        output=[],
    )
    case(
        t, "empty expression and empty input values", fn, mes={}, values={}, result=True, output=[]
    )
    case(
        t,
        "empty expression and empty input instances",
        fn,
        mes={},
        instances=[],
        result=False,
        output=[],
    )
    case(
        t,
        "empty expression and one input instance with empty attributes",
        fn,
        mes={},
        instances=[{}],
        result=True,
        output=[{}],
    )
    case(t, "empty expression", fn, mes={}, values={"foo": "bar"}, result=True, output=[])
    case(
        t,
        "keys match",
        fn,
        mes=two,
        keys=["bar", "baz", "buzz"],
        result=True,
        output=[{"Name": "bar"}, {"Name": "foo"}],
    )
    case(
        t,
        "keys do not match",
        fn,
        mes=two,
        keys=["foo", "bar", "baz"],
        result=False,
        output=[],
    )
    case(
        t,
        "keys error",
        fn,
        mes={"foo": me("Exists", "val")},
        keys=["bar", "baz", "buzz"],
        result=False,
        output=None,
        error=True,
    )
    case(
        t,
        "values match",
        fn,
        mes=three,
        values={"foo": "1", "bar": "val", "baz": "123", "buzz": "light"},
        result=True,
        output=[
            {"Name": "bar", "Value": "val"},
            {"Name": "baz", "Value": "123"},
            {"Name": "foo", "Value": "1"},
        ],
    )
    case(t, "values do not match", fn, mes=three, values={"bar": "val"}, result=False, output=[])
    case(
        t,
        "values error",
        fn,
        mes={"bar": me("In")},
        values={"foo": "1", "bar": "val", "baz": "123", "buzz": "light"},
        result=False,
        output=None,
        error=True,
    )
    case(
        t,
        "instances match",
        fn,
        mes=lt,
        instances=[{"foo": "1"}, {"foo": "2", "bar": "1"}],
        result=True,
        output=[{"foo": "2", "bar": "1"}],
    )
    case(
        t,
        "instances do not match",
        fn,
        mes={"foo": me("Exists"), "baz": me("Lt", "10")},
        instances=[{"foo": "1"}, {"bar": "1"}],
        result=False,
        output=[],
    )
    case(
        t,
        "instances error",
        fn,
        mes={"foo": me("In")},
        instances=[{"foo": "1"}, {"foo": "2", "bar": "1"}],
        result=False,
        output=None,
        error=True,
    )
    multi_keys = ["bar", "baz", "qux"]
    multi_values = {"foo": "1", "bar": "2", "quux": "3"}
    for name, mes, result, output in (
        (
            "multi: keys and values either matches",
            {"foo": me("In", "1"), "baz": me("Exists")},
            True,
            [{"Name": "baz"}, {"Name": "foo", "Value": "1"}],
        ),
        (
            "multi: keys and values duplicate match",
            {"foo": me("In", "1"), "bar": me("Exists")},
            True,
            [{"Name": "bar"}, {"Name": "bar", "Value": "2"}, {"Name": "foo", "Value": "1"}],
        ),
        (
            "multi: keys and values NotIn match",
            {"bar": me("NotIn", "1", "3")},
            True,
            [{"Name": "bar", "Value": "2"}],
        ),
        ("multi: keys and values NotIn does not match", {"bar": me("NotIn", "2")}, False, []),
        (
            "multi: keys and values DoesNotExist match",
            {"xyzzy": me("DoesNotExist")},
            True,
            [{"Name": "xyzzy"}, {"Name": "xyzzy", "Value": ""}],
        ),
        (
            "multi: keys and values DoesNotExist does not match",
            {"quux": me("DoesNotExist")},
            False,
            [],
        ),
    ):
        case(
            t,
            name,
            fn,
            mes=mes,
            keys=multi_keys,
            values=multi_values,
            result=result,
            output=output,
        )
    case(
        t,
        "multi: keys, values and instances all match",
        fn,
        mes={"foo": me("In", "1"), "bar": me("Exists")},
        keys=multi_keys,
        values=multi_values,
        instances=[{"foo": "1", "bar": "2"}, {"foo": "10", "bar": "20"}],
        result=True,
        output=[
            {"Name": "bar"},
            {"Name": "bar", "Value": "2"},
            {"Name": "foo", "Value": "1"},
            {"bar": "2", "foo": "1"},
        ],
    )

    t = "TestMatchNamesMulti"
    fn = ["MatchNamesMulti"]
    case(t, "nil input", fn, me=me("Any"), result=False, output=[])
    case(t, "empty input keys", fn, me=me("Any"), keys=[], result=False, output=[])
    case(t, "empty input values", fn, me=me("Any"), values={}, result=False, output=[])
    case(t, "empty input instances", fn, me=me("Any"), instances=[], result=False, output=[])
    case(
        t,
        "input keys match",
        fn,
        me=me("Exists"),
        keys=k12,
        result=True,
        output=[{"Name": "key1"}, {"Name": "key2"}],
    )
    case(t, "input keys do not match", fn, me=me("DoesNotExist"), keys=k12, result=False, output=[])
    case(
        t,
        "input keys error",
        fn,
        me=me("In"),
        keys=k12,
        result=False,
        output=None,
        error=True,
    )
    case(
        t,
        "input values match",
        fn,
        me=me("In", "key1"),
        values=v12,
        result=True,
        output=[{"Name": "key1", "Value": "val1"}],
    )
    case(
        t,
        "input values do not match",
        fn,
        me=me("In", "key3"),
        values=v12,
        result=False,
        output=[],
    )
    case(
        t,
        "input values error",
        fn,
        me=me("In"),
        values=v12,
        result=False,
        output=None,
        error=True,
    )
    case(
        t,
        "input instances match",
        fn,
        me=me("In", "foo"),
        instances=three_instances,
        result=True,
        output=[{"foo": "1"}, {"foo": "3", "baz": "4"}],
    )
    case(
        t,
        "input instances do not match",
        fn,
        me=me("In", "foo"),
        instances=[{"bar": "1"}, {"baz": "2"}],
        result=False,
        output=[],
    )
    case(
        t,
        "input instances error",
        fn,
        me=me("In"),
        instances=[{"bar": "1"}],
        result=False,
        output=None,
        error=True,
    )
    case(
        t,
        "input keys, values and instances match",
        fn,
        me=me("In", "key2"),
        keys=k12,
        values=v12,
        instances=[{"key1": "1"}, {"key1": "2"}, {"key1": "3", "key2": "4"}],
        result=True,
        output=[
            {"Name": "key2"},
            {"Name": "key2", "Value": "val2"},
            {"key1": "3", "key2": "4"},
        ],
    )
    return table


TABLES = {
    "rule_test.json": _rule_table,
    "grouprule_test.json": _group_table,
    "template_test.json": _template_table,
    "validate_test.json": _validate_table,
    "nfd_master_test.json": _master_table,
    "expression_api_test.json": _api_table,
}


def render(build: Any) -> str:
    return json.dumps(build().document(), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, build in TABLES.items():
        text = render(build)
        path = DATA / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    for name in stale:
        print(f"{DATA / name}: not what tools/nfd_tables.py writes", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
