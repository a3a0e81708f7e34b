"""Nothing a reviewer did not see is destroyed: empty prunes, namespaces pruned from under
their objects, prunes that strand workloads, and saved plans that were edited, made from
another tree or for another cluster. Where reconcile refuses, the cluster is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconcile.engine.nodes.apply import apply_plan
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.plan import Plan
from reconcile.engine.results import DONE_BY_OTHERS
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.server import FaultInjector, Route
from tests.conftest import ClusterFactory
from tests.e2e.test_workloads import WORKLOADS
from tests.support import TestCluster, lab_objects, run_cli, settled, wait_for

# What a snapshot reads: every kind the lab holds, in every namespace.
_COLLECTIONS = (
    "/api/v1/nodes",
    "/api/v1/namespaces",
    "/api/v1/pods",
    "/api/v1/configmaps",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/replicasets",
    "/apis/policy/v1/poddisruptionbudgets",
)


def snapshot(cluster: TestCluster) -> dict[str, str]:
    """(collection, namespace, name) -> what a writer like reconcile could change (labels,
    annotations, spec, data) of everything in the cluster. Not the status or the
    resourceVersion: on a real cluster the scheduler and the controllers move those on
    their own."""
    found = {}
    for path in _COLLECTIONS:
        status, body = cluster.raw("GET", path)
        assert status == 200, body
        for item in body["items"]:
            metadata = item["metadata"]
            key = f"{path} {metadata.get('namespace', '')}/{metadata['name']}"
            annotations = {
                k: v
                for k, v in (metadata.get("annotations") or {}).items()
                if not k.startswith("deployment.kubernetes.io/")
            }
            seen = [metadata.get("labels"), annotations, item.get("spec"), item.get("data")]
            found[key] = json.dumps(seen, sort_keys=True)
    return found


def _workloads(workdir: Path) -> Path:
    return workdir / "desired" / "workloads"


def _drop_documents(workdir: Path, file: str, *names: str) -> None:
    path = _workloads(workdir) / file
    documents = path.read_text().split("---\n")
    kept = [d for d in documents if not any(f"name: {n}\n" in d for n in names)]
    assert len(kept) == len(documents) - len(names)
    path.write_text("---\n".join(kept))


# --- 1. pruning everything needs a word from a person ------------------------------------


def test_an_empty_workloads_directory_never_prunes_everything(
    lab: TestCluster, workdir: Path
) -> None:
    for path in _workloads(workdir).glob("*.yaml"):
        path.unlink()
    before = snapshot(lab)

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "note: 11 object(s) applied by reconcile are no longer in desired/" in plan.stderr

    for command in ("plan", "apply"):
        refused = run_cli(command, "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
        assert refused.code == 2, refused.stderr
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith("error: --prune would delete all 11 object(s) reconcile manages")
        assert "pass --allow-empty-prune" in line
    assert snapshot(lab) == before

    allowed = run_cli(
        "apply",
        "--prune",
        "--allow-empty-prune",
        "--prune-namespace-contents",
        cwd=workdir,
        kubeconfig=lab.kubeconfig,
    )
    assert allowed.code == 0, allowed.stderr
    assert "Namespace/nfd-lab -" in allowed.lines
    wait_for(  # a real cluster deletes a namespace's content asynchronously
        lambda: lab.raw("GET", "/api/v1/namespaces/nfd-lab/pods/a100-job")[0] == 404,
        what="a100-job to go",
    )


def test_pruning_every_label_reconcile_manages_is_refused(lab: TestCluster, workdir: Path) -> None:
    assert run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0  # inventory
    node_file = workdir / "desired" / "nodes" / "lab-node-1.yaml"
    head = node_file.read_text().split("labels:")[0]
    node_file.write_text(head + "labels: {}\n")
    before = snapshot(lab)

    refused = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    assert "--prune would remove all 13 label(s) reconcile manages" in refused.stderr
    assert snapshot(lab) == before


def test_a_desired_directory_that_does_not_exist_is_an_error(
    lab: TestCluster, tmp_path: Path
) -> None:
    before = snapshot(lab)
    for command in ("plan", "apply"):
        result = run_cli(
            command, "--prune", "--desired", "nowhere", cwd=tmp_path, kubeconfig=lab.kubeconfig
        )
        assert result.code == 2
        assert "desired state directory not found: nowhere" in result.stderr
    assert snapshot(lab) == before


# --- 2. namespaces are not pruned out from under declared objects --------------------------


def test_a_namespace_whose_objects_are_still_declared_is_not_pruned(
    lab: TestCluster, workdir: Path
) -> None:
    _drop_documents(workdir, "nfd-lab.yaml", "nfd-lab")
    before = snapshot(lab)

    plan = run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.code == 2
    assert "Namespace/nfd-lab -" in plan.lines
    assert (
        "error: Namespace/nfd-lab: desired/ no longer declares this namespace but still "
        "declares 5 object(s) in it (Pod/nfd-lab/a100-job, " in plan.stderr
    )

    apply = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.code == 2
    assert apply.stdout == ""
    assert "nothing was applied" in apply.stderr
    assert snapshot(lab) == before


def test_a_namespace_holding_objects_reconcile_does_not_manage_needs_a_flag(
    lab: TestCluster, workdir: Path
) -> None:
    (_workloads(workdir) / "nfd-lab.yaml").unlink()
    lab.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "someone-elses", "namespace": "nfd-lab"},
            "data": {"k": "v"},
        }
    )
    before = snapshot(lab)

    refused = run_cli("apply", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert refused.code == 2
    assert (
        "Namespace/nfd-lab: the namespace holds 1 object(s) reconcile does not manage "
        "(1 ConfigMap): deleting it deletes them too. Pass --prune-namespace-contents"
    ) in refused.stderr
    assert snapshot(lab) == before

    allowed = run_cli(
        "apply", "--prune", "--prune-namespace-contents", cwd=workdir, kubeconfig=lab.kubeconfig
    )
    assert allowed.code == 0, allowed.stderr
    assert "Namespace/nfd-lab -" in allowed.lines
    assert lab.raw("GET", "/api/v1/namespaces/nfd-lab")[0] in (404, 200)  # 200: terminating


def test_validate_warns_about_a_namespace_desired_does_not_create(workdir: Path) -> None:
    _drop_documents(workdir, "nfd-lab.yaml", "nfd-lab")
    result = run_cli("validate", cwd=workdir)
    assert result.code == 0
    assert result.stderr == (
        "desired/workloads/nfd-lab.yaml:6:14: warning: namespace nfd-lab is not created by "
        "desired/: 5 object(s) here live in it, so it must already exist in the cluster "
        "(`reconcile plan` checks); declare a Namespace document to manage it\n"
        "note: desired is valid: 3 node(s), 0 group(s), 10 object(s), 3 support-matrix "
        "row(s); 1 warning(s) above\n"
    )


# --- 3. a removal goes through the same impact checks as a change --------------------------


def test_a_pruned_label_that_strands_a_workload_is_an_error_finding(
    lab: TestCluster, workdir: Path
) -> None:
    lab.label("lab-node-0", **{"nvidia.com/gpu.count": "1"})  # drift: apply records inventory
    assert run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig).code == 0
    node_file = workdir / "desired" / "nodes" / "lab-node-0.yaml"
    node_file.write_text(node_file.read_text().replace("gpu.product:", "gpu.prodcut:"))

    plan = run_cli("plan", "--prune", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert "lab-node-0 nvidia.com/gpu.product -" in plan.lines
    stranded = (
        "error: Pod/nfd-lab/a100-job: no node will take it after apply (1/1 placed before): "
        "0/3 nodes are "
        "available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    assert stranded in plan.stderr
    assert "warning: Pod/nfd-lab/a100-job: keeps running on lab-node-0" in plan.stderr

    # the same removal written as `null`: the very same findings
    node_file.write_text(node_file.read_text() + "  nvidia.com/gpu.product: null\n")
    explicit = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert "lab-node-0 nvidia.com/gpu.product -" in explicit.lines
    assert [line for line in explicit.stderr.splitlines() if "a100-job" in line] == [
        line for line in plan.stderr.splitlines() if "a100-job" in line
    ]


# --- 4. a saved plan is bound to its cluster, its tree and its own content -----------------


TRAINER = "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer"


def _saved(lab: TestCluster, workdir: Path, *args: str) -> Path:
    """A saved plan, made once the trainer Deployment has settled (on a real cluster its
    controller writes its status for a while, and any write makes the plan stale)."""
    if lab.raw("GET", TRAINER)[0] == 200:
        settled(lab, TRAINER)
    out = workdir / "plan.json"
    result = run_cli("plan", *args, "--out", str(out), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert result.code in (0, 1, 2), result.stderr  # 2: an error finding, still saved
    assert out.is_file()
    return out


def _reseal(path: Path, edit: Any) -> None:
    """Edit a saved plan as someone who knows the digest scheme would, and re-seal it."""
    document = json.loads(path.read_text())
    edit(document)
    document["digest"] = None
    plan = Plan.model_validate(document)
    document["digest"] = plan.body_digest()
    path.write_text(json.dumps(document))


def test_a_saved_plan_records_what_it_was_made_from(lab: TestCluster, workdir: Path) -> None:
    document = json.loads(_saved(lab, workdir).read_text())
    assert document["cluster"]["server"].startswith("https://127.0.0.1:")
    _, kube_system = lab.raw("GET", "/api/v1/namespaces/kube-system")
    assert document["cluster"]["kubeSystemUID"] == kube_system["metadata"]["uid"]
    assert document["desiredDigest"].startswith("sha256:")
    assert Plan.model_validate(document).body_digest() == document["digest"]


def test_an_edited_plan_is_refused_by_its_digest(lab: TestCluster, workdir: Path) -> None:
    path = _saved(lab, workdir)
    path.write_text(path.read_text().replace('"after": "2"', '"after": "3"'))
    before = snapshot(lab)

    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert "was changed after `reconcile plan` wrote it" in result.stderr
    assert snapshot(lab) == before


def _value(doc: dict[str, Any]) -> None:
    doc["nodes"][0]["changes"][0]["after"] = "8"


def _node(doc: dict[str, Any]) -> None:
    added = json.loads(json.dumps(doc["nodes"][0]))
    added["name"] = "lab-node-7"
    doc["nodes"].append(added)


def _key(doc: dict[str, Any]) -> None:
    change = dict(doc["nodes"][0]["changes"][0], key="example.com/backdoor", after="1")
    doc["nodes"][0]["changes"].append(change)


def _prune_kube_system(doc: dict[str, Any]) -> None:
    """Asks to delete kube-system, at the resourceVersion it has now (so it is not stale)."""
    doc["prune"] = True
    doc["objects"].append(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "namespace": "",
            "name": "kube-system",
            "plural": "namespaces",
            "namespaced": False,
            "source": "",
            "action": "prune",
        }
    )


def _binding(doc: dict[str, Any]) -> None:
    doc["objects"].append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "namespace": "",
            "name": "everyone-admin",
            "plural": "clusterrolebindings",
            "namespaced": False,
            "source": "",
            "action": "create",
            "manifest": {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "everyone-admin"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "x"}
                ],
            },
        }
    )


NOT_PLANNED = "error: the plan is not what planning gives now: "


def _recreate_namespace(doc: dict[str, Any]) -> None:
    [namespace] = [o for o in doc["objects"] if o["kind"] == "Namespace"]
    namespace["action"] = "recreate"


def _cluster_scoped(doc: dict[str, Any]) -> None:
    [deployment] = [o for o in doc["objects"] if o["kind"] == "Deployment"]
    deployment["namespaced"] = False


@pytest.mark.parametrize(
    ("edit", "args", "named"),
    [
        (_value, (), NOT_PLANNED + "lab-node-1 nvidia.com/gpu.count 8 (planning gives 2)"),
        (_node, (), "error: plan is stale: lab-node-7 (deleted)"),
        (_key, (), NOT_PLANNED + "lab-node-1 example.com/backdoor 1 (planning gives no change)"),
        (
            _prune_kube_system,
            ("--prune",),
            NOT_PLANNED + "Namespace/kube-system prune (planning gives no change)",
        ),
        (
            _binding,
            (),
            NOT_PLANNED + "ClusterRoleBinding/everyone-admin create (planning gives no change)",
        ),
        (
            _recreate_namespace,
            (),
            NOT_PLANNED + "Namespace/gpu-drv action recreate (planning gives update)",
        ),
        (
            _cluster_scoped,
            (),
            # Looked up where the edit says, it is not there: stale, whatever else it is.
            "error: plan is stale: Deployment/gpu-drv/trainer (deleted)",
        ),
    ],
    ids=["value", "node", "key", "prune", "create", "recreate", "scope"],
)
def test_a_resealed_plan_is_refused_change_by_change(
    lab: TestCluster, workdir: Path, edit: Any, args: tuple[str, ...], named: str
) -> None:
    """A plan edited by someone who recomputes its digest is refused: it is not what
    planning gives again, whatever its digest says."""
    _workloads_drift(workdir)
    path = _saved(lab, workdir, *args)
    _reseal(path, edit)
    if edit is _prune_kube_system:
        _, kube_system = lab.raw("GET", "/api/v1/namespaces/kube-system")
        _reseal(
            path,
            lambda doc: doc["objects"][-1].update(
                resourceVersion=kube_system["metadata"]["resourceVersion"]
            ),
        )
    before = snapshot(lab)

    result = run_cli("apply", *args, str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(named), line
    assert "nothing was applied" in line
    assert snapshot(lab) == before


def _workloads_drift(workdir: Path) -> None:
    """A plan with objects: the gpu-drv Namespace (an update: a new label) and the trainer
    Deployment (3 replicas) change."""
    path = workdir / "desired" / "workloads" / "gpu-drv.yaml"
    text = path.read_text().replace("replicas: 4", "replicas: 3")
    text = text.replace(
        "kind: Namespace\nmetadata:\n  name: gpu-drv\n",
        "kind: Namespace\nmetadata:\n  name: gpu-drv\n  labels: {example.com/team: ml}\n",
    )
    path.write_text(text)


@pytest.mark.parametrize(
    ("edit", "flag"),
    [
        (lambda doc: doc.update(forceConflicts=True), "--force-conflicts"),
        (lambda doc: doc.update(recreate=True), "--recreate"),
        (lambda doc: doc.update(prune=True), "--prune"),
        (lambda doc: doc.update(allowEmptyPrune=True), "--allow-empty-prune"),
        (lambda doc: doc.update(pruneNamespaceContents=True), "--prune-namespace-contents"),
    ],
    ids=["force", "recreate", "prune", "empty-prune", "namespace-contents"],
)
def test_an_option_added_to_a_saved_plan_is_refused(
    lab: TestCluster, workdir: Path, edit: Any, flag: str
) -> None:
    path = _saved(lab, workdir)
    _reseal(path, edit)
    before = snapshot(lab)

    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stderr == (
        f"error: the plan was planned with {flag}, and apply was not given it: a saved plan "
        "is applied with the options it was planned with, so a plan file alone never grants "
        "one. Nothing was applied\n"
    )
    assert snapshot(lab) == before


def test_a_plan_made_with_an_option_applies_with_it_and_only_with_it(
    lab: TestCluster, workdir: Path
) -> None:
    path = _saved(lab, workdir, "--force-conflicts")
    before = snapshot(lab)
    without = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert without.code == 2
    assert "was planned with --force-conflicts, and apply was not given it" in without.stderr
    assert snapshot(lab) == before

    applied = run_cli(
        "apply", "--force-conflicts", str(path), cwd=workdir, kubeconfig=lab.kubeconfig
    )
    assert (applied.code, applied.lines) == (0, ["lab-node-1 nvidia.com/gpu.count 2"])


def test_a_recreate_edited_in_is_refused_and_the_namespace_keeps_its_pods(
    lab: TestCluster, workdir: Path
) -> None:
    """The attack as it was seen: a Namespace's update turned into a recreate, the digest
    recomputed; applying it would delete the namespace and every pod in it."""
    _workloads_drift(workdir)
    path = _saved(lab, workdir)
    _reseal(path, _recreate_namespace)
    _, namespace = lab.raw("GET", "/api/v1/namespaces/gpu-drv")
    _, pods = lab.raw("GET", "/api/v1/namespaces/gpu-drv/pods")

    refused = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert refused.code == 2
    assert "Namespace/gpu-drv action recreate (planning gives update)" in refused.stderr
    _, after = lab.raw("GET", "/api/v1/namespaces/gpu-drv")
    assert after["metadata"]["uid"] == namespace["metadata"]["uid"]
    assert len(lab.raw("GET", "/api/v1/namespaces/gpu-drv/pods")[1]["items"]) == len(pods["items"])


def test_a_plan_from_another_tree_is_refused_naming_both_digests(
    lab: TestCluster, workdir: Path
) -> None:
    path = _saved(lab, workdir)
    made_from = json.loads(path.read_text())["desiredDigest"]
    node_file = workdir / "desired" / "nodes" / "lab-node-2.yaml"
    node_file.write_text(node_file.read_text() + "  # reviewed\n")
    before = snapshot(lab)

    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert f"the plan was made from another desired/ tree ({made_from}) than the one here" in (
        result.stderr
    )
    assert "Re-run `reconcile plan --out FILE`" in result.stderr
    assert snapshot(lab) == before


def test_a_plan_for_another_cluster_is_refused(
    lab: TestCluster, make_cluster: ClusterFactory, workdir: Path
) -> None:
    path = _saved(lab, workdir)
    other = make_cluster(lab_objects("lab"))
    before = snapshot(other)

    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=other.kubeconfig)

    assert result.code == 2
    assert "error: the plan was made for another cluster" in result.stderr
    assert snapshot(other) == before


@pytest.mark.parametrize("document", ["{}", '{"nodes": []}'])
def test_a_file_that_is_not_a_saved_plan_is_refused(
    lab: TestCluster, workdir: Path, document: str
) -> None:
    (workdir / "plan.json").write_text(document)
    before = snapshot(lab)

    result = run_cli("apply", "plan.json", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stderr == (
        "error: plan.json is not a saved reconcile plan (cluster: Field required); "
        "write one with `reconcile plan --out FILE`\n"
    )
    assert snapshot(lab) == before


def test_an_untouched_saved_plan_applies(lab: TestCluster, workdir: Path) -> None:
    path = _saved(lab, workdir)
    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert result.code == 0, result.stderr
    assert result.lines == ["lab-node-1 nvidia.com/gpu.count 2"]


# --- 5. the inventory is written before the objects it lists -------------------------------


class _RefuseDeployments(FaultInjector):
    """Forbids every write to Deployments (not their dry runs: the writes fail, after the
    dry run of the whole plan passed): an apply that stops half-way, for good."""

    writes_only = True

    def before(self, method: str, route: Route | None) -> ApiStatus | str | None:
        if method == "PATCH" and route is not None and route.resource.plural == "deployments":
            return ApiStatus(403, "Forbidden", 'deployments.apps "trainer" is forbidden: test')
        return None


def test_an_apply_that_stops_half_way_leaves_nothing_prune_cannot_find(
    make_cluster: ClusterFactory, workdir: Path
) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    if cluster.sandbox is None:
        pytest.skip("injects a failure into the sandbox")
    cluster.sandbox.server.faults = _RefuseDeployments()

    failed = run_cli("apply", cwd=workdir, kubeconfig=cluster.kubeconfig)
    assert failed.code == 2
    assert "Pod/gpu-drv/cuda12-job +" in failed.lines  # created before the failure
    assert "Deployment/gpu-drv/trainer: not applied" in failed.stderr

    cluster.sandbox.server.faults = None
    _drop_documents(workdir, "gpu-drv.yaml", "cuda12-job")
    pruned = run_cli("apply", "--prune", cwd=workdir, kubeconfig=cluster.kubeconfig)

    assert pruned.code == 0, pruned.stderr
    assert "Pod/gpu-drv/cuda12-job -" in pruned.lines
    assert cluster.raw("GET", "/api/v1/namespaces/gpu-drv/pods/cuda12-job")[0] == 404


# --- 6. concurrent applies tell the truth --------------------------------------------------


def test_two_applies_of_the_same_change_print_it_once(
    make_cluster: ClusterFactory, workdir: Path
) -> None:
    """Both runs plan before either writes; the second finds every change made already."""
    from reconcile.desired.reader import load_desired
    from reconcile.engine.operations import PlanRequest
    from reconcile.gpu import checks as gpu
    from reconcile.kube.client import Cluster

    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    cluster.label("lab-node-1", **{"nvidia.com/gpu.count": "9"})
    state, _ = load_desired(workdir / "desired")
    runs = [Cluster.connect(str(cluster.kubeconfig)) for _ in range(2)]
    plans = [gpu.plan(PlanRequest(state), c) for c in runs]
    assert plans[0].nodes == plans[1].nodes
    assert len(plans[0].objects) == 11

    results = []
    for plan, run in zip(plans, runs, strict=True):
        nodes = apply_plan(plan, run, desired=state)
        results.append((nodes, apply_objects(plan, run, saved=False)))

    (first_nodes, first_objects), (second_nodes, second_objects) = results
    assert [name for name, _ in first_nodes.lines()] == ["lab-node-1"]
    assert len([o for o in first_objects if o.changed is not None]) == 11
    assert list(second_nodes.lines()) == []
    assert [o for o in second_objects if o.changed is not None] == []
    assert second_nodes.ok and not any(o.error for o in second_objects)
    assert [n.note for n in second_nodes.nodes] == [DONE_BY_OTHERS]
    assert all(o.note and DONE_BY_OTHERS in o.note for o in second_objects)
    for run in runs:
        run.close()


def test_two_applies_started_together_print_each_change_exactly_once(
    make_cluster: ClusterFactory, workdir: Path
) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    cluster.label("lab-node-1", **{"nvidia.com/gpu.count": "9"})
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "NO_COLOR": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "reconcile", "apply"],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in processes]

    assert [p.returncode for p in processes] == [0, 0], [err for _, err in outputs]
    printed = [line for out, _ in outputs for line in out.splitlines()]
    assert sorted(printed) == sorted(["lab-node-1 nvidia.com/gpu.count 2", *WORKLOADS])
