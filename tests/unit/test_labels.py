"""Label rules: the upstream apimachinery test vectors, the exact messages, sanitizing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconcile.gpu import provenance
from reconcile.kube import labels

UPSTREAM = json.loads(
    (Path(__file__).parents[1] / "data/upstream/label_validation.json").read_text()
)

CHECKS: dict[str, Any] = {
    "isQualifiedName": labels.is_qualified_name,
    "isValidLabelValue": labels.is_valid_label_value,
    "isDNS1123Subdomain": labels.is_dns1123_subdomain,
    "isDNS1123Label": labels.is_dns1123_label,
}


def _cases(verdict: str) -> list[tuple[str, str]]:
    return [(name, value) for name in CHECKS for value in UPSTREAM[name][verdict]]


@pytest.mark.parametrize(("check", "value"), _cases("good"))
def test_upstream_good_values_are_accepted(check: str, value: str) -> None:
    assert CHECKS[check](value) == []


@pytest.mark.parametrize(("check", "value"), _cases("bad"))
def test_upstream_bad_values_are_refused(check: str, value: str) -> None:
    assert CHECKS[check](value) != []


def test_value_message_is_the_api_servers() -> None:
    assert labels.is_valid_label_value("NVIDIA A100-SXM4-40GB") == [
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
        "'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    ]


def test_too_long_value_counts_bytes_and_says_so() -> None:
    assert labels.is_valid_label_value("a" * 64) == ["must be no more than 63 bytes"]
    # 32 two-byte characters: 64 bytes though only 32 characters, and not alphanumeric either.
    assert labels.is_valid_label_value("é" * 32)[0] == "must be no more than 63 bytes"


def test_key_message_names_the_part_that_is_wrong() -> None:
    assert labels.is_qualified_name("nvidia.com/gpu product") == [
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
        "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    ]
    assert labels.is_qualified_name("/gpu") == ["prefix part must be non-empty"]
    assert labels.is_qualified_name("nvidia.com/" + "a" * 64) == [
        "name part must be no more than 63 bytes"
    ]
    assert labels.is_qualified_name("Nvidia.com/gpu")[0].startswith(
        "prefix part a lowercase RFC 1123 subdomain must consist of"
    )
    assert labels.is_qualified_name("a/b/c")[0].startswith("a valid label key must consist of")


def test_empty_key_reports_both_empty_and_pattern() -> None:
    problems = labels.is_qualified_name("")
    assert problems[0] == "name part must be non-empty"
    assert len(problems) == 2


def test_dns_label_says_dots_when_it_is_a_subdomain() -> None:
    assert labels.is_dns1123_label("a.b") == ["must not contain dots"]


@pytest.mark.parametrize(
    ("raw", "sanitized"),
    [
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA-A10", "NVIDIA-A10"),
        ("  Tesla T4 (PCIe)  ", "Tesla-T4--PCIe"),
        ("-leading.and.trailing_", "leading.and.trailing"),
        ("a" * 62 + " b", "a" * 62),  # truncate first: the '-' at position 63 is trimmed after
        ("日本語", ""),
        ("", ""),
    ],
)
def test_sanitize_replaces_truncates_then_trims(raw: str, sanitized: str) -> None:
    assert labels.sanitize_label_value(raw) == sanitized


@given(st.text())
def test_sanitized_value_is_always_accepted(raw: str) -> None:
    assert labels.is_valid_label_value(labels.sanitize_label_value(raw)) == []


@given(st.text())
def test_sanitize_is_idempotent(raw: str) -> None:
    once = labels.sanitize_label_value(raw)
    assert labels.sanitize_label_value(once) == once


@given(st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", fullmatch=True))
def test_sanitize_is_the_identity_on_valid_values(value: str) -> None:
    assert labels.is_valid_label_value(value) == []
    assert labels.sanitize_label_value(value) == value


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("tab\there", '"tab\\there"'),
        ("\x01", '"\\x01"'),
        ("ü", '"ü"'),
        ("\u200b", '"\\u200b"'),
    ],
)
def test_go_quote_matches_strconv_quote(value: str, quoted: str) -> None:
    assert labels.go_quote(value) == quoted


@pytest.mark.parametrize(
    ("key", "owner"),
    [
        ("feature.node.kubernetes.io/pci-10de.present", provenance.NFD),
        ("nvidia.com/gpu.product", provenance.GFD),
        ("nvidia.com/cuda.driver.major", provenance.GFD),
        ("nvidia.com/mig.strategy", provenance.GFD),
        ("nvidia.com/gpu.deploy.driver", provenance.GPU_OPERATOR),
        ("nvidia.com/gpu-driver-upgrade-state", provenance.GPU_OPERATOR),
        ("example.com/team", None),
    ],
)
def test_label_owner_by_prefix(key: str, owner: str | None) -> None:
    assert provenance.label_owner(key) == owner


def test_label_owner_by_nfd_record_and_inventory() -> None:
    nfd = provenance.nfd_feature_labels("custom-gpu-training,example.com/rack")
    assert nfd == {"feature.node.kubernetes.io/custom-gpu-training", "example.com/rack"}
    assert provenance.label_owner("example.com/rack", nfd) == provenance.NFD
    assert (
        provenance.label_owner("example.com/team", nfd, frozenset({"example.com/team"}))
        == provenance.RECONCILE
    )


def test_shown_cuts_a_long_value_and_says_its_size() -> None:
    assert labels.shown("NVIDIA A100") == '"NVIDIA A100"'
    assert labels.shown("a" * 64) == '"' + "a" * 64 + '"'
    assert labels.shown("é" * 70, 3) == '"ééé"...(140 bytes)'
    assert labels.shown("k" * 400, labels.SHOWN_NAME, quote=False) == "k" * 320 + "...(400 bytes)"
