"""What the API server says about a manifest, through the real CLI: a rejection at the
line of the field it names, and a DaemonSet that no node runs yet as a note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

NAMESPACE = """\
apiVersion: v1
kind: Namespace
metadata:
  name: pos-web
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: pos-web
spec:
  replicas: 0
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
        - name: web
          image: nginx
"""
DAEMON_SET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: gpu-agent
  namespace: pos-agents
spec:
  selector:
    matchLabels:
      app: gpu-agent
  template:
    metadata:
      labels:
        app: gpu-agent
    spec:
      nodeSelector:
        example.com/accelerator: never-joined
      containers:
        - name: agent
          image: busybox
"""


def _desired(root: Path, **files: str) -> Path:
    workloads = root / "desired" / "workloads"
    workloads.mkdir(parents=True)
    for name, text in files.items():
        (workloads / f"{name}.yaml").write_text(text)
    return root / "desired"


def _written(cluster: TestCluster) -> tuple[Any, ...]:
    """The Deployment's spec and what reconcile wrote of it (its field manager's entry,
    with its time): controllers of a real cluster move the resourceVersion by themselves."""
    status, body = cluster.raw("GET", "/apis/apps/v1/namespaces/pos-web/deployments/web")
    assert status == 200
    entries = [m for m in body["metadata"]["managedFields"] if m["manager"] == "reconcile"]
    return body["spec"]["selector"], entries


def test_a_rejected_field_is_reported_at_its_line_and_nothing_is_applied(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([])
    desired = _desired(tmp_path, web=NAMESPACE + "---\n" + DEPLOYMENT)
    args = ("--desired", str(desired))
    assert run_cli("apply", *args, kubeconfig=cluster.kubeconfig).code == 0
    before = _written(cluster)

    # A selector cannot change in place: the server names `spec.selector`, on line 13.
    web = desired / "workloads" / "web.yaml"
    web.write_text(web.read_text().replace("app: web", "app: web-2"))
    plan = run_cli("plan", *args, kubeconfig=cluster.kubeconfig)
    assert plan.code == 2
    [error] = [line for line in plan.stderr.splitlines() if line.startswith("error:")]
    assert error.startswith(
        'error: Deployment/pos-web/web: cannot change in place: Deployment.apps "web" is '
        "invalid: spec.selector: Invalid value: "
    )
    assert error.endswith(f"field is immutable; --recreate deletes and creates it ({web}:13:3)"), (
        error
    )

    applied = run_cli("apply", *args, kubeconfig=cluster.kubeconfig)
    assert (applied.code, applied.stdout) == (2, "")
    assert applied.stderr.splitlines() == [
        'rejected: Deployment/pos-web/web: cannot change in place: Deployment.apps "web" is '
        'invalid: spec.selector: Invalid value: {"matchLabels":{"app":"web-2"}}: field is '
        f"immutable; --recreate deletes and creates it ({web}:13:3)",
        "error: 1 refusal(s) above: nothing was applied",
    ]
    assert _written(cluster) == before


def test_a_daemon_set_with_no_node_yet_is_a_note(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    namespace = NAMESPACE.replace("pos-web", "pos-agents")
    desired = _desired(tmp_path, agent=namespace + "---\n" + DAEMON_SET)
    args = ("--desired", str(desired))

    plan = run_cli("plan", *args, kubeconfig=cluster.kubeconfig)
    assert (plan.code, plan.lines) == (
        1,
        ["Namespace/pos-agents +", "DaemonSet/pos-agents/gpu-agent +"],
    )
    assert plan.stderr.splitlines() == [
        "note: DaemonSet/pos-agents/gpu-agent: no node will run it after apply (0/3 nodes are "
        "available: 3 node(s) didn't match Pod's node affinity/selector.); its pods start as "
        "matching nodes join"
    ]

    applied = run_cli("apply", *args, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert "error:" not in applied.stderr
    again = run_cli("plan", *args, kubeconfig=cluster.kubeconfig)
    assert (again.code, again.stdout, again.stderr) == (0, "", "")


def test_with_no_node_at_all_the_note_says_what_the_scheduler_says(
    make_cluster: ClusterFactory, tmp_path: Path
) -> None:
    cluster = make_cluster([])
    namespace = NAMESPACE.replace("pos-web", "pos-agents")
    desired = _desired(tmp_path, agent=namespace + "---\n" + DAEMON_SET)
    plan = run_cli("plan", "--desired", str(desired), "-o", "json", kubeconfig=cluster.kubeconfig)
    assert plan.code == 1
    placement = run_cli("placement", "--desired", str(desired), kubeconfig=cluster.kubeconfig)
    assert placement.lines == [
        "DaemonSet/pos-agents/gpu-agent 0/0 PENDING: no nodes available to schedule pods"
    ]
    assert '"severity": "note"' in plan.stdout
    assert "no nodes available to schedule pods" in plan.stdout
