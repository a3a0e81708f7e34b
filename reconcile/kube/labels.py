"""Label keys and values, checked exactly as the Kubernetes API server checks them.

The messages are those of k8s.io/apimachinery/pkg/util/validation (v1.36): the same
words reach the user whether `reconcile validate` finds the problem offline or the API
server refuses a request, and the sandbox answers with them too.
"""

from __future__ import annotations

import functools
import re
from typing import Final

LABEL_VALUE_MAX_LENGTH: Final = 63
QUALIFIED_NAME_MAX_LENGTH: Final = 63
DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253

_QUALIFIED_NAME_CHAR_FMT = "[A-Za-z0-9]"
_QUALIFIED_NAME_EXT_CHAR_FMT = "[-A-Za-z0-9_.]"
QUALIFIED_NAME_FMT: Final = (
    f"({_QUALIFIED_NAME_CHAR_FMT}{_QUALIFIED_NAME_EXT_CHAR_FMT}*)?{_QUALIFIED_NAME_CHAR_FMT}"
)
QUALIFIED_NAME_ERR_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
LABEL_VALUE_FMT: Final = f"({QUALIFIED_NAME_FMT})?"
LABEL_VALUE_ERR_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = f"{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"
DNS1123_SUBDOMAIN_ERR_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MAX_LENGTH: Final = 63
DNS1123_LABEL_ERR_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)

_QUALIFIED_NAME_RE = re.compile(QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE = re.compile(LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1123_LABEL_RE = re.compile(DNS1123_LABEL_FMT)
_OUTSIDE_VALUE_ALPHABET = re.compile(r"[^A-Za-z0-9_.-]")
_NON_ALNUM_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def empty_error() -> str:
    return "must be non-empty"


def max_len_error(length: int, unit: str = "characters") -> str:
    """util/validation says "characters"; the api/validate/content package, which checks
    label keys and values since v1.35, says "bytes". Both count bytes (Go's len)."""
    return f"must be no more than {length} {unit}"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError, double spaces between examples included."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    quoted = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {quoted}regex used for validation is '{fmt}')"


def _byte_len(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def is_dns1123_subdomain(value: str, *, unit: str = "characters") -> list[str]:
    errors = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH, unit))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errors.append(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def is_dns1123_label(value: str) -> list[str]:
    errors = []
    if _byte_len(value) > DNS1123_LABEL_MAX_LENGTH:
        errors.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        if _DNS1123_SUBDOMAIN_RE.fullmatch(value):
            # A valid subdomain but not a label: the length was checked, so it is the dots.
            errors.append("must not contain dots")
        else:
            errors.append(
                regex_error(DNS1123_LABEL_ERR_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc")
            )
    return errors


def is_qualified_name(value: str) -> list[str]:
    """Problems with a label key (or any qualified name); empty when it is valid."""
    return list(_qualified_name_problems(value))


@functools.lru_cache(maxsize=4096)  # a fleet repeats the same few dozen keys on every node
def _qualified_name_problems(value: str) -> tuple[str, ...]:
    """The v1.36 form (api/validate/content.IsLabelKey): lengths in bytes, "a valid label
    key" for a key with more than one '/'.
    """
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part " + empty_error())
        else:
            errors.extend(
                "prefix part " + msg for msg in is_dns1123_subdomain(prefix, unit="bytes")
            )
    else:
        return (
            "a valid label key "
            + regex_error(
                QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"
            )
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    if not name:
        errors.append("name part " + empty_error())
    elif _byte_len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errors.append("name part " + max_len_error(QUALIFIED_NAME_MAX_LENGTH, "bytes"))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errors.append(
            "name part "
            + regex_error(
                QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc"
            )
        )
    return tuple(errors)


def is_valid_label_value(value: str) -> list[str]:
    """Problems with a label value; empty when it is valid (the empty string is valid)."""
    if len(value) <= LABEL_VALUE_MAX_LENGTH and _LABEL_VALUE_RE.fullmatch(value):
        return []  # the common case, without counting bytes (a match is ASCII-only)
    errors = []
    if _byte_len(value) > LABEL_VALUE_MAX_LENGTH:
        errors.append(max_len_error(LABEL_VALUE_MAX_LENGTH, "bytes"))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(
            regex_error(LABEL_VALUE_ERR_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def label_errors(labels: dict[str, str]) -> list[tuple[str, str]]:
    """(bad value, message) pairs as metav1validation.ValidateLabels finds them, sorted by key.

    The field of every such error is `metadata.labels`; the bad value is the key or the
    value, whichever is wrong.
    """
    found: list[tuple[str, str]] = []
    for key in sorted(labels):
        found.extend((key, msg) for msg in is_qualified_name(key))
        found.extend((labels[key], msg) for msg in is_valid_label_value(labels[key]))
    return found


def sanitize_label_value(raw: str) -> str:
    """A vendor string made into a valid label value, or "" when nothing is left.

    Replace every character outside [A-Za-z0-9_.-] with '-', truncate to 63, then trim
    non-alphanumerics from both ends. Truncating before trimming matters: a '-' that
    lands on position 63 must not survive.
    """
    replaced = _OUTSIDE_VALUE_ALPHABET.sub("-", raw)
    return _NON_ALNUM_EDGES.sub("", replaced[:LABEL_VALUE_MAX_LENGTH])


def go_quote(value: str) -> str:
    """Go's %q (strconv.Quote), which the API server uses to show a bad value."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


# How much of a value a message shows: a label value is at most 63 characters; keys and
# object names, longer than any valid one (a 253-character prefix, '/', 63 characters).
SHOWN_VALUE: Final = 64
SHOWN_NAME: Final = 320


def shown(text: str, limit: int = SHOWN_VALUE, *, quote: bool = True) -> str:
    """`text` for a message, Go-quoted as the API server shows a value (unless `quote` is
    false), cut after `limit` characters with its whole size said: `"abc..."...(N bytes)`.
    A value of normal size is shown whole; a 20 MB one is not echoed."""
    if len(text) <= limit:
        return go_quote(text) if quote else text
    head = go_quote(text[:limit]) if quote else text[:limit]
    return f"{head}...({_byte_len(text)} bytes)"


_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


# --- labels the kubelet and the cloud provider own ------------------------------------------

# Written by the kubelet at registration (and by the cloud controller) on every node, and
# written back if changed: the scheduler, topology spread and every `nodeSelector` on
# `kubernetes.io/os` rely on them. node-role.kubernetes.io/* is the cluster admin's.
KUBELET_OWNED_KEYS: Final = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)
KUBELET_OWNED_PREFIXES: Final = ("topology.kubernetes.io/",)
KUBELET_OWNED_REASON: Final = (
    "the kubelet (or cloud provider) rewrites it on every node; changing it breaks scheduling"
)


def is_kubelet_owned(key: str) -> bool:
    """Whether the kubelet or the cloud provider writes `key` on every node."""
    return key in KUBELET_OWNED_KEYS or key.startswith(KUBELET_OWNED_PREFIXES)


# Taints Kubernetes controllers set and remove themselves (k8s.io/api core/v1 and
# k8s.io/cloud-provider api well_known_taints.go): key -> who, and what to do instead.
# Declared, or declared absent, they fight the controller. `node.kubernetes.io/out-of-service`
# is not here: an administrator sets that one by hand (non-graceful node shutdown).
_YOUR_OWN: Final = (
    "to keep pods off a node, declare a taint of your own "
    "(e.g. example.com/maintenance:NoSchedule) or cordon it with `kubectl cordon`"
)
_CONDITION: Final = (
    "the node lifecycle controller sets and removes it from the node's {} condition; " + _YOUR_OWN
)
CONTROLLER_OWNED_TAINTS: Final = {
    "node.kubernetes.io/unschedulable": (
        "the node lifecycle controller mirrors spec.unschedulable into it: cordon a node "
        "with `kubectl cordon` and uncordon it with `kubectl uncordon`, not with a taint"
    ),
    "node.kubernetes.io/not-ready": _CONDITION.format("Ready"),
    "node.kubernetes.io/unreachable": _CONDITION.format("Ready"),
    "node.kubernetes.io/memory-pressure": _CONDITION.format("MemoryPressure"),
    "node.kubernetes.io/disk-pressure": _CONDITION.format("DiskPressure"),
    "node.kubernetes.io/pid-pressure": _CONDITION.format("PIDPressure"),
    "node.kubernetes.io/network-unavailable": _CONDITION.format("NetworkUnavailable"),
    "node.cloudprovider.kubernetes.io/uninitialized": (
        "the kubelet sets it (--cloud-provider=external) and the cloud controller manager "
        "removes it once it has initialized the node; " + _YOUR_OWN
    ),
    "node.cloudprovider.kubernetes.io/shutdown": (
        "the cloud controller manager sets it while the node's machine is shut down; " + _YOUR_OWN
    ),
}


def controller_owned_taint(key: str) -> str | None:
    """Why a Kubernetes controller owns the taint `key` (without its effect), or None."""
    return CONTROLLER_OWNED_TAINTS.get(key)


def is_kubernetes_reserved(key: str) -> bool:
    """Whether `key` is under kubernetes.io or k8s.io (the kubelet's, the cluster's and
    node-role keys), NFD's feature.node.kubernetes.io aside: never imported."""
    domain, slash, _ = key.partition("/")
    if not slash or domain == NFD_DEFAULT_NAMESPACE.rstrip("/"):
        return False
    return domain.endswith(("kubernetes.io", "k8s.io"))


# Node Feature Discovery's default label namespace: under kubernetes.io, yet not reserved
# for the kubelet or the cluster (NFD publishes user features there).
NFD_DEFAULT_NAMESPACE: Final = "feature.node.kubernetes.io/"
