"""The files `reconcile nfd eval` reads: a NodeFeature, NodeFeatureRules, a node's labels.

YAML is read with desired/'s reader (YAML 1.1 as kubectl reads it, every value with its
position); each problem is a RuleError naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reconcile.desired.yamlpos import YamlDocument, parse_yaml
from reconcile.nfd.model import (
    NodeFeature,
    NodeFeatureGroup,
    NodeFeatureRule,
    RuleError,
    parse_node_feature_group,
    parse_node_feature_rule,
)
from reconcile.nfd.nodefeature import merge_node_features


def _placed(path: Path) -> list[tuple[Any, YamlDocument, tuple[str | int, ...]]]:
    """Every object of `path` (a List's items one by one), with its document and path."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(f"{path}: cannot be read: {e}") from e
    documents, problems = parse_yaml(text, str(path))
    if problems:
        raise RuleError(str(problems[0]))
    found: list[tuple[Any, YamlDocument, tuple[str | int, ...]]] = []
    for doc in documents:
        data = doc.data
        if isinstance(data, dict) and data.get("kind", "").endswith("List") and "items" in data:
            found.extend((item, doc, ("items", i)) for i, item in enumerate(data["items"] or []))
        else:
            found.append((data, doc, ()))
    return found


def _documents(path: Path) -> list[Any]:
    return [data for data, _, _ in _placed(path)]


def read_node_feature(path: Path) -> NodeFeature:
    """The NodeFeature of `path`: one object, or several of one node merged as nfd-master
    merges a node's objects (`nodefeature.merge_node_features`)."""
    documents = _documents(path)
    if not documents:
        raise RuleError(f"{path}: holds no NodeFeature object")
    return merge_node_features(documents, source=str(path))


def read_rules(paths: list[Path]) -> list[NodeFeatureRule]:
    """Every NodeFeatureRule in `paths` (other kinds are refused)."""
    rules, groups = read_rules_and_groups(paths)
    if groups:
        raise RuleError(
            f"{groups[0].file}: NodeFeatureGroup/{groups[0].name}: not a NodeFeatureRule"
        )
    return rules


def read_rules_and_groups(
    paths: list[Path],
) -> tuple[list[NodeFeatureRule], list[NodeFeatureGroup]]:
    """Every NodeFeatureRule and NodeFeatureGroup in `paths`, each rule knowing the
    file:line:col it is written at (other kinds are refused)."""
    rules: list[NodeFeatureRule] = []
    groups: list[NodeFeatureGroup] = []
    for path in paths:
        for data, doc, base in _placed(path):

            def at(
                sub: tuple[str | int, ...],
                doc: YamlDocument = doc,
                base: tuple[str | int, ...] = base,
            ) -> str:
                return str(doc.at(base + sub))

            if isinstance(data, dict) and data.get("kind") == "NodeFeatureGroup":
                groups.append(parse_node_feature_group(data, str(path), at))
            else:
                rules.append(parse_node_feature_rule(data, str(path), at))
    return rules, groups


def read_node_labels(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) from a JSON file: a labels object, or a Node object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RuleError(f"{path}: not a JSON object of labels: {e}") from e
    annotations: dict[str, Any] = {}
    if isinstance(data, dict) and data.get("kind") == "Node":
        meta = data.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        data = meta.get("labels") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise RuleError(f"{path}: not a JSON object of labels (string values) or a Node")
    return dict(data), {str(k): str(v) for k, v in annotations.items()}
