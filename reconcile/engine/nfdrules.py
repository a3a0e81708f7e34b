"""The labels nfd-master will write once desired/ changes its NodeFeatureRules, predicted
in the plan: reconcile writes the rule objects, nfd-master (not reconcile) the labels.

When the tree adds, changes or (with `--prune`) removes a NodeFeatureRule, the rule set
before (the cluster's) and after (the cluster's with the tree's laid over) are each
evaluated (reconcile/nfd, a port of nfd-master) against every planned node's live
NodeFeature objects, merged as nfd-master merges them. What differs is a
`PredictedLabel`: `<node> <key> <value> (nfd)` in the plan, and the labels that checks
project (so a workload that selects a label the change removes is stranded before merge).

Joined to what the tree declares: a label desired/ sets on a node and a rule will set
there to another value is an error finding (the two would rewrite it in turn); two rules
writing one key with different values on one node, a warning naming both (the later in
nfd-master's order wins). A node without NodeFeature objects has no nfd-worker: nothing
is predicted for it, as nfd-master labels nothing there. A cluster that does not serve
NFD's kinds has no NodeFeature objects: nothing is predicted either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Severity
from reconcile.engine.findings import Finding
from reconcile.engine.plan import PredictedLabel
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import LiveNode
from reconcile.nfd.master import NodeOutput, evaluate
from reconcile.nfd.model import API_VERSION, NodeFeatureRule, RuleError, parse_node_feature_rule
from reconcile.nfd.nodefeature import NODE_NAME_LABEL, merge_node_features

RULE_KIND: Final = "NodeFeatureRule"
FEATURE_KIND: Final = "NodeFeature"


@dataclass
class Prediction:
    labels: list[PredictedLabel] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def tree_rules(state: DesiredState) -> list[Manifest]:
    return [m for m in state.manifests if (m.api_version, m.kind) == (API_VERSION, RULE_KIND)]


def predict(
    state: DesiredState,
    cluster: ObjectApi,
    live: Sequence[LiveNode],
    *,
    pruned: Iterable[str] = (),
) -> Prediction:
    """What the tree's rule change makes nfd-master write on `live`'s nodes. `pruned`: the
    ids of the objects this apply deletes (`NodeFeatureRule/<name>` among them)."""
    prediction = Prediction()
    declared = tree_rules(state)
    gone = {i.removeprefix(f"{RULE_KIND}/") for i in pruned if i.startswith(f"{RULE_KIND}/")}
    if not declared and not gone:
        return prediction
    discovery = cluster.discovery()
    rule_resource = discovery.resource_for(API_VERSION, RULE_KIND)
    feature_resource = discovery.resource_for(API_VERSION, FEATURE_KIND)
    if rule_resource is None or feature_resource is None:
        return prediction  # NFD is not installed: no nfd-worker publishes features
    before: dict[str, Mapping[str, Any]] = {
        str((o.get("metadata") or {}).get("name")): o for o in cluster.list_objects(rule_resource)
    }
    after = {name: obj for name, obj in before.items() if name not in gone}
    sources: dict[str, str] = {}
    for manifest in declared:
        after[manifest.name] = manifest.body
        sources[manifest.name] = str(manifest.source)
    if _specs(before) == _specs(after):
        return prediction
    try:
        old_rules = _parsed(before, {})
        new_rules = _parsed(after, sources)
    except RuleError as e:
        prediction.findings.append(_finding("nfd-rule-invalid", "NodeFeatureRule", str(e)))
        return prediction
    by_node: dict[str, list[dict[str, Any]]] = {}
    for obj in cluster.list_objects(feature_resource):
        node = ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_NAME_LABEL)
        if isinstance(node, str):
            by_node.setdefault(node, []).append(obj)
    for node in live:
        objects = by_node.get(node.name)
        if not objects:
            continue
        try:
            features = merge_node_features(
                objects, node=node.name, source=f"NodeFeature objects of node {node.name}"
            )
            old = evaluate(features, old_rules)
            new = evaluate(features, new_rules)
        except RuleError as e:
            prediction.findings.append(_finding("nfd-rule-invalid", node.name, str(e)))
            continue
        _compare(node.name, old, new, state, prediction)
    return prediction


def _specs(rules: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: obj.get("spec") for name, obj in rules.items()}


def _parsed(
    rules: Mapping[str, Mapping[str, Any]], sources: Mapping[str, str]
) -> list[NodeFeatureRule]:
    return [
        parse_node_feature_rule(
            dict(obj), sources.get(name, f"the cluster's NodeFeatureRule/{name}")
        )
        for name, obj in sorted(rules.items())
    ]


def _compare(
    node: str, old: NodeOutput, new: NodeOutput, state: DesiredState, prediction: Prediction
) -> None:
    """The labels `new` writes that `old` did not (or otherwise), and where they collide
    with the tree or with each other."""
    writers, writers_before = _writers(new), _writers(old)
    for key in sorted(old.labels.keys() | new.labels.keys()):
        before, after = old.labels.get(key), new.labels.get(key)
        if before == after:
            continue
        # The rules that write it after apply; for a label that goes, those that wrote it.
        by = writers.get(key, ()) if after is not None else writers_before.get(key, ())
        prediction.labels.append(
            PredictedLabel(
                node=node,
                key=key,
                value=after,
                before=before,
                rules=tuple(sorted({rule for rule, _ in by})),
            )
        )
    want = state.nodes.get(node)
    declared = dict(want.labels) if want is not None else {}
    for key, value in sorted(new.labels.items()):
        if key in declared and declared[key] is not None and declared[key] != value:
            rules = ", ".join(sorted({r for r, _ in writers.get(key, ())})) or "a NodeFeatureRule"
            prediction.findings.append(
                _finding(
                    "nfd-label-conflict",
                    node,
                    f"{key}: desired/ declares {declared[key]!r} ({want.source if want else ''}) "
                    f"and {rules} makes nfd-master write {value!r}: the two would rewrite "
                    "it in turn; declare it in one place",
                )
            )
    for key, written in sorted(writers.items()):
        values = {value for _, value in written}
        if len(values) > 1:
            shown = ", ".join(f"{rule} writes {value!r}" for rule, value in written)
            prediction.findings.append(
                _finding(
                    "nfd-rules-disagree",
                    node,
                    f"{key}: {shown}; nfd-master keeps {new.labels.get(key)!r} (the last in "
                    "its order, by NodeFeatureRule name, then rule)",
                    severity=Severity.WARNING,
                )
            )


def _writers(output: NodeOutput) -> dict[str, list[tuple[str, str]]]:
    """key -> (rule, value) of every matched rule that writes it, in nfd-master's order."""
    found: dict[str, list[tuple[str, str]]] = {}
    for result in output.rules:
        for key, value in result.labels.items():
            found.setdefault(key, []).append((result.rule, value))
    return found


def _finding(
    kind: str, subject: str, message: str, *, severity: Severity = Severity.ERROR
) -> Finding:
    return Finding(
        severity=severity,
        kind=kind,
        subject=subject,
        message=message,
        blocksApply=severity is Severity.ERROR,
    )
