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

import marshal
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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


class Reads:
    """The cluster's NodeFeatureRules, and its NodeFeature objects when the tree's rules
    differ from them, asked for as planning starts (when the tree holds NodeFeatureRules
    and the cluster serves NFD's kinds): their LISTs go out while the objects are dry-run
    and the nodes read, and each NodeFeature is indexed by node as its page comes in. A
    plan whose rules are the cluster's never lists NodeFeatures."""

    def __init__(self, state: DesiredState, cluster: ObjectApi) -> None:
        self._cluster = cluster
        self._rules: Future[list[dict[str, Any]] | None] | None = None
        self._features: Future[Features | None] | None = None
        declared = tree_rules(state)
        discovery = cluster.discovery()
        if not declared or discovery.resource_for(API_VERSION, FEATURE_KIND) is None:
            return
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nfd-read")
        rules = self._rules = pool.submit(self._list_rules)

        def features_if_changed() -> Features | None:
            before = _by_name(rules.result() or ())
            after = {**before, **{m.name: m.body for m in declared}}
            if _specs(before) == _specs(after):
                return None
            # What any rule before or after reads: a prune that drops rules besides (known
            # later) only narrows it, and a key over more features is still a true key.
            try:
                every = [*_parsed(before, {}), *_parsed(after, {})]
            except RuleError:
                return self._read_features(None)  # predict says what is wrong with the rule
            return self._read_features(_referenced(every))

        self._features = pool.submit(features_if_changed)
        pool.shutdown(wait=False)

    def rules(self) -> list[dict[str, Any]] | None:
        """The cluster's NodeFeatureRules (read early when they were); None when the
        cluster does not serve the kind."""
        found = self._rules.result() if self._rules is not None else None
        return found if found is not None else self._list_rules()

    def features_read(self, referenced: frozenset[str] | None) -> Features | None:
        """The NodeFeature objects by node, as read early when they were (keyed by at least
        `referenced`), else read now; None when the cluster does not serve the kind."""
        early = self._features.result() if self._features is not None else None
        return early if early is not None else self._read_features(referenced)

    def _read_features(self, referenced: frozenset[str] | None) -> Features | None:
        resource = self._cluster.discovery().resource_for(API_VERSION, FEATURE_KIND)
        if resource is None:
            return None
        return Features.index(self._cluster.list_specs(resource), referenced)

    def _list_rules(self) -> list[dict[str, Any]] | None:
        resource = self._cluster.discovery().resource_for(API_VERSION, RULE_KIND)
        return None if resource is None else self._cluster.list_objects(resource)


@dataclass
class Features:
    """Every node's NodeFeature objects, and for a node that has one, the key of what the
    rules can see of it: nodes alike in all of it (a fleet's pools) are evaluated once."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    keys: dict[str, bytes | None] = field(default_factory=dict)

    @classmethod
    def index(cls, found: Iterable[dict[str, Any]], referenced: frozenset[str] | None) -> Features:
        order = sorted(referenced) if referenced is not None else None
        indexed = cls()
        for obj in found:
            node = ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_NAME_LABEL)
            if not isinstance(node, str):
                continue
            held = indexed.objects.setdefault(node, [])
            held.append(obj)
            # Two objects for one node are merged first: not keyed.
            indexed.keys[node] = _fingerprint(obj, order) if len(held) == 1 else None
        return indexed


def _by_name(objects: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str((o.get("metadata") or {}).get("name")): o for o in objects}


def predict(
    state: DesiredState,
    cluster: ObjectApi,
    live: Sequence[LiveNode],
    *,
    pruned: Iterable[str] = (),
    reads: Reads | None = None,
) -> Prediction:
    """What the tree's rule change makes nfd-master write on `live`'s nodes. `pruned`: the
    ids of the objects this apply deletes (`NodeFeatureRule/<name>` among them); `reads`
    the LISTs started early (else they are made here)."""
    prediction = Prediction()
    declared = tree_rules(state)
    gone = {i.removeprefix(f"{RULE_KIND}/") for i in pruned if i.startswith(f"{RULE_KIND}/")}
    if not declared and not gone:
        return prediction
    reads = reads or Reads(state, cluster)
    live_rules = reads.rules()
    if live_rules is None:
        return prediction  # NFD is not installed: no nfd-worker publishes features
    before = _by_name(live_rules)
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
    features = reads.features_read(_referenced([*old_rules, *new_rules])) or Features()
    outputs: dict[bytes, tuple[NodeOutput, NodeOutput] | RuleError] = {}
    compared_by_output: dict[int, _Compared] = {}
    for node in live:
        objects = features.objects.get(node.name)
        if not objects:
            continue
        key = features.keys.get(node.name)
        found = outputs.get(key) if key is not None else None
        if found is None:
            try:
                merged = merge_node_features(
                    objects, node=node.name, source=f"NodeFeature objects of node {node.name}"
                )
                found = (evaluate(merged, old_rules), evaluate(merged, new_rules))
            except RuleError as e:
                found = e
            if key is not None:
                outputs[key] = found
        if isinstance(found, RuleError):
            prediction.findings.append(_finding("nfd-rule-invalid", node.name, str(found)))
            continue
        compared = compared_by_output.get(id(found))
        if compared is None:
            compared = compared_by_output[id(found)] = _Compared(*found)
        compared.report(node.name, state, prediction)
    return prediction


def _referenced(rules: Sequence[NodeFeatureRule]) -> frozenset[str] | None:
    """The features the rules read (their terms' and `@<feature>.<element>` values'); None
    when one cannot be told from the rule alone."""
    names: set[str] = set()
    for obj in rules:
        for r in obj.rules:
            for term in (*r.match_features, *(t for terms in r.match_any for t in terms)):
                names.add(term.feature)
            for value in (*r.labels.values(), *r.extended_resources.values()):
                if value.startswith("@"):
                    parts = value[1:].split(".", 2)
                    if len(parts) != 3:
                        return None
                    names.add(f"{parts[0]}.{parts[1]}")
    return frozenset(names)


def _fingerprint(obj: Mapping[str, Any], referenced: list[str] | None) -> bytes | None:
    """What of a node's one NodeFeature object the rules can see, as a key: the referenced
    features and the labels, without the names (None: not to be shared). Written by
    marshal's version 0, which has no back-references or interning marks: equal data (in
    the same order) is equal bytes."""
    spec = obj.get("spec")
    if referenced is None or not isinstance(spec, Mapping):
        return None
    features = spec.get("features") or {}
    if not isinstance(features, Mapping):
        return None
    seen = []
    for kind in ("flags", "attributes", "instances"):
        held = features.get(kind) or {}
        if not isinstance(held, Mapping):
            return None
        seen.append([held.get(name) for name in referenced])
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    # Not sorted: two nodes whose same features are written in another order only miss
    # the cache.
    try:
        return marshal.dumps([seen, spec.get("labels"), namespace], 0)
    except ValueError:  # not JSON's types: not to be shared
        return None


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


class _Compared:
    """What one pair of outputs (before, after) predicts, for every node that has it."""

    def __init__(self, old: NodeOutput, new: NodeOutput) -> None:
        self.new = new
        self.writers = writers = _writers(new)
        before_writers = _writers(old)
        self.changes: list[tuple[str, str | None, str | None, tuple[str, ...]]] = []
        for key in sorted(old.labels.keys() | new.labels.keys()):
            before, after = old.labels.get(key), new.labels.get(key)
            if before == after:
                continue
            # The rules that write it after apply; for a label that goes, those that wrote it.
            by = writers.get(key, ()) if after is not None else before_writers.get(key, ())
            self.changes.append((key, before, after, tuple(sorted({r for r, _ in by}))))
        self.disagreements = [
            (key, written)
            for key, written in sorted(writers.items())
            if len({value for _, value in written}) > 1
        ]

    def report(self, node: str, state: DesiredState, prediction: Prediction) -> None:
        """The labels the new rules write on `node` that the old did not (or otherwise),
        and where they collide with the tree or with each other."""
        prediction.labels += [
            PredictedLabel(node=node, key=key, value=after, before=before, rules=rules)
            for key, before, after, rules in self.changes
        ]
        want = state.nodes.get(node)
        declared = want.labels if want is not None else {}
        for key, wanted in sorted(declared.items()):
            value = self.new.labels.get(key)
            if value is None or wanted is None or wanted == value:
                continue
            rules = ", ".join(sorted({r for r, _ in self.writers.get(key, ())}))
            prediction.findings.append(
                _finding(
                    "nfd-label-conflict",
                    node,
                    f"{key}: desired/ declares {wanted!r} ({want.source if want else ''}) "
                    f"and {rules or 'a NodeFeatureRule'} makes nfd-master write {value!r}: "
                    "the two would rewrite it in turn; declare it in one place",
                )
            )
        for key, written in self.disagreements:
            shown = ", ".join(f"{rule} writes {value!r}" for rule, value in written)
            prediction.findings.append(
                _finding(
                    "nfd-rules-disagree",
                    node,
                    f"{key}: {shown}; nfd-master keeps {self.new.labels.get(key)!r} (the last "
                    "in its order, by NodeFeatureRule name, then rule)",
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
