"""CEL validation rules of CRD schemas (x-kubernetes-validations), evaluated offline as
apiextensions-apiserver does: messages as a v1.36 kube-apiserver wrote them for the same
objects, the Kubernetes CEL libraries on upstream vectors, and `validate` on a tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.kube import celrules
from tests.support import run_cli

VECTORS = json.loads((Path(__file__).parent / "data" / "cel_library_vectors.json").read_text())

GIZMO: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('g')"}],
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "has(self.a)", "reason": "FieldValueRequired", "message": "a is required"},
                {"rule": "self.b != 'dup'", "reason": "FieldValueDuplicate", "message": "dup"},
                {"rule": "self.c.x == 1"},
                {"rule": "self.b == oldSelf.b", "message": "b is immutable"},
                {"rule": "self.num < 10", "messageExpression": "'num is too large'"},
            ],
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "string"},
                "num": {"type": "integer"},
                "c": {"type": "object", "properties": {"x": {"type": "integer"}}},
            },
        }
    },
}


def _gizmo(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gizmo",
        "metadata": {"name": name},
        "spec": spec,
    }


def _errors(schema: dict[str, Any], obj: dict[str, Any], old: Any = None) -> list[str]:
    return [str(e) for e in celrules.validate(schema, obj, old).errors]


def test_each_failed_rule_is_the_servers_field_error() -> None:
    """The v1.36 server's answer to this object: Gizmo.example.com "x" is invalid: [...]."""
    found = _errors(GIZMO, _gizmo("x", {"b": "dup", "c": {}, "num": 12}))
    assert sorted(found) == sorted(
        [
            "<nil>: Invalid value: failed rule: self.metadata.name.startsWith('g')",
            "spec: Required value: a is required",
            "spec: Duplicate value",
            'spec: Invalid value: "object": no such key: x evaluating rule: self.c.x == 1',
            "spec: Invalid value: num is too large",
        ]
    )
    assert _errors(GIZMO, _gizmo("g", {"a": "", "b": "one", "c": {"x": 1}, "num": 1})) == []


def test_transition_rules_run_on_update_only() -> None:
    new = _gizmo("g1", {"a": "1", "b": "two", "c": {"x": 1}, "num": 1})
    old = _gizmo("g1", {"a": "1", "b": "one", "c": {"x": 1}, "num": 1})
    assert _errors(GIZMO, new) == []
    assert _errors(GIZMO, new, old) == ["spec: Invalid value: b is immutable"]
    assert _errors(GIZMO, old, old) == []


def test_an_unchanged_value_ratchets_its_rules_but_not_transition_rules() -> None:
    """ratcheting.go: on update a false rule at a node equal to its old value (or whose
    nearest correlating ancestor is) is a warning, not an error; a transition rule and a
    runtime error never ratchet."""
    old = _gizmo("g1", {"a": "1", "b": "one", "c": {"x": 1}, "num": 12})
    # num above 10 was allowed before the rule: unchanged, the update passes.
    assert _errors(GIZMO, old, old) == []
    assert _errors(GIZMO, old) == ["spec: Invalid value: num is too large"]
    # Any change under spec makes spec a changed node: its rules all count again.
    changed = _gizmo("g1", {"a": "2", "b": "one", "c": {"x": 1}, "num": 12})
    assert _errors(GIZMO, changed, old) == ["spec: Invalid value: num is too large"]
    # 12 and 12.0 are different values to the server's deep equality.
    floated = _gizmo("g1", {"a": "1", "b": "one", "c": {"x": 1}, "num": 12.0})
    assert _errors(GIZMO, floated, old) == ["spec: Invalid value: num is too large"]
    always = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.n > oldSelf.n", "message": "grow"}],
                "properties": {
                    "n": {"type": "integer"},
                    "tags": {
                        "type": "array",
                        "items": {
                            "type": "string",
                            "x-kubernetes-validations": [{"rule": "self != 'bad'"}],
                        },
                    },
                },
            }
        },
    }
    same = {"spec": {"n": 1, "tags": ["bad"]}}
    assert _errors(always, same, same) == ["spec: Invalid value: grow"]
    # An item of an atomic list has no old value of its own: its list decides.
    grown = {"spec": {"n": 2, "tags": ["bad", "ok"]}}
    assert _errors(always, grown, same) == [
        "spec.tags[0]: Invalid value: failed rule: self != 'bad'"
    ]


def test_optional_old_self_runs_on_create_with_no_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {
                        "rule": "!oldSelf.hasValue() || self.size >= oldSelf.value().size",
                        "optionalOldSelf": True,
                        "message": "size may only grow",
                    },
                    {
                        "rule": "oldSelf.hasValue() || self.size < 5 // a comment",
                        "optionalOldSelf": True,
                        "message": "created small",
                    },
                ],
                "properties": {"size": {"type": "integer"}},
            }
        },
    }
    assert _errors(schema, {"spec": {"size": 7}}) == ["spec: Invalid value: created small"]
    assert _errors(schema, {"spec": {"size": 1}}, {"spec": {"size": 2}}) == [
        "spec: Invalid value: size may only grow"
    ]


def test_field_path_reason_and_message_expression() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.cohort) ? !has(self.borrowingLimit) : true",
                        "message": "borrowingLimit must be nil when cohort is empty",
                        "fieldPath": ".borrowingLimit",
                    },
                    {
                        "rule": "self.mode != 'default' || !has(self.nodeSelector)",
                        "messageExpression": "'default ' + self.kind + ' must not use nodeSelector'",
                        "reason": "FieldValueForbidden",
                        "fieldPath": "['nodeSelector']",
                    },
                    {
                        "rule": "self.mode != 'x'",
                        "messageExpression": "'two\\nlines'",
                        "message": "mode x is refused",
                    },
                ],
                "properties": {
                    "cohort": {"type": "string"},
                    "borrowingLimit": {"type": "integer"},
                    "mode": {"type": "string"},
                    "kind": {"type": "string"},
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
    spec = {"borrowingLimit": 1, "mode": "default", "kind": "NVIDIADriver", "nodeSelector": {}}
    assert _errors(schema, {"spec": spec}) == [
        "spec.borrowingLimit: Invalid value: borrowingLimit must be nil when cohort is empty",
        "spec.nodeSelector: Forbidden: default NVIDIADriver must not use nodeSelector",
    ]
    # A messageExpression with a line break falls back to the message, as the server does.
    assert _errors(schema, {"spec": {"cohort": "c", "mode": "x", "kind": "k"}}) == [
        "spec: Invalid value: mode x is refused"
    ]


def test_rules_on_items_map_values_and_escaped_names() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "tolerations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "x-kubernetes-validations": [
                                {
                                    "rule": "self.operator != 'Exists' || !has(self.value)",
                                    "message": "value must be empty when operator is Exists",
                                }
                            ],
                            "properties": {
                                "operator": {"type": "string"},
                                "value": {"type": "string"},
                            },
                        },
                    },
                    "limits": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "x-kubernetes-validations": [{"rule": "self.max__dash__count > 0"}],
                            "properties": {"max-count": {"type": "integer"}},
                        },
                    },
                    "port": {
                        "x-kubernetes-int-or-string": True,
                        "x-kubernetes-validations": [
                            {"rule": "type(self) == int ? self > 0 : self.endsWith('%')"}
                        ],
                    },
                },
            }
        },
    }
    spec = {
        "tolerations": [{"operator": "Equal", "value": "a"}, {"operator": "Exists", "value": "b"}],
        "limits": {"gpu": {"max-count": 0}},
        "port": "25",
    }
    assert _errors(schema, {"spec": spec}) == [
        "spec.tolerations[1]: Invalid value: value must be empty when operator is Exists",
        "spec.limits[gpu]: Invalid value: failed rule: self.max__dash__count > 0",
        "spec.port: Invalid value: failed rule: type(self) == int ? self > 0 : self.endsWith('%')",
    ]
    assert _errors(schema, {"spec": {"port": 8}}) == []


def test_a_rule_the_evaluator_cannot_evaluate_is_unchecked_named() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.items.all(i, v, v > i)"},  # two-variable comprehension
                    {"rule": "self.items.indexOf(1) >= 0"},  # lists' indexOf, not modelled
                    {"rule": "self.since > timestamp('2020-01-01T00:00:00Z')"},
                ],
                "properties": {
                    "items": {"type": "array", "items": {"type": "integer"}},
                    "since": {"type": "string", "format": "date-time"},
                },
            }
        },
    }
    verdict = celrules.validate(schema, {"spec": {"items": [1], "since": "2021-01-01T00:00:00Z"}})
    assert verdict.errors == []
    assert [u.rule for u in verdict.unchecked] == [
        "self.items.all(i, v, v > i)",
        "self.items.indexOf(1) >= 0",
        "self.since > timestamp('2020-01-01T00:00:00Z')",
    ]
    assert all(u.field == "spec" and u.why for u in verdict.unchecked)


def test_a_time_field_the_value_leaves_out_does_not_stop_the_rule() -> None:
    """Kueue's ResourceFlavor: tolerations[].timeAdded is a date-time, and a flavor
    without tolerations' timeAdded is judged; the v1.36 server's answer to the object."""
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.topologyName) || self.nodeLabels.size() >= 1",
                        "message": "at least one nodeLabel is required when topology is set",
                    }
                ],
                "properties": {
                    "nodeLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "topologyName": {"type": "string"},
                    "tolerations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "key": {"type": "string"},
                                "timeAdded": {"type": "string", "format": "date-time"},
                            },
                        },
                    },
                },
            }
        },
    }
    verdict = celrules.validate(
        schema, {"spec": {"topologyName": "default", "tolerations": [{"key": "k"}]}}
    )
    assert [str(e) for e in verdict.errors] == [
        'spec: Invalid value: "object": no such key: nodeLabels evaluating rule: '
        "at least one nodeLabel is required when topology is set"
    ]
    assert verdict.unchecked == []
    timed = {"topologyName": "default", "tolerations": [{"timeAdded": "2024-01-01T00:00:00Z"}]}
    verdict = celrules.validate(schema, {"spec": timed})
    assert verdict.errors == [] and [u.field for u in verdict.unchecked] == ["spec"]


def test_the_environment_follows_the_server_version() -> None:
    rule = celrules.compile_rule("quantity(self) == quantity('1')", version=(1, 27))
    assert rule.program is None and "quantity" in rule.why
    assert celrules.compile_rule("quantity(self) == quantity('1')", version=(1, 28)).program
    assert celrules.compile_rule("isSemver(self)", version=(1, 32)).program is None
    assert celrules.compile_rule("isSemver(self)", version=(1, 33)).program
    assert celrules.compile_rule("isIP(self)", version=(1, 29)).program is None


def test_each_rule_is_compiled_once() -> None:
    assert celrules.compile_rule("self > 1") is celrules.compile_rule("self > 1")
    assert celrules.plan(GIZMO) is celrules.plan(GIZMO)


@pytest.mark.parametrize(
    ("library", "expression", "expected"),
    [(lib, e, want) for lib, cases in VECTORS.items() if lib != "_source" for e, want in cases],
)
def test_library_vectors(library: str, expression: str, expected: bool | str) -> None:
    rule = celrules.compile_rule(expression)
    assert rule.program is not None, rule.why
    result = rule.program.eval(data={"self": None, "oldSelf": None, "__old": None})
    if isinstance(expected, str):
        assert result.type().name() == "ERROR"
        assert expected in str(result.value())
    else:
        assert result.type().name() == "BOOL", result.value()
        assert result.value() is expected


CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterqueues.example.com
spec:
  group: example.com
  scope: Cluster
  names: {plural: clusterqueues, singular: clusterqueue, kind: ClusterQueue}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-validations:
                - rule: "!has(self.cohort) ? !has(self.borrowingLimit) : true"
                  message: borrowingLimit must be nil when cohort is empty
                  fieldPath: .borrowingLimit
              properties:
                cohort: {type: string}
                borrowingLimit: {type: integer}
                mode: {type: string, enum: [a, b]}
---
apiVersion: example.com/v1
kind: ClusterQueue
metadata:
  name: q
spec:
"""


def _tree(tmp_path: Path, spec: str) -> Path:
    file = tmp_path / "desired" / "workloads" / "queues.yaml"
    file.parent.mkdir(parents=True)
    file.write_text(CRD + spec)
    return file


def test_validate_refuses_a_resource_breaking_a_rule_at_its_fields_line(tmp_path: Path) -> None:
    _tree(tmp_path, "  borrowingLimit: 3\n")
    line = CRD.count("\n") + 1
    result = run_cli("validate", cwd=tmp_path)
    assert result.code == 2, result.stderr
    assert (
        f'desired/workloads/queues.yaml:{line}:19: ClusterQueue.example.com "q" is invalid: '
        "spec.borrowingLimit: Invalid value: borrowingLimit must be nil when cohort is empty"
    ) in result.stderr, result.stderr


def test_validate_accepts_a_resource_keeping_the_rule(tmp_path: Path) -> None:
    _tree(tmp_path, "  cohort: all\n  borrowingLimit: 3\n")
    result = run_cli("validate", cwd=tmp_path)
    assert result.code == 0, result.stderr


def test_rules_are_not_run_after_a_blocking_schema_error(tmp_path: Path) -> None:
    _tree(tmp_path, "  borrowingLimit: 3\n  mode: c\n")
    result = run_cli("validate", cwd=tmp_path)
    assert result.code == 2
    assert "borrowingLimit must be nil" not in result.stderr
    assert (
        "<nil>: Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation"
    ) in result.stderr, result.stderr
