"""The scheduler's arithmetic to the letter of upstream: pod-level resources with
hugepages (k8s.io/component-helpers/resource/helpers.go PodRequests and
IsSupportedPodLevelResource, cases of helpers_test.go TestPodLevelResourceRequests), and
quantities bounded as resource.Quantity bounds them (k8s.io/apimachinery/pkg/api/resource
quantity.go, amount.go, math.go; cases of quantity_test.go)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from reconcile.kube.quantity import milli_value, parse_quantity, value
from reconcile.kube.resources import is_supported_pod_level_resource, pod_requests

MAX = (1 << 63) - 1
MIN = -(1 << 63)
MI = 1 << 20
GI = 1 << 30
H2 = "hugepages-2Mi"
H1G = "hugepages-1Gi"

# TestPodLevelResourceRequests, the cases that do not skip pod-level resources:
# (name, pod-level resources, containers' resources, init containers' (resources,
# restartable), the requests in the scheduler's units).
Case = tuple[
    str, dict[str, Any], list[dict[str, Any]], list[tuple[dict[str, Any], bool]], dict[str, int]
]
POD_LEVEL_CASES: list[Case] = [
    ("nil", {}, [], [], {}),
    ("pod level memory resource", {"requests": {"memory": "2Mi"}}, [], [], {"memory": 2 * MI}),
    (
        "pod level memory and container level cpu resources",
        {"requests": {"memory": "2Mi"}},
        [{"requests": {"cpu": "2m"}}],
        [],
        {"memory": 2 * MI, "cpu": 2},
    ),
    (
        "pod level unsupported resources set at both pod-level and container-level",
        {"requests": {"storage": "2Mi"}},
        [{"requests": {"storage": "3Mi"}}],
        [],
        {"storage": 3 * MI},
    ),
    (
        "pod level unsupported resources set at pod-level",
        {"requests": {"storage": "2Mi"}},
        [{"requests": {"memory": "3Mi"}}],
        [],
        {"memory": 3 * MI},
    ),
    (
        "only container level resources set",
        {},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [],
        {"memory": 3 * MI, "cpu": 2},
    ),
    (
        "both container-level and pod-level resources set",
        {"requests": {"memory": "6Mi", "cpu": "8m"}},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [],
        {"memory": 6 * MI, "cpu": 8},
    ),
    (
        "container-level resources and init container set",
        {},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [({"requests": {"memory": "5Mi", "cpu": "4m"}}, False)],
        {"memory": 5 * MI, "cpu": 4},
    ),
    (
        "container-level resources and sidecar container set",
        {},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [({"requests": {"memory": "5Mi", "cpu": "4m"}}, True)],
        {"memory": 8 * MI, "cpu": 6},
    ),
    (
        "container-level resources, init and sidecar container set",
        {},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [
            ({"requests": {"memory": "5Mi", "cpu": "4m"}}, True),
            ({"requests": {"memory": "6Mi", "cpu": "8m"}}, False),
        ],
        {"memory": 11 * MI, "cpu": 12},
    ),
    (
        "pod-level resources, container-level resources, init and sidecar container set",
        {"requests": {"memory": "15Mi", "cpu": "18m"}},
        [{"requests": {"memory": "3Mi", "cpu": "2m"}}],
        [
            ({"requests": {"memory": "5Mi", "cpu": "4m"}}, True),
            ({"requests": {"memory": "6Mi", "cpu": "8m"}}, False),
        ],
        {"memory": 15 * MI, "cpu": 18},
    ),
    (
        "pod-level resources, hugepage request/limit single page size",
        {"limits": {H2: "2Mi"}, "requests": {"memory": "10Mi", H2: "2Mi"}},
        [],
        [],
        {"memory": 10 * MI, H2: 2 * MI},
    ),
    (
        "pod-level resources, hugepage request/limit multiple page sizes",
        {"limits": {H2: "2Mi", H1G: "1Gi"}, "requests": {"cpu": "1", H2: "2Mi", H1G: "1Gi"}},
        [],
        [],
        {"cpu": 1000, H2: 2 * MI, H1G: GI},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit single page size",
        {"limits": {H2: "10Mi"}, "requests": {"cpu": "1", H2: "10Mi"}},
        [{"limits": {H2: "6Mi"}, "requests": {H2: "6Mi"}}],
        [],
        {"cpu": 1000, H2: 10 * MI},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit multiple page sizes",
        {"limits": {H2: "10Mi", H1G: "2Gi"}, "requests": {"cpu": "1", H2: "10Mi", H1G: "2Gi"}},
        [{"limits": {H1G: "2Gi"}, "requests": {"cpu": "1", H1G: "2Gi"}}],
        [],
        {"cpu": 1000, H2: 10 * MI, H1G: 2 * GI},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit multiple page "
        "sizes between pod-level and container-level",
        {"limits": {H2: "10Mi"}, "requests": {"cpu": "1", H2: "10Mi"}},
        [{"limits": {H1G: "1Gi"}, "requests": {"memory": "4Mi", H1G: "1Gi"}}],
        [],
        {"cpu": 1000, "memory": 4 * MI, H2: 10 * MI, H1G: GI},
    ),
]


@pytest.mark.parametrize(
    ("pod_resources", "containers", "init_containers", "expected"),
    [case[1:] for case in POD_LEVEL_CASES],
    ids=[case[0] for case in POD_LEVEL_CASES],
)
def test_pod_level_resource_requests(
    pod_resources: dict[str, Any],
    containers: list[dict[str, Any]],
    init_containers: list[tuple[dict[str, Any], bool]],
    expected: dict[str, int],
) -> None:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
        "initContainers": [
            {"name": f"i{i}", "resources": r, **({"restartPolicy": "Always"} if always else {})}
            for i, (r, always) in enumerate(init_containers)
        ],
    }
    if pod_resources:
        spec["resources"] = pod_resources
    assert pod_requests(spec) == expected


@pytest.mark.parametrize(
    ("name", "supported"),
    [("cpu", True), ("memory", True), ("ephemeral-storage", False), (H2, True), (H1G, True),
     ("nvidia.com/gpu", False)],
)  # fmt: skip
def test_is_supported_pod_level_resource(name: str, supported: bool) -> None:
    assert is_supported_pod_level_resource(name) is supported


# quantity_test.go TestQuantityParse: what ParseQuantity keeps (rounded up to a nano, a
# binary value capped at maxAllowed, a decimal one kept).
@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("0.0000000001", Fraction(1, 10**9)),
        ("0.0000000005", Fraction(1, 10**9)),
        ("0.00000000050", Fraction(1, 10**9)),
        ("0.5e-9", Fraction(1, 10**9)),
        ("0.9n", Fraction(1, 10**9)),
        ("0.00000012345", Fraction(124, 10**9)),
        ("0.00000012354", Fraction(124, 10**9)),
        ("9Ei", Fraction(MAX)),
        ("9223372036854775807Ki", Fraction(MAX)),
        ("-9Ei", Fraction(-MAX)),
        ("12E", Fraction(12 * 10**18)),
        ("100.035Ki", Fraction(10243584, 100)),
        ("0.5Mi", Fraction(MI // 2)),
        ("0.05Gi", Fraction(536870912, 10)),
        ("7Ei", Fraction(7 << 60)),  # below the cap: exact
    ],
)
def test_parse_quantity_bounds(text: str, amount: Fraction) -> None:
    assert parse_quantity(text) == amount


# Value() and MilliValue(): rounded away from zero, saturated to int64 (amount.go
# AsScaledInt64, math.go positiveScaleInt64 "saturates to the int64 rail").
@pytest.mark.parametrize(
    ("text", "whole", "milli"),
    [
        ("9Ei", MAX, MAX),
        ("8Ei", MAX, MAX),  # 2**63, capped
        ("-9Ei", -MAX, MIN),
        ("12E", MAX, MAX),
        ("-12E", MIN, MIN),
        ("1e19", MAX, MAX),
        ("9223372036854775807", MAX, MAX),
        ("9223372036854775", 9223372036854775, MAX - MAX % 1000),
        ("9223372036854775808", MAX, MAX),
        ("1.5", 2, 1500),
        ("-1.5", -2, -1500),
        ("0.0001", 1, 1),
        ("-0.0001", -1, -1),
        ("100m", 1, 100),
        ("1Gi", GI, GI * 1000),
    ],
)
def test_value_and_milli_value_saturate(text: str, whole: int, milli: int) -> None:
    assert (value(text), milli_value(text)) == (whole, milli)


def test_a_pod_asking_beyond_int64_asks_int64s_worth() -> None:
    spec = {
        "containers": [{"name": "c", "resources": {"requests": {"memory": "9Ei", "cpu": "10E"}}}]
    }
    assert pod_requests(spec) == {"memory": MAX, "cpu": MAX}
