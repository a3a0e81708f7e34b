"""Driver tags, the GPU label audit and matrix coverage, as pure functions."""

from __future__ import annotations

import pytest

from reconcile.cli.output import audit_line
from reconcile.desired.models import DesiredNode, DesiredState, MatrixRow
from reconcile.diagnostics import Source
from reconcile.gpu import drivers

LAB_NODE_0 = {
    drivers.GPU_PRESENT: "true",
    drivers.DRIVER_MAJOR: "550",
    drivers.KERNEL: "5.15.0-119-generic",
    drivers.OS_ID: "ubuntu",
    drivers.OS_VERSION: "22.04",
}


def test_tag_is_built_from_its_parts() -> None:
    assert drivers.node_tag("n", LAB_NODE_0) == "550-5.15.0-119-generic-ubuntu22.04"


@pytest.mark.parametrize("part", drivers.TAG_PARTS)
def test_a_missing_part_is_an_error_naming_the_label(part: str) -> None:
    labels = {k: v for k, v in LAB_NODE_0.items() if k != part}
    with pytest.raises(drivers.TagError) as raised:
        drivers.node_tag("lab-node-9", labels)
    assert (
        str(raised.value)
        == f"lab-node-9: cannot build the driver image tag: label {part} is missing"
    )
    assert raised.value.label == part


def test_an_empty_part_is_not_a_missing_one_but_still_an_error() -> None:
    with pytest.raises(drivers.TagError) as raised:
        drivers.node_tag("n", {**LAB_NODE_0, drivers.OS_VERSION: ""})
    assert str(raised.value).endswith(f"label {drivers.OS_VERSION} is empty")


GOOD = {
    drivers.GPU_PRESENT: "true",
    drivers.GPU_PRODUCT: "NVIDIA-A10",
    drivers.GPU_COUNT: "2",
    drivers.GPU_MEMORY: "22731",
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, []),
        ({drivers.GPU_PRODUCT: None}, [(drivers.GPU_PRODUCT, "missing")]),
        (
            {drivers.GPU_COUNT: None, drivers.GPU_MEMORY: None},
            [(drivers.GPU_COUNT, "missing"), (drivers.GPU_MEMORY, "missing")],
        ),
        ({drivers.GPU_COUNT: "four"}, [(drivers.GPU_COUNT, "not-a-number")]),
        ({drivers.GPU_MEMORY: "40G"}, [(drivers.GPU_MEMORY, "not-a-number")]),
        (
            {drivers.GPU_COUNT: ""},
            [(drivers.GPU_COUNT, "not-a-number")],
        ),  # empty is present, not missing
        ({drivers.GPU_COUNT: "-1"}, [(drivers.GPU_COUNT, "not-a-number")]),
        ({drivers.GPU_PRODUCT: "A" * 64}, [(drivers.GPU_PRODUCT, "too-long")]),
        ({drivers.GPU_PRODUCT: "-A10"}, [(drivers.GPU_PRODUCT, "bad-format")]),
        ({drivers.GPU_PRODUCT: "NVIDIA A10"}, [(drivers.GPU_PRODUCT, "bad-format")]),
        ({drivers.GPU_PRODUCT: ""}, [(drivers.GPU_PRODUCT, "bad-format")]),
        (
            {drivers.GPU_PRODUCT: "-" + "A" * 63},
            [(drivers.GPU_PRODUCT, "bad-format"), (drivers.GPU_PRODUCT, "too-long")],
        ),
    ],
)
def test_audit_rules(changes: dict[str, str | None], expected: list[tuple[str, str]]) -> None:
    labels = {k: v for k, v in {**GOOD, **changes}.items() if v is not None}
    assert [(f.key, f.reason) for f in drivers.audit_labels("n", labels)] == expected


def test_audit_skips_nodes_without_gpus_and_sorts_by_node() -> None:
    nodes = [
        ("b", {drivers.GPU_PRESENT: "true"}),
        ("a", {drivers.GPU_PRESENT: "true", drivers.GPU_COUNT: "x"}),
        ("c", {}),
    ]
    assert [audit_line(f) for f in drivers.audit(nodes)] == [
        "a nvidia.com/gpu.count not-a-number",
        "a nvidia.com/gpu.memory missing",
        "a nvidia.com/gpu.product missing",
        "b nvidia.com/gpu.count missing",
        "b nvidia.com/gpu.memory missing",
        "b nvidia.com/gpu.product missing",
    ]


def test_a_gpu_present_value_other_than_true_is_not_a_gpu_node() -> None:
    assert drivers.audit([("n", {drivers.GPU_PRESENT: "false"})]) == []


def test_coverage_reports_tags_and_what_cannot_be_built() -> None:
    nodes = [
        ("a", LAB_NODE_0),
        ("b", {**LAB_NODE_0, drivers.KERNEL: "6.8.0-52-generic"}),
        ("c", {drivers.GPU_PRESENT: "true"}),
    ]
    found = drivers.coverage(nodes, frozenset({"550-5.15.0-119-generic-ubuntu22.04"}))
    assert [(c.node, c.tag, c.covered) for c in found] == [
        ("a", "550-5.15.0-119-generic-ubuntu22.04", True),
        ("b", "550-6.8.0-52-generic-ubuntu22.04", False),
        ("c", None, False),
    ]


@pytest.mark.parametrize(
    ("version", "parts"), [("550.90.07", ("550", "90", "07")), ("535.183.06", ("535", "183", "06"))]
)
def test_driver_version_split_keeps_leading_zeros(
    version: str, parts: tuple[str, str, str]
) -> None:
    assert drivers.split_driver_version(version) == parts


@pytest.mark.parametrize("version", ["550", "550.90", "550.90.07.1", "v550.90.07", ""])
def test_driver_version_must_have_three_parts(version: str) -> None:
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR\.REV"):
        drivers.split_driver_version(version)


def test_env_name() -> None:
    assert drivers.env_name("lab-node-1") == "LAB_NODE_1"


def _state(labels: dict[str, str | None], rows: tuple[str, ...] = ()) -> DesiredState:
    source = Source("desired/nodes/n.yaml", 5, 9)
    matrix = tuple(
        MatrixRow(branch, kernel, os_tag, Source("m.csv", 2, 1))
        for branch, kernel, os_tag in (row.split(",") for row in rows)
    )
    return DesiredState(nodes={"n": DesiredNode("n", labels, source)}, matrix=matrix)


def test_offline_audit_checks_declared_values_only() -> None:
    assert (
        drivers.desired_diagnostics(_state({drivers.GPU_PRESENT: "true"}), coverage_check=True)
        == []
    )
    [problem] = drivers.desired_diagnostics(
        _state({drivers.GPU_PRESENT: "true", drivers.GPU_COUNT: "4x"}), coverage_check=False
    )
    assert problem.summary == "nvidia.com/gpu.count of GPU node n: not-a-number"


def test_offline_coverage_names_the_missing_image() -> None:
    state = _state(dict(LAB_NODE_0), rows=("535,5.15.0-107-generic,ubuntu22.04",))
    [problem] = drivers.desired_diagnostics(state, coverage_check=True)
    assert (
        problem.summary
        == "GPU node n needs driver image 550-5.15.0-119-generic-ubuntu22.04, which is not in the support matrix"
    )
    assert drivers.desired_diagnostics(state, coverage_check=False) == []


@pytest.mark.parametrize(
    ("labels", "allocatable", "expected"),
    [
        ({"nvidia.com/gpu.count": "2"}, {"nvidia.com/gpu": "8"}, "allocatable=8"),
        ({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "8"}, None),
        ({"nvidia.com/gpu.count": "8"}, {}, None),  # the device plugin has not run
        ({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "0"}, None),  # mixed: all MIG
        (
            {"nvidia.com/gpu.count": "8"},
            {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.5gb": "14"},
            None,
        ),
        (
            {
                "nvidia.com/gpu.count": "1",
                "nvidia.com/mig.strategy": "single",
                "nvidia.com/mig.config": "all-1g.5gb",
            },
            {"nvidia.com/gpu": "7"},
            None,  # the single strategy's nvidia.com/gpu counts MIG slices
        ),
        ({"nvidia.com/gpu.count": "four"}, {"nvidia.com/gpu": "4"}, None),  # not-a-number says it
    ],
)
def test_the_gpu_count_is_held_to_the_allocatable_gpus_where_they_count_the_same(
    labels: dict[str, str], allocatable: dict[str, str], expected: str | None
) -> None:
    found = drivers.count_against_allocatable("n", labels, allocatable)
    assert (found.reason if found else None) == expected
