"""The checks of pkg/apis/nfd/validate/validate.go (node-feature-discovery NFD_COMMIT).

nfd-master runs Label, Annotation, Taint and ExtendedResource on every output of the
rules before writing it; kubectl-nfd's `validate` runs them with MatchFeatures, MatchAny
and Template on a NodeFeatureRule file. Each check raises ValidationError with Go's
message; the sentinel errors of validate.go (ErrNSNotAllowed and the others) are its
subclasses, so that nfd-master's `err == validate.ErrNSNotAllowed` is an isinstance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from reconcile.kube import labels as kube_labels
from reconcile.kube.labels import go_quote
from reconcile.kube.quantity import QuantityError, parse_quantity
from reconcile.nfd import template
from reconcile.nfd.model import Taint, Term

FEATURE_NS: Final = "feature.node.kubernetes.io"
PROFILE_NS: Final = "profile.node.kubernetes.io"
ANNOTATION_VALUE_LIMIT: Final = 1 << 10
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# resource.ErrFormatWrong: ParseQuantity's error, without the value the API server adds.
_QUANTITY_FORMAT: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class ValidationError(ValueError):
    """What a check of validate.go returns; str() is its message."""


class NSNotAllowed(ValidationError):
    """validate.ErrNSNotAllowed."""

    def __init__(self) -> None:
        super().__init__("namespace is not allowed")


class UnprefixedKeysNotAllowed(ValidationError):
    """validate.ErrUnprefixedKeysNotAllowed."""

    def __init__(self) -> None:
        super().__init__("unprefixed keys are not allowed")


class InvalidTaintEffect(ValidationError):
    """validate.ErrInvalidTaintEffect."""

    def __init__(self) -> None:
        super().__init__("invalid taint effect")


class EmptyTaintEffect(ValidationError):
    """validate.ErrEmptyTaintEffect."""

    def __init__(self) -> None:
        super().__init__("empty taint effect")


def split_ns(name: str) -> tuple[str, str]:
    """splitNs: (namespace, name); the namespace empty when there is no `/`."""
    ns, sep, base = name.partition("/")
    return (ns, base) if sep else ("", name)


def _kubernetes_io(ns: str) -> bool:
    return ns == "kubernetes.io" or ns.endswith(".kubernetes.io")


def _own(ns: str, *allowed: str) -> bool:
    """The namespace itself, or one under it (`<x>.<allowed>`: validate.go's SubNsSuffix)."""
    return any(ns == a or ns.endswith("." + a) for a in allowed)


def _namespace(key: str, *allowed: str) -> None:
    ns, _ = split_ns(key)
    if not ns:
        raise UnprefixedKeysNotAllowed()
    if _kubernetes_io(ns) and not _own(ns, *allowed):
        raise NSNotAllowed()


def label(key: str, value: str) -> None:
    """validate.Label."""
    if problems := kube_labels.is_qualified_name(key):
        raise ValidationError(f"invalid label key {go_quote(key)}: {'; '.join(problems)}")
    _namespace(key, FEATURE_NS, PROFILE_NS)
    if problems := kube_labels.is_valid_label_value(value):
        raise ValidationError(f"invalid value {go_quote(value)}: {'; '.join(problems)}")


def annotation(key: str, value: str) -> None:
    """validate.Annotation."""
    if problems := kube_labels.is_qualified_name(key):
        raise ValidationError(f"invalid annotation key {go_quote(key)}: {'; '.join(problems)}")
    _namespace(key, FEATURE_NS)
    if len(value.encode()) > ANNOTATION_VALUE_LIMIT:
        raise ValidationError(
            f"invalid value: too long: feature annotations must not be longer than {ANNOTATION_VALUE_LIMIT} characters"
        )


def taint(t: Taint) -> None:
    """validate.Taint."""
    _namespace(t.key, FEATURE_NS)
    if not t.effect:
        raise EmptyTaintEffect()
    if t.effect not in TAINT_EFFECTS:
        raise InvalidTaintEffect()


def extended_resource(key: str, value: str) -> None:
    """validate.ExtendedResource."""
    if problems := kube_labels.is_qualified_name(key):
        raise ValidationError(f"invalid name {go_quote(key)}: {'; '.join(problems)}")
    _namespace(key, FEATURE_NS)
    try:
        parse_quantity(value)
    except QuantityError as e:
        problem = _QUANTITY_FORMAT if str(e).startswith(_QUANTITY_FORMAT[:30]) else str(e)
        raise ValidationError(f"invalid value {go_quote(value)}: {problem}") from e


def match_features(terms: Sequence[Term]) -> list[str]:
    """validate.MatchFeatures: a feature name that is not `<domain>.<feature>` (nfd-master
    evaluates such a term, but a template cannot reach what it matched)."""
    return [
        f"invalid feature name {t.feature} (not <domain>.<feature>), cannot be used for templating"
        for t in terms
        if len(t.feature.split(".")) != 2
    ]


def match_any(elements: Sequence[Sequence[Term]]) -> list[str]:
    """validate.MatchAny: match_features over every element."""
    return [problem for terms in elements for problem in match_features(terms)]


def template_errors(source: str) -> list[str]:
    """validate.Template: the template's parse error, if any."""
    problem = template.parse_error(source)
    return [] if problem is None else [problem]
