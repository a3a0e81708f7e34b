"""What nfd-master writes to one node: every NodeFeatureRule evaluated in its order, the
outputs namespaced, fed back and filtered.

A port of pkg/nfd-master/nfd-master.go (node-feature-discovery NFD_COMMIT):
processNodeFeatureRule (NodeFeatureRule objects by name, each one's rules in order, each
rule's raw labels and vars fed back as the `rule.matched` attribute feature for the rules
after it), refreshNodeFeatures (the NodeFeature's own labels under the rules' labels),
filterFeatureLabel with getDynamicValue (`@<domain>.<feature>.<element>` values), the
default namespace feature.node.kubernetes.io for unprefixed keys (addNsToMapKeys; with
the DisableAutoPrefix feature gate on, none, and unprefixed keys allowed), -extra-label-ns, -deny-label-ns (a
leading `*` denies every namespace ending with the rest), -label-whitelist, -enable-taints
(off by default: no taints are written), filterFeatureAnnotations,
filterExtendedResources and filterTaints; with the checks of
pkg/apis/nfd/validate/validate.go. And nfdAPIUpdateNodeFeatureGroup: which rules of a
NodeFeatureGroup match the node (nfd-master's NodeFeatureGroupAPI feature gate).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from reconcile.kube import regexp
from reconcile.kube.labels import go_quote
from reconcile.nfd import rule as rules
from reconcile.nfd import validate
from reconcile.nfd.model import (
    Features,
    GroupRule,
    NodeFeature,
    NodeFeatureGroup,
    NodeFeatureRule,
    Rule,
    RuleError,
    Taint,
    Term,
)
from reconcile.nfd.validate import FEATURE_NS, PROFILE_NS

__all__ = ["FEATURE_NS", "PROFILE_NS", "MasterConfig", "NodeOutput", "add_ns", "evaluate"]

R = TypeVar("R", Rule, GroupRule)
Out = TypeVar("Out")

BACKREF_DOMAIN: Final = "rule"
BACKREF_FEATURE: Final = "matched"
DISABLE_AUTO_PREFIX: Final = "DisableAutoPrefix"
NODE_FEATURE_GROUP_API: Final = "NodeFeatureGroupAPI"


@dataclass(frozen=True)
class MasterConfig:
    """The nfd-master settings that change what it writes (its flags' defaults)."""

    extra_label_ns: frozenset[str] = frozenset()
    deny_label_ns: frozenset[str] = frozenset()
    label_whitelist: str | None = None
    enable_taints: bool = False
    # The DisableAutoPrefix feature gate (alpha, off by default): unprefixed keys are
    # neither put under feature.node.kubernetes.io nor refused.
    disable_auto_prefix: bool = False


@dataclass
class RuleResult:
    rule: str  # <NodeFeatureRule name>/<rule name>
    matched: bool
    explanation: list[str] = field(default_factory=list)
    # The labels it gives when matched, namespaced (before nfd-master's filtering).
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class GroupResult:
    group: str  # the NodeFeatureGroup's name
    rule: str  # the group rule's name
    matched: bool
    explanation: list[str] = field(default_factory=list)


@dataclass
class NodeOutput:
    """What nfd-master writes to the node, and why each thing is or is not there."""

    labels: dict[str, str]
    annotations: dict[str, str]
    taints: list[Taint]
    extended_resources: dict[str, str]
    rules: list[RuleResult]
    rejected: list[str]  # `<what> <key>: <why>`, as nfd-master logs "ignoring ..."
    # kubectl-nfd validate's findings nfd-master evaluates anyway: `<rule>: <problem>`.
    warnings: list[str] = field(default_factory=list)
    groups: list[GroupResult] = field(default_factory=list)


def add_ns(values: dict[str, str], ns: str) -> dict[str, str]:
    """addNsToMapKeys: unprefixed keys under `ns`, unless the prefixed key is there too."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if "/" in key:
            out[key] = value
        elif f"{ns}/{key}" not in values:
            out[f"{ns}/{key}"] = value
    return out


def validate_label(key: str, value: str) -> None:
    """validate.Label (ValidationError with its message; NSNotAllowed for a namespace)."""
    validate.label(key, value)


def dynamic_value(value: str, features: Features) -> str:
    """getDynamicValue: `@<domain>.<feature>.<element>`, an attribute's value."""
    split = value[1:].split(".", 2)
    if len(split) != 3:
        raise ValueError(f"value {value} is not in the form of '@domain.feature.element'")
    name = f"{split[0]}.{split[1]}"
    if name not in features.attributes:
        raise ValueError(f"feature {name} not found")
    elements = features.attributes[name] or {}
    if split[2] not in elements:
        raise ValueError(f"element {split[2]} not found on feature {name}")
    return str(elements[split[2]])


class Master:
    """nfd-master's filters (filterFeatureLabel, filterExtendedResource,
    filterFeatureAnnotations, filterTaints) under one configuration."""

    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        # preProcessDeniedNamespaces
        self.denied = {ns for ns in config.deny_label_ns if not ns.startswith("*")}
        self.denied_suffixes = {ns.lstrip("*") for ns in config.deny_label_ns if ns.startswith("*")}
        self.rejected: list[str] = []

    def denied_ns(self, ns: str) -> bool:
        """isNamespaceDenied."""
        return ns in self.denied or any(ns.endswith(s) for s in self.denied_suffixes)

    def _unprefixed_allowed(self, problem: validate.ValidationError) -> bool:
        return self.config.disable_auto_prefix and isinstance(
            problem, validate.UnprefixedKeysNotAllowed
        )

    def label(self, key: str, value: str, features: Features) -> str:
        """filterFeatureLabel: the value written, or ValueError saying why none is."""
        if value.startswith("@"):
            value = dynamic_value(value, features)
        ns, base = validate.split_ns(key)
        problem: validate.ValidationError | None = None
        try:
            validate.label(key, value)
        except validate.ValidationError as e:
            problem = e
        if isinstance(problem, validate.NSNotAllowed) or self.denied_ns(ns):
            if ns not in self.config.extra_label_ns:
                raise ValueError(f"namespace {go_quote(ns)} is not allowed")
        elif problem is not None and not self._unprefixed_allowed(problem):
            raise problem
        whitelist = self.config.label_whitelist
        if whitelist is not None and not regexp.search(whitelist, base):
            raise ValueError(f"{base} ({key}) does not match the whitelist ({whitelist})")
        return value

    def extended_resource(self, key: str, value: str, features: Features) -> str:
        """filterExtendedResource: the capacity written, or ValueError saying why none is."""
        if value.startswith("@"):
            value = dynamic_value(value, features)
        try:
            validate.extended_resource(key, value)
        except validate.ValidationError as e:
            if not self._unprefixed_allowed(e):
                raise
        return value

    def annotation(self, key: str, value: str) -> str:
        """One annotation of filterFeatureAnnotations."""
        try:
            validate.annotation(key, value)
        except validate.ValidationError as e:
            if not self._unprefixed_allowed(e):
                raise
        return value

    @staticmethod
    def taint(taint: Taint) -> None:
        """One taint of filterTaints."""
        validate.taint(taint)


def rule_id(obj: NodeFeatureRule, rule: Rule) -> str:
    return f"{obj.name}/{rule.name}"


def check_rules(objects: Sequence[NodeFeatureRule | NodeFeatureGroup]) -> None:
    """RuleError for the first rule that cannot run on any node, naming its place and rule."""
    for obj in objects:
        written: Sequence[Rule | GroupRule] = obj.rules
        for i, r in enumerate(written):
            problem = rules.check(r)
            if problem is not None:
                raise RuleError(f"{obj.where(i)}: {problem}")


def _warnings(objects: Sequence[NodeFeatureRule]) -> list[str]:
    """kubectl-nfd validate's MatchFeatures and MatchAny checks: what nfd-master runs but a
    template cannot use."""
    found = []
    for obj in sorted(objects, key=lambda o: o.name):
        for r in obj.rules:
            problems = validate.match_features(r.match_features) + validate.match_any(r.match_any)
            found += [f"rule {rule_id(obj, r)}: {p}" for p in problems]
    return found


def _add_ns(config: MasterConfig, values: dict[str, str]) -> dict[str, str]:
    return dict(values) if config.disable_auto_prefix else add_ns(values, FEATURE_NS)


def evaluate(
    node: NodeFeature,
    objects: Sequence[NodeFeatureRule],
    config: MasterConfig | None = None,
    *,
    explain: bool = False,
    groups: Sequence[NodeFeatureGroup] = (),
) -> NodeOutput:
    """What nfd-master writes to the node whose features `node` holds, and which rules of
    the NodeFeatureGroups `groups` match it. RuleError when a rule cannot be evaluated
    (nfd-master would log it and skip the rule on this node)."""
    master = Master(config or MasterConfig())
    check_rules(objects)
    check_rules(groups)
    features = copy.deepcopy(node.features)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    extended: dict[str, str] = {}
    taints: list[Taint] = []
    results: list[RuleResult] = []
    for obj in sorted(objects, key=lambda o: o.name):
        for i, r in enumerate(obj.rules):
            out, explanation = _executed(rules.execute, r, features, obj.where(i), explain)
            given = _add_ns(master.config, out.labels) if out.matched else {}
            results.append(RuleResult(rule_id(obj, r), out.matched, explanation, given))
            taints.extend(out.taints)
            labels.update(_add_ns(master.config, out.labels))
            extended.update(_add_ns(master.config, out.extended_resources))
            annotations.update(_add_ns(master.config, out.annotations))
            # A rule that did not match feeds back nothing, but the feature is there
            # from the first rule on (InsertAttributeFeatures with a nil map).
            features.insert_attributes(BACKREF_DOMAIN, BACKREF_FEATURE, out.labels)
            features.insert_attributes(BACKREF_DOMAIN, BACKREF_FEATURE, out.vars)
    merged = _add_ns(master.config, node.labels)
    merged.update(labels)

    def kept(items: dict[str, str], check: Callable[[str, str], str], what: str) -> dict[str, str]:
        """What nfd-master writes of `items` (each value as `check` gives it); the rest
        rejected, with why."""
        written: dict[str, str] = {}
        for key, value in items.items():
            try:
                written[key] = check(key, value)
            except ValueError as e:
                master.rejected.append(f"{what} {key}: {e}")
        return written

    written = kept(merged, lambda k, v: master.label(k, v, features), "label")
    written_er = kept(
        extended, lambda k, v: master.extended_resource(k, v, features), "extended resource"
    )
    written_annotations = kept(annotations, master.annotation, "annotation")
    written_taints: list[Taint] = []
    if master.config.enable_taints:
        for taint in taints:
            try:
                master.taint(taint)
                written_taints.append(taint)
            except ValueError as e:
                master.rejected.append(f"taint {taint.key}: {e}")
    elif taints:
        master.rejected.append(
            f"taints {', '.join(t.key for t in taints)}: nfd-master writes taints only with -enable-taints"
        )
    return NodeOutput(
        labels=dict(sorted(written.items())),
        annotations=dict(sorted(written_annotations.items())),
        taints=written_taints,
        extended_resources=dict(sorted(written_er.items())),
        rules=results,
        rejected=master.rejected,
        warnings=_warnings(objects),
        groups=[g for group in groups for g in evaluate_group(node, group, explain=explain)],
    )


def evaluate_group(
    node: NodeFeature, group: NodeFeatureGroup, *, explain: bool = False
) -> list[GroupResult]:
    """nfdAPIUpdateNodeFeatureGroup for one node: each group rule executed in order on the
    node's own features (not the NodeFeatureRules' outputs), each one's vars fed back as
    `rule.matched` for the rules after it. nfd-master lists the node in the group's
    status.nodes when any rule matched. RuleError when a rule cannot be evaluated."""
    features = copy.deepcopy(node.features)
    results = []
    for i, r in enumerate(group.rules):
        out, explanation = _executed(rules.execute_group_rule, r, features, group.where(i), explain)
        results.append(GroupResult(group.name, r.name, out.matched, explanation))
        features.insert_attributes(BACKREF_DOMAIN, BACKREF_FEATURE, out.vars)
    return results


def _executed(
    execute: Callable[[R, Features], Out], r: R, features: Features, where: str, explain: bool
) -> tuple[Out, list[str]]:
    """`execute` of rule `r` on `features`, and (with `explain`) how each of its terms
    matched; a RuleError located at `where`."""
    explanation = _explanation(r.match_any, r.match_features, features) if explain else []
    try:
        return execute(r, features), explanation
    except RuleError as e:
        raise RuleError(f"{where}: {e}") from e


def _explanation(
    match_any: tuple[tuple[Term, ...], ...], match_features: tuple[Term, ...], features: Features
) -> list[str]:
    lines: list[str] = []
    if match_any:
        for i, terms in enumerate(match_any):
            lines.append(f"matchAny[{i}]:")
            lines += ["  " + line for line in rules.explain_terms(terms, features)]
    if match_features:
        lines.append("matchFeatures:")
        lines += ["  " + line for line in rules.explain_terms(match_features, features)]
    if not match_any and not match_features:
        lines.append("no matchFeatures or matchAny: matches every node")
    return lines
