"""Rewrite `expected` in the DRA placement scenarios from what a real kube-scheduler does.

    python tests/data/placement/dra/capture.py KUBECONFIG [SCENARIO.yaml ...]

Each scenario (every *.yaml beside this script when none is named) runs on a clean slate:
the nodes, ResourceSlices and DeviceClasses of the previous one are deleted (all carry the
label below), namespaced objects go to a fresh namespace `dra-<name>`. Nodes are made
Ready by `tests.kubelet.NodeStandIn`, as a kubelet would, with the scenario's allocatable.
Objects are created in order (a ResourceClaim's `status` is written through its status
subresource, as the scheduler would have written it), then the workload; once every pod
is bound or carries the scheduler's PodScheduled=False condition, and the condition has
had time to settle, `expected` is written back: pods placed and wanted, pods per node, and
for a pod left Pending the condition's message and its FitError part (`reason`); both are
empty for a pod the scheduler holds back without trying any node (no condition at all).

Run against the control plane in shared/k8s (`cluster up`): a cluster nobody else uses,
since nodes and cluster-scoped objects are created and deleted. The format is the placement
corpus's (tests/data/placement/): `expected` holds wanted, placed, nodes, reason, message.
Each scenario here is built so that the filters leave one outcome (`nodes` is recorded as
observed, from one run).
"""

from __future__ import annotations

import copy
import io
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from tests.kubelet import NodeStandIn  # noqa: E402
from tests.support import TestCluster  # noqa: E402

HERE = Path(__file__).resolve().parent
LABEL: Final = "reconcile.test/dra-capture"
SETTLE_SECONDS: Final = 4.0
TIMEOUT_SECONDS: Final = 60.0
# A pod the scheduler holds back before trying any node (DynamicResources' PreEnqueue: a
# claim that does not exist yet) gets no PodScheduled condition at all: recorded as an
# empty message once it has stayed so this long.
HELD_SECONDS: Final = 12.0
# What the post-filter plugins add after the FitError (DynamicResources first, then
# preemption's own words), joined by ", ".
POST_FILTER_OPENINGS: Final = (
    " still not schedulable, ",
    " no new claims to deallocate, ",
    " preemption: ",
)

# kind -> (collection path, namespaced)
PATHS: Final = {
    "ResourceSlice": ("/apis/resource.k8s.io/v1/resourceslices", False),
    "DeviceClass": ("/apis/resource.k8s.io/v1/deviceclasses", False),
    "ResourceClaim": ("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", True),
    "ResourceClaimTemplate": (
        "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
        True,
    ),
    "Pod": ("/api/v1/namespaces/{ns}/pods", True),
    "Deployment": ("/apis/apps/v1/namespaces/{ns}/deployments", True),
    "Job": ("/apis/batch/v1/namespaces/{ns}/jobs", True),
}


def _check(code: int, body: Any, *ok: int) -> Any:
    if code not in ok:
        raise RuntimeError(f"HTTP {code}: {body}")
    return body


class Capture:
    def __init__(self, kubeconfig: Path) -> None:
        self.cluster = TestCluster(kubeconfig)
        self.raw = self.cluster.raw
        self.kubelet = NodeStandIn(self.raw, LABEL)

    # --- a clean slate -----------------------------------------------------------------

    def clean(self) -> None:
        """Delete what earlier scenarios made; wait until no claim of theirs holds a
        device (their namespaces may still be terminating)."""
        selector = f"?labelSelector={LABEL}"
        code, namespaces = self.raw("GET", "/api/v1/namespaces" + selector)
        now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        for ns in _check(code, namespaces, 200)["items"]:
            name = ns["metadata"]["name"]
            self.raw("DELETE", f"/api/v1/namespaces/{name}/pods", now)
            self.raw("DELETE", f"/api/v1/namespaces/{name}")
        for path in ("/api/v1/nodes", PATHS["ResourceSlice"][0], PATHS["DeviceClass"][0]):
            self.raw("DELETE", path + selector)
        gone = {n["metadata"]["name"] for n in namespaces["items"]}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = 0
            for path in ("/api/v1/nodes", PATHS["ResourceSlice"][0], PATHS["DeviceClass"][0]):
                code, found = self.raw("GET", path + selector)
                left += len(_check(code, found, 200)["items"])
            code, claims = self.raw("GET", "/apis/resource.k8s.io/v1/resourceclaims")
            left += sum(
                1 for c in _check(code, claims, 200)["items"] if c["metadata"]["namespace"] in gone
            )
            if not left:
                return
            time.sleep(0.3)
        raise RuntimeError("the previous scenario's objects did not go")

    def namespace(self, name: str) -> None:
        """A fresh namespace of that name (waiting for an earlier one to finish going)."""
        body = {"metadata": {"name": name, "labels": {LABEL: "true"}}}
        deadline = time.monotonic() + 120
        while True:
            code, answer = self.raw("POST", "/api/v1/namespaces", body)
            if code == 201:
                break
            if code != 409 or time.monotonic() > deadline:
                raise RuntimeError(f"namespace {name}: HTTP {code}: {answer}")
            time.sleep(0.5)
        path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        while self.raw("GET", path)[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default service account in {name}")
            time.sleep(0.2)

    # --- creating --------------------------------------------------------------------

    def node(self, spec: dict[str, Any]) -> None:
        name = spec["name"]
        labels = {LABEL: "true", **(spec.get("labels") or {})}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": spec.get("taints") or None},
        }
        _check(*self.raw("POST", "/api/v1/nodes", body), 201)
        allocatable = spec.get("allocatable") or {"cpu": "8", "memory": "32Gi", "pods": "110"}
        status = {"status": {"allocatable": allocatable, "capacity": allocatable}}
        code, node = self.raw(
            "PATCH", f"/api/v1/nodes/{name}/status", status, "application/merge-patch+json"
        )
        self.kubelet.register(_check(code, node, 200))

    def create(self, obj: dict[str, Any], namespace: str) -> None:
        obj = copy.deepcopy(obj)
        path, namespaced = PATHS[obj["kind"]]
        metadata = obj.setdefault("metadata", {})
        if namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.setdefault("labels", {})[LABEL] = "true"
        path = path.format(ns=namespace)
        status = obj.pop("status", None)
        created = _check(*self.raw("POST", path, obj), 201)
        if status is not None and obj["kind"] == "ResourceClaim":
            created["status"] = status
            _check(*self.raw("PUT", f"{path}/{metadata['name']}/status", created), 200)

    # --- watching the scheduler ------------------------------------------------------

    def pods(self, namespace: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
        code, found = self.raw("GET", f"/api/v1/namespaces/{namespace}/pods")
        pods = _check(code, found, 200)["items"]
        if workload["kind"] == "Pod":
            return [p for p in pods if p["metadata"]["name"] == workload["metadata"]["name"]]
        return [p for p in pods if (p["metadata"].get("ownerReferences") or ())]

    @staticmethod
    def decided(pod: dict[str, Any]) -> bool:
        if pod["spec"].get("nodeName"):
            return True
        conditions = (pod.get("status") or {}).get("conditions") or ()
        return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    def outcome(self, namespace: str, workload: dict[str, Any]) -> dict[str, Any]:
        wanted = _wanted(workload)
        started = time.monotonic()
        while True:
            pods = self.pods(namespace, workload)
            if len(pods) >= wanted and all(self.decided(p) for p in pods):
                break
            waited = time.monotonic() - started
            if len(pods) >= wanted and waited > HELD_SECONDS:
                break  # held back before any attempt (PreEnqueue): no condition comes
            if waited > TIMEOUT_SECONDS:
                raise RuntimeError(f"the scheduler did not decide on {namespace} in time")
            time.sleep(0.3)
        time.sleep(SETTLE_SECONDS)  # a retry may change the message; let it
        pods = self.pods(namespace, workload)
        placed = Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))
        expected: dict[str, Any] = {"wanted": wanted, "placed": sum(placed.values())}
        expected["nodes"] = dict(sorted(placed.items()))
        pending = sorted(
            (p for p in pods if not p["spec"].get("nodeName")),
            key=lambda p: p["metadata"]["name"],
        )
        for pod in pending[:1]:
            message = ""
            for c in pod["status"].get("conditions") or ():
                if c["type"] == "PodScheduled":
                    message = c.get("message", "")
            expected["reason"] = fit_error(message)
            expected["message"] = message
        return expected

    def run(self, path: Path) -> dict[str, Any]:
        yaml = YAML()
        yaml.preserve_quotes = True
        yaml.width = 4096
        scenario = yaml.load(path.read_text())
        self.clean()
        namespace = f"dra-{scenario['name']}"
        self.namespace(namespace)
        for node in scenario.get("nodes") or ():
            self.node(dict(node))
        self.kubelet.start()
        try:
            for obj in scenario.get("objects") or ():
                self.create(_plain(obj), namespace)
            workload = _plain(scenario["workload"])
            self.create(workload, namespace)
            expected = self.outcome(namespace, workload)
        finally:
            self.kubelet.stop()
            self.kubelet = NodeStandIn(self.raw, LABEL)
        write_expected(path, expected)
        return expected


def write_expected(path: Path, expected: dict[str, Any]) -> None:
    """Replace the scenario's last key, `expected`, leaving the rest of the file as written."""
    text = path.read_text()
    head, found, _ = text.partition("\nexpected:")
    if not found:
        raise RuntimeError(f"{path}: `expected:` must be the last key")
    yaml = YAML()
    yaml.width = 4096
    yaml.default_flow_style = False
    body = io.StringIO()
    quoted = {
        k: DoubleQuotedScalarString(v) if isinstance(v, str) else v for k, v in expected.items()
    }
    yaml.dump({"expected": quoted}, body)
    path.write_text(head + "\n" + body.getvalue())


def fit_error(message: str) -> str:
    """The FitError part of a PodScheduled message: what precedes the post-filter plugins'
    words (the first of POST_FILTER_OPENINGS)."""
    cuts = [message.find(o) for o in POST_FILTER_OPENINGS if o in message]
    return message[: min(cuts)] if cuts else message


def _wanted(workload: dict[str, Any]) -> int:
    if workload["kind"] == "Deployment":
        return int(workload["spec"].get("replicas", 1))
    if workload["kind"] == "Job":
        return int(workload["spec"].get("parallelism", 1))
    return 1


def _plain(node: Any) -> Any:
    """ruamel's commented containers as plain dicts and lists, for JSON."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    capture = Capture(Path(argv[0]))
    paths = [Path(a) for a in argv[1:]] or sorted(HERE.glob("*.yaml"))
    for path in paths:
        expected = capture.run(path)
        print(f"{path.name}: {expected}")
    capture.clean()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
