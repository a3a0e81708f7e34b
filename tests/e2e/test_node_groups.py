"""A fleet declared by pools: NodeGroups select nodes on their live labels, a node's own
file overrides a group, labels, annotations and taints are applied together, one request
per node, and every conflict is refused with both places named."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli, without_prunes

A100_POOL = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: a100-pool
selector:
  matchLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}
labels:
  example.com/pool: a100
annotations:
  example.com/owner: ml platform
taints:
- {key: nvidia.com/gpu, value: present, effect: NoSchedule}
"""

GPUS = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: gpus
selector:
  matchExpressions:
  - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}
labels:
  example.com/gpu: "yes"
"""

OVERRIDE = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeFeatures
metadata:
  name: lab-node-1
labels:
  example.com/gpu: override
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """A desired/ tree declared by pools: two groups and one per-node override."""
    work = tmp_path / "fleet"
    for directory, files in {
        "groups": {"a100-pool.yaml": A100_POOL, "gpus.yaml": GPUS},
        "nodes": {"lab-node-1.yaml": OVERRIDE},
    }.items():
        (work / "desired" / directory).mkdir(parents=True)
        for name, text in files.items():
            (work / "desired" / directory / name).write_text(text)
    return work


EXPECTED = [
    "lab-node-0 example.com/gpu yes",
    "lab-node-0 example.com/pool a100",
    'lab-node-0 annotation:example.com/owner "ml platform"',
    "lab-node-0 taint:nvidia.com/gpu:NoSchedule present",
    "lab-node-1 example.com/gpu override",
]


def test_a_fleet_by_groups_plans_applies_in_one_request_per_node_and_converges(
    lab: TestCluster, fleet: Path
) -> None:
    assert run_cli("validate", cwd=fleet).code == 0
    plan = run_cli("plan", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert (plan.code, without_prunes(plan.lines)) == (1, EXPECTED), plan.stderr

    if lab.sandbox is not None:
        lab.sandbox.clear_requests()
    apply = run_cli("apply", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert (apply.code, apply.lines) == (0, EXPECTED), apply.stderr
    if lab.sandbox is not None:
        # One PATCH a node; the nodes are written in parallel, in no set order.
        # (Each is dry-run first: checked, not written.)
        writes = sorted(
            r.path for r in lab.sandbox.requests if r.method == "PATCH" and not r.dry_run
        )
        assert writes == ["/api/v1/nodes/lab-node-0", "/api/v1/nodes/lab-node-1"]

    node = lab.node("lab-node-0")
    assert node["metadata"]["annotations"]["example.com/owner"] == "ml platform"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    again = run_cli("plan", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert (again.code, without_prunes(again.lines)) == (1, [])  # the lab's objects: --prune


def test_a_node_that_joins_a_pool_shows_in_the_next_plan(lab: TestCluster, fleet: Path) -> None:
    assert run_cli("apply", cwd=fleet, kubeconfig=lab.kubeconfig).code == 0
    lab.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "lab-node-5",
                "labels": {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                },
            },
        }
    )
    plan = run_cli("plan", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert without_prunes(plan.lines) == [
        "lab-node-5 example.com/gpu yes",
        "lab-node-5 example.com/pool a100",
        'lab-node-5 annotation:example.com/owner "ml platform"',
        "lab-node-5 taint:nvidia.com/gpu:NoSchedule present",
    ]


def test_two_groups_that_disagree_on_a_node_are_refused_naming_both(
    lab: TestCluster, fleet: Path
) -> None:
    (fleet / "desired" / "groups" / "gpus.yaml").write_text(
        GPUS.replace('example.com/gpu: "yes"', "example.com/pool: other")
    )
    before = lab.resource_versions()
    for command in ("plan", "apply"):
        result = run_cli(command, cwd=fleet, kubeconfig=lab.kubeconfig)
        assert result.code == 2, result.stderr
        assert result.stdout == ""
        assert result.stderr == (
            "error: lab-node-0 example.com/pool: group a100-pool "
            "(desired/groups/a100-pool.yaml) says 'a100', group gpus "
            "(desired/groups/gpus.yaml) says 'other': nothing was planned\n"
        )
    assert lab.resource_versions() == before


def test_two_groups_over_the_annotation_budget_on_one_node_block_apply(
    lab: TestCluster, fleet: Path
) -> None:
    """Each group is within 256 KiB; a node both select is not. Offline the overlap is
    unknown (they select on different labels): plan finds it on the live node."""
    groups = fleet / "desired" / "groups"
    for name, group in (("a100-pool.yaml", A100_POOL), ("gpus.yaml", GPUS)):
        big = f"annotations:\n  example.com/{name[:4]}: {'v' * 200_000}\n"
        own = group.replace("annotations:\n  example.com/owner: ml platform\n", "")
        (groups / name).write_text(own + big)
    assert run_cli("validate", cwd=fleet).code == 0
    before = lab.resource_versions()

    plan = run_cli("plan", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert plan.code == 2, plan.stderr
    assert ("error: lab-node-0: its annotations would total 400") in plan.stderr
    apply = run_cli("apply", cwd=fleet, kubeconfig=lab.kubeconfig)
    assert apply.code == 2, apply.stderr
    assert "lab-node-0: its annotations would total" in apply.stderr
    assert lab.resource_versions() == before


def test_groups_over_the_annotation_budget_are_refused_offline_when_one_implies_the_other(
    fleet: Path,
) -> None:
    groups = fleet / "desired" / "groups"
    (groups / "gpus.yaml").write_text(GPUS + f"annotations:\n  example.com/a: {'v' * 200_000}\n")
    everywhere = GPUS.replace("name: gpus", "name: everywhere").replace(
        '  matchExpressions:\n  - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}\n',
        "  {}\n",
    )
    (groups / "everywhere.yaml").write_text(
        everywhere.replace('example.com/gpu: "yes"', 'example.com/any: "yes"')
        + f"annotations:\n  example.com/b: {'w' * 200_000}\n"
    )

    result = run_cli("validate", cwd=fleet)

    assert result.code == 2
    assert (
        "desired/groups/gpus.yaml:11:3: the annotations of a node group gpus selects would "
        "total 400"
    ) in result.stderr
    assert "counted with group everywhere (desired/groups/everywhere.yaml)" in result.stderr
    # the node file is covered by the group that selects every node
    assert (
        "desired/nodes/lab-node-1.yaml" not in result.stderr or "node lab-node-1" in result.stderr
    )


def test_a_selector_on_a_key_desired_sets_is_refused_offline_with_both_places(
    fleet: Path,
) -> None:
    (fleet / "desired" / "groups" / "gpus.yaml").write_text(
        GPUS.replace("nvidia.com/gpu.present, operator: In", "example.com/pool, operator: In")
    )
    result = run_cli("validate", cwd=fleet)
    assert result.code == 2
    assert (
        "desired/groups/gpus.yaml:7:11: node group gpus selects on example.com/pool, which "
        "desired/ sets: set at desired/groups/a100-pool.yaml:8:3: membership would depend on "
        "the order of applies"
    ) in result.stderr


def test_taints_and_annotations_are_checked_with_the_api_servers_rules(fleet: Path) -> None:
    node_file = fleet / "desired" / "nodes" / "lab-node-1.yaml"
    node_file.write_text(
        OVERRIDE
        + textwrap.dedent(
            """\
            annotations:
              "bad key!": x
            taints:
            - {key: b, effect: Sometimes}
            """
        )
    )
    result = run_cli("validate", cwd=fleet)
    assert result.code == 2
    assert 'desired/nodes/lab-node-1.yaml:8:3: invalid annotation key "bad key!"' in result.stderr
    assert (
        'desired/nodes/lab-node-1.yaml:10:20: taints.0.effect: Unsupported value: "Sometimes": '
        'supported values: "NoExecute", "NoSchedule", "PreferNoSchedule"'
    ) in result.stderr

    node_file.write_text(
        OVERRIDE + "taints:\n- {key: a, effect: NoSchedule}\n- {key: a, effect: NoSchedule}\n"
    )
    result = run_cli("validate", cwd=fleet)
    assert result.code == 2
    assert 'taints[1]: Duplicate value: "a:NoSchedule"' in result.stderr


def test_a_new_no_schedule_taint_that_strands_a_workload_is_an_error_finding(
    lab: TestCluster, workdir: Path
) -> None:
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(
        node_file.read_text() + "taints:\n- {key: dedicated, value: training, effect: NoSchedule}\n"
    )
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "lab-node-0 taint:dedicated:NoSchedule training" in plan.lines
    assert (
        "error: Pod/nfd-lab/a100-job: no node will take it after apply (1/1 placed before): "
        "0/3 nodes are "
        "available: 1 node(s) had untolerated taint(s), 2 node(s) didn't "
        "match Pod's node affinity/selector."
    ) in plan.stderr


def test_the_pooled_fleet_example_validates(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "pooled-fleet"
    shutil.copytree(example, tmp_path / "pooled-fleet")
    result = run_cli("validate", cwd=tmp_path / "pooled-fleet")
    assert result.code == 0, result.stderr


def test_the_lab_desired_tree_keeps_working(make_cluster: ClusterFactory, workdir: Path) -> None:
    cluster = make_cluster(lab_objects("lab"))
    plan = run_cli("plan", cwd=workdir, kubeconfig=cluster.kubeconfig)
    assert plan.lines == ["lab-node-1 nvidia.com/gpu.count 2"]


def test_import_group_by_bootstraps_a_fleet_that_plans_clean(
    lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli(
        "import", "--group-by", "nvidia.com/gpu.present", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )
    assert result.code == 0, result.stderr
    assert result.lines[0] == "desired/groups/gpu-present-true.yaml 4 label(s)"
    group = (tmp_path / "desired" / "groups" / "gpu-present-true.yaml").read_text()
    assert '  matchLabels:\n    nvidia.com/gpu.present: "true"\n' in group
    assert "feature.node.kubernetes.io/pci-10de.present" in group  # shared by both GPU nodes
    node = (tmp_path / "desired" / "nodes" / "lab-node-0.yaml").read_text()
    assert "pci-10de.present" not in node and "nvidia.com/gpu.present" not in node
    assert "nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB" in node  # what differs stays
    assert run_cli("validate", cwd=tmp_path).code == 0
    plan = run_cli("plan", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    # Out of sync only by the lab's objects, which an import of nodes leaves to git.
    assert (plan.code, without_prunes(plan.lines)) == (1, []), plan.stderr

    again = run_cli(
        "import", "--group-by", "nvidia.com/gpu.present", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )
    assert again.code == 2
    assert "node group gpu-present-true exists already: nothing was written" in again.stderr


def test_driver_coverage_applies_to_every_node_a_group_selects(
    lab: TestCluster, tmp_path: Path
) -> None:
    work = tmp_path / "pool"
    shutil.copytree(Path(__file__).parents[2] / "desired" / "drivers", work / "desired" / "drivers")
    (work / "desired" / "groups").mkdir(parents=True)
    (work / "desired" / "groups" / "a10.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeGroup\nmetadata: {name: a10}\n"
        "selector:\n  matchLabels: {kubernetes.io/hostname: lab-node-1}\n"
        'labels:\n  nvidia.com/cuda.driver.major: "999"\n'
    )
    plan = run_cli("plan", cwd=work, kubeconfig=lab.kubeconfig)
    assert without_prunes(plan.lines) == ["lab-node-1 nvidia.com/cuda.driver.major 999"]
    assert "error: lab-node-1: driver image 999-" in plan.stderr
    assert "is not in the support matrix" in plan.stderr
    refused = run_cli("apply", cwd=work, kubeconfig=lab.kubeconfig)
    assert refused.code == 2
    assert "lab-node-1" in refused.stderr and "--allow-missing-image" in refused.stderr
