"""MIG layouts per GPU product and the allocatable a node advertises after a layout change.

The expected numbers are read off the upstream sources by hand, not off this code:
NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml at v26.7.0 (all-1g.10gb
is 7 x 1g.10gb per 80 GB A100/H100 and 4 per 40 GB A100; all-balanced is 2 x 1g.10gb +
2g.20gb + 3g.40gb on an 80 GB H100, 2 x 1g.6gb + 2g.12gb on an A30), and the MIG profiles
of NVIDIA/mig-parted pkg/mig/builder/builder_test.go (the MIG User Guide's tables).
"""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.gpu import mig
from reconcile.gpu.mig import DeviceId, MigConfigError, MigProblem, MigTable, Profile, Projected

NODE = {"cpu": "96", "memory": "1056300Mi", "pods": "110", "ephemeral-storage": "1Ti"}


@pytest.fixture(scope="module")
def table() -> MigTable:
    return MigTable.default()


def labels(
    product: str, count: int, layout: str | None, strategy: str | None = "mixed"
) -> dict[str, str]:
    out = {mig.GPU_PRODUCT: product, mig.GPU_COUNT: str(count), mig.MIG_CAPABLE: "true"}
    if layout is not None:
        out[mig.MIG_CONFIG] = layout
    if strategy is not None:
        out[mig.MIG_STRATEGY] = strategy
    return out


def projected(result: Projected | MigProblem) -> Projected:
    assert isinstance(result, Projected), str(result)
    return result


def problem(result: Projected | MigProblem) -> MigProblem:
    assert isinstance(result, MigProblem), result
    return result


def test_all_1g_10gb_on_eight_80gb_a100s_mixed_advertises_56_instances(table: MigTable) -> None:
    after = projected(
        table.projected(
            labels("NVIDIA-A100-SXM4-80GB", 8, "all-1g.10gb"), {**NODE, "nvidia.com/gpu": "8"}
        )
    )
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}
    assert [dict(gpu.mig_devices) for gpu in after.gpus] == [{"1g.10gb": 7}] * 8


def test_all_1g_10gb_on_eight_80gb_a100s_single_advertises_56_gpus(table: MigTable) -> None:
    after = projected(
        table.projected(
            labels("NVIDIA-A100-SXM4-80GB", 8, "all-1g.10gb", "single"),
            {**NODE, "nvidia.com/gpu": "8"},
        )
    )
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "56"}


def test_all_balanced_on_h100_80gb_mixed_counts_each_profile(table: MigTable) -> None:
    after = projected(
        table.projected(
            labels("NVIDIA-H100-80GB-HBM3", 8, "all-balanced"), {**NODE, "nvidia.com/gpu": "8"}
        )
    )
    assert after.allocatable == {
        **NODE,
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-3g.40gb": "8",
    }


def test_all_balanced_under_strategy_single_is_refused_as_the_device_plugin_does(
    table: MigTable,
) -> None:
    found = problem(
        table.projected(labels("NVIDIA-H100-80GB-HBM3", 8, "all-balanced", "single"), NODE)
    )
    assert "one MIG profile on every GPU" in found.message
    assert "1g.10gb, 2g.20gb, 3g.40gb" in found.message


def test_all_disabled_gives_back_whole_gpus_and_drops_the_mig_resources(table: MigTable) -> None:
    before = {**NODE, "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}
    after = projected(table.projected(labels("NVIDIA-A100-SXM4-80GB", 8, "all-disabled"), before))
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "8"}
    assert all(not gpu.mig_enabled for gpu in after.gpus)


def test_all_disabled_needs_no_knowledge_of_the_gpu(table: MigTable) -> None:
    after = projected(table.projected(labels("NVIDIA-L40S", 4, "all-disabled", None), NODE))
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "4"}
    assert table.layouts("NVIDIA-L40S") == ["all-disabled"]


def test_strategy_none_is_what_an_absent_strategy_label_means(table: MigTable) -> None:
    after = projected(
        table.projected(labels("NVIDIA-A100-SXM4-80GB", 8, "all-1g.10gb", None), NODE)
    )
    assert after.strategy == "none"
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "8"}


def test_a30_layouts_are_its_profiles_and_all_balanced(table: MigTable) -> None:
    assert table.layouts("NVIDIA-A30") == [
        "all-1g.6gb",
        "all-1g.6gb.me",
        "all-2g.12gb",
        "all-2g.12gb.me",
        "all-4g.24gb",
        "all-balanced",
        "all-disabled",
        "all-enabled",
    ]


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("all-1g.6gb", {"nvidia.com/mig-1g.6gb": "8"}),
        ("all-2g.12gb", {"nvidia.com/mig-2g.12gb": "4"}),
        ("all-4g.24gb", {"nvidia.com/mig-4g.24gb": "2"}),
        ("all-1g.6gb.me", {"nvidia.com/mig-1g.6gb.me": "2"}),
        ("all-balanced", {"nvidia.com/mig-1g.6gb": "4", "nvidia.com/mig-2g.12gb": "2"}),
    ],
)
def test_a30_layouts_on_two_gpus(table: MigTable, layout: str, expected: dict[str, str]) -> None:
    after = projected(table.projected(labels("NVIDIA-A30", 2, layout), NODE))
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "0", **expected}


def test_the_40gb_a100_takes_four_1g_10gb_instances_not_seven(table: MigTable) -> None:
    # Upstream's all-1g.10gb has an entry of its own for the 40 GB A100 (device filter
    # 0x20B010DE ...): 4 x 1g.10gb, where the 80 GB parts take 7.
    after = projected(table.projected(labels("NVIDIA-A100-SXM4-40GB", 4, "all-1g.10gb"), NODE))
    assert after.allocatable["nvidia.com/mig-1g.10gb"] == "16"


def test_a_layout_the_40gb_a100_lacks_is_a_problem_naming_what_exists(table: MigTable) -> None:
    found = problem(table.projected(labels("NVIDIA-A100-SXM4-40GB", 4, "all-3g.40gb"), NODE))
    assert found.layout == "all-3g.40gb"
    assert found.product == "NVIDIA-A100-SXM4-40GB"
    assert found.layouts == (
        "all-1g.10gb",
        "all-1g.5gb",
        "all-1g.5gb.me",
        "all-2g.10gb",
        "all-3g.20gb",
        "all-4g.20gb",
        "all-7g.40gb",
        "all-balanced",
        "all-disabled",
        "all-enabled",
    )
    assert found.message.startswith(
        "layout all-3g.40gb does not exist for NVIDIA-A100-SXM4-40GB: 3g.40gb is not one of "
        "its MIG profiles"
    )
    assert found.message.endswith(
        "; layouts for NVIDIA-A100-SXM4-40GB: " + ", ".join(found.layouts)
    )


def test_a_layout_whose_device_filters_skip_the_gpu_does_not_exist_for_it(
    table: MigTable,
) -> None:
    # all-1g.10gb filters on the A100/H100 ids: mig-parted would leave an H200 untouched.
    found = problem(table.projected(labels("NVIDIA-H200", 8, "all-1g.10gb"), NODE))
    assert "none of its entries applies to device 0x233510DE" in found.message
    assert "all-1g.18gb" in found.layouts


def test_h200_b200_and_h100_nvl_have_their_own_profiles(table: MigTable) -> None:
    assert "all-7g.141gb" in table.layouts("NVIDIA-H200")
    assert "all-7g.180gb" in table.layouts("NVIDIA-B200")
    assert "all-7g.94gb" in table.layouts("NVIDIA-H100-NVL")
    assert "all-7g.80gb" not in table.layouts("NVIDIA-H100-NVL")
    b200 = projected(table.projected(labels("NVIDIA-B200", 8, "all-balanced"), NODE))
    assert b200.allocatable == {
        **NODE,
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.23gb": "16",
        "nvidia.com/mig-2g.45gb": "8",
        "nvidia.com/mig-3g.90gb": "8",
    }


def test_an_unknown_product_is_a_problem_naming_the_layout(table: MigTable) -> None:
    found = problem(table.projected(labels("NVIDIA-L40S", 4, "all-1g.10gb"), NODE))
    assert found.product == "NVIDIA-L40S"
    assert "NVIDIA-L40S is not a GPU this table knows" in found.message
    assert "all-1g.10gb" in found.message
    assert found.layouts == ("all-disabled",)


def test_an_unknown_layout_is_a_problem(table: MigTable) -> None:
    found = problem(table.projected(labels("NVIDIA-A30", 2, "all-7g.80gb-typo"), NODE))
    assert found.message.startswith("layout all-7g.80gb-typo is not in NVIDIA/gpu-operator")
    assert "all-balanced" in found.layouts


def test_a_node_without_a_layout_keeps_its_allocatable(table: MigTable) -> None:
    before = {**NODE, "nvidia.com/mig-1g.10gb": "56"}
    after = projected(table.projected(labels("NVIDIA-A100-SXM4-80GB", 8, None), before))
    assert after.layout is None
    assert after.allocatable == before


def test_gfd_suffixes_are_stripped_to_find_the_product(table: MigTable) -> None:
    assert mig.base_product("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb") == "NVIDIA-A100-SXM4-80GB"
    assert mig.base_product("NVIDIA-A100-SXM4-40GB-MIG-INVALID") == "NVIDIA-A100-SXM4-40GB"
    assert mig.base_product("NVIDIA-A30-SHARED") == "NVIDIA-A30"
    assert table.layouts("NVIDIA-A30-MIG-1g.6gb") == table.layouts("NVIDIA-A30")


def test_under_single_a_partitioned_node_counts_mig_devices_so_the_gpus_must_be_given(
    table: MigTable,
) -> None:
    now = labels("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 56, "all-3g.40gb", "single")
    found = problem(table.projected(now, {**NODE, "nvidia.com/gpu": "56"}))
    assert "counts MIG devices" in found.message
    after = projected(table.projected(now, {**NODE, "nvidia.com/gpu": "56"}, gpus=8))
    assert after.allocatable == {**NODE, "nvidia.com/gpu": "16"}


def test_all_enabled_under_single_is_refused_and_under_mixed_advertises_nothing(
    table: MigTable,
) -> None:
    single = labels("NVIDIA-H100-80GB-HBM3", 2, "all-enabled", "single")
    assert "MIG on and no instances" in problem(table.projected(single, NODE)).message
    mixed = projected(table.projected(labels("NVIDIA-H100-80GB-HBM3", 2, "all-enabled"), NODE))
    assert mixed.allocatable == {**NODE, "nvidia.com/gpu": "0"}


def test_shared_gpus_are_not_projected(table: MigTable) -> None:
    shared = {**labels("NVIDIA-A30", 2, "all-1g.6gb"), "nvidia.com/gpu.replicas": "4"}
    assert "shared" in problem(table.projected(shared, NODE)).message


def test_a_non_mig_capable_node_ignores_a_mig_layout(table: MigTable) -> None:
    off = {**labels("NVIDIA-A30", 2, "all-1g.6gb"), mig.MIG_CAPABLE: "false"}
    assert "not MIG-capable" in problem(table.projected(off, NODE)).message


CUSTOM: dict[str, Any] = {
    "version": "v1",
    "mig-configs": {
        "half-and-half": [
            {"devices": [0, 1, 2, 3], "mig-enabled": False},
            {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
        "inference": [
            {
                "device-filter": ["0x233010DE", "0x20B210DE"],
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {"1g.10gb": 3, "2g.20gb": 2},
            },
        ],
        "too-much": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}
        ],
    },
}


def test_a_custom_config_replaces_the_default_layouts(table: MigTable) -> None:
    custom = MigTable.from_config(CUSTOM, "gpu-operator/custom-mig-parted-config")
    assert list(custom.configs) == ["half-and-half", "inference", "too-much"]
    assert custom.layouts("NVIDIA-H100-80GB-HBM3") == ["half-and-half", "inference"]
    half = projected(custom.projected(labels("NVIDIA-H100-80GB-HBM3", 8, "half-and-half"), NODE))
    assert half.allocatable == {**NODE, "nvidia.com/gpu": "4", "nvidia.com/mig-3g.40gb": "8"}
    inference = projected(custom.projected(labels("NVIDIA-A100-SXM4-80GB", 2, "inference"), NODE))
    assert inference.allocatable == {
        **NODE,
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "6",
        "nvidia.com/mig-2g.20gb": "4",
    }
    gone = problem(custom.projected(labels("NVIDIA-A30", 2, "all-balanced"), NODE))
    assert "gpu-operator/custom-mig-parted-config" in gone.message


def test_a_custom_layout_past_the_memory_of_the_gpu_does_not_exist(table: MigTable) -> None:
    # 3g.40gb takes half the memory of an 80 GB H100: two leave no room for a 1g.10gb.
    custom = MigTable.from_config(CUSTOM, "custom")
    found = problem(custom.projected(labels("NVIDIA-H100-80GB-HBM3", 1, "too-much"), NODE))
    assert "need 9 memory slices, it has 8" in found.message


def test_a_custom_layout_leaving_some_gpus_unlisted_cannot_be_told(table: MigTable) -> None:
    custom = MigTable.from_config(CUSTOM, "custom")
    found = problem(custom.projected(labels("NVIDIA-H100-80GB-HBM3", 10, "half-and-half"), NODE))
    assert "no entry for GPU 8, 9" in found.message


def test_a_config_mig_parted_would_refuse_lists_every_problem() -> None:
    bad = {
        "version": "v2",
        "mig-configs": {
            "empty": [],
            "wrong": [
                {"devices": "some", "mig-enabled": True},
                {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}},
                {
                    "device-filter": "A100",
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"7z": 1},
                },
            ],
        },
    }
    with pytest.raises(MigConfigError) as raised:
        MigTable.from_config(bad, "bad.yaml")
    assert raised.value.problems == (
        "version must be v1, not 'v2'",
        "mig-configs.empty: at least one entry is required",
        "mig-configs.wrong[0].devices: 'all' or a list of GPU indexes, not 'some'",
        "mig-configs.wrong[0]: missing required field 'mig-devices' when 'mig-enabled' is true",
        "mig-configs.wrong[1]: MIG devices included when 'mig-enabled' is false",
        "mig-configs.wrong[2].device-filter: 'A100' is not a device id",
        "mig-configs.wrong[2].mig-devices: '7z' is not a MIG profile",
    )


def test_profiles_and_device_ids_parse_as_mig_parted_writes_them() -> None:
    assert str(DeviceId.parse("0x20b210de")) == "0x20B210DE"
    assert DeviceId.parse("0x20B210DE:0x147F10DE").subsystem == 0x147F10DE
    me = Profile.parse("1g.10gb+me")
    assert me is not None and me.resource == "nvidia.com/mig-1g.10gb.me"
    same = Profile.parse("1c.1g.5gb")
    assert same is not None and same.name == "1g.5gb"
    assert Profile.parse("1g.10gb+me-me") is None


def test_every_layout_of_the_default_names_profiles_and_device_ids_that_parse(
    table: MigTable,
) -> None:
    assert len(table.configs) == 81  # the layouts of upstream's config.yaml
    filtered = {
        str(f) for entries in table.configs.values() for e in entries for f in e.device_filter
    }
    # Every product's id is one the default configuration filters on.
    assert {str(p.device_id) for p in table.products.values()} <= filtered
    # Every profile a product lists is one some layout of the default makes.
    made = {name for entries in table.configs.values() for e in entries for name in e.mig_devices}
    for product in table.products.values():
        assert set(product.profiles) <= made, product.label


def _uncounted(layout: str) -> dict[str, str]:
    after = labels("NVIDIA-A100-SXM4-80GB", 8, layout)
    del after[mig.GPU_COUNT]
    return after


def test_without_a_gpu_count_label_the_advertised_gpus_are_counted(table: MigTable) -> None:
    from_allocatable = projected(
        table.projected(
            _uncounted("all-1g.10gb"),
            {**NODE, "nvidia.com/gpu": "8"},
            capacity={**NODE, "nvidia.com/gpu": "2"},
        )
    )
    from_capacity = projected(
        table.projected(_uncounted("all-1g.10gb"), NODE, capacity={**NODE, "nvidia.com/gpu": "2"})
    )

    assert from_allocatable.allocatable["nvidia.com/mig-1g.10gb"] == "56"
    assert from_capacity.allocatable["nvidia.com/mig-1g.10gb"] == "14"


@pytest.mark.parametrize(
    "offered",
    [
        NODE,  # no device plugin yet
        {**NODE, "nvidia.com/gpu": "0"},
        {**NODE, "nvidia.com/gpu": "4", "nvidia.com/mig-1g.10gb": "28"},  # partitioned
    ],
)
def test_a_node_that_does_not_say_how_many_gpus_it_has_cannot_be_projected(
    table: MigTable, offered: dict[str, str]
) -> None:
    unknown = problem(table.projected(_uncounted("all-1g.10gb"), offered, capacity=offered))

    assert unknown.unknown
    assert "the number of GPUs is unknown" in unknown.message
    # A layout the GPU lacks is still refused, not merely unknown.
    lacking = problem(table.projected(_uncounted("all-1g.5gb"), offered))
    assert not lacking.unknown
