"""The CEL of DRA device selectors, over cel-python: the environment of
k8s.io/dynamic-resource-allocation/cel (compile.go) and the Kubernetes libraries selectors
use (quantity.go, semverlib.go, the strings extension, cel.bind, cross-type numeric
comparisons). Imported by kube/dra.py only when a selector is evaluated: building CEL's
parser is the largest cost of starting a command that never meets one.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator

from reconcile.kube.quantity import QuantityError, parse_quantity

Obj = Mapping[str, Any]


class NotModelled(Exception):
    """The selector uses something not modelled here (kube/dra.py: NotEvaluated)."""


@functools.total_ordering
class Quantity:
    """apiservercel.Quantity: a resource.Quantity in CEL, compared by value."""

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


_SEMVER: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


class Semver:
    """apiservercel.Semver: a version as github.com/blang/semver/v4 parses (strict
    semver 2.0.0) and orders it (build metadata ignored, a pre-release below its release,
    numeric identifiers numerically and below alphanumeric ones)."""

    def __init__(self, text: str) -> None:
        match = _SEMVER.fullmatch(text)
        pre = match[4] if match else None
        if match is None or any(
            p.isdigit() and len(p) > 1 and p.startswith("0") for p in (pre or "").split(".")
        ):
            raise ValueError(f"not a semantic version: {text!r}")
        self.text = text
        self.major, self.minor, self.patch = int(match[1]), int(match[2]), int(match[3])
        self.pre: tuple[str, ...] = tuple(pre.split(".")) if pre else ()

    def compare(self, other: Semver) -> int:
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        if self.pre == other.pre:
            return 0
        if not self.pre or not other.pre:
            return 1 if not self.pre else -1
        for a, b in zip(self.pre, other.pre, strict=False):
            if a == b:
                continue
            if a.isdigit() and b.isdigit():
                return -1 if int(a) < int(b) else 1
            if a.isdigit() != b.isdigit():
                return -1 if a.isdigit() else 1
            return -1 if a < b else 1
        return -1 if len(self.pre) < len(other.pre) else 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __repr__(self) -> str:
        return f"Semver({self.text!r})"


def _normalized_semver(text: str) -> Semver:
    """semverlib.go normalizeAndParse: a leading v dropped, leading zeros trimmed,
    missing minor and patch as 0."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            parts[i] = trimmed if trimmed and trimmed[0].isdigit() else "0" + trimmed
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return Semver(".".join(parts))


class _Failure(Exception):
    """A CEL runtime error raised by a custom function (wrapped by cel-python)."""


def _no_overload(*args: Any) -> _Failure:
    return _Failure("no such overload: " + ", ".join(type(a).__name__ for a in args))


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise _no_overload(text)
    try:
        return Quantity(parse_quantity(str(text)))
    except QuantityError as e:
        raise _Failure(str(e)) from e


def _is_quantity(text: Any) -> celtypes.BoolType:
    if not isinstance(text, str):
        raise _no_overload(text)
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(text: Any, normalize: Any = False) -> Semver:
    if not isinstance(text, str) or not isinstance(normalize, bool | celtypes.BoolType):
        raise _no_overload(text, normalize)
    try:
        return _normalized_semver(str(text)) if normalize else Semver(str(text))
    except ValueError as e:
        raise _Failure(str(e)) from e


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    try:
        _semver(text, normalize)
    except _Failure:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise _no_overload(a, b)


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_compare(a, b))


def _is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) == 1)


def _is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) == -1)


def _semver_part(index: int) -> Callable[[Any], celtypes.IntType]:
    def part(v: Any) -> celtypes.IntType:
        if not isinstance(v, Semver):
            raise _no_overload(v)
        return celtypes.IntType((v.major, v.minor, v.patch)[index])

    return part


def _quantity_of(q: Any) -> Fraction:
    if not isinstance(q, Quantity):
        raise _no_overload(q)
    return q.value


def _q_arith(sign: int) -> Callable[[Any, Any], Quantity]:
    def arith(q: Any, other: Any) -> Quantity:
        if isinstance(other, Quantity):
            return Quantity(_quantity_of(q) + sign * other.value)
        if isinstance(other, int) and not isinstance(other, bool):
            return Quantity(_quantity_of(q) + sign * Fraction(int(other)))
        raise _no_overload(q, other)

    return arith


def _as_integer(q: Any) -> celtypes.IntType:
    value = _quantity_of(q)
    if value.denominator != 1 or not -(2**63) <= value < 2**63:
        raise _Failure("cannot convert value to integer")
    return celtypes.IntType(int(value))


def _is_integer(q: Any) -> celtypes.BoolType:
    value = _quantity_of(q)
    return celtypes.BoolType(value.denominator == 1 and -(2**63) <= value < 2**63)


def _string(s: Any) -> str:
    if not isinstance(s, str):
        raise _no_overload(s)
    return str(s)


def _index_of(target: Any, item: Any, start: Any = 0) -> celtypes.IntType:
    if isinstance(target, list):  # ext.Lists: list.indexOf
        for i, element in enumerate(target):
            if _equal(element, item):
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, sub = _string(target), _string(item)
    if not 0 <= int(start) <= len(text):
        raise _Failure(f"index out of range: {int(start)}")
    return celtypes.IntType(text.find(sub, int(start)))


def _last_index_of(target: Any, item: Any, *end: Any) -> celtypes.IntType:
    text, sub = _string(target), _string(item)
    stop = int(end[0]) + len(sub) if end else len(text)
    return celtypes.IntType(text.rfind(sub, 0, stop))


def _split(text: Any, sep: Any, limit: Any = -1) -> celtypes.ListType:
    parts = _string(text).split(_string(sep)) if int(limit) < 0 else []
    if int(limit) > 0:
        parts = _string(text).split(_string(sep), int(limit) - 1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    s = _string(text)
    stop = len(s) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(s):
        raise _Failure(f"index out of range: {int(start)}")
    return celtypes.StringType(s[int(start) : stop])


def _replace(text: Any, old: Any, new: Any, limit: Any = -1) -> celtypes.StringType:
    return celtypes.StringType(_string(text).replace(_string(old), _string(new), int(limit)))


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not isinstance(items, list):
        raise _no_overload(items)
    return celtypes.StringType(_string(sep).join(_string(i) for i in items))


def _char_at(text: Any, index: Any) -> celtypes.StringType:
    s, i = _string(text), int(index)
    if not 0 <= i <= len(s):
        raise _Failure(f"index out of range: {i}")
    return celtypes.StringType(s[i : i + 1])


_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_UPPER: Final = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)
_NUMBER: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _equal(a: Any, b: Any) -> bool:
    """cel-go's heterogeneous equality: numbers compare by value across int, uint and
    double; values of different types are unequal, not an error."""
    if isinstance(a, _NUMBER) and isinstance(b, _NUMBER):
        return float(a) == float(b) if isinstance(a, float) or isinstance(b, float) else a == b
    if isinstance(a, celtypes.BoolType) != isinstance(b, celtypes.BoolType):
        return False
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
        return False
    return bool(a == b)


def _ordered(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], celtypes.BoolType]:
    """Comparison with cel.CrossTypeNumericComparisons: int, uint and double across."""

    def compare(a: Any, b: Any) -> celtypes.BoolType:
        if isinstance(a, _NUMBER) and isinstance(b, _NUMBER):
            return celtypes.BoolType(op(Fraction(a), Fraction(b)))
        if type(a) is type(b) and not isinstance(a, Quantity | Semver | list | dict):
            return celtypes.BoolType(op(a, b))
        raise _no_overload(a, b)

    return compare


def _eq(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_equal(a, b))


def _ne(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(not _equal(a, b))


def _returning_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """A failure as cel-python's error value, not an exception: `&&` and `||` absorb it.
    An error given as an argument is the result, as in cel-go."""

    @functools.wraps(function)
    def wrapped(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        try:
            return function(*args)
        except _Failure as e:
            return CELEvalError(str(e), _Failure, e.args)

    return wrapped


# The functions the Kubernetes CEL environment adds over standard CEL, by the name a call
# uses (cel-python passes the receiver of `x.f(y)` as the first argument).
_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    # k8s.io/apiserver/pkg/cel/library/quantity.go
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": lambda q: celtypes.IntType((_quantity_of(q) > 0) - (_quantity_of(q) < 0)),
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_quantity_of(q))),
    "add": _q_arith(1),
    "sub": _q_arith(-1),
    # quantity.go and semverlib.go share these names
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    # k8s.io/apiserver/pkg/cel/library/semverlib.go (SemverVersion 1)
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part(0),
    "minor": _semver_part(1),
    "patch": _semver_part(2),
    # github.com/google/cel-go/ext/strings.go (StringsVersion 2) and ext/lists indexOf
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda s: celtypes.StringType(_string(s).translate(_LOWER)),
    "upperAscii": lambda s: celtypes.StringType(_string(s).translate(_UPPER)),
    "trim": lambda s: celtypes.StringType(_string(s).strip()),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "join": _join,
    # cel.CrossTypeNumericComparisons and cel-go's heterogeneous equality
    "_<_": _ordered(lambda a, b: a < b),
    "_<=_": _ordered(lambda a, b: a <= b),
    "_>_": _ordered(lambda a, b: a > b),
    "_>=_": _ordered(lambda a, b: a >= b),
    "_==_": _eq,
    "_!=_": _ne,
}
FUNCTIONS: Final = {name: _returning_errors(f) for name, f in _FUNCTIONS.items()}


class _KubernetesEvaluator(Evaluator):
    """cel-python's interpreter with the `cel.bind(var, init, expr)` macro of cel-go's
    ext.Bindings, which the DRA environment enables."""

    def sub_evaluator(self, ast: Any) -> Evaluator:
        return _KubernetesEvaluator(ast, activation=self.activation)

    def member_dot_arg(self, tree: Any) -> Any:
        member, method = tree.children[:2]
        if (
            method.value == "bind"
            and len(tree.children) == 3
            and member.data == "member"
            and [t.value for t in member.scan_values(lambda v: True)] == ["cel"]
        ):
            var, init, body = tree.children[2].children
            names = [t.value for t in var.scan_values(lambda v: True)]
            if len(names) != 1:
                return CELEvalError("cel.bind: the first argument must be a name")
            value = self.visit(init)
            if isinstance(value, CELEvalError):
                return value
            nested = self.sub_evaluator(body)
            try:
                return nested.evaluate({names[0]: value})
            except CELEvalError as e:
                return e
        return super().member_dot_arg(tree)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _KubernetesEvaluator(ast=self.ast, activation=self.new_activation()).evaluate(
            context
        )


@functools.cache
def _environment() -> celpy.Environment:
    """Built on first use: its parser is most of the cost of importing this module, which
    kube/celrules.py imports for Semver only."""
    return celpy.Environment(runner_class=_Runner)


@functools.lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    environment = _environment()
    return environment.program(environment.compile(expression), functions=dict(FUNCTIONS))


class _DefaultMap(celtypes.MapType):
    """newStringInterfaceMapWithDefault: an unknown domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


class CelError(Exception):
    """A CEL runtime error, in cel-go's words (`no such key: family`)."""


_MISSING_MEMBER: Final = re.compile(r"no such member in mapping: '(.*)'")


def _cel_value(typed: Obj, name: str) -> Any:
    """getAttributeValue: the one typed value of an attribute."""
    if "int" in typed:
        return celtypes.IntType(int(typed["int"]))
    if "bool" in typed:
        return celtypes.BoolType(bool(typed["bool"]))
    if "string" in typed:
        return celtypes.StringType(str(typed["string"]))
    if "version" in typed:
        try:
            return Semver(str(typed["version"]))
        except ValueError as e:
            raise NotModelled(f"attribute {name}: version {typed['version']!r}") from e
    raise NotModelled(f"attribute {name}: a value type not modelled ({', '.join(typed)})")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def device_variable(driver: str, device: Obj) -> celtypes.MapType:
    """The CEL `device` of DeviceMatches: driver, allowMultipleAllocations, attributes
    and capacity by domain (names without one under the driver's)."""
    attributes: dict[str, dict[Any, Any]] = {}
    for name, typed in (device.get("attributes") or {}).items():
        domain, ident = _qualified(str(name), driver)
        attributes.setdefault(domain, {})[celtypes.StringType(ident)] = _cel_value(typed, name)
    capacity: dict[str, dict[Any, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = _qualified(str(name), driver)
        capacity.setdefault(domain, {})[celtypes.StringType(ident)] = Quantity(
            parse_quantity(cap["value"])
        )
    s = celtypes.StringType
    return celtypes.MapType(
        {
            s("driver"): s(driver),
            s("allowMultipleAllocations"): celtypes.BoolType(
                bool(device.get("allowMultipleAllocations"))
            ),
            s("attributes"): _DefaultMap(
                {s(k): celtypes.MapType(v) for k, v in attributes.items()}
            ),
            s("capacity"): _DefaultMap({s(k): celtypes.MapType(v) for k, v in capacity.items()}),
        }
    )


def matches(expression: str, device: celtypes.MapType) -> bool:
    """Whether a CEL selector accepts the device. Raises CelError for a runtime error the
    scheduler reports (a missing key), NotModelled for what is not modelled here (a
    function the environment lacks, an error whose wording is unknown)."""
    try:
        result = _program(expression).evaluate({"device": device})
    except CELEvalError as e:
        text = str(e.args[0]) if e.args else str(e)
        missing = _MISSING_MEMBER.fullmatch(text)
        if missing:
            raise CelError(f"no such key: {missing[1]}") from e
        if text == "no such key" and len(e.args) > 2 and e.args[2]:
            raise CelError(f"no such key: {e.args[2][0]}") from e
        undeclared = re.match(r"undeclared reference to '([^']*)'", text)
        if undeclared:
            raise NotModelled(f"CEL: {undeclared[1]} is not modelled") from e
        raise NotModelled(f"CEL runtime error not modelled: {text}") from e
    except _Failure as e:
        raise NotModelled(f"CEL runtime error not modelled: {e}") from e
    except Exception as e:  # cel-python's parser and internal errors
        raise NotModelled(f"CEL: {type(e).__name__}: {e}") from e
    if not isinstance(result, celtypes.BoolType):
        raise NotModelled(f"CEL result of type {type(result).__name__}, not bool")
    return bool(result)
