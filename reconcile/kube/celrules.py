"""CEL validation rules of a CRD's schema (`x-kubernetes-validations`), evaluated offline
as apiextensions-apiserver does (pkg/apiserver/schema/cel/validation.go): at each schema
node that carries rules, `self` is the value there; transition rules (those naming
`oldSelf`) run only on update, unless `optionalOldSelf`; a false rule is a field error of
its `reason` at its `fieldPath`, detailed by `messageExpression`, else `message`, else
`failed rule: <rule>`; on update, one at a value equal to its old value is ratcheted (a
warning upstream, dropped here) unless it is a transition rule (ratcheting.go).

The engine is cel-expr-python (cel-cpp), compiled once per rule and server version and
evaluated some fifty times faster than cel-python. The Kubernetes libraries
(k8s.io/apiserver/pkg/cel/library) are added here by the version that introduced them
(environment/base.go); Quantity, Semver, IP, CIDR and URL are protobuf messages holding a
canonical form, so CEL's equality of messages is the libraries' equality. What cannot be
evaluated here (a function not modelled, two-variable comprehensions, a rule over a
timestamp or duration field) is an `Unchecked`: the API server checks it, this does not
pretend to. Cost limits are not checked.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import (  # type: ignore[import-untyped]
    ext_bindings,
    ext_optional,
    ext_strings,
)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from reconcile.kube import regexp
from reconcile.kube.cel import Semver, _normalized_semver
from reconcile.kube.objects import same_json
from reconcile.kube.quantity import QuantityError, parse_quantity
from reconcile.kube.validation import FieldError, forbidden, invalid, required

Version = tuple[int, int]
NEWEST: Final[Version] = (1, 36)


@dataclass(frozen=True)
class Unchecked:
    """A rule this evaluator cannot evaluate: the API server checks it."""

    field: str
    rule: str
    why: str


@dataclass
class Verdict:
    errors: list[FieldError] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)


# --- the Kubernetes types, as protobuf messages --------------------------------------------

_PACKAGE: Final = "reconcile.cel"


def _messages() -> tuple[Any, dict[str, Any]]:
    file = descriptor_pb2.FileDescriptorProto(
        name="reconcile_cel.proto", package=_PACKAGE, syntax="proto3"
    )
    # Each holds the canonical text of its value: equal values, equal messages.
    for name in ("Quantity", "Semver", "IP", "CIDR", "URL"):
        message = file.message_type.add(name=name)
        message.field.add(
            name="canonical",
            number=1,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    classes = {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in ("Quantity", "Semver", "IP", "CIDR", "URL")
    }
    return pool, classes


_POOL, _CLASSES = _messages()
T_QUANTITY: Final = cel.Type(f"{_PACKAGE}.Quantity")
T_SEMVER: Final = cel.Type(f"{_PACKAGE}.Semver")
T_IP: Final = cel.Type(f"{_PACKAGE}.IP")
T_CIDR: Final = cel.Type(f"{_PACKAGE}.CIDR")
T_URL: Final = cel.Type(f"{_PACKAGE}.URL")
DYN: Final = cel.Type.DYN
STRING: Final = cel.Type.STRING
BOOL: Final = cel.Type.BOOL
INT: Final = cel.Type.INT
DOUBLE: Final = cel.Type.DOUBLE
LIST: Final = cel.Type.List(cel.Type.DYN)
LIST_STRING: Final = cel.Type.List(cel.Type.STRING)


class LibraryError(Exception):
    """A runtime error of a library function, in the library's words."""


def _message(kind: str, canonical: str) -> Any:
    return _CLASSES[kind](canonical=canonical)


# quantity.go (from 1.28)


def _q(text: str) -> Any:
    try:
        value = parse_quantity(text)
    except QuantityError as e:
        raise LibraryError(str(e)) from e
    return _message("Quantity", f"{value.numerator}/{value.denominator}")


def _qv(q: Any) -> Fraction:
    return Fraction(q.canonical)


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _q_of(value: Fraction) -> Any:
    return _message("Quantity", f"{value.numerator}/{value.denominator}")


def _as_integer(q: Any) -> int:
    value = _qv(q)
    if value.denominator != 1 or not -(2**63) <= value < 2**63:
        raise LibraryError("cannot convert value to integer")
    return int(value)


def _is_integer(q: Any) -> bool:
    value = _qv(q)
    return value.denominator == 1 and -(2**63) <= value < 2**63


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _compare_to(a: Any, b: Any) -> int:
    kinds = (a.DESCRIPTOR.name, b.DESCRIPTOR.name)
    if kinds == ("Quantity", "Quantity"):
        return _cmp(_qv(a), _qv(b))
    if kinds == ("Semver", "Semver"):
        return _sv(a).compare(_sv(b))
    raise LibraryError("no such overload")


def _greater(a: Any, b: Any) -> bool:
    return _compare_to(a, b) == 1


def _less(a: Any, b: Any) -> bool:
    return _compare_to(a, b) == -1


# semverlib.go (from 1.33)


def _semver(text: str, normalize: bool = False) -> Any:
    try:
        version = _normalized_semver(text) if normalize else Semver(text)
    except ValueError as e:
        raise LibraryError(str(e)) from e
    return _message("Semver", _semver_text(version))  # build metadata does not count


def _semver_text(version: Semver) -> str:
    pre = "-" + ".".join(version.pre) if version.pre else ""
    return f"{version.major}.{version.minor}.{version.patch}{pre}"


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except LibraryError:
        return False
    return True


def _sv(v: Any) -> Semver:
    return Semver(v.canonical)


# ip.go, cidr.go (from 1.30): net/netip, which refuses zones and IPv4-mapped IPv6


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in text:
        raise LibraryError(f"IP address with zone value is not allowed: {text}")
    try:
        address = ipaddress.ip_address(text)
    except ValueError as e:
        raise LibraryError(f"IP Address {text!r} parse error during conversion from string") from e
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise LibraryError(f"IPv4-mapped IPv6 address is not allowed: {text}")
    return address


def _ip(text: str) -> Any:
    return _message("IP", str(_parse_ip(text)))


def _is_ip(text: str) -> bool:
    try:
        _parse_ip(text)
    except LibraryError:
        return False
    return True


def _iv(ip: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(ip.canonical)


def _parse_cidr(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    address, sep, bits = text.partition("/")
    if not sep or not bits.isdigit() or (len(bits) > 1 and bits.startswith("0")):
        raise LibraryError(f"network address parse error during conversion from string: {text}")
    ip = _parse_ip(address)
    if int(bits) > ip.max_prefixlen:
        raise LibraryError(f"network address parse error during conversion from string: {text}")
    return ip, int(bits)


def _cidr(text: str) -> Any:
    ip, bits = _parse_cidr(text)
    return _message("CIDR", f"{ip}/{bits}")


def _is_cidr(text: str) -> bool:
    try:
        _parse_cidr(text)
    except LibraryError:
        return False
    return True


def _network(c: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(c.canonical, strict=False)


def _contains_ip(c: Any, other: Any) -> bool:
    ip = _iv(other) if not isinstance(other, str) else _parse_ip(other)
    network = _network(c)
    return ip.version == network.version and ip in network


def _contains_cidr(c: Any, other: Any) -> bool:
    inner = _network(other if not isinstance(other, str) else _cidr(other))
    outer = _network(c)
    return (
        inner.version == outer.version
        and inner.prefixlen >= outer.prefixlen
        and inner.network_address in outer
    )


def _masked(c: Any) -> Any:
    network = _network(c)
    return _message("CIDR", f"{network.network_address}/{network.prefixlen}")


# urls.go (from 1.0): net/url.ParseRequestURI, approximately


def _parse_url(text: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(text)
    if not (parts.scheme and (parts.netloc or parts.path.startswith("/"))) and not (
        text.startswith("/")
    ):
        raise LibraryError(f"URL parse error during conversion from string: {text}")
    if "#" in text or any(c in text for c in " \t\n"):
        raise LibraryError(f"URL parse error during conversion from string: {text}")
    return parts


def _url(text: str) -> Any:
    _parse_url(text)
    return _message("URL", text)


def _is_url(text: str) -> bool:
    try:
        _parse_url(text)
    except LibraryError:
        return False
    return True


def _url_part(part: str) -> Callable[[Any], str]:
    def get(u: Any) -> str:
        parts = urllib.parse.urlsplit(str(u.canonical))
        if part == "host":
            return parts.netloc.rpartition("@")[2]
        if part == "hostname":
            host = parts.netloc.rpartition("@")[2]
            if host.startswith("["):
                return host[1 : host.find("]")]
            return host.rpartition(":")[0] if ":" in host else host
        if part == "port":
            host = parts.netloc.rpartition("@")[2]
            tail = host.rpartition("]")[2] if host.startswith("[") else host
            return tail.rpartition(":")[2] if ":" in tail else ""
        if part == "path":
            return parts.path
        return parts.scheme

    return get


def _query(u: Any) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(u.canonical).query, keep_blank_values=True)


# lists.go (from 1.0)


def _comparable(items: Sequence[Any]) -> Sequence[Any]:
    for item in items:
        if isinstance(item, list | dict | bool) and not isinstance(items[0], bool):
            raise LibraryError("no such overload")
    return items


def _is_sorted(items: list[Any]) -> bool:
    _comparable(items)
    return all(a <= b for a, b in itertools.pairwise(items))


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    total = items[0]
    for item in items[1:]:
        total = total + item
        if isinstance(total, int) and not -(2**63) <= total < 2**63:
            raise LibraryError("integer overflow")
    return total


def _min(items: list[Any]) -> Any:
    if not items:
        raise LibraryError("min(list) called on an empty list")
    return min(_comparable(items))


def _max(items: list[Any]) -> Any:
    if not items:
        raise LibraryError("max(list) called on an empty list")
    return max(_comparable(items))


# regex.go (from 1.0): RE2, as Go's regexp


def _regex(pattern: str) -> Any:
    try:
        return regexp.compiled(pattern)
    except regexp.PatternError as e:
        raise LibraryError(f"invalid regular expression: {pattern}") from e


def _find(text: str, pattern: str) -> str:
    match = _regex(pattern).search(text)
    return "" if match is None else str(match.group(0))


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [str(m.group(0)) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


# sets (ext.Sets, from 1.29)


def _contains_all(a: list[Any], b: list[Any]) -> bool:
    return all(any(x == y for x in a) for y in b)


def _overload(
    name: str,
    result: Any,
    parameters: Sequence[Any],
    impl: Callable[..., Any] | None,
    *,
    member: bool = False,
) -> Any:
    kinds = "_".join(p.name() for p in parameters)
    name_id = f"{name}_{kinds}{'_m' if member else ''}"
    if impl is None:  # declared for the checker; another overload's implementation runs
        return cel.Overload(name_id, result, list(parameters), is_member=member)

    def run(*args: Any) -> Any:
        try:
            return impl(*args)
        except LibraryError:
            raise
        except (ValueError, ArithmeticError) as e:
            raise LibraryError(str(e)) from e

    return cel.Overload(name_id, result, list(parameters), is_member=member, impl=run)


def _functions(version: Version) -> list[Any]:
    """The library functions of the server version, by the version that introduced each
    (k8s.io/apiserver/pkg/cel/environment/base.go)."""
    decls: dict[str, list[Any]] = {}

    def add(
        name: str,
        result: Any,
        parameters: Sequence[Any],
        impl: Callable[..., Any] | None,
        *,
        member: bool = False,
        since: Version = (1, 0),
    ) -> None:
        if version >= since:
            decls.setdefault(name, []).append(
                _overload(name, result, parameters, impl, member=member)
            )

    # lists
    add("isSorted", BOOL, [LIST], _is_sorted, member=True)
    add("sum", DYN, [LIST], _sum, member=True)
    add("min", DYN, [LIST], _min, member=True)
    add("max", DYN, [LIST], _max, member=True)
    # indexOf and lastIndexOf of a list: cel-cpp's strings extension owns the names (not
    # modelled: a call on a list is a runtime "no such overload", so unchecked)
    # regex
    add("find", STRING, [STRING, STRING], _find, member=True)
    add("findAll", LIST_STRING, [STRING, STRING], _find_all, member=True)
    add("findAll", LIST_STRING, [STRING, STRING, INT], _find_all, member=True)
    # urls
    add("url", T_URL, [STRING], _url)
    add("isURL", BOOL, [STRING], _is_url)
    for name, part in (
        ("getScheme", "scheme"),
        ("getHost", "host"),
        ("getHostname", "hostname"),
        ("getPort", "port"),
        ("getEscapedPath", "path"),
    ):
        add(name, STRING, [T_URL], _url_part(part), member=True)
    add("getQuery", cel.Type.Map(STRING, LIST_STRING), [T_URL], _query, member=True)
    # quantity
    q = (1, 28)
    add("quantity", T_QUANTITY, [STRING], _q, since=q)
    add("isQuantity", BOOL, [STRING], _is_quantity, since=q)
    add("sign", INT, [T_QUANTITY], lambda a: _cmp(_qv(a), 0), member=True, since=q)
    add("isInteger", BOOL, [T_QUANTITY], _is_integer, member=True, since=q)
    add("asInteger", INT, [T_QUANTITY], _as_integer, member=True, since=q)
    add("asApproximateFloat", DOUBLE, [T_QUANTITY], lambda a: float(_qv(a)), member=True, since=q)
    add(
        "add",
        T_QUANTITY,
        [T_QUANTITY, T_QUANTITY],
        lambda a, b: _q_of(_qv(a) + _qv(b)),
        member=True,
        since=q,
    )
    add("add", T_QUANTITY, [T_QUANTITY, INT], lambda a, b: _q_of(_qv(a) + b), member=True, since=q)
    add(
        "sub",
        T_QUANTITY,
        [T_QUANTITY, T_QUANTITY],
        lambda a, b: _q_of(_qv(a) - _qv(b)),
        member=True,
        since=q,
    )
    add("sub", T_QUANTITY, [T_QUANTITY, INT], lambda a, b: _q_of(_qv(a) - b), member=True, since=q)
    # Quantity and Semver share compareTo, isGreaterThan and isLessThan: the runtime
    # dispatches on kinds (both are messages), so one implementation serves both.
    add("compareTo", INT, [T_QUANTITY, T_QUANTITY], _compare_to, member=True, since=q)
    add("isGreaterThan", BOOL, [T_QUANTITY, T_QUANTITY], _greater, member=True, since=q)
    add("isLessThan", BOOL, [T_QUANTITY, T_QUANTITY], _less, member=True, since=q)
    # sets
    s = (1, 29)
    add("sets.contains", BOOL, [LIST, LIST], _contains_all, since=s)
    add(
        "sets.equivalent",
        BOOL,
        [LIST, LIST],
        lambda a, b: _contains_all(a, b) and _contains_all(b, a),
        since=s,
    )
    add(
        "sets.intersects",
        BOOL,
        [LIST, LIST],
        lambda a, b: any(any(x == y for x in a) for y in b),
        since=s,
    )
    # ip, cidr
    n = (1, 30)
    add("ip", T_IP, [STRING], _ip, since=n)
    add("isIP", BOOL, [STRING], _is_ip, since=n)
    add("ip.isCanonical", BOOL, [STRING], lambda t: str(_parse_ip(t)) == t, since=n)
    add("family", INT, [T_IP], lambda a: _iv(a).version, member=True, since=n)
    add("isUnspecified", BOOL, [T_IP], lambda a: _iv(a).is_unspecified, member=True, since=n)
    add("isLoopback", BOOL, [T_IP], lambda a: _iv(a).is_loopback, member=True, since=n)
    add("isLinkLocalMulticast", BOOL, [T_IP], _link_local_multicast, member=True, since=n)
    add("isLinkLocalUnicast", BOOL, [T_IP], lambda a: _iv(a).is_link_local, member=True, since=n)
    add("isGlobalUnicast", BOOL, [T_IP], _global_unicast, member=True, since=n)
    add("cidr", T_CIDR, [STRING], _cidr, since=n)
    add("isCIDR", BOOL, [STRING], _is_cidr, since=n)
    add("containsIP", BOOL, [T_CIDR, T_IP], _contains_ip, member=True, since=n)
    add("containsIP", BOOL, [T_CIDR, STRING], _contains_ip, member=True, since=n)
    add("containsCIDR", BOOL, [T_CIDR, T_CIDR], _contains_cidr, member=True, since=n)
    add("containsCIDR", BOOL, [T_CIDR, STRING], _contains_cidr, member=True, since=n)
    add(
        "ip",
        T_IP,
        [T_CIDR],
        lambda c: _message("IP", c.canonical.partition("/")[0]),
        member=True,
        since=n,
    )
    add("masked", T_CIDR, [T_CIDR], _masked, member=True, since=n)
    add(
        "prefixLength",
        INT,
        [T_CIDR],
        lambda c: int(c.canonical.partition("/")[2]),
        member=True,
        since=n,
    )
    # semver
    v = (1, 33)
    add("semver", T_SEMVER, [STRING], _semver, since=v)
    add("semver", T_SEMVER, [STRING, BOOL], _semver, since=v)
    add("isSemver", BOOL, [STRING], _is_semver, since=v)
    add("isSemver", BOOL, [STRING, BOOL], _is_semver, since=v)
    add("major", INT, [T_SEMVER], lambda a: _sv(a).major, member=True, since=v)
    add("minor", INT, [T_SEMVER], lambda a: _sv(a).minor, member=True, since=v)
    add("patch", INT, [T_SEMVER], lambda a: _sv(a).patch, member=True, since=v)
    add("compareTo", INT, [T_SEMVER, T_SEMVER], None, member=True, since=v)
    add("isGreaterThan", BOOL, [T_SEMVER, T_SEMVER], None, member=True, since=v)
    add("isLessThan", BOOL, [T_SEMVER, T_SEMVER], None, member=True, since=v)
    return [cel.FunctionDecl(name, overloads) for name, overloads in decls.items()]


def _link_local_multicast(a: Any) -> bool:
    ip = _iv(a)
    if ip.version == 4:
        return ip in ipaddress.ip_network("224.0.0.0/24")
    return ip in ipaddress.ip_network("ff02::/16")


def _global_unicast(a: Any) -> bool:
    """netip.Addr.IsGlobalUnicast: not unspecified, loopback, multicast, link-local, or
    the IPv4 broadcast address (private addresses are global unicast)."""
    ip = _iv(a)
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local:
        return False
    return not (ip.version == 4 and str(ip) == "255.255.255.255")


@functools.cache
def environment(version: Version = NEWEST) -> Any:
    """The CEL environment of the server version: standard CEL, the strings extension
    (version 2 from 1.29), optional types from 1.28, cel.bind, and the libraries."""
    extensions = [
        ext_strings.ExtStrings(2 if version >= (1, 29) else 0),
        ext_bindings.ExtBindings(),
    ]
    if version >= (1, 28):
        extensions.append(ext_optional.ExtOptional())
    return cel.NewEnv(
        _POOL,
        variables={"self": DYN, "oldSelf": DYN, "__old": DYN},
        extensions=extensions,
        functions=_functions(version),
    )


# --- compiled rules ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    text: str
    message: str
    message_expression: str
    reason: str
    field_path: str
    optional_old_self: bool
    program: Any  # None when not compiled
    message_program: Any
    uses_old_self: bool
    why: str  # why it is not evaluated, when program is None

    def error_string(self) -> str:
        """ruleErrorString: the message, else the rule."""
        return self.message.strip() or self.text.strip()


_OLD_SELF: Final = re.compile(r"\boldSelf\b")


@functools.lru_cache(maxsize=4096)
def compile_rule(
    text: str,
    message: str = "",
    message_expression: str = "",
    reason: str = "",
    field_path: str = "",
    optional_old_self: bool = False,
    version: Version = NEWEST,
) -> Rule:
    """One rule compiled in the server version's environment, once per process."""
    env = environment(version)
    uses_old_self = bool(_OLD_SELF.search(_without_strings(text)))
    source = text
    if uses_old_self and optional_old_self:
        # oldSelf as an optional: optional.none() on create, optional.of(old) on update.
        source = f"cel.bind(oldSelf, __old.?v, (\n{text}\n))"
    program, why = None, ""
    try:
        program = env.compile(source)
    except Exception as e:  # cel-cpp's parser or checker
        why = _compile_error(str(e))
    message_program = None
    if message_expression.strip():
        try:
            message_program = env.compile(message_expression)
        except Exception as e:
            program, why = None, "messageExpression: " + _compile_error(str(e))
    return Rule(
        text,
        message,
        message_expression,
        reason,
        field_path,
        optional_old_self,
        program,
        message_program,
        uses_old_self,
        why,
    )


def _without_strings(text: str) -> str:
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", text)


def _compile_error(text: str) -> str:
    text = re.sub(r"^[A-Z_]+: ", "", text.strip())
    text = re.sub(r" \[[A-Z_]+\]$", "", text)
    first = text.splitlines()[0] if text else "does not compile"
    first = first.removeprefix("ERROR: ").replace("<input>:", "")
    return re.sub(r" \(in container ''\)", "", first)


# --- the schema's rules, once per schema ---------------------------------------------------


@dataclass
class Node:
    """The rules of one schema node and the nodes below it that hold rules."""

    schema: Mapping[str, Any]
    rules: list[Rule]
    resource_root: bool
    properties: dict[str, Node]
    items: Node | None
    additional: Node | None
    unmodelled: str  # why self cannot be modelled here ("" when it can)


_PLANS: dict[tuple[int, Version], tuple[Mapping[str, Any], Node | None]] = {}


def plan(schema: Mapping[str, Any], version: Version = NEWEST) -> Node | None:
    """The rule tree of a CRD version's schema, compiled once per schema object."""
    key = (id(schema), version)
    cached = _PLANS.get(key)
    if cached is not None and cached[0] is schema:
        return cached[1]
    node = _node(schema, True, version)
    _PLANS[key] = (schema, node)
    return node


def _node(schema: Mapping[str, Any], root: bool, version: Version) -> Node | None:
    rules = []
    for entry in schema.get("x-kubernetes-validations") or ():
        if not isinstance(entry, Mapping) or not str(entry.get("rule") or "").strip():
            continue
        rules.append(
            compile_rule(
                str(entry.get("rule")),
                str(entry.get("message") or ""),
                str(entry.get("messageExpression") or ""),
                str(entry.get("reason") or ""),
                str(entry.get("fieldPath") or ""),
                bool(entry.get("optionalOldSelf")),
                version,
            )
        )
    properties = {}
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            child = _node(sub, bool(sub.get("x-kubernetes-embedded-resource")), version)
            if child is not None:
                properties[str(name)] = child
    items = schema.get("items")
    item_node = (
        _node(items, bool(items.get("x-kubernetes-embedded-resource")), version)
        if isinstance(items, Mapping)
        else None
    )
    extra = schema.get("additionalProperties")
    extra_node = (
        _node(extra, bool(extra.get("x-kubernetes-embedded-resource")), version)
        if isinstance(extra, Mapping)
        else None
    )
    if not rules and not properties and item_node is None and extra_node is None:
        return None
    return Node(
        schema,
        rules,
        root,
        properties,
        item_node,
        extra_node,
        _unmodelled(schema) if rules else "",
    )


_TIME_FORMATS: Final = ("date", "date-time", "datetime", "duration")


def _unmodelled(schema: Mapping[str, Any], depth: int = 0) -> str:
    """Why `self` of this schema cannot be built here: CEL sees a timestamp or a duration
    where the schema's format says so (UnstructuredToVal), which cel-expr-python cannot be
    given inside a map."""
    if schema.get("type") == "string" and schema.get("format") in _TIME_FORMATS:
        return f"a {schema['format']} string is a CEL {('duration' if schema['format'] == 'duration' else 'timestamp')}, not modelled here"
    if depth > 32:
        return ""
    subs: list[Any] = list((schema.get("properties") or {}).values())
    subs += [schema.get("items"), schema.get("additionalProperties")]
    for sub in subs:
        if isinstance(sub, Mapping):
            why = _unmodelled(sub, depth + 1)
            if why:
                return why
    return ""


def _holds_time(schema: Mapping[str, Any], value: Any, depth: int = 0) -> bool:
    """Whether VALUE has a string where the schema's format makes it a CEL timestamp or
    duration: only then is `self` out of reach (a schema that declares such a field is
    modelled exactly for a value that leaves it out)."""
    if isinstance(value, str):
        return schema.get("type") == "string" and schema.get("format") in _TIME_FORMATS
    if depth > 64:
        return True
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = (properties or {}).get(name) if properties is not None else extra
            if isinstance(sub, Mapping) and _holds_time(sub, item, depth + 1):
                return True
        return False
    if isinstance(value, list):
        items = schema.get("items")
        return isinstance(items, Mapping) and any(
            _holds_time(items, item, depth + 1) for item in value
        )
    return False


# --- values as CEL sees them ---------------------------------------------------------------

_RESERVED: Final = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
_ESCAPABLE: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_./-]*")


def escape(name: str) -> str | None:
    """cel.Escape: a property name as a CEL field name; None when it has none."""
    if name in _RESERVED:
        return f"__{name}__"
    if not _ESCAPABLE.fullmatch(name):
        return None
    return (
        name.replace("__", "__underscores__")
        .replace(".", "__dot__")
        .replace("-", "__dash__")
        .replace("/", "__slash__")
    )


def to_cel(schema: Mapping[str, Any], value: Any, root: bool = False) -> Any:
    """UnstructuredToVal: numbers typed by the schema, object properties by their escaped
    names, only name and generateName of an embedded resource's metadata."""
    if value is None:
        return None
    kind = schema.get("type")
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if properties is None and isinstance(extra, Mapping):
            return {k: to_cel(extra, v) for k, v in value.items()}
        if properties is None and schema.get("x-kubernetes-preserve-unknown-fields"):
            return _plain(value)
        result: dict[str, Any] = {}
        for name, item in value.items():
            if root and name == "metadata" and isinstance(item, dict):
                result["metadata"] = {
                    k: item[k] for k in ("name", "generateName") if isinstance(item.get(k), str)
                }
                continue
            if root and name in ("apiVersion", "kind"):
                result[name] = item
                continue
            sub = (properties or {}).get(name)
            if sub is None:
                if schema.get("x-kubernetes-preserve-unknown-fields"):
                    escaped = escape(name)
                    if escaped is not None:
                        result[escaped] = _plain(item)
                continue
            escaped = escape(name)
            if escaped is not None:
                result[escaped] = to_cel(sub, item, bool(sub.get("x-kubernetes-embedded-resource")))
        return result
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            embedded = bool(items.get("x-kubernetes-embedded-resource"))
            return [to_cel(items, v, embedded) for v in value]
        return _plain(value)
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "string" and schema.get("format") == "byte" and isinstance(value, str):
        import base64

        try:
            return base64.b64decode(value)
        except ValueError:
            return value
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- evaluation ----------------------------------------------------------------------------

# The schema errors that keep the server from running any rule (validation.go's caller,
# apiextensions-apiserver pkg/registry/customresource/validator.go), and its one note then.
_BLOCKING: Final = frozenset({"Unsupported value", "Required value", "Too long", "Too many"})
NOT_CHECKED: Final = invalid(
    "<nil>",
    None,
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)


def blocks_rules(error: FieldError) -> bool:
    """NotSupported, Required, TooLong, TooMany and TypeInvalid (`must be of type`)."""
    return error.type in _BLOCKING or " must be of type " in error.detail


def _type_name(schema: Mapping[str, Any]) -> str:
    return str(schema.get("type") or "")


def validate(
    schema: Mapping[str, Any],
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None = None,
    *,
    version: Version = NEWEST,
) -> Verdict:
    """Every rule of the schema on `obj` (defaulted already), `old` the live object on an
    update (transition rules run only then, or with optionalOldSelf)."""
    verdict = Verdict()
    node = plan(schema, version)
    if node is not None:
        _validate(node, "", obj, old, verdict)
    return verdict


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _key(path: str, key: str) -> str:
    """field.Path.Key: the key bare in brackets (`spec.limits[a.b]`)."""
    return f"{path}[{key}]"


def _validate(
    node: Node, path: str, value: Any, old: Any, verdict: Verdict, ratchet: bool = False
) -> None:
    """`ratchet`: whether this node's false rules are ratcheted (ratcheting.go's
    shouldRatchetError): it correlates with an old value it equals, or, not correlating,
    its nearest correlating ancestor does."""
    if value is None:
        return
    if old is not None:
        ratchet = same_json(value, old)
    if node.rules:
        _evaluate(node, path, value, old, verdict, ratchet)
    if isinstance(value, dict):
        correlatable = node.schema.get("x-kubernetes-map-type") in (None, "granular", "atomic")
        old_map = old if isinstance(old, dict) and correlatable else {}
        if node.additional is not None:
            for k, v in value.items():
                _validate(node.additional, _key(path, k), v, old_map.get(k), verdict, ratchet)
        for k, v in value.items():
            child = node.properties.get(k)
            if child is not None:
                _validate(child, _child(path, k), v, old_map.get(k), verdict, ratchet)
    elif isinstance(value, list) and node.items is not None:
        old_items = _correlated(node.schema, value, old)
        for i, v in enumerate(value):
            _validate(node.items, f"{path}[{i}]", v, old_items[i], verdict, ratchet)


def _correlated(schema: Mapping[str, Any], value: list[Any], old: Any) -> list[Any]:
    """makeMapList: only the items of a list-type map correlate with old items, by key."""
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return [None] * len(value)
    by_key = {}
    for item in old:
        if isinstance(item, dict):
            by_key[tuple(repr(item.get(k)) for k in keys)] = item
    return [
        by_key.get(tuple(repr(item.get(k)) for k in keys)) if isinstance(item, dict) else None
        for item in value
    ]


def _evaluate(
    node: Node, path: str, value: Any, old: Any, verdict: Verdict, ratchet: bool = False
) -> None:
    schema = node.schema
    shown = path or "<nil>"
    type_name = _type_name(schema)
    self_value: Any = None
    old_value: Any = None
    built = False
    for rule in node.rules:
        if rule.uses_old_self and old is None and not rule.optional_old_self:
            continue  # a transition rule: only on update
        if rule.program is None:
            verdict.unchecked.append(Unchecked(shown, rule.text, rule.why))
            continue
        if node.unmodelled and (_holds_time(schema, value) or _holds_time(schema, old)):
            verdict.unchecked.append(Unchecked(shown, rule.text, node.unmodelled))
            continue
        if not built:
            self_value = to_cel(schema, value, node.resource_root)
            old_value = None if old is None else to_cel(schema, old, node.resource_root)
            built = True
        data = {"self": self_value, "oldSelf": old_value}
        if rule.optional_old_self:
            data["__old"] = {} if old is None else {"v": old_value}
        try:
            result = rule.program.eval(data=data)
        except Exception as e:  # the runtime refused the activation
            verdict.unchecked.append(Unchecked(shown, rule.text, f"not evaluated: {e}"))
            continue
        kind = result.type().name()
        if kind == "ERROR":
            message, known = runtime_error(str(result.value()))
            if not known:
                verdict.unchecked.append(Unchecked(shown, rule.text, message))
            elif message.startswith("no such overload"):
                # Every value is dyn here: cel-go's checker refuses most of these when the
                # CRD is created, and a call on a value of the wrong type is only a
                # runtime error for int-or-string and unknown fields. Not judged.
                verdict.unchecked.append(
                    Unchecked(shown, rule.text, "no such overload (types not checked here)")
                )
            else:
                # A runtime error keeps the schema's type as the value (v1.36 server).
                verdict.errors.append(
                    invalid(shown, type_name, f"{message} evaluating rule: {rule.error_string()}")
                )
            continue
        if kind != "BOOL":
            verdict.unchecked.append(
                Unchecked(shown, rule.text, f"evaluates to {kind.lower()}, not bool")
            )
            continue
        if result.value() is True:
            continue
        if ratchet and not rule.uses_old_self:
            continue  # unchanged: the server only warns (validation.go's addErr)
        at = _field_path(path, rule.field_path) if rule.field_path else shown
        detail = ""
        if rule.message_program is not None:
            detail = _message_expression(rule, data)
        if not detail:
            detail = rule.message.strip() or f"failed rule: {rule.text.strip()}"
        verdict.errors.append(_reasoned(at, detail, rule.reason))


def _field_path(path: str, field_path: str) -> str:
    """A rule's fieldPath (`.spec.x`, `['a.b']`) under the node's path, as field.Path
    writes it."""
    result = path
    for match in re.finditer(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]", field_path):
        if match[1] is not None:
            result = _child(result, match[1])
        else:
            result = _child(result, match[2].replace("\\'", "'").replace("\\\\", "\\"))
    return result


def _message_expression(rule: Rule, data: Mapping[str, Any]) -> str:
    """evalMessageExpression: its string, trimmed, unless it fails, is empty, or has a
    line break (then the rule's message is used, as the server does)."""
    try:
        result = rule.message_program.eval(data=dict(data))
    except Exception:
        return ""
    if result.type().name() != "STRING":
        return ""
    text = str(result.value()).strip()
    if not text or "\n" in text or len(text) > 5 * 1024:
        return ""
    return text


def _reasoned(path: str, detail: str, reason: str) -> FieldError:
    """fieldErrorForReason."""
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return FieldError("Duplicate value", path)  # the v1.36 server omits the value
    return _invalid(path, detail)


def _invalid(path: str, detail: str) -> FieldError:
    """field.Invalid of a rule: the v1.36 server omits the value (`Invalid value: <detail>`),
    where older ones printed the schema's type (`Invalid value: "object": <detail>`)."""
    return FieldError("Invalid value", path, detail=detail)


_RUNTIME: Final[Sequence[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]] = (
    (re.compile(r'Key not found in map : "?(.*?)"?$'), lambda m: f"no such key: {m[1]}"),
    (
        re.compile(r"Index error: index=(-?\d+) size=(\d+)"),
        lambda m: f"index '{m[1]}' out of range in list size '{m[2]}'",
    ),
    (re.compile(r"divide by zero|division by zero"), lambda m: "division by zero"),
    (re.compile(r"modulus by zero"), lambda m: "modulus by zero"),
    (re.compile(r"integer overflow"), lambda m: "integer overflow"),
    (re.compile(r"No matching overloads found"), lambda m: "no such overload"),
)


def runtime_error(text: str) -> tuple[str, bool]:
    """cel-cpp's runtime error in cel-go's words, and whether the wording is known."""
    bare = re.sub(r"^[A-Z_]+: ", "", text)
    for pattern, words in _RUNTIME:
        match = pattern.search(bare)
        if match:
            return words(match), True
    return f"runtime error not modelled: {bare}", False
