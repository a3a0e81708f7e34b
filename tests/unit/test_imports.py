"""`import --group-by`: a group file per value of the key, whatever the values look like."""

from __future__ import annotations

from pathlib import Path

from reconcile.engine.imports import ImportRequest, plan_import
from tests.fake import FakeCluster

KEY = "example.com/sku"


def _nodes(values: list[str]) -> FakeCluster:
    cluster = FakeCluster()
    for i, value in enumerate(values):
        cluster.add_node(f"node-{i}", {KEY: value, "nvidia.com/gpu.count": str(i)})
    return cluster


def _group_files(tmp_path: Path, values: list[str]) -> dict[str, str]:
    request = ImportRequest(tmp_path, None, keep=("nvidia.com/",), group_by=KEY)
    changes = plan_import(request, _nodes(values))
    return {
        c.path.name: next(
            line.split(": ", 1)[1] for line in c.after.splitlines() if line.startswith(f"    {KEY}")
        )
        for c in changes
        if c.path.parent.name == "groups"
    }


def test_values_that_make_one_name_get_a_file_each_numbered_in_sorted_order(
    tmp_path: Path,
) -> None:
    # `a100-x-2` is a value's own name: the number given to a100-x skips it.
    files = _group_files(tmp_path, ["a100-x", "a100-x-2", "A100_x", "A100.X"])
    assert files == {
        "sku-a100-x.yaml": "A100.X",
        "sku-a100-x-3.yaml": "A100_x",
        "sku-a100-x-4.yaml": "a100-x",
        "sku-a100-x-2.yaml": "a100-x-2",
    }
    # The same values in any order make the same names.
    assert _group_files(tmp_path, ["A100_x", "a100-x-2", "A100.X", "a100-x"]) == files


def test_long_values_cut_to_one_name_stay_apart_within_63_characters(tmp_path: Path) -> None:
    long = "x" * 61  # with the key's name, more than 63 characters
    files = _group_files(tmp_path, [f"{long}-a", f"{long}-b"])
    assert sorted(files.values()) == [f"{long}-a", f"{long}-b"]
    assert all(len(name.removesuffix(".yaml")) <= 63 for name in files)
    assert len(files) == 2
