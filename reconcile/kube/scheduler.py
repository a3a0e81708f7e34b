"""The scheduler's filters on labels, to the letter: node affinity exactly as
k8s.io/component-helpers/scheduling/corev1/nodeaffinity evaluates it (terms OR-ed,
expressions and fields AND-ed, an empty term matches nothing), node selectors, cordoned
nodes, untolerated taints, and FitError's message. Pure functions of a pod spec and a node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from reconcile.kube.selector import (
    Nothing,
    Op,
    Requirement,
    Selector,
    requirement_errors,
)
from reconcile.kube.validation import FieldError

HOSTNAME: Final = "kubernetes.io/hostname"

_OPERATORS: Final = {
    "In": Op.IN,
    "NotIn": Op.NOT_IN,
    "Exists": Op.EXISTS,
    "DoesNotExist": Op.DOES_NOT_EXIST,
    "Gt": Op.GREATER_THAN,
    "Lt": Op.LESS_THAN,
}
_VALID_SELECTOR_OPERATORS: Final = '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"'
_VALID_FIELD_OPERATORS: Final = '"In", "NotIn"'

# kube-scheduler's filter failure reasons (pkg/scheduler/framework/plugins/...).
REASON_UNSCHEDULABLE: Final = "node(s) were unschedulable"
REASON_AFFINITY: Final = "node(s) didn't match Pod's node affinity/selector"
REASON_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
REASON_NODE_NAME: Final = "node(s) didn't match the requested node name"


@dataclass(frozen=True)
class NodeView:
    """A node as placement sees it."""

    name: str
    labels: Mapping[str, str]
    unschedulable: bool = False
    taints: tuple[Mapping[str, Any], ...] = ()


# --- k8s.io/component-helpers nodeaffinity ------------------------------------------------


@dataclass(frozen=True)
class _Term:
    labels: Selector | None
    fields: tuple[tuple[bool, str], ...] | None  # (equal?, metadata.name value)

    def matches(self, node: NodeView) -> bool:
        if self.labels is not None and not self.labels.matches(node.labels):
            return False
        # Fields are ignored for a node without a name, as upstream (extractNodeFields).
        if self.fields is not None and node.name:
            return all((node.name == value) == equal for equal, value in self.fields)
        return True


def _requirements_as_selector(
    expressions: Sequence[Mapping[str, Any]] | None, path: str
) -> tuple[Selector | None, list[FieldError]]:
    """nodeSelectorRequirementsAsSelector: an empty list selects nothing."""
    if not expressions:
        return _NOTHING, []
    problems: list[FieldError] = []
    requirements: list[Requirement] = []
    for i, expression in enumerate(expressions):
        where = f"{path}[{i}]"
        operator = _OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            problems.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{where}.operator",
                    detail=f"supported values: {_VALID_SELECTOR_OPERATORS}",
                )
            )
            continue
        key = str(expression.get("key", ""))
        values = tuple(str(v) for v in expression.get("values") or ())
        errors = requirement_errors(key, operator, values)
        if errors:
            problems.extend(
                FieldError(e.type, f"{where}.{e.field}", detail=e.detail) for e in errors
            )
            continue
        requirements.append(Requirement(key, operator, tuple(sorted(values))))
    if problems:
        return None, problems
    return Selector(tuple(sorted(requirements, key=lambda r: r.key))), []


_NOTHING: Final = Nothing()


def _requirements_as_fields(
    expressions: Sequence[Mapping[str, Any]], path: str
) -> tuple[tuple[tuple[bool, str], ...] | None, list[FieldError]]:
    """nodeSelectorRequirementsAsFieldSelector: In/NotIn with exactly one value."""
    problems: list[FieldError] = []
    terms: list[tuple[bool, str]] = []
    for i, expression in enumerate(expressions):
        where = f"{path}[{i}]"
        operator = expression.get("operator")
        values = list(expression.get("values") or ())
        if operator in ("In", "NotIn"):
            if len(values) != 1:
                problems.append(
                    FieldError(
                        "FieldValueInvalid", f"{where}.values", detail="must have one element"
                    )
                )
            elif expression.get("key") == "metadata.name":
                terms.append((operator == "In", str(values[0])))
            else:
                # Only metadata.name is a node field: any other key never equals a value.
                terms.append((operator == "In", "\x00no such field"))
        else:
            problems.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{where}.operator",
                    detail=f"supported values: {_VALID_FIELD_OPERATORS}",
                )
            )
    if problems:
        return None, problems
    return tuple(terms), []


def is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def _parse_term(term: Mapping[str, Any], path: str) -> tuple[_Term | None, list[FieldError]]:
    labels_: Selector | None = None
    fields_: tuple[tuple[bool, str], ...] | None = None
    problems: list[FieldError] = []
    if term.get("matchExpressions"):
        labels_, found = _requirements_as_selector(
            term["matchExpressions"], f"{path}.matchExpressions"
        )
        problems += found
    if term.get("matchFields"):
        fields_, found = _requirements_as_fields(term["matchFields"], f"{path}.matchFields")
        problems += found
    if problems:
        return None, problems
    return _Term(labels_, fields_), []


@dataclass(frozen=True)
class NodeSelector:
    """A parsed v1.NodeSelector: terms OR-ed; a term that does not parse matches nothing."""

    terms: tuple[_Term, ...]
    problems: tuple[FieldError, ...] = ()

    @classmethod
    def parse(
        cls, selector: Mapping[str, Any] | None, path: str = "nodeSelectorTerms"
    ) -> NodeSelector:
        terms = []
        problems: list[FieldError] = []
        for i, term in enumerate((selector or {}).get("nodeSelectorTerms") or ()):
            if is_empty_term(term or {}):
                continue  # an empty term selects no objects
            parsed, found = _parse_term(term, f"{path}[{i}]")
            problems += found
            if parsed is not None:
                terms.append(parsed)
        return cls(tuple(terms), tuple(problems))

    def matches(self, node: NodeView | None) -> bool:
        if node is None:
            return False
        return any(term.matches(node) for term in self.terms)


def preferred_score(
    terms: Sequence[Mapping[str, Any]], node: NodeView | None
) -> tuple[int, list[FieldError]]:
    """PreferredSchedulingTerms.Score: the weights of the preferences a node matches.
    Terms of weight 0 are skipped, their problems unreported, as upstream."""
    score = 0
    problems: list[FieldError] = []
    parsed: list[tuple[int, _Term]] = []
    for i, term in enumerate(terms):
        weight = int(term.get("weight") or 0)
        if weight == 0:
            continue
        result, found = _parse_term(term.get("preference") or {}, f"[{i}]")
        problems += found
        if result is not None:
            parsed.append((weight, result))
    if problems:
        return 0, problems
    if node is not None:
        score = sum(weight for weight, term in parsed if term.matches(node))
    return score, []


def required_node_affinity_matches(pod_spec: Mapping[str, Any], node: NodeView) -> bool:
    """GetRequiredNodeAffinity(pod).Match(node): nodeSelector and required node affinity."""
    node_selector = pod_spec.get("nodeSelector") or {}
    if node_selector and not all(node.labels.get(k) == str(v) for k, v in node_selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return NodeSelector.parse(required).matches(node)


# --- the scheduler's filters ------------------------------------------------------------------

# What admission adds to every pod: tolerating not-ready and unreachable for 300 s.
DEFAULT_TOLERATIONS: Final = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod_spec: Mapping[str, Any], node: NodeView) -> Mapping[str, Any] | None:
    tolerations = [*(pod_spec.get("tolerations") or ()), *DEFAULT_TOLERATIONS]
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def filter_reason(
    pod_spec: Mapping[str, Any], node: NodeView, *, daemon: bool = False
) -> str | None:
    """Why the scheduler would not place the pod on `node`, in its words (first failing
    filter, in the default profile's order), or None when the node fits."""
    if node.unschedulable and not daemon:
        return REASON_UNSCHEDULABLE
    wanted = pod_spec.get("nodeName")
    if wanted and wanted != node.name:
        return REASON_NODE_NAME
    taint = untolerated_taint(pod_spec, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    if not required_node_affinity_matches(pod_spec, node):
        return REASON_AFFINITY
    return None


def scheduler_message(total: int, reasons: Iterable[str]) -> str:
    """FitError.Error(): `0/3 nodes are available: 3 node(s) didn't match ...`."""
    histogram = Counter(reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."
