"""`reconcile nfd eval` against node-feature-discovery's expression test tables, ported as
data (tests/data/nfd/expression_test.json, naming the commit and file it comes from), and
the interface of the command. The other tables run in test_nfd_tables.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, run_cli

DATA = REPO / "tests" / "data" / "nfd"
TABLES = [DATA / "expression_test.json"]


def _cases() -> list[Any]:
    return [
        pytest.param(case, id=case["name"])
        for table in TABLES
        for case in json.loads(table.read_text())["cases"]
    ]


def _write(tmp_path: Path, features: dict[str, Any], rules: list[dict[str, Any]]) -> list[str]:
    node = tmp_path / "node.json"  # JSON is YAML: the reader takes it as it is
    node.write_text(
        json.dumps(
            {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeature",
                "metadata": {"name": "node-1"},
                "spec": {"features": features},
            }
        )
    )
    rule_file = tmp_path / "rules.json"
    rule_file.write_text(
        json.dumps(
            {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeatureRule",
                "metadata": {"name": "table"},
                "spec": {"rules": rules},
            }
        )
    )
    return ["nfd", "eval", "--features", str(node), str(rule_file)]


@pytest.mark.parametrize("case", _cases())
def test_nfd_table_case_through_nfd_eval(case: dict[str, Any], tmp_path: Path) -> None:
    rules = case.get("rules") or [
        {"name": "case", "labels": {"matched": "true"}, "matchFeatures": [case["term"]]}
    ]
    result = run_cli(*_write(tmp_path, case["features"], rules), "-o", "json")
    if case["expect"] == "error":
        assert result.code == 2, result.stdout
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        assert "NodeFeatureRule/table rule" in lines[0] and "rules.json" in lines[0]
        return
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    if "labels" in case:
        expected = {
            (k if "/" in k else f"feature.node.kubernetes.io/{k}"): v
            for k, v in case["labels"].items()
        }
        assert found["labels"] == expected
    else:
        assert found["rules"] == [{"rule": "table/case", "matched": case["expect"] == "matched"}]


def test_tables_are_there() -> None:
    assert sum(len(json.loads(t.read_text())["cases"]) for t in TABLES) >= 200


RULES_AND_GROUP = """\
apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeatureRule
metadata: {name: r}
spec:
  rules:
    - name: never
      labels: {never: "true"}
      matchFeatures:
        - feature: kernel.version
          matchExpressions: {major: {op: In, value: ["5"]}}
    - name: after-never
      labels: {after-never: "true"}
      matchFeatures:
        - feature: rule.matched
          matchExpressions: {never: {op: DoesNotExist}}
---
apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeatureGroup
metadata: {name: kernel-6}
spec:
  featureGroupRules:
    - name: major
      vars: {k6: "true"}
      matchFeatures:
        - feature: kernel.version
          matchExpressions: {major: {op: In, value: ["6"]}}
    - name: back-reference
      matchFeatures:
        - feature: rule.matched
          matchExpressions: {k6: {op: IsTrue}, after-never: {op: DoesNotExist}}
    - name: kernel-5
      matchFeatures:
        - feature: kernel.version
          matchExpressions: {major: {op: In, value: ["5"]}}
"""


def _kernel_node(tmp_path: Path) -> Path:
    node = tmp_path / "node.yaml"
    node.write_text(
        "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeature\nmetadata: {name: n}\n"
        "spec:\n  features:\n    attributes:\n      kernel.version: {elements: {major: '6'}}\n"
    )
    return node


def test_a_rule_that_did_not_match_still_makes_rule_matched_a_feature(tmp_path: Path) -> None:
    # nfd-master feeds every rule's output back, an empty one too: rule.matched exists
    # from the first rule on, so DoesNotExist on it matches after a rule that did not.
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_AND_GROUP.split("---\n", maxsplit=1)[0])
    result = run_cli(
        "nfd", "eval", "--features", str(_kernel_node(tmp_path)), str(rules), "-o", "json"
    )
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["rules"] == [
        {"rule": "r/never", "matched": False},
        {"rule": "r/after-never", "matched": True},
    ]
    assert found["labels"] == {"feature.node.kubernetes.io/after-never": "true"}
    assert "groups" not in found


def test_node_feature_groups_evaluate_on_the_node_features_alone(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_AND_GROUP)
    args = ("nfd", "eval", "--features", str(_kernel_node(tmp_path)), str(rules))
    result = run_cli(*args, "-o", "json")
    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    # The group's rules see their own vars fed back, not the NodeFeatureRules' labels.
    assert found["groups"] == [
        {"group": "kernel-6", "rule": "major", "matched": True},
        {"group": "kernel-6", "rule": "back-reference", "matched": True},
        {"group": "kernel-6", "rule": "kernel-5", "matched": False},
    ]
    assert list(found) == [
        "labels",
        "annotations",
        "taints",
        "extendedResources",
        "rules",
        "groups",
    ]
    text = run_cli(*args)
    assert text.code == 0, text.stderr
    assert "group kernel-6 rule kernel-5: not matched" in text.lines
    assert "group kernel-6: nfd-master lists the node in status.nodes" in text.lines


def test_a_rule_error_names_file_line_and_rule(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_AND_GROUP.replace('{op: In, value: ["6"]}', "{op: Gt, value: [x]}"))
    result = run_cli("nfd", "eval", "--features", str(_kernel_node(tmp_path)), str(rules))
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: {rules}:22:7: NodeFeatureGroup/kernel-6 rule 'major': matchFeatures[0]"
        ".matchExpressions.major: not a number 'x' in &{Gt [x] }"
    ]


def test_feature_gates(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES_AND_GROUP.split("---\n", maxsplit=1)[0])
    args = ("nfd", "eval", "--features", str(_kernel_node(tmp_path)), str(rules))
    gated = run_cli(*args, "--feature-gates", "DisableAutoPrefix=true", "-o", "json")
    assert gated.code == 0, gated.stderr
    assert json.loads(gated.stdout)["labels"] == {"after-never": "true"}
    refused = run_cli(*args, "--feature-gates", "NodeFeatureGroupAPI=true")
    assert refused.code == 2
    assert refused.stderr.startswith("error: --feature-gates: 'NodeFeatureGroupAPI'")
