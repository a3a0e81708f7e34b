"""The harness on a real cluster needs nothing of the cluster but its control plane: the
nodes it seeds are Ready, untainted and heartbeating, and their pods run, by its own
stand-in kubelet (tests/kubelet.py), whether or not the cluster has one."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import ClusterFactory
from tests.support import lab_objects, wait_for


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_seeded_nodes_are_ready_with_a_lease_and_their_pods_run(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster(lab_objects("driver-lab"))
    if cluster.is_sandbox:
        pytest.skip("the sandbox's nodes and pods are as seeded: no kubelet to stand in for")
    _, nodes = cluster.raw("GET", "/api/v1/nodes")
    assert nodes["items"]
    for node in nodes["items"]:
        name = node["metadata"]["name"]
        assert _ready(node), name
        assert node["status"]["allocatable"]["pods"], name
        taints = [t["key"] for t in node["spec"].get("taints") or ()]
        assert "node.kubernetes.io/not-ready" not in taints, name
        code, lease = cluster.raw(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
        )
        assert code == 200, lease
        assert lease["spec"]["holderIdentity"] == name
        assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    # a pod the scheduler binds after seeding runs too, and one deleted is gone
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "late", "namespace": "gpu-drv"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "lab-node-0"},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    code, body = cluster.raw("POST", "/api/v1/namespaces/gpu-drv/pods", pod)
    assert code == 201, body
    path = "/api/v1/namespaces/gpu-drv/pods/late"
    wait_for(lambda: _ready(cluster.raw("GET", path)[1]), what="the late pod to be Ready")
    code, body = cluster.raw("DELETE", path)  # graceful: its kubelet confirms it
    assert code == 200, body
    wait_for(lambda: cluster.raw("GET", path)[0] == 404, what="the deleted pod to go")


def test_seeded_nodes_keep_the_capacity_they_were_seeded_with(
    make_cluster: ClusterFactory,
) -> None:
    """The control plane's own stand-in kubelet gives a node it reads not Ready its own
    capacity (8 GPUs): a seeded node's capacity is in place before it can read the node,
    never overwritten after."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"}
    seeded = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"held-{i}", "labels": {"kubernetes.io/hostname": f"held-{i}"}},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(12)
    ]
    cluster = make_cluster(seeded)
    if cluster.is_sandbox:
        pytest.skip("the sandbox's nodes are as seeded: no kubelet to stand in for")
    time.sleep(1.5)  # three rounds of the control plane's stand-in kubelet
    _, nodes = cluster.raw("GET", "/api/v1/nodes")
    gpus = {
        n["metadata"]["name"]: n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes["items"]
    }
    assert gpus == {f"held-{i}": "4" for i in range(12)}
