"""Workload manifests end to end: dry-run planning, server-side apply, conflicts, immutable
fields, pruning by inventory, and no spurious drift from defaulting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli, wait_for

WORKLOADS = [
    "Namespace/gpu-drv +",
    "Namespace/nfd-lab +",
    "PodDisruptionBudget/gpu-drv/trainer-pdb +",
    "Pod/gpu-drv/cuda12-job +",
    "Pod/gpu-drv/cuda13-job +",
    "Pod/nfd-lab/a100-job +",
    "Pod/nfd-lab/any-gpu-job +",
    "Pod/nfd-lab/gt-job +",
    "Pod/nfd-lab/or-job +",
    "Pod/nfd-lab/train-a +",
    "Deployment/gpu-drv/trainer +",
]


@pytest.fixture
def empty(make_cluster: ClusterFactory) -> TestCluster:
    """The lab's three nodes and nothing else."""
    return make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])


def _objects(cluster: TestCluster) -> dict[str, str]:
    """id -> a fingerprint of each workload object of the lab that any write of
    reconcile's changes: the resourceVersion on the sandbox, where nothing else writes;
    on a real cluster (where the scheduler and controllers move resourceVersions by
    themselves) reconcile's own field-manager entry, its time and fields."""
    found = {}
    for path, kind in (
        ("/api/v1/namespaces/nfd-lab/pods", "Pod"),
        ("/api/v1/namespaces/gpu-drv/pods", "Pod"),
        ("/apis/apps/v1/namespaces/gpu-drv/deployments", "Deployment"),
        ("/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets", "PodDisruptionBudget"),
        ("/api/v1/namespaces", "Namespace"),
    ):
        status, body = cluster.raw("GET", path)
        if status != 200:
            continue
        for item in body["items"]:
            metadata = item["metadata"]
            written = [
                m for m in metadata.get("managedFields") or () if m.get("manager") == "reconcile"
            ]
            found[f"{kind}/{metadata.get('namespace', '')}/{metadata['name']}"] = (
                metadata["resourceVersion"]
                if cluster.is_sandbox
                else json.dumps(written, sort_keys=True)
            )
    return found


def _edit(workdir: Path, file: str, old: str, new: str) -> None:
    path = workdir / "desired" / "workloads" / file
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_the_labs_manifests_apply_from_empty_and_then_plan_empty(
    empty: TestCluster, workdir: Path
) -> None:
    plan = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert plan.code == 2
    assert plan.lines == ["lab-node-1 nvidia.com/gpu.count 2", *WORKLOADS]

    apply = run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert (apply.code, apply.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2", *WORKLOADS]), (
        apply.stderr
    )

    again = run_cli("plan", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert (again.code, again.stdout, again.stderr) == (0, "", "")
    versions = _objects(empty)
    second = run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig)
    assert (second.code, second.stdout) == (0, "")
    assert _objects(empty) == versions  # no spurious writes from defaulted fields


def test_applied_objects_carry_the_managed_by_label_and_reconciles_field_manager(
    empty: TestCluster, workdir: Path
) -> None:
    run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig)
    status, deployment = empty.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer")
    assert status == 200
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "reconcile"
    # Its spec and metadata are reconcile's alone (a real controller writes status).
    owners = deployment["metadata"]["managedFields"]
    assert [(m["manager"], m["operation"]) for m in owners if m.get("subresource") != "status"] == [
        ("reconcile", "Apply")
    ]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"  # server defaults, never drift


def test_namespaces_go_first(empty: TestCluster, workdir: Path) -> None:
    if empty.sandbox is None:
        pytest.skip("reads the sandbox's request log")
    empty.sandbox.clear_requests()
    run_cli("apply", cwd=workdir, kubeconfig=empty.kubeconfig)
    writes = [
        (r.resource, r.namespace)
        for r in empty.sandbox.requests
        if r.verb == "patch" and "dryRun" not in r.query and r.resource != "nodes"
    ]
    # The inventory first (what is about to be created is recorded before it exists),
    # then the namespaces, and the inventory again, last.
    assert writes[:3] == [("configmaps", "default"), ("namespaces", ""), ("namespaces", "")]
    assert writes[-1] == ("configmaps", "default")


def test_one_changed_field_is_planned_applied_and_then_in_sync(
    lab: TestCluster, workdir: Path
) -> None:
    _edit(workdir, "gpu-drv.yaml", "replicas: 4", "replicas: 3")

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.lines == [
        "lab-node-1 nvidia.com/gpu.count 2",
        "Deployment/gpu-drv/trainer spec.replicas 3",
    ]

    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    )
    [trainer] = document["objects"]
    assert trainer["changes"] == [
        {"path": ["spec", "replicas"], "action": "update", "before": 4, "after": 3}
    ]

    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.lines == [
        "lab-node-1 nvidia.com/gpu.count 2",
        "Deployment/gpu-drv/trainer spec.replicas 3",
    ]
    _, deployment = lab.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer")
    assert deployment["spec"]["replicas"] == 3
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0


def test_a_field_another_manager_owns_is_a_conflict_naming_it(
    lab: TestCluster, workdir: Path
) -> None:
    status, _ = lab.raw(
        "PATCH",
        # A controller's field (an autoscaler's): kubectl's own managers are taken back.
        "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer?fieldManager=replica-autoscaler",
        {"spec": {"replicas": 5}},
        "application/merge-patch+json",
    )
    assert status == 200
    versions = lab.resource_versions()

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "Deployment/gpu-drv/trainer spec.replicas 4" in plan.lines
    assert 'conflict with "replica-autoscaler" using apps/v1' in plan.stderr
    assert "--force-conflicts takes ownership" in plan.stderr

    refused = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert refused.code == 2
    assert refused.stdout == ""
    assert "nothing was applied" in refused.stderr
    assert lab.resource_versions() == versions  # not even the label drift was written

    forced = run_cli("apply", "--force-conflicts", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert forced.code == 0, forced.stderr
    assert "Deployment/gpu-drv/trainer spec.replicas 4" in forced.lines
    _, deployment = lab.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer")
    assert deployment["spec"]["replicas"] == 4


def test_an_immutable_change_is_refused_with_the_recreate_hint(
    lab: TestCluster, workdir: Path
) -> None:
    _edit(
        workdir,
        "nfd-lab.yaml",
        "values: [NVIDIA-A100-SXM4-40GB]",
        "values: [NVIDIA-A100-SXM4-80GB]",
    )
    _, before = lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/a100-job")

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        "Pod/nfd-lab/a100-job spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        '.nodeSelectorTerms[0].matchExpressions[0].values ["NVIDIA-A100-SXM4-80GB"]'
    ) in plan.lines
    assert (
        'error: Pod/nfd-lab/a100-job: cannot change in place: Pod "a100-job" is invalid: spec: Forbidden'
        in plan.stderr
    )
    assert "--recreate deletes and creates it" in plan.stderr

    refused = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert refused.code == 2
    assert (
        lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/a100-job")[1]["metadata"]["uid"]
        == before["metadata"]["uid"]
    )

    recreated = run_cli("apply", "--recreate", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert recreated.code == 0, recreated.stderr
    _, after = lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/a100-job")
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    terms = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["NVIDIA-A100-SXM4-80GB"]
    assert run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0


def test_prune_deletes_only_managed_objects_no_longer_declared(
    lab: TestCluster, workdir: Path
) -> None:
    text = (workdir / "desired" / "workloads" / "nfd-lab.yaml").read_text()
    documents = text.split("---\n")
    kept = [d for d in documents if "name: a100-job" not in d and "name: gt-job" not in d]
    (workdir / "desired" / "workloads" / "nfd-lab.yaml").write_text("---\n".join(kept))
    # gt-job was taken over by hand: without the label it is never deleted
    status, _ = lab.raw(
        "PATCH",
        "/api/v1/namespaces/nfd-lab/pods/gt-job",
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}},
        "application/merge-patch+json",
    )
    assert status == 200

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "Pod/nfd-lab/a100-job -" not in plan.lines
    assert (
        "note: 1 object(s) applied by reconcile are no longer in desired/ (Pod/nfd-lab/a100-job)"
        in plan.stderr
    )

    pruning = run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert pruning.lines[-1] == "Pod/nfd-lab/a100-job -"

    apply = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.code == 0, apply.stderr
    assert apply.lines[-1] == "Pod/nfd-lab/a100-job -"
    wait_for(  # graceful deletion: a real kubelet confirms it asynchronously
        lambda: lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/a100-job")[0] == 404,
        what="a100-job to go",
    )
    assert lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/gt-job")[0] == 200
    assert run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0


def test_an_object_the_api_server_does_not_know_rejects_the_whole_apply(
    lab: TestCluster, workdir: Path
) -> None:
    (workdir / "desired" / "workloads" / "extra.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: nfd-lab\n"
    )
    versions = lab.resource_versions()

    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert apply.code == 2
    assert (
        "Widget/nfd-lab/w: the API server does not serve apiVersion example.com/v1 kind Widget"
        in apply.stderr
    )
    assert apply.stdout == ""
    assert lab.resource_versions() == versions


def test_a_namespace_that_is_neither_live_nor_declared_is_reported(
    lab: TestCluster, workdir: Path
) -> None:
    (workdir / "desired" / "workloads" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: nowhere\ndata: {a: b}\n"
    )
    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (
        "error: ConfigMap/nowhere/c: namespace nowhere does not exist and desired/ does not create it"
        in plan.stderr
    )


def test_saved_plan_with_objects_refuses_when_an_object_moved(
    lab: TestCluster, workdir: Path
) -> None:
    _edit(workdir, "gpu-drv.yaml", "replicas: 4", "replicas: 3")
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    lab.raw(
        "PATCH",
        "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer",
        {"metadata": {"labels": {"touched": "yes"}}},
        "application/merge-patch+json",
    )

    stale = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert stale.code == 2
    assert "plan is stale: Deployment/gpu-drv/trainer (resourceVersion" in stale.stderr
    _, deployment = lab.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer")
    assert deployment["spec"]["replicas"] == 4


def test_saved_plan_with_objects_applies(lab: TestCluster, workdir: Path) -> None:
    _edit(workdir, "gpu-drv.yaml", "replicas: 4", "replicas: 3")
    saved = workdir / "plan.json"
    run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    applied = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert applied.code == 0, applied.stderr
    assert applied.lines == [
        "lab-node-1 nvidia.com/gpu.count 2",
        "Deployment/gpu-drv/trainer spec.replicas 3",
    ]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata: {a: b}\n",
            "desired/workloads/extra.yaml:4:3: metadata.namespace is required: ConfigMap is namespaced",
        ),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: n\n  namespace: x\n",
            "desired/workloads/extra.yaml:5:14: Namespace is cluster-scoped: it has no namespace",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: nfd-lab}\nspec:\n  containers:\n  - name: c\n",
            'desired/workloads/extra.yaml:6:5: Pod "p" is invalid: spec.containers[0].image: Required value',
        ),
        (
            "kind: Pod\nmetadata: {name: p}\n",
            "desired/workloads/extra.yaml:1:1: missing required field apiVersion",
        ),
        (
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: nfd-lab\n",
            "desired/workloads/nfd-lab.yaml:2:1: Namespace/nfd-lab is declared twice: first declared at desired/workloads/extra.yaml:1:1",
        ),
    ],
)
def test_invalid_manifests_are_refused_offline_with_their_position(
    manifest: str, message: str, lab: TestCluster, workdir: Path
) -> None:
    (workdir / "desired" / "workloads" / "extra.yaml").write_text(manifest)
    versions = lab.resource_versions()

    validate = run_cli("validate", cwd=workdir)
    assert validate.code == 2
    assert any(line.startswith(message) for line in validate.stderr.splitlines()), validate.stderr
    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (apply.code, apply.stdout) == (2, "")
    assert lab.resource_versions() == versions


def test_markdown_plan_lists_object_changes(lab: TestCluster, workdir: Path) -> None:
    _edit(workdir, "gpu-drv.yaml", "replicas: 4", "replicas: 3")
    plan = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "| `Deployment/gpu-drv/trainer` | `spec.replicas` | `4` | `3` |" in plan.stdout
