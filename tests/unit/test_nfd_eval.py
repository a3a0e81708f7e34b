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
