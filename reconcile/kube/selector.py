"""Label selectors, parsed and matched as k8s.io/apimachinery/pkg/labels does it.

Two forms: the string syntax of `?labelSelector=` and `kubectl -l`
(`a=b,c in (d,e),!f,g>3`), and the structured `LabelSelector` of PodDisruptionBudgets
and pod affinity terms (`matchLabels` + `matchExpressions`). Error messages are the
upstream ones, because the sandbox answers a bad selector with them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from reconcile.kube import labels


class SelectorError(ValueError):
    """A selector that does not parse; str() is the upstream message."""


class Op(enum.StrEnum):
    IN = "in"
    NOT_IN = "notin"
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_INT64: Final = re.compile(r"[+-]?[0-9]+")
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): sign and digits only, in range; else None."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Op
    values: tuple[str, ...] = ()

    def matches(self, labels_: Mapping[str, str]) -> bool:
        has = self.key in labels_
        if self.op in (Op.IN, Op.EQUALS, Op.DOUBLE_EQUALS):
            return has and labels_[self.key] in self.values
        if self.op in (Op.NOT_IN, Op.NOT_EQUALS):
            return not has or labels_[self.key] not in self.values
        if self.op is Op.EXISTS:
            return has
        if self.op is Op.DOES_NOT_EXIST:
            return not has
        if not has or len(self.values) != 1:
            return False
        have = parse_int64(labels_[self.key])
        want = parse_int64(self.values[0])
        if have is None or want is None:
            return False
        return have > want if self.op is Op.GREATER_THAN else have < want

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return self.key
        if self.op is Op.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.op in (Op.IN, Op.NOT_IN):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        symbol = {Op.GREATER_THAN: ">", Op.LESS_THAN: "<"}.get(self.op, str(self.op))
        return f"{self.key}{symbol}{self.values[0] if self.values else ''}"


@dataclass(frozen=True)
class Selector:
    """Requirements AND-ed together; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels_: Mapping[str, str]) -> bool:
        return all(r.matches(labels_) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


class Nothing(Selector):
    """Matches no object (a nil LabelSelector)."""

    def matches(self, labels_: Mapping[str, str]) -> bool:
        return False


# --- the string syntax ---------------------------------------------------------------------

_SPECIAL: Final = frozenset("=!(),<>")
_WHITESPACE: Final = frozenset(" \t\r\n")


class _T(enum.Enum):
    ERROR = enum.auto()
    END = enum.auto()
    CLOSE = enum.auto()
    COMMA = enum.auto()
    NOT = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN = enum.auto()


_TOKENS: Final = {
    ")": _T.CLOSE,
    ",": _T.COMMA,
    "!": _T.NOT,
    "==": _T.DOUBLE_EQUALS,
    "=": _T.EQUALS,
    ">": _T.GREATER,
    "in": _T.IN,
    "<": _T.LESS,
    "!=": _T.NOT_EQUALS,
    "notin": _T.NOT_IN,
    "(": _T.OPEN,
}
_BINARY_OPERATORS: Final = ("in", "notin", "=", "==", "!=", "gt", "lt")


def _lex(text: str) -> list[tuple[_T, str]]:
    tokens: list[tuple[_T, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append((_T.END, ""))
            return tokens
        if text[i] in _SPECIAL:
            buffer, last = "", None
            while i < n and text[i] in _SPECIAL:
                buffer += text[i]
                if buffer in _TOKENS:
                    last = (_TOKENS[buffer], buffer)
                elif last is not None:
                    break
                i += 1
            if last is None:
                tokens.append((_T.ERROR, f"error expected: keyword found '{buffer}'"))
            else:
                tokens.append(last)
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        word = text[start:i]
        tokens.append((_TOKENS.get(word, _T.IDENTIFIER), word))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.position = 0

    def lookahead(self, values: bool = True) -> tuple[_T, str]:
        token, literal = self.items[self.position]
        if values and token in (_T.IN, _T.NOT_IN):
            token = _T.IDENTIFIER
        return token, literal

    def consume(self, values: bool = True) -> tuple[_T, str]:
        found = self.lookahead(values)
        self.position += 1
        return found

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.lookahead()
            if token in (_T.IDENTIFIER, _T.NOT):
                try:
                    requirements.append(self.requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from None
                token, literal = self.consume()
                if token is _T.END:
                    return requirements
                if token is _T.COMMA:
                    token2, literal2 = self.lookahead()
                    if token2 not in (_T.IDENTIFIER, _T.NOT):
                        raise SelectorError(f"found '{literal2}', expected: identifier after ','")
                    continue
                raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            if token is _T.END:
                return requirements
            raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        key, op = self.key_and_inferred_operator()
        if op in (Op.EXISTS, Op.DOES_NOT_EXIST):
            return new_requirement(key, op, ())
        op = self.operator()
        values = self.value_set() if op in (Op.IN, Op.NOT_IN) else self.exact_value()
        return new_requirement(key, op, tuple(sorted(values)))

    def key_and_inferred_operator(self) -> tuple[str, Op | None]:
        op: Op | None = None
        token, literal = self.consume()
        if token is _T.NOT:
            op = Op.DOES_NOT_EXIST
            token, literal = self.consume()
        if token is not _T.IDENTIFIER:
            raise SelectorError(f"found '{literal}', expected: identifier")
        problems = labels.is_qualified_name(literal)
        if problems:
            raise SelectorError(_field_invalid("<nil>", literal, "; ".join(problems)))
        following, _ = self.lookahead()
        if following in (_T.END, _T.COMMA) and op is None:
            op = Op.EXISTS
        return literal, op

    def operator(self) -> Op:
        token, literal = self.consume(values=False)
        mapping = {
            _T.IN: Op.IN,
            _T.EQUALS: Op.EQUALS,
            _T.DOUBLE_EQUALS: Op.DOUBLE_EQUALS,
            _T.GREATER: Op.GREATER_THAN,
            _T.LESS: Op.LESS_THAN,
            _T.NOT_IN: Op.NOT_IN,
            _T.NOT_EQUALS: Op.NOT_EQUALS,
        }
        if token not in mapping:
            raise SelectorError(f"found '{literal}', expected: {', '.join(_BINARY_OPERATORS)}")
        return mapping[token]

    def value_set(self) -> set[str]:
        token, literal = self.consume()
        if token is not _T.OPEN:
            raise SelectorError(f"found '{literal}' expected: '('")
        token, literal = self.lookahead()
        if token in (_T.IDENTIFIER, _T.COMMA):
            values = self.identifiers()
            token, _ = self.consume()
            if token is not _T.CLOSE:
                raise SelectorError(f"found '{literal}', expected: ')'")
            return values
        if token is _T.CLOSE:
            self.consume()
            return {""}
        raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            token, literal = self.consume()
            if token is _T.IDENTIFIER:
                values.add(literal)
                token2, literal2 = self.lookahead()
                if token2 is _T.COMMA:
                    continue
                if token2 is _T.CLOSE:
                    return values
                raise SelectorError(f"found '{literal2}', expected: ',' or ')'")
            if token is _T.COMMA:
                if not values:
                    values.add("")
                token2, _ = self.lookahead()
                if token2 is _T.CLOSE:
                    values.add("")
                    return values
                if token2 is _T.COMMA:
                    self.consume()
                    values.add("")
                continue
            raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        token, _ = self.lookahead()
        if token in (_T.END, _T.COMMA):
            return {""}
        token, literal = self.consume()
        if token is _T.IDENTIFIER:
            return {literal}
        raise SelectorError(f"found '{literal}', expected: identifier")


@dataclass(frozen=True)
class RequirementError:
    """One field.Error of labels.NewRequirement, its field relative to the requirement."""

    field: str  # "key", "values", "values[0]", "values[0][<key>]", "operator"
    type: str  # "FieldValueInvalid" or "FieldValueNotSupported"
    value: Any
    detail: str

    def message(self, path: str | None = None) -> str:
        where = f"{path}.{self.field}" if path else self.field
        if isinstance(self.value, str):
            shown = labels.go_quote(self.value)
        else:
            shown = "[]string{" + ", ".join(labels.go_quote(v) for v in self.value) + "}"
        kind = "Unsupported value" if self.type == "FieldValueNotSupported" else "Invalid value"
        return f"{where}: {kind}: {shown}: {self.detail}"


_OPERATORS_SUPPORTED: Final = ", ".join(
    labels.go_quote(o) for o in (*_BINARY_OPERATORS, "exists", "!")
)


def requirement_errors(key: str, op: Op | str, values: tuple[str, ...]) -> list[RequirementError]:
    """Everything labels.NewRequirement refuses about one requirement."""
    if op not in set(Op):
        return [
            RequirementError(
                "operator",
                "FieldValueNotSupported",
                str(op),
                f"supported values: {_OPERATORS_SUPPORTED}",
            )
        ]
    op = Op(op)
    found = []
    invalid = "FieldValueInvalid"
    key_problems = labels.is_qualified_name(key)
    if key_problems:
        found.append(RequirementError("key", invalid, key, "; ".join(key_problems)))
    if op in (Op.IN, Op.NOT_IN) and not values:
        found.append(
            RequirementError(
                "values", invalid, values, "for 'in', 'notin' operators, values set can't be empty"
            )
        )
    elif op in (Op.EQUALS, Op.DOUBLE_EQUALS, Op.NOT_EQUALS) and len(values) != 1:
        found.append(
            RequirementError(
                "values", invalid, values, "exact-match compatibility requires one single value"
            )
        )
    elif op in (Op.EXISTS, Op.DOES_NOT_EXIST) and values:
        found.append(
            RequirementError(
                "values", invalid, values, "values set must be empty for exists and does not exist"
            )
        )
    elif op in (Op.GREATER_THAN, Op.LESS_THAN):
        if len(values) != 1:
            found.append(
                RequirementError(
                    "values",
                    invalid,
                    values,
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                )
            )
        found.extend(
            RequirementError(
                f"values[{i}]",
                invalid,
                value,
                "for 'Gt', 'Lt' operators, the value must be an integer",
            )
            for i, value in enumerate(values)
            if parse_int64(value) is None
        )
    for i, value in enumerate(values):
        value_problems = labels.is_valid_label_value(value)
        if value_problems:
            found.append(
                RequirementError(f"values[{i}][{key}]", invalid, value, "; ".join(value_problems))
            )
    return found


def new_requirement(key: str, op: Op | str, values: tuple[str, ...]) -> Requirement:
    """labels.NewRequirement: the requirement, or SelectorError with every problem."""
    problems = [e.message() for e in requirement_errors(key, op, values)]
    if problems:
        raise SelectorError(problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
    return Requirement(key, Op(op), values)


def _field_invalid(field: str, value: Any, detail: str) -> str:
    return RequirementError(field, "FieldValueInvalid", value, detail).message()


def parse(text: str) -> Selector:
    """labels.Parse: a selector string to a Selector (requirements sorted by key)."""
    requirements = _Parser(text).parse()
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))


# --- metav1.LabelSelector ------------------------------------------------------------------

_SELECTOR_OPERATORS: Final = {
    "In": Op.IN,
    "NotIn": Op.NOT_IN,
    "Exists": Op.EXISTS,
    "DoesNotExist": Op.DOES_NOT_EXIST,
}


def from_label_selector(selector: Mapping[str, Any] | None) -> Selector:
    """metav1.LabelSelectorAsSelector: nil matches nothing, {} matches everything."""
    if selector is None:
        return Nothing()
    requirements = [
        new_requirement(str(key), Op.EQUALS, (str(value),))
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or ():
        operator = str(expression.get("operator", ""))
        if operator not in _SELECTOR_OPERATORS:
            raise SelectorError(f'"{operator}" is not a valid label selector operator')
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(
            new_requirement(str(expression.get("key", "")), _SELECTOR_OPERATORS[operator], values)
        )
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))
