"""A MIG layout in desired/ is a change of room, not only a label: the plan projects each
node's allocatable from the GPU Operator's mig-parted layouts, refuses a layout the
node's GPU does not have, and says which workloads and running pods lose their GPUs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ClusterFactory
from tests.support import TestCluster, mig_node, run_cli

A100_JOB = """---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: nfd-lab
spec:
  nodeSelector:
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:24.07-py3
    resources:
      limits: {{{resource}: {count}}}
"""


def _layout(workdir: Path, layout: str, strategy: str = "mixed", *, product: bool = True) -> None:
    """lab-node-0's desired layout (with its product declared too, or left to the live
    label); a second call replaces the first."""
    node = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    text = node.read_text().split("  nvidia.com/mig.config:")[0]
    if not product:
        text = text.replace("  nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB\n", "")
    node.write_text(
        text + f"  nvidia.com/mig.config: {layout}\n  nvidia.com/mig.strategy: {strategy}\n"
    )


def _add(workdir: Path, text: str) -> None:
    workloads = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    workloads.write_text(workloads.read_text() + text)


def test_a_layout_the_gpu_does_not_have_is_refused_and_nothing_is_written(
    lab: TestCluster, workdir: Path
) -> None:
    _layout(workdir, "all-3g.40gb", product=False)  # an 80 GB profile on a 40 GB A100
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.code == 2
    [line] = [line for line in plan.stderr.splitlines() if "mig-layout" in line or "all-3g" in line]
    assert line.startswith("error: lab-node-0: nvidia.com/mig.config=all-3g.40gb: ")
    assert "all-1g.5gb" in line  # the layouts that do exist for the product are named
    before = lab.labels("lab-node-0")
    applied = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 2
    assert lab.labels("lab-node-0") == before


def test_a_new_layout_projects_the_room_workloads_find(lab: TestCluster, workdir: Path) -> None:
    _layout(workdir, "all-1g.5gb")  # 4 x A100-40GB: 7 x 1g.5gb each
    _add(workdir, A100_JOB.format(name="whole-gpu", resource="nvidia.com/gpu", count=1))
    _add(workdir, A100_JOB.format(name="slices", resource="nvidia.com/mig-1g.5gb", count=28))
    placement = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "Pod/nfd-lab/slices 1/1 -> lab-node-0 (1); candidates: lab-node-0" in placement.lines
    assert (
        "Pod/nfd-lab/whole-gpu 0/1 PENDING 1: 0/3 nodes are available: 1 Insufficient "
        "nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    ) in placement.lines
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        "error: Pod/nfd-lab/whole-gpu: no node will take it after apply (1/1 placed before): "
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match "
        "Pod's node affinity/selector."
    ) in plan.stderr


def test_a_new_layout_under_running_gpu_pods_is_a_rollout_and_blocks_apply(
    lab: TestCluster, workdir: Path
) -> None:
    lab.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "busy", "namespace": "nfd-lab"},
            "spec": {
                "nodeName": "lab-node-0",
                "containers": [
                    {
                        "name": "trainer",
                        "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                        "resources": {"limits": {"nvidia.com/gpu": 2}},
                    }
                ],
            },
        }
    )
    _layout(workdir, "all-1g.5gb")
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    # The layout is marked a rollout, and refused under a pod that uses a GPU.
    assert "lab-node-0 nvidia.com/mig.config all-1g.5gb (rollout)" in plan.lines
    assert (
        "error: lab-node-0: nvidia.com/mig.config=all-1g.5gb on a node where 1 pod(s) use GPUs "
        "(nfd-lab/busy): mig-manager stops the GPU operands and repartitions every GPU of the "
        "node: the pods using them lose their devices. Roll it out: `reconcile rollout` cordons "
        "the node, drains its GPU pods within the budgets, writes it, waits for "
        "nvidia.com/mig.config.state=success and uncordons the node"
    ) in plan.stderr
    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    )
    [node] = [n for n in document["nodes"] if n["name"] == "lab-node-0"]
    assert [c["key"] for c in node["changes"] if c["rollout"]] == ["nvidia.com/mig.config"]
    before = lab.labels("lab-node-0")
    applied = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 2
    assert lab.labels("lab-node-0") == before


def test_validate_refuses_a_layout_the_declared_product_lacks(workdir: Path) -> None:
    _layout(workdir, "all-3g.40gb")
    result = run_cli("validate", cwd=workdir)
    assert result.code == 2
    assert (
        "desired/nodes/lab-node-0.yaml:21:3: node lab-node-0: MIG layout all-3g.40gb does not "
        "exist for NVIDIA-A100-SXM4-40GB: layouts for NVIDIA-A100-SXM4-40GB: "
    ) in result.stderr


CUSTOM = """---
apiVersion: v1
kind: ConfigMap
metadata:
  name: custom-mig-config
  namespace: gpu-operator
data:
  config.yaml: |
    version: v1
    mig-configs:
      two-halves:
        - devices: all
          mig-enabled: true
          mig-devices:
            "3g.20gb": 2
"""


def test_a_custom_mig_parted_config_in_desired_gives_its_layouts(
    lab: TestCluster, workdir: Path
) -> None:
    namespace = "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: gpu-operator\n"
    _add(workdir, namespace + CUSTOM)
    _layout(workdir, "two-halves")
    _add(workdir, A100_JOB.format(name="halves", resource="nvidia.com/mig-3g.20gb", count=8))
    placement = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "Pod/nfd-lab/halves 1/1 -> lab-node-0 (1); candidates: lab-node-0" in placement.lines
    _layout(workdir, "all-1g.5gb")  # the default's layouts are gone with a custom config
    result = run_cli("validate", cwd=workdir)
    assert result.code == 2
    assert (
        "MIG layout all-1g.5gb is not in ConfigMap gpu-operator/custom-mig-config" in result.stderr
    )


DRA_WORKLOAD = """---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
  - cel:
      expression: device.driver == 'gpu.nvidia.com'
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: one-a100
  namespace: nfd-lab
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inference
  namespace: nfd-lab
spec:
  replicas: 3
  selector:
    matchLabels: {app: inference}
  template:
    metadata:
      labels: {app: inference}
    spec:
      resourceClaims:
      - {name: gpu, resourceClaimTemplateName: one-a100}
      containers:
      - name: server
        image: nvcr.io/nvidia/tritonserver:24.07-py3
        resources:
          claims: [{name: gpu}]
"""


def test_dra_claims_are_placed_against_the_clusters_resource_slices(
    lab: TestCluster, workdir: Path
) -> None:
    devices = [
        {"name": f"gpu-{i}", "capacity": {"memory": {"value": memory}}}
        for i, memory in enumerate(("40Gi", "40Gi", "20Gi"))
    ]
    lab.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "lab-node-0-gpus"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "pool": {"name": "lab-node-0", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "lab-node-0",
                "devices": devices,
            },
        }
    )
    try:
        _add(workdir, DRA_WORKLOAD)
        placement = run_cli("placement", cwd=workdir, kubeconfig=lab.kubeconfig)
    finally:  # cluster-scoped: no namespace of the test takes it away
        lab.raw("DELETE", "/apis/resource.k8s.io/v1/resourceslices/lab-node-0-gpus")
    # Two devices of 40Gi on lab-node-0: each replica's claim takes one; the third finds
    # only the 20Gi device, which the request's selector refuses.
    assert (
        "Deployment/nfd-lab/inference 2/3 -> lab-node-0 (2); PENDING 1: 0/3 nodes are "
        "available: 3 cannot allocate all claims."
    ) in placement.lines


def test_a_layout_on_a_node_no_gpu_pod_uses_is_written_and_marked(
    lab: TestCluster, workdir: Path
) -> None:
    _layout(workdir, "all-1g.5gb")
    markdown = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    assert "- `lab-node-0 nvidia.com/mig.config all-1g.5gb`" in markdown.split("**Rollouts:**")[1]
    applied = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert "lab-node-0 nvidia.com/mig.config all-1g.5gb (rollout)" in applied.lines
    assert lab.labels("lab-node-0")["nvidia.com/mig.config"] == "all-1g.5gb"


POOL_LAYOUT = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: pa
selector:
  matchLabels: {example.com/pool: pa}
labels:
  nvidia.com/mig.config: all-1g.5gb
"""
SLICES = """\
apiVersion: v1
kind: Pod
metadata:
  name: slices
  namespace: default
spec:
  nodeSelector: {example.com/pool: pa}
  containers:
  - name: trainer
    image: nvcr.io/nvidia/pytorch:24.07-py3
    resources:
      limits: {nvidia.com/mig-1g.5gb: 28}
"""


def _unlabelled(name: str, gpu: str | None) -> dict[str, object]:
    """A pool node GFD has not labelled yet: no nvidia.com/gpu.count nor mig.config;
    `gpu` the nvidia.com/gpu it advertises (None: the device plugin has not either)."""
    node = mig_node(name, layout=None, gpus=4)
    labels = node["metadata"]["labels"]
    del labels["nvidia.com/gpu.count"]
    labels["example.com/pool"] = "pa"
    for part in ("capacity", "allocatable"):
        node["status"][part].pop("nvidia.com/gpu")
        if gpu is not None:
            node["status"][part]["nvidia.com/gpu"] = gpu
    return node


def _pool_tree(tmp_path: Path) -> Path:
    work = tmp_path / "pool"
    (work / "desired" / "groups").mkdir(parents=True)
    (work / "desired" / "groups" / "pa.yaml").write_text(POOL_LAYOUT)
    (work / "desired" / "workloads").mkdir()
    (work / "desired" / "workloads" / "slices.yaml").write_text(SLICES)
    return work


def test_without_a_gpu_count_label_the_projection_counts_the_advertised_gpus(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([_unlabelled("pa-09", "4")])
    work = _pool_tree(tmp_path)
    whole = SLICES.replace("name: slices", "name: whole-gpu")
    (work / "desired" / "workloads" / "whole.yaml").write_text(
        whole.replace("nvidia.com/mig-1g.5gb: 28", "nvidia.com/gpu: 1")
    )

    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)

    assert plan.code == 2, plan.stderr
    assert "pa-09 nvidia.com/mig.config all-1g.5gb (rollout)" in plan.lines
    assert "cannot be projected" not in plan.stderr and "mig.config=" not in plan.stderr
    # The 4 GPUs it advertises, 7 x 1g.5gb each: the pod that wants 28 finds room after
    # the layout, the one that wants a whole GPU none.
    [error] = [line for line in plan.stderr.splitlines() if line.startswith("error:")]
    assert error == (
        "error: Pod/default/whole-gpu: no node will take it after apply (1/1 placed before): "
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    )


def test_a_node_that_does_not_say_how_many_gpus_it_has_is_a_warning_and_still_applied(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([_unlabelled("pa-09", None)])
    work = _pool_tree(tmp_path)
    (work / "desired" / "workloads" / "slices.yaml").unlink()

    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)

    assert plan.code == 1, plan.stderr
    assert plan.lines == ["pa-09 nvidia.com/mig.config all-1g.5gb (rollout)"]
    [warning] = [line for line in plan.stderr.splitlines() if "pa-09" in line]
    assert warning.startswith("warning: pa-09: nvidia.com/mig.config=all-1g.5gb: ")
    assert "capacity after the layout cannot be projected" in warning
    assert "error:" not in plan.stderr
    applied = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert applied.lines == ["pa-09 nvidia.com/mig.config all-1g.5gb (rollout)"]
    assert cluster.labels("pa-09")["nvidia.com/mig.config"] == "all-1g.5gb"


def test_an_unknown_gpu_count_still_refuses_a_layout_the_gpu_lacks(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([_unlabelled("pa-09", None)])
    work = _pool_tree(tmp_path)
    group = work / "desired" / "groups" / "pa.yaml"
    group.write_text(group.read_text().replace("all-1g.5gb", "all-3g.40gb"))  # an 80 GB one

    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)

    [error] = [line for line in plan.stderr.splitlines() if line.startswith("error: pa-09")]
    assert error.startswith("error: pa-09: nvidia.com/mig.config=all-3g.40gb: layout ")
    assert run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig).code == 2
    assert "nvidia.com/mig.config" not in cluster.labels("pa-09")


def test_an_unknown_gpu_count_on_a_busy_node_is_still_a_rollout(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    busy = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "busy", "namespace": "default"},
        "spec": {
            "nodeName": "pa-09",
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.07-py3",
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }
    cluster = make_cluster([_unlabelled("pa-09", None), busy])
    work = _pool_tree(tmp_path)
    (work / "desired" / "workloads" / "slices.yaml").unlink()

    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)

    assert "pa-09 nvidia.com/mig.config all-1g.5gb (rollout)" in plan.lines
    assert "capacity after the layout cannot be projected" in plan.stderr
    assert (
        "error: pa-09: nvidia.com/mig.config=all-1g.5gb on a node where 1 pod(s) use GPUs "
        "(default/busy)"
    ) in plan.stderr
    applied = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 2
    assert "nvidia.com/mig.config" not in cluster.labels("pa-09")
