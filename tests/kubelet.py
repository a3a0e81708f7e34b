"""A kubelet's part for the nodes the harness creates on a real cluster, as kwok plays it.

A Node made through the API has no machine behind it: nothing reports it Ready, renews its
Lease or runs its pods, so on kind or any cluster without a stand-in it stays NotReady
(with the `node.kubernetes.io/not-ready` taint that registration adds) and its pods
Pending. `NodeStandIn` does for the nodes it is given what their kubelet would: a Ready
condition and capacity through the status subresource, the node's Lease in
kube-node-lease (renewed, so that a node lifecycle controller never finds it silent), the
not-ready taint removed; pods bound to them Running and Ready (one that has Succeeded or
Failed stays so), and a pod being deleted gone (the kubelet confirms a graceful deletion).
Nodes annotated `reconcile.test/kubelet=none` are left as they are, as by the control
plane's stand-in.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any, Final

Raw = Callable[..., tuple[int, Any]]

LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
LEASE_SECONDS: Final = 40  # the kubelet's default nodeLeaseDurationSeconds
RENEW_SECONDS: Final = 10.0  # a quarter of it, as the kubelet renews
POLL_SECONDS: Final = 0.2
CONDITION_TAINTS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
CAPACITY: Final = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
MERGE: Final = "application/merge-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"


def _now(micro: bool = False) -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class NodeStandIn:
    """The kubelet of each node `register` is given, on the cluster `raw` talks to. Call
    `register` once the Node exists (it is Ready when it returns), `start` to keep the
    nodes and their pods up in the background, `stop` before the nodes go."""

    def __init__(self, raw: Raw, seeded_label: str) -> None:
        self.raw = raw
        self.seeded_label = seeded_label
        self.nodes: dict[str, float] = {}  # name -> when its Lease was last renewed (monotonic)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None  # the last round that failed, for a debugger

    # --- a node --------------------------------------------------------------------------

    def register(self, node: dict[str, Any]) -> None:
        """Take `node` (as the API server returned it) over: Ready, with its Lease."""
        if (node["metadata"].get("annotations") or {}).get("reconcile.test/kubelet") == "none":
            return
        self.adopt(node)

    def adopt(self, node: dict[str, Any]) -> None:
        """Take `node` over whatever its annotations say. Annotated
        `reconcile.test/kubelet=none`, it is left alone by the control plane's own stand-in
        (which would start its finished pods again) and kept by this one alone."""
        name = node["metadata"]["name"]
        with self._lock:
            self.nodes[name] = 0.0
        self._status(node)
        self._lease(node)
        self._untaint(node)

    def forget(self, name: str) -> None:
        """Stop standing in for node `name`, which is going: a node of that name made later
        is another node, taken over when it is registered, not before."""
        with self._lock:
            self.nodes.pop(name, None)

    def _status(self, node: dict[str, Any]) -> None:
        """The kubelet's status update: Ready now, and a capacity where the node has none."""
        name = node["metadata"]["name"]
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "stand-in kubelet of the test harness",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ]
        }
        current = node.get("status") or {}
        if not current.get("allocatable"):
            status["allocatable"] = CAPACITY
        if not current.get("capacity"):
            status["capacity"] = current.get("allocatable") or CAPACITY
        code, body = self.raw(
            "PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, STRATEGIC
        )
        assert code in (200, 404), body  # 404: the test removed it already

    def _lease(self, node: dict[str, Any]) -> None:
        """The node's heartbeat: its Lease in kube-node-lease, owned by the node (so it
        goes with it), created or renewed."""
        name = node["metadata"]["name"]
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": "kube-node-lease",
                "labels": {self.seeded_label: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": name,
                        "uid": node["metadata"]["uid"],
                    }
                ],
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now(micro=True),
            },
        }
        code, body = self.raw("POST", LEASES, lease)
        if code == 409:  # a Lease of an earlier node of that name: this node's now
            code, body = self.raw("PATCH", f"{LEASES}/{name}", lease, MERGE)
        assert code in (200, 201), body
        with self._lock:
            self.nodes[name] = time.monotonic()

    def _renew(self, name: str) -> None:
        spec = {"spec": {"holderIdentity": name, "renewTime": _now(micro=True)}}
        code, body = self.raw("PATCH", f"{LEASES}/{name}", spec, MERGE)
        if code == 404:
            code, node = self.raw("GET", f"/api/v1/nodes/{name}")
            if code == 200:
                self._lease(node)
            return
        assert code == 200, body
        with self._lock:
            self.nodes[name] = time.monotonic()

    def _untaint(self, node: dict[str, Any]) -> None:
        """Registration taints a node not-ready until its kubelet says it is Ready."""
        taints = (node.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in CONDITION_TAINTS]
        if len(kept) == len(taints):
            return
        name = node["metadata"]["name"]
        patch = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": kept or None},
        }
        code, body = self.raw("PATCH", f"/api/v1/nodes/{name}", patch, MERGE)
        if code == 409:  # moved since it was read: read it again
            code, body = self.raw("GET", f"/api/v1/nodes/{name}")
            if code == 200:
                self._untaint(body)
            return
        assert code in (200, 404), body

    # --- the loop ------------------------------------------------------------------------

    def tick(self) -> None:
        """One round of every registered node's kubelet: the node Ready and untainted,
        its Lease fresh, its pods Running and Ready, its deleted pods gone."""
        with self._lock:
            renewed = dict(self.nodes)
        code, found = self.raw("GET", "/api/v1/nodes")
        assert code == 200, found
        live = {
            n["metadata"]["name"]: n for n in found["items"] if n["metadata"]["name"] in renewed
        }
        for name, node in live.items():
            taints = (node.get("spec") or {}).get("taints") or ()
            if not _ready(node):
                self._status(node)
            if any(t.get("key") in CONDITION_TAINTS for t in taints):
                self._untaint(node)
            if time.monotonic() - renewed[name] >= RENEW_SECONDS:
                self._renew(name)
        if live:
            self._pods(set(live))

    def _pods(self, nodes: set[str]) -> None:
        code, found = self.raw("GET", "/api/v1/pods")
        assert code == 200, found
        for pod in found["items"]:
            if (pod.get("spec") or {}).get("nodeName") not in nodes:
                continue
            metadata = pod["metadata"]
            path = f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}"
            if metadata.get("deletionTimestamp"):
                now = {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": metadata["uid"]},
                }
                self.raw("DELETE", path, now)  # 404/409: gone or replaced already
                continue
            if (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
                continue  # running already, or finished: a kubelet never starts it again
            started = _now()
            status = {
                "phase": "Running",
                "startTime": started,
                "conditions": [
                    {"type": kind, "status": "True", "lastTransitionTime": started}
                    for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                        "started": True,
                        "state": {"running": {"startedAt": started}},
                    }
                    for container in pod["spec"].get("containers") or ()
                ],
            }
            # On the version read: a pod that moved since (finished, say) is left for the
            # next round, not made Running over its new phase (409; 404: gone since).
            read = {"resourceVersion": metadata["resourceVersion"]}
            self.raw("PATCH", f"{path}/status", {"metadata": read, "status": status}, MERGE)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="stand-in kubelet")
            self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(POLL_SECONDS):
            try:
                self.tick()
            except Exception as e:  # a transient API error: the next round retries
                self.last_error = e

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
