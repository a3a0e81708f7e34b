"""The nfd.k8s-sigs.io/v1alpha1 objects a rule evaluation reads, as plain typed values.

The shapes are those of api/nfd/v1alpha1/types.go (NFD_COMMIT). Where Go tells a nil map
from an empty one, so does this module (None against {}): nfd-master's matching does
(a flag feature whose `elements` is absent is not a flag feature to `MatchMulti`).
Parsing refuses what the CRD's schema refuses (a value that is not a string, an unknown
field type); a reader names the object, the rule and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

API_VERSION: Final = "nfd.k8s-sigs.io/v1alpha1"

Attributes = dict[str, str]


class RuleError(ValueError):
    """A NodeFeatureRule nfd-master cannot execute (or a NodeFeature it cannot read);
    str() says which rule and what is wrong."""


@dataclass
class Features:
    """A node's features (types.go Features): flags, attributes and instances by
    `<domain>.<feature>`. A None elements value is Go's nil map or slice."""

    flags: dict[str, set[str] | None] = field(default_factory=dict)
    attributes: dict[str, Attributes | None] = field(default_factory=dict)
    instances: dict[str, list[Attributes] | None] = field(default_factory=dict)

    def insert_attributes(self, domain: str, feature: str, values: Mapping[str, str]) -> None:
        """feature.go InsertAttributeFeatures: merge `values` into `<domain>.<feature>`."""
        key = f"{domain}.{feature}"
        found = self.attributes.get(key)
        if key not in self.attributes:
            self.attributes[key] = dict(values)
        elif found is None:
            # Go writes into the nil map and panics; nfd-master never makes one here.
            self.attributes[key] = dict(values)
        else:
            found.update(values)


@dataclass(frozen=True)
class Expression:
    """types.go MatchExpression: `op`, `value` (MatchValue) and `type` ("" or "version")."""

    op: str
    value: tuple[str, ...] = ()
    type: str = ""

    def shown(self) -> str:
        text = self.op
        if self.value:
            text += " [" + ", ".join(self.value) + "]"
        if self.type:
            text += f" (type {self.type})"
        return text


@dataclass(frozen=True)
class Term:
    """types.go FeatureMatcherTerm. `expressions` None: the field is absent (Go nil)."""

    feature: str
    expressions: tuple[tuple[str, Expression], ...] | None = None
    name: Expression | None = None


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    def document(self) -> dict[str, str]:
        out = {"key": self.key}
        if self.value:
            out["value"] = self.value
        out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class Rule:
    """types.go Rule: one entry of a NodeFeatureRule's spec.rules."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    labels_template: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    vars: dict[str, str] = field(default_factory=dict)
    vars_template: str = ""
    taints: tuple[Taint, ...] = ()
    extended_resources: dict[str, str] = field(default_factory=dict)
    match_features: tuple[Term, ...] = ()
    match_any: tuple[tuple[Term, ...], ...] = ()


@dataclass(frozen=True)
class NodeFeatureRule:
    name: str
    rules: tuple[Rule, ...]
    file: str = ""
    # Where each rule is written (`file:line:col`), in the order of `rules`.
    places: tuple[str, ...] = ()

    def where(self, index: int) -> str:
        """`<file:line:col>: NodeFeatureRule/<name> rule '<rule>'`, for an error."""
        place = self.places[index] if index < len(self.places) else self.file
        return f"{place}: NodeFeatureRule/{self.name} rule {self.rules[index].name!r}"


@dataclass(frozen=True)
class GroupRule:
    """types.go GroupRule: one entry of a NodeFeatureGroup's spec.featureGroupRules."""

    name: str
    vars: dict[str, str] = field(default_factory=dict)
    vars_template: str = ""
    match_features: tuple[Term, ...] = ()
    match_any: tuple[tuple[Term, ...], ...] = ()


@dataclass(frozen=True)
class NodeFeatureGroup:
    name: str
    rules: tuple[GroupRule, ...]
    file: str = ""
    places: tuple[str, ...] = ()

    def where(self, index: int) -> str:
        place = self.places[index] if index < len(self.places) else self.file
        return f"{place}: NodeFeatureGroup/{self.name} rule {self.rules[index].name!r}"


# Where a path of an object is written (`file:line:col`); the file alone when unknown.
Locate = Callable[[tuple[str | int, ...]], str]


@dataclass
class NodeFeature:
    """One NodeFeature object's spec: the features and the labels nfd-worker asks for."""

    name: str
    features: Features
    labels: dict[str, str]


def _where(where: str, path: str) -> str:
    return f"{where}: {path}" if path else where


def _mapping(value: Any, where: str, path: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RuleError(f"{_where(where, path)}: must be a mapping")
    return value


def _string(value: Any, where: str, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RuleError(f"{_where(where, path)}: must be a string (quote it)")
    return value


def _strings(value: Any, where: str, path: str) -> dict[str, str]:
    found = _mapping(value, where, path) or {}
    return {str(k): _string(v, where, f"{path}.{k}") for k, v in found.items()}


def _expression(value: Any, where: str, path: str) -> Expression:
    found = _mapping(value, where, path)
    if found is None:
        raise RuleError(f"{_where(where, path)}: must be a mapping with `op`")
    values = found.get("value")
    if values is None:
        values = []
    if not isinstance(values, list):
        raise RuleError(f"{_where(where, path)}.value: must be a list of strings")
    return Expression(
        op=_string(found.get("op"), where, f"{path}.op"),
        value=tuple(_string(v, where, f"{path}.value[{i}]") for i, v in enumerate(values)),
        type=_string(found.get("type"), where, f"{path}.type"),
    )


def _terms(value: Any, where: str, path: str) -> tuple[Term, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(f"{_where(where, path)}: must be a list")
    terms = []
    for i, raw in enumerate(value):
        at = f"{path}[{i}]"
        term = _mapping(raw, where, at) or {}
        expressions = _mapping(term.get("matchExpressions"), where, f"{at}.matchExpressions")
        name = term.get("matchName")
        terms.append(
            Term(
                feature=_string(term.get("feature"), where, f"{at}.feature"),
                expressions=None
                if expressions is None
                else tuple(
                    (str(k), _expression(v, where, f"{at}.matchExpressions.{k}"))
                    for k, v in expressions.items()
                ),
                name=None if name is None else _expression(name, where, f"{at}.matchName"),
            )
        )
    return tuple(terms)


def _taints(value: Any, where: str, path: str) -> tuple[Taint, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(f"{_where(where, path)}: must be a list")
    out = []
    for i, raw in enumerate(value):
        at = f"{path}[{i}]"
        taint = _mapping(raw, where, at) or {}
        out.append(
            Taint(
                key=_string(taint.get("key"), where, f"{at}.key"),
                value=_string(taint.get("value"), where, f"{at}.value"),
                effect=_string(taint.get("effect"), where, f"{at}.effect"),
            )
        )
    return tuple(out)


def _match_any(found: dict[str, Any], at: str) -> tuple[tuple[Term, ...], ...]:
    match_any = found.get("matchAny")
    if match_any is not None and not isinstance(match_any, list):
        raise RuleError(f"{at}: matchAny: must be a list")
    return tuple(
        _terms(
            (_mapping(elem, at, f"matchAny[{i}]") or {}).get("matchFeatures"),
            at,
            f"matchAny[{i}].matchFeatures",
        )
        for i, elem in enumerate(match_any or [])
    )


def _rule_fields(raw: Any, where: str, path: str) -> tuple[dict[str, Any], str, str]:
    found = _mapping(raw, where, path) or {}
    name = _string(found.get("name"), where, f"{path}.name")
    at = f"{where} rule {name!r}" if name else f"{where}: {path}"
    return found, name, at


def parse_rule(raw: Any, where: str, index: int) -> Rule:
    found, name, at = _rule_fields(raw, where, f"spec.rules[{index}]")
    return Rule(
        name=name,
        labels=_strings(found.get("labels"), at, "labels"),
        labels_template=_string(found.get("labelsTemplate"), at, "labelsTemplate"),
        annotations=_strings(found.get("annotations"), at, "annotations"),
        vars=_strings(found.get("vars"), at, "vars"),
        vars_template=_string(found.get("varsTemplate"), at, "varsTemplate"),
        taints=_taints(found.get("taints"), at, "taints"),
        extended_resources=_strings(found.get("extendedResources"), at, "extendedResources"),
        match_features=_terms(found.get("matchFeatures"), at, "matchFeatures"),
        match_any=_match_any(found, at),
    )


def parse_group_rule(raw: Any, where: str, index: int) -> GroupRule:
    found, name, at = _rule_fields(raw, where, f"spec.featureGroupRules[{index}]")
    return GroupRule(
        name=name,
        vars=_strings(found.get("vars"), at, "vars"),
        vars_template=_string(found.get("varsTemplate"), at, "varsTemplate"),
        match_features=_terms(found.get("matchFeatures"), at, "matchFeatures"),
        match_any=_match_any(found, at),
    )


def _identity(data: Any, file: str, kind: str) -> tuple[dict[str, Any], str]:
    if not isinstance(data, dict):
        raise RuleError(f"{file}: not a Kubernetes object")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != kind:
        shown = f"{data.get('apiVersion')}/{data.get('kind')}"
        raise RuleError(f"{file}: {shown} is not a {API_VERSION} {kind}")
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise RuleError(f"{file}: {kind} without metadata.name")
    return data, name


def _locate(file: str, at: Locate | None) -> Locate:
    return at or (lambda _path: file)


def parse_node_feature_rule(data: Any, file: str, at: Locate | None = None) -> NodeFeatureRule:
    """A NodeFeatureRule object; RuleError naming the place, object and rule otherwise."""
    locate = _locate(file, at)
    found, name = _identity(data, locate(()), "NodeFeatureRule")
    spec = _mapping(found.get("spec"), f"{locate(())}: NodeFeatureRule/{name}", "spec") or {}
    rules = spec.get("rules")
    if not isinstance(rules, list):
        raise RuleError(f"{locate(('spec',))}: NodeFeatureRule/{name}: spec.rules: must be a list")
    places = tuple(locate(("spec", "rules", i)) for i in range(len(rules)))
    return NodeFeatureRule(
        name,
        tuple(
            parse_rule(r, f"{places[i]}: NodeFeatureRule/{name}", i) for i, r in enumerate(rules)
        ),
        file=file,
        places=places,
    )


def parse_node_feature_group(data: Any, file: str, at: Locate | None = None) -> NodeFeatureGroup:
    """A NodeFeatureGroup object (its spec.featureGroupRules; the status is not read)."""
    locate = _locate(file, at)
    found, name = _identity(data, locate(()), "NodeFeatureGroup")
    spec = _mapping(found.get("spec"), f"{locate(())}: NodeFeatureGroup/{name}", "spec") or {}
    rules = spec.get("featureGroupRules")
    if not isinstance(rules, list):
        raise RuleError(
            f"{locate(('spec',))}: NodeFeatureGroup/{name}: spec.featureGroupRules: must be a list"
        )
    places = tuple(locate(("spec", "featureGroupRules", i)) for i in range(len(rules)))
    return NodeFeatureGroup(
        name,
        tuple(
            parse_group_rule(r, f"{places[i]}: NodeFeatureGroup/{name}", i)
            for i, r in enumerate(rules)
        ),
        file=file,
        places=places,
    )


def _elements(value: Any, where: str, path: str) -> Any:
    found = _mapping(value, where, path)
    return None if found is None else found.get("elements")


def parse_features(raw: Any, where: str) -> Features:
    """types.go Features from `spec.features`."""
    found = _mapping(raw, where, "spec.features") or {}
    features = Features()
    for name, value in (_mapping(found.get("flags"), where, "flags") or {}).items():
        elements = _elements(value, where, f"flags.{name}")
        features.flags[str(name)] = (
            None if elements is None else set(_mapping(elements, where, f"flags.{name}") or {})
        )
    for name, value in (_mapping(found.get("attributes"), where, "attributes") or {}).items():
        elements = _elements(value, where, f"attributes.{name}")
        features.attributes[str(name)] = (
            None if elements is None else _strings(elements, where, f"attributes.{name}")
        )
    for name, value in (_mapping(found.get("instances"), where, "instances") or {}).items():
        elements = _elements(value, where, f"instances.{name}")
        if elements is None:
            features.instances[str(name)] = None
            continue
        if not isinstance(elements, list):
            raise RuleError(f"{where}: instances.{name}.elements: must be a list")
        features.instances[str(name)] = [
            _strings(
                (_mapping(e, where, f"instances.{name}[{i}]") or {}).get("attributes"),
                where,
                f"instances.{name}[{i}].attributes",
            )
            for i, e in enumerate(elements)
        ]
    return features


def parse_node_feature(data: Any, file: str) -> NodeFeature:
    """A NodeFeature object's spec (features and labels)."""
    found, name = _identity(data, file, "NodeFeature")
    where = f"{file}: NodeFeature/{name}"
    spec = _mapping(found.get("spec"), where, "spec") or {}
    return NodeFeature(
        name,
        parse_features(spec.get("features"), where),
        _strings(spec.get("labels"), where, "spec.labels"),
    )
