"""One NodeFeatureRule rule executed against a node's features, as nfd-master executes it.

A port of pkg/apis/nfd/nodefeaturerule/rule.go (node-feature-discovery NFD_COMMIT):
Execute and evaluateFeatureMatcher with failFast on (nfd-master's processNodeFeatureRule
calls Execute(&rule, features, true)). `check` finds the errors a rule carries whatever the
node (operators, value counts, patterns, template syntax), so that a rule that can never
run is refused before anything is evaluated; `explain` says, term by term, why a rule
matched or did not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reconcile.nfd import expression, template
from reconcile.nfd.expression import ExpressionError, MatchedElement
from reconcile.nfd.model import Expression, Features, GroupRule, Rule, RuleError, Taint, Term

# domain -> feature -> matched elements: the data a template ranges over.
MatchedFeatures = dict[str, dict[str, list[MatchedElement]]]


@dataclass
class RuleOutput:
    """rule.go RuleOutput: what a rule gives when it matched (empty when it did not)."""

    matched: bool
    labels: dict[str, str] = field(default_factory=dict)
    vars: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    extended_resources: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


def _terms(rule: Rule | GroupRule) -> list[tuple[str, Term]]:
    found = [(f"matchFeatures[{i}]", t) for i, t in enumerate(rule.match_features)]
    for n, terms in enumerate(rule.match_any):
        found += [(f"matchAny[{n}].matchFeatures[{i}]", t) for i, t in enumerate(terms)]
    return found


def check(rule: Rule | GroupRule) -> str | None:
    """The first error that stops `rule` on every node, as `<field>: <error>`; None when
    it can run."""
    labels_template = rule.labels_template if isinstance(rule, Rule) else ""
    for path, term in _terms(rule):
        for name, e in term.expressions or ():
            problem = expression.check(e)
            if problem is not None:
                return f"{path}.matchExpressions.{name}: {problem}"
        if term.name is not None and (problem := expression.check(term.name)) is not None:
            return f"{path}.matchName: {problem}"
    for key, source in (
        ("labelsTemplate", labels_template),
        ("varsTemplate", rule.vars_template),
    ):
        if source and (problem := template.check(source)) is not None:
            return f"{key}: {problem}"
    return None


def _feature_sets(
    term: Term, features: Features
) -> tuple[bool, set[str] | None, dict[str, str] | None, list[dict[str, str]] | None]:
    name = term.feature.lower()
    available = name in features.flags or name in features.attributes or name in features.instances
    return (
        available,
        features.flags.get(name),
        features.attributes.get(name),
        features.instances.get(name),
    )


def evaluate_terms(terms: tuple[Term, ...], features: Features) -> tuple[bool, MatchedFeatures]:
    """evaluateFeatureMatcher (failFast): whether every term matches, and the matched
    elements by domain and feature. ExpressionError from an expression nfd-master
    cannot evaluate."""
    matched: MatchedFeatures = {}
    for term in terms:
        split = term.feature.split(".", 1)
        dom, nam = (split[0], split[1]) if len(split) == 2 else (term.feature.lower(), "")
        matched.setdefault(dom, {})
        available, keys, values, instances = _feature_sets(term, features)
        if not available:
            return False, matched
        elements: list[MatchedElement] = []
        is_match = True
        if term.expressions is not None:
            is_match, elements = expression.match_multi(term.expressions, keys, values, instances)
        if is_match and term.name is not None:
            is_match, more = expression.match_names_multi(term.name, keys, values, instances)
            elements = elements + more
        matched[dom].setdefault(nam, []).extend(elements)
        if not is_match:
            return False, matched
    return True, matched


def _expand(source: str, data: MatchedFeatures, out: dict[str, str]) -> None:
    if source:
        out.update(template.expand_map(source, data))


def _matched(
    match_any: Sequence[tuple[Term, ...]],
    match_features: tuple[Term, ...],
    templates: Sequence[tuple[str, dict[str, str]]],
    features: Features,
) -> bool:
    """The matching Execute and ExecuteGroupRule share: each matchAny alternative until one
    matches (all of them while there are templates to expand, each expanded into its map),
    then matchFeatures, its matches expanded too. ExpressionError and TemplateError pass."""
    any_matched = False
    for terms in match_any:
        ok, found = evaluate_terms(terms, features)
        if ok:
            any_matched = True
            if not any(source for source, _ in templates):
                break
            for source, out in templates:
                _expand(source, found, out)
    if match_any and not any_matched:
        return False
    if match_features:
        ok, found = evaluate_terms(match_features, features)
        if not ok:
            return False
        for source, out in templates:
            _expand(source, found, out)
    return True


def execute(rule: Rule, features: Features) -> RuleOutput:
    """rule.go Execute with failFast. RuleError when nfd-master would log "failed to
    process rule" (and skip it on this node)."""
    labels: dict[str, str] = {}
    vars_: dict[str, str] = {}
    templates = ((rule.labels_template, labels), (rule.vars_template, vars_))
    try:
        if not _matched(rule.match_any, rule.match_features, templates, features):
            return RuleOutput(False)
    except (ExpressionError, template.TemplateError) as e:
        raise RuleError(str(e)) from e
    labels.update(rule.labels)
    vars_.update(rule.vars)
    return RuleOutput(
        True,
        labels=labels,
        vars=vars_,
        annotations=dict(rule.annotations),
        extended_resources=dict(rule.extended_resources),
        taints=rule.taints,
    )


@dataclass
class GroupRuleOutput:
    """rule.go GroupRuleOutput: whether the group rule matched, and its vars."""

    matched: bool
    vars: dict[str, str] = field(default_factory=dict)


def execute_group_rule(rule: GroupRule, features: Features) -> GroupRuleOutput:
    """rule.go ExecuteGroupRule with failFast, as nfd-master runs it for each node of a
    NodeFeatureGroup. RuleError when nfd-master would log "failed to evaluate rule"."""
    vars_: dict[str, str] = {}
    try:
        if not _matched(
            rule.match_any, rule.match_features, ((rule.vars_template, vars_),), features
        ):
            return GroupRuleOutput(False)
    except (ExpressionError, template.TemplateError) as e:
        raise RuleError(str(e)) from e
    vars_.update(rule.vars)
    return GroupRuleOutput(True, vars_)


# ---- explanation --------------------------------------------------------------------------


def _seen(name: str, keys: set[str] | None, values: dict[str, str] | None) -> str:
    if values is not None and name in values:
        return f"value {values[name]!r}"
    if keys is not None and name in keys:
        return "flag present"
    return "absent"


def _explain_expression(
    name: str,
    e: Expression,
    keys: set[str] | None,
    values: dict[str, str] | None,
    instances: list[dict[str, str]] | None,
) -> str:
    try:
        ok, _ = expression.match_multi(((name, e),), keys, values, instances)
    except ExpressionError as err:
        return f"{name} {e.shown()}: error: {err}"
    if ok:
        return f"{name} {e.shown()}: matched"
    if instances:
        shown = ", ".join(repr(i.get(name)) if name in i else "absent" for i in instances)
        return f"{name} {e.shown()}: failed: no instance matches ({shown})"
    return f"{name} {e.shown()}: failed: {_seen(name, keys, values)}"


def explain_terms(terms: tuple[Term, ...], features: Features) -> list[str]:
    """One line per term and one per expression under it: matched, or what failed and
    the value it met. Every expression is shown, also those nfd-master's fail-fast
    evaluation never reaches."""
    lines = []
    for term in terms:
        available, keys, values, instances = _feature_sets(term, features)
        if not available:
            lines.append(f"{term.feature}: failed: the node has no such feature")
            continue
        try:
            ok, _ = evaluate_terms((term,), features)
            lines.append(f"{term.feature}: {'matched' if ok else 'failed'}")
        except ExpressionError as err:
            lines.append(f"{term.feature}: error: {err}")
        for name, e in term.expressions or ():
            lines.append("  " + _explain_expression(name, e, keys, values, instances))
        if term.name is not None:
            try:
                ok, found = expression.match_names_multi(term.name, keys, values, instances)
                names = sorted({el.get(expression.NAME, "") for el in found} - {""})
                result = (
                    f"matched {', '.join(names) or 'instances'}"
                    if ok
                    else "failed: no name matches"
                )
            except ExpressionError as err:
                result = f"error: {err}"
            lines.append(f"  matchName {term.name.shown()}: {result}")
    return lines
