"""The scheduler's filters on labels, to the letter: node affinity exactly as
k8s.io/component-helpers/scheduling/corev1/nodeaffinity evaluates it (terms OR-ed,
expressions and fields AND-ed, an empty term matches nothing), node selectors, cordoned
nodes, untolerated taints, and FitError's message; and when the taint manager evicts a
running pod from a node's NoExecute taints. Pure functions of a pod spec and a node.
"""

from __future__ import annotations

import re
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
# kube-scheduler v1.36 names no taint (tests/data/placement/taint-*.yaml, captured).
REASON_TAINT: Final = "node(s) had untolerated taint(s)"


@dataclass(frozen=True)
class NodeView:
    """A node as placement sees it."""

    name: str
    labels: Mapping[str, str]
    unschedulable: bool = False
    taints: tuple[Mapping[str, Any], ...] = ()
    # What it offers pods, in the scheduler's units (kube/resources.py); None when not
    # known (a node declared in desired/ that has not joined): fit is not evaluated.
    allocatable: Mapping[str, int] | None = None


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
    """v1.Toleration.ToleratesTaint: an empty effect matches every effect, an empty key
    every key; operator `Equal` (or none) compares values, `Exists` takes any value,
    `Gt`/`Lt` compare them as integers, any other operator matches nothing."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or ""
    value = str(toleration.get("value") or "")
    if operator in ("", "Equal"):
        return value == str(taint.get("value") or "")
    if operator == "Exists":
        return True
    if operator in ("Gt", "Lt"):
        # Behind the TaintTolerationComparisonOperators gate: the API server admits such
        # a toleration only with the gate on, so a live pod that carries one is judged
        # as the gated scheduler and taint manager judge it.
        ours, theirs = _decimal(value), _decimal(str(taint.get("value") or ""))
        if ours is None or theirs is None:
            return False
        return theirs > ours if operator == "Gt" else theirs < ours
    return False


_DECIMAL: Final = re.compile(r"0|-?[1-9][0-9]*")


def _decimal(text: str) -> int | None:
    """content.IsDecimalInteger then ParseInt(_, 10, 64): canonical form, 64 bits."""
    if not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def untolerated_taint(pod_spec: Mapping[str, Any], node: NodeView) -> Mapping[str, Any] | None:
    tolerations = [*(pod_spec.get("tolerations") or ()), *DEFAULT_TOLERATIONS]
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


# --- the taint manager (pkg/controller/tainteviction) -----------------------------------------


def matching_tolerations(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]] | None:
    """v1helper.GetMatchingTolerations: for each taint, the first toleration (in the
    pod's order) that tolerates it; None when some taint is tolerated by none."""
    used = []
    for taint in taints:
        first = next((t for t in tolerations if tolerates(t, taint)), None)
        if first is None:
            return None
        used.append(first)
    return used


def eviction_delay(pod_spec: Mapping[str, Any], taints: Sequence[Mapping[str, Any]]) -> int | None:
    """When the taint manager evicts a pod bound to a node carrying `taints`, in seconds
    from the moment it sees them: 0 at once (a NoExecute taint no toleration of the pod
    matches, or a matching tolerationSeconds of 0 or less), the least tolerationSeconds
    of the tolerations it uses, or None: never (no NoExecute taint, or each tolerated
    without a limit). Only NoExecute taints count; the pod's tolerations are its own, as
    admission left them (the not-ready and unreachable 300 s included)."""
    no_execute = [t for t in taints if t.get("effect") == "NoExecute"]
    if not no_execute:
        return None
    used = matching_tolerations(no_execute, list(pod_spec.get("tolerations") or ()))
    if used is None:
        return 0
    # getMinTolerationTime: the least tolerationSeconds; 0 or less is at once.
    limits = [int(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    if not limits:
        return None
    return max(0, min(limits))


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
        return REASON_TAINT
    if not required_node_affinity_matches(pod_spec, node):
        return REASON_AFFINITY
    return None


# schedulePod's ErrNoNodesAvailable: what a pod's PodScheduled condition says when the
# cluster has no node at all (no FitError is built then).
NO_NODES: Final = "no nodes available to schedule pods"


def scheduler_message(total: int, reasons: Iterable[str]) -> str:
    """FitError.Error(): `0/3 nodes are available: 3 node(s) didn't match ...`; with no
    node at all, the scheduler's `no nodes available to schedule pods`. Never empty, and
    never a list of reasons with nothing in it."""
    if total == 0:
        return NO_NODES
    histogram = Counter(reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    if not parts:
        return f"0/{total} nodes are available."
    return f"0/{total} nodes are available: {', '.join(parts)}."
