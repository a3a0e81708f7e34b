"""What nfd-master writes to one node: every NodeFeatureRule evaluated in its order, the
outputs namespaced, fed back and filtered.

A port of pkg/nfd-master/nfd-master.go (node-feature-discovery NFD_COMMIT):
processNodeFeatureRule (NodeFeatureRule objects by name, each one's rules in order, each
rule's raw labels and vars fed back as the `rule.matched` attribute feature for the rules
after it), refreshNodeFeatures (the NodeFeature's own labels under the rules' labels),
filterFeatureLabel with getDynamicValue (`@<domain>.<feature>.<element>` values), the
default namespace feature.node.kubernetes.io for unprefixed keys (addNsToMapKeys, the
DisableAutoPrefix feature gate off, its default), -extra-label-ns, -deny-label-ns (a
leading `*` denies every namespace ending with the rest), -label-whitelist, -enable-taints
(off by default: no taints are written), filterFeatureAnnotations,
filterExtendedResources and filterTaints; with the checks of
pkg/apis/nfd/validate/validate.go.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from reconcile.kube import labels as kube_labels
from reconcile.kube import regexp
from reconcile.kube.quantity import QuantityError, parse_quantity
from reconcile.nfd import rule as rules
from reconcile.nfd.model import Features, NodeFeature, NodeFeatureRule, Rule, RuleError, Taint

FEATURE_NS: Final = "feature.node.kubernetes.io"
PROFILE_NS: Final = "profile.node.kubernetes.io"
BACKREF_DOMAIN: Final = "rule"
BACKREF_FEATURE: Final = "matched"
ANNOTATION_VALUE_LIMIT: Final = 1 << 10
_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class _NotAllowed(ValueError):
    """validate.ErrNSNotAllowed."""


@dataclass(frozen=True)
class MasterConfig:
    """The nfd-master settings that change what it writes (its flags' defaults)."""

    extra_label_ns: frozenset[str] = frozenset()
    deny_label_ns: frozenset[str] = frozenset()
    label_whitelist: str | None = None
    enable_taints: bool = False


@dataclass
class RuleResult:
    rule: str  # <NodeFeatureRule name>/<rule name>
    matched: bool
    explanation: list[str] = field(default_factory=list)
    # The labels it gives when matched, namespaced (before nfd-master's filtering).
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class NodeOutput:
    """What nfd-master writes to the node, and why each thing is or is not there."""

    labels: dict[str, str]
    annotations: dict[str, str]
    taints: list[Taint]
    extended_resources: dict[str, str]
    rules: list[RuleResult]
    rejected: list[str]  # `<what> <key>: <why>`, as nfd-master logs "ignoring ..."


def _split_ns(name: str) -> tuple[str, str]:
    ns, sep, base = name.partition("/")
    return (ns, base) if sep else ("", name)


def add_ns(values: dict[str, str], ns: str) -> dict[str, str]:
    """addNsToMapKeys: unprefixed keys under `ns`, unless the prefixed key is there too."""
    out: dict[str, str] = {}
    for key, value in values.items():
        if "/" in key:
            out[key] = value
        elif f"{ns}/{key}" not in values:
            out[f"{ns}/{key}"] = value
    return out


def _kubernetes_io(ns: str) -> bool:
    return ns == "kubernetes.io" or ns.endswith(".kubernetes.io")


def _own(ns: str, *allowed: str) -> bool:
    return any(ns == a or ns.endswith("." + a) for a in allowed)


def validate_label(key: str, value: str) -> None:
    """validate.Label: ValueError with its message, _NotAllowed for a namespace."""
    if problems := kube_labels.is_qualified_name(key):
        raise ValueError(f"invalid label key {key!r}: {'; '.join(problems)}")
    ns, _ = _split_ns(key)
    if not ns:
        raise ValueError("unprefixed keys are not allowed")
    if _kubernetes_io(ns) and not _own(ns, FEATURE_NS, PROFILE_NS):
        raise _NotAllowed("namespace is not allowed")
    if problems := kube_labels.is_valid_label_value(value):
        raise ValueError(f"invalid value {value!r}: {'; '.join(problems)}")


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


class _Master:
    def __init__(self, config: MasterConfig) -> None:
        self.config = config
        self.denied = {ns for ns in config.deny_label_ns if not ns.startswith("*")}
        self.denied_suffixes = {ns.lstrip("*") for ns in config.deny_label_ns if ns.startswith("*")}
        self.rejected: list[str] = []

    def denied_ns(self, ns: str) -> bool:
        return ns in self.denied or any(ns.endswith(s) for s in self.denied_suffixes)

    def label(self, key: str, value: str, features: Features) -> str:
        """filterFeatureLabel: the value written, or ValueError saying why none is."""
        if value.startswith("@"):
            value = dynamic_value(value, features)
        ns, base = _split_ns(key)
        problem: ValueError | None = None
        try:
            validate_label(key, value)
        except ValueError as e:
            problem = e
        if isinstance(problem, _NotAllowed) or self.denied_ns(ns):
            if ns not in self.config.extra_label_ns:
                raise ValueError(f"namespace {ns!r} is not allowed")
        elif problem is not None:
            raise problem
        whitelist = self.config.label_whitelist
        if whitelist is not None and not regexp.search(whitelist, base):
            raise ValueError(f"{base} ({key}) does not match the whitelist ({whitelist})")
        return value

    def extended_resource(self, key: str, value: str, features: Features) -> str:
        if value.startswith("@"):
            value = dynamic_value(value, features)
        if problems := kube_labels.is_qualified_name(key):
            raise ValueError(f"invalid name {key!r}: {'; '.join(problems)}")
        ns, _ = _split_ns(key)
        if not ns:
            raise ValueError("unprefixed keys are not allowed")
        if _kubernetes_io(ns) and not _own(ns, FEATURE_NS):
            raise ValueError("namespace is not allowed")
        try:
            parse_quantity(value)
        except QuantityError as e:
            raise ValueError(f"invalid value {value!r}: {e}") from e
        return value

    def annotation(self, key: str, value: str) -> None:
        if problems := kube_labels.is_qualified_name(key):
            raise ValueError(f"invalid annotation key {key!r}: {'; '.join(problems)}")
        ns, _ = _split_ns(key)
        if not ns:
            raise ValueError("unprefixed keys are not allowed")
        if _kubernetes_io(ns) and not _own(ns, FEATURE_NS):
            raise ValueError("namespace is not allowed")
        if len(value) > ANNOTATION_VALUE_LIMIT:
            raise ValueError(
                f"invalid value: too long: feature annotations must not be longer than {ANNOTATION_VALUE_LIMIT} characters"
            )

    @staticmethod
    def taint(taint: Taint) -> None:
        ns, _ = _split_ns(taint.key)
        if not ns:
            raise ValueError("unprefixed keys are not allowed")
        if _kubernetes_io(ns) and not _own(ns, FEATURE_NS):
            raise ValueError("namespace is not allowed")
        if not taint.effect:
            raise ValueError("empty taint effect")
        if taint.effect not in _TAINT_EFFECTS:
            raise ValueError("invalid taint effect")


def rule_id(obj: NodeFeatureRule, rule: Rule) -> str:
    return f"{obj.name}/{rule.name}"


def check_rules(objects: Sequence[NodeFeatureRule]) -> None:
    """RuleError for the first rule that cannot run on any node, naming its file and rule."""
    for obj in objects:
        for r in obj.rules:
            problem = rules.check(r)
            if problem is not None:
                raise RuleError(
                    f"{obj.file}: NodeFeatureRule/{obj.name} rule {r.name!r}: {problem}"
                )


def evaluate(
    node: NodeFeature,
    objects: Sequence[NodeFeatureRule],
    config: MasterConfig | None = None,
    *,
    explain: bool = False,
) -> NodeOutput:
    """What nfd-master writes to the node whose features `node` holds. RuleError when a
    rule cannot be evaluated (nfd-master would log it and skip the rule on this node)."""
    master = _Master(config or MasterConfig())
    check_rules(objects)
    features = copy.deepcopy(node.features)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    extended: dict[str, str] = {}
    taints: list[Taint] = []
    results: list[RuleResult] = []
    for obj in sorted(objects, key=lambda o: o.name):
        for r in obj.rules:
            explanation: list[str] = []
            if explain:
                explanation = _explanation(r, features)
            try:
                out = rules.execute(r, features)
            except RuleError as e:
                raise RuleError(
                    f"{obj.file}: NodeFeatureRule/{obj.name} rule {r.name!r}: {e}"
                ) from e
            given = add_ns(out.labels, FEATURE_NS) if out.matched else {}
            results.append(RuleResult(rule_id(obj, r), out.matched, explanation, given))
            if not out.matched:
                continue
            taints.extend(out.taints)
            labels.update(add_ns(out.labels, FEATURE_NS))
            extended.update(add_ns(out.extended_resources, FEATURE_NS))
            annotations.update(add_ns(out.annotations, FEATURE_NS))
            features.insert_attributes(BACKREF_DOMAIN, BACKREF_FEATURE, out.labels)
            features.insert_attributes(BACKREF_DOMAIN, BACKREF_FEATURE, out.vars)
    merged = add_ns(node.labels, FEATURE_NS)
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

    def annotation(key: str, value: str) -> str:
        master.annotation(key, value)
        return value

    written = kept(merged, lambda k, v: master.label(k, v, features), "label")
    written_er = kept(
        extended, lambda k, v: master.extended_resource(k, v, features), "extended resource"
    )
    written_annotations = kept(annotations, annotation, "annotation")
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
    )


def _explanation(r: Rule, features: Features) -> list[str]:
    lines: list[str] = []
    if r.match_any:
        for i, terms in enumerate(r.match_any):
            lines.append(f"matchAny[{i}]:")
            lines += ["  " + line for line in rules.explain_terms(terms, features)]
    if r.match_features:
        lines.append("matchFeatures:")
        lines += ["  " + line for line in rules.explain_terms(r.match_features, features)]
    if not r.match_any and not r.match_features:
        lines.append("no matchFeatures or matchAny: matches every node")
    return lines
