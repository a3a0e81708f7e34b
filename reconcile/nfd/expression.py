"""The match operators of NodeFeatureRule expressions, as nfd-master evaluates them.

A port of pkg/apis/nfd/nodefeaturerule/expression.go (node-feature-discovery NFD_COMMIT):
evaluateMatchExpression and the set matchers built on it (MatchMulti, MatchNamesMulti and
the single-type ones they generalize), with failFast on as nfd-master runs them. Go's
regexp is RE2, as reconcile.kube.regexp is; `type: version` compares with
Masterminds/semver v3 (NewVersion with CoerceNewVersion, the pre-release dropped), which
`_version` ports.

Two differences, both about when an error shows, never about a result:
- `check` finds a rule's own mistakes (unknown op, wrong value count, a pattern or number
  that does not parse, a range whose ends are the wrong way round) before any node is
  looked at; nfd-master meets each only when the expression is first evaluated against a
  value, and then skips the rule on that node.
- Go ranges over a MatchExpressionSet in a random order, so which failing expression
  stops a term first is chance in nfd-master; here it is the order written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from reconcile.kube import regexp
from reconcile.nfd.model import Attributes, Expression

MatchedElement = dict[str, str]
Expressions = Sequence[tuple[str, Expression]]

NAME: Final = "Name"
VALUE: Final = "Value"

ANY: Final = "Any"
OPS: Final = frozenset(
    {
        ANY,
        "In",
        "NotIn",
        "InRegexp",
        "Exists",
        "DoesNotExist",
        "Gt",
        "Ge",
        "Lt",
        "Le",
        "GtLt",
        "GeLe",
        "IsTrue",
        "IsFalse",
    }
)
_NO_VALUE: Final = frozenset({ANY, "Exists", "DoesNotExist", "IsTrue", "IsFalse"})
_SOME_VALUES: Final = frozenset({"In", "NotIn", "InRegexp"})
_ONE_VALUE: Final = frozenset({"Gt", "Ge", "Lt", "Le"})
_TWO_VALUES: Final = frozenset({"GtLt", "GeLe"})
VERSION: Final = "version"

_INT: Final = re.compile(r"[+-]?[0-9]+")
_INT64: Final = 1 << 63
# Masterminds/semver v3 looseSemVerRegex, anchored (version.go).
_LOOSE_SEMVER: Final = re.compile(
    r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
    r"(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)
_UINT64: Final = 1 << 64


class ExpressionError(ValueError):
    """An expression nfd-master refuses to evaluate; str() is its error, as Go words it."""


def go_list(values: Sequence[str]) -> str:
    """Go's %v of a []string."""
    return "[" + " ".join(values) + "]"


def _atoi(text: str) -> int | None:
    """strconv.Atoi: an optional sign and decimal digits, within int64."""
    if not _INT.fullmatch(text):
        return None
    number = int(text)
    return number if -_INT64 <= number < _INT64 else None


def _version(text: str) -> tuple[int, int, int] | None:
    """semver.NewVersion (coercing) with SetPrerelease(""): major, minor, patch."""
    m = _LOOSE_SEMVER.fullmatch(text)
    if m is None:
        return None
    parts = [int(m.group(1)), int((m.group(2) or ".0")[1:]), int((m.group(3) or ".0")[1:])]
    if any(p >= _UINT64 for p in parts):
        return None
    pre, meta = m.group(5), m.group(8)
    if pre is not None:
        for part in pre.split("."):
            if part.isdigit() and len(part) > 1 and part[0] == "0":
                return None  # ErrSegmentStartsZero
    if meta is not None and any(not p for p in meta.split(".")):
        return None
    return parts[0], parts[1], parts[2]


def _expression_text(e: Expression) -> str:
    """Go's %v of a *MatchExpression."""
    return f"&{{{e.op} {go_list(e.value)} {e.type}}}"


def check(e: Expression) -> str | None:
    """The error nfd-master gives for `e` whatever the feature's value; None when `e`
    is valid (the value-count rules of evaluateMatchExpression, Go's wording)."""
    if e.op not in OPS:
        return f"invalid Op {e.op!r}"
    if e.op in _NO_VALUE and e.value:
        return f"invalid expression, 'value' field must be empty for Op {e.op!r} (have {go_list(e.value)})"
    if e.op in _SOME_VALUES and not e.value:
        return f"invalid expression, 'value' field must be non-empty for Op {e.op!r}"
    if e.op == "InRegexp":
        for pattern in e.value:
            if regexp.compile_error(pattern) is not None:
                return f"invalid expressiom, 'value' field must only contain valid regexps for Op {e.op!r} (have {go_list(e.value)})"
    if e.op in _ONE_VALUE and len(e.value) != 1:
        return f"invalid expression, 'value' field must contain exactly one element for Op {e.op!r} (have {go_list(e.value)})"
    if e.op in _TWO_VALUES and len(e.value) != 2:
        return f"invalid expression, 'value' field must contain exactly two elements for Op {e.op!r} (have {go_list(e.value)})"
    if e.op in _ONE_VALUE | _TWO_VALUES:
        if e.type not in ("", VERSION):
            return f"invalid expression, 'type' field only accepts {VERSION!r} value for Op {e.op!r} (have {e.type!r})"
        parse = _version if e.type == VERSION else _atoi
        for v in e.value:
            if parse(v) is None:
                kind = "version" if e.type == VERSION else "number"
                return f"not a {kind} {v!r} in {_expression_text(e)}"
        if e.op in _TWO_VALUES and e.type == "":
            low, high = (_atoi(v) for v in e.value)
            assert low is not None and high is not None
            if low >= high:
                return f"invalid expression, value[0] must be less than Value[1] for Op {e.op!r} (have {go_list(e.value)})"
    return None


def evaluate(e: Expression, valid: bool, value: str | None) -> bool:
    """evaluateMatchExpression: whether `value` (present when `valid`; None for a flag)
    satisfies `e`. ExpressionError for an invalid `e` or a value its op cannot compare."""
    problem = check(e)
    if problem is not None:
        raise ExpressionError(problem)
    op = e.op
    if op == ANY:
        return True
    if op == "Exists":
        return valid
    if op == "DoesNotExist":
        return not valid
    if not valid or value is None:
        return False
    if op == "In":
        return value in e.value
    if op == "NotIn":
        return value not in e.value
    if op == "InRegexp":
        return any(regexp.search(pattern, value) for pattern in e.value)
    if op == "IsTrue":
        return value == "true"
    if op == "IsFalse":
        return value == "false"
    if e.type == VERSION:
        found = _version(value)
        if found is None:
            raise ExpressionError(f"not a version {value!r}")
        bounds = [_version(v) for v in e.value]
        return _compare(op, found, bounds)
    number = _atoi(value)
    if number is None:
        raise ExpressionError(f"not a number {value!r}")
    return _compare(op, number, [_atoi(v) for v in e.value])


def _compare(op: str, v: Any, bounds: Sequence[Any]) -> bool:
    b = bounds
    if op == "Gt":
        return bool(v > b[0])
    if op == "Ge":
        return bool(v >= b[0])
    if op == "Lt":
        return bool(v < b[0])
    if op == "Le":
        return bool(v <= b[0])
    if op == "GtLt":
        return bool(b[0] < v < b[1])
    return bool(b[0] <= v <= b[1])


def _by_name(elements: list[MatchedElement]) -> list[MatchedElement]:
    # Go's sort.Slice on these few elements is an insertion sort: stable, as sorted() is.
    return sorted(elements, key=lambda e: e.get(NAME, ""))


def match_instances(
    expressions: Expressions, instances: Sequence[Attributes] | None
) -> tuple[bool, list[MatchedElement]]:
    """MatchGetInstances (failFast): the instances every expression matches."""
    matched = []
    for attributes in instances or ():
        if all(evaluate(e, name in attributes, attributes.get(name)) for name, e in expressions):
            matched.append(attributes)
    return bool(matched), matched


def match_multi(
    expressions: Expressions,
    keys: set[str] | None,
    values: Mapping[str, str] | None,
    instances: Sequence[Attributes] | None,
) -> tuple[bool, list[MatchedElement]]:
    """MatchMulti (failFast): flags and attributes as a union, instances apart; the
    matched elements for a template."""
    elements: list[MatchedElement] = []
    matched = keys is not None or values is not None
    for name, e in expressions:
        match_k = match_v = False
        if keys is not None:
            match_k = evaluate(e, name in keys, None)
            if match_k:
                elements.append({NAME: name})
            elif e.op == "DoesNotExist":
                matched, elements = False, []
                break
        if values is not None:
            match_v = evaluate(e, name in values, values.get(name))
            if match_v:
                elements.append({NAME: name, VALUE: values.get(name, "")})
            elif e.op == "DoesNotExist":
                matched, elements = False, []
                break
        if not match_k and not match_v:
            matched, elements = False, []
            break
    elements = _by_name(elements)
    found, matched_instances = match_instances(expressions, instances)
    return matched or found, elements + matched_instances


def match_names_multi(
    e: Expression,
    keys: set[str] | None,
    values: Mapping[str, str] | None,
    instances: Sequence[Attributes] | None,
) -> tuple[bool, list[MatchedElement]]:
    """MatchNamesMulti: the flags, attributes and instances whose names `e` matches."""
    elements: list[MatchedElement] = [{NAME: k} for k in sorted(keys or ()) if evaluate(e, True, k)]
    elements += [
        {NAME: k, VALUE: v} for k, v in sorted((values or {}).items()) if evaluate(e, True, k)
    ]
    elements = _by_name(elements) + match_instance_attribute_names(e, instances)[1]
    return bool(elements), elements


def match_keys(
    expressions: Expressions, keys: set[str] | None
) -> tuple[bool, list[MatchedElement]]:
    """MatchGetKeys: MatchMulti over flags alone, a nil set read as an empty one."""
    return match_multi(expressions, keys or set(), None, None)


def match_values(
    expressions: Expressions, values: Mapping[str, str] | None
) -> tuple[bool, list[MatchedElement]]:
    """MatchGetValues (failFast): MatchMulti over attributes alone, a nil map read as an
    empty one."""
    return match_multi(expressions, None, values or {}, None)


def match_key_names(e: Expression, keys: set[str] | None) -> tuple[bool, list[MatchedElement]]:
    """MatchKeyNames: the flags whose names `e` matches."""
    return match_names_multi(e, keys, None, None)


def match_value_names(
    e: Expression, values: Mapping[str, str] | None
) -> tuple[bool, list[MatchedElement]]:
    """MatchValueNames: the attributes whose names `e` matches."""
    return match_names_multi(e, None, values, None)


def match_instance_attribute_names(
    e: Expression, instances: Sequence[Attributes] | None
) -> tuple[bool, list[MatchedElement]]:
    """MatchInstanceAttributeNames: the instances one of whose attribute names `e`
    matches. Every name is evaluated, as MatchValueNames does: a name `e` cannot compare
    is an error even when another name of the instance matched."""
    matched = []
    for attributes in instances or ():
        if [k for k in sorted(attributes) if evaluate(e, True, k)]:
            matched.append(attributes)
    return bool(matched), matched
