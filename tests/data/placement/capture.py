"""Record what the real kube-scheduler decides for each scenario of the placement corpus.

Every `*.yaml` beside this script (not those under `dra/`) is one scenario: nodes, objects
created before the workload (pods already bound, a RuntimeClass), and one workload. For each
scenario (or those named) on a real control plane:

- a fresh namespace; each node created, its capacity and allocatable written through the
  status subresource, then made Ready and untainted by the stand-in kubelet
  (tests/kubelet.py) that also runs the pods bound to it (so a StatefulSet's next replica
  comes once the one before is Ready);
- the objects, in order (a `status` of theirs through the status subresource: a pod's
  `phase: Succeeded`), then the workload;
- a wait until the controller has made its pods and the scheduler has decided each one
  (bound, or PodScheduled False with its message), with nothing changing for a moment;
- everything removed (pods, namespace, the cluster-scoped objects, the nodes), so the next
  scenario starts on an empty cluster.

The outcome (`wanted`, `placed`, `nodes`, `reason`, `message`) is written as the file's
`expected` block by a ruamel.yaml round trip that keeps the rest of the file as it is.

Each scenario is replayed `--repeat` times; with `--any-fit KUBE_SCHEDULER` (the binary) a
second scheduler is started whose profile scores nothing, so that it picks at random among
the nodes the filters leave, and the scenario is replayed `--explore` more times through it.
`nodes` is recorded only when every replay bound the same pods to the same nodes, the one
outcome the filters allow; otherwise `nodes: null`. Any other difference between replays
is an error: the scenario is not one the corpus can state.

    python tests/data/placement/capture.py [--kubeconfig PATH] [--any-fit PATH] [NAME ...]

The kubeconfig defaults to $RECONCILE_TEST_KUBECONFIG. The cluster must be one for tests:
everything on it (nodes included) is removed before the first scenario.
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

CORPUS: Final = Path(__file__).resolve().parent
REPO: Final = CORPUS.parents[2]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from ruamel.yaml import YAML  # noqa: E402
from ruamel.yaml.comments import CommentedMap  # noqa: E402
from ruamel.yaml.scalarstring import DoubleQuotedScalarString  # noqa: E402

from tests.support import TestCluster, reset  # noqa: E402

ANY_FIT: Final = "corpus-any-fit"  # the profile of the scheduler started by --any-fit
TIMEOUT: Final = 60.0  # seconds for one scenario to settle
QUIET: Final = 0.4  # seconds with nothing changing before an outcome is taken
POLL: Final = 0.05
NOW: Final = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
MERGE: Final = "application/merge-patch+json"
# kind -> plural; every kind is namespaced but these
PLURALS: Final = {
    "Pod": "pods",
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "RuntimeClass": "runtimeclasses",
    "PriorityClass": "priorityclasses",
}
CLUSTER_SCOPED: Final = frozenset({"RuntimeClass", "PriorityClass"})
WORKLOADS: Final = frozenset({"Pod", "Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet"})

Outcome = dict[str, Any]  # wanted, placed, nodes, reason, message


class CaptureError(Exception):
    """A scenario the real cluster did not settle, or one whose replays disagree."""


# --- the corpus -------------------------------------------------------------------------


def scenario_paths(names: list[str] | None = None) -> list[Path]:
    """The scenario files, by name; all of them (not those of dra/) when none is named."""
    found = sorted(CORPUS.glob("*.yaml"))
    if not names:
        return found
    by_name = {p.stem: p for p in found}
    missing = [n for n in names if n.removesuffix(".yaml") not in by_name]
    if missing:
        raise SystemExit(f"no such scenario: {', '.join(missing)}")
    return [by_name[n.removesuffix(".yaml")] for n in names]


def round_trip() -> YAML:
    yaml = YAML()
    yaml.width = 4096  # a scheduler message stays on one line
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.preserve_quotes = True
    yaml.representer.add_representer(  # `nodes: null`, said, not an empty value
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    return yaml


def load(path: Path) -> dict[str, Any]:
    """A scenario as plain data."""
    document = YAML(typ="safe").load(path.read_text())
    if not isinstance(document, dict):
        raise CaptureError(f"{path.name}: not a mapping")
    return document


def write_expected(path: Path, outcome: Outcome) -> None:
    """Replace the file's `expected` block, the rest kept as written."""
    yaml = round_trip()
    document = yaml.load(path.read_text())
    expected = CommentedMap()
    expected["wanted"] = outcome["wanted"]
    expected["placed"] = outcome["placed"]
    if outcome["nodes"] is None:
        expected["nodes"] = None
    else:
        nodes = CommentedMap(sorted(outcome["nodes"].items()))
        nodes.fa.set_flow_style()
        expected["nodes"] = nodes
    for key in ("reason", "message"):
        value = outcome[key]
        expected[key] = None if value is None else DoubleQuotedScalarString(value)
    document["expected"] = expected
    with path.open("w") as out:
        yaml.dump(document, out)


# --- one replay -------------------------------------------------------------------------


def _collection(obj: dict[str, Any], namespace: str) -> str:
    kind = obj["kind"]
    if kind not in PLURALS:
        raise CaptureError(f"kind {kind} is not one the corpus knows")
    version = obj["apiVersion"]
    prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
    if kind in CLUSTER_SCOPED:
        return f"{prefix}/{PLURALS[kind]}"
    return f"{prefix}/namespaces/{namespace}/{PLURALS[kind]}"


def _decided(pod: dict[str, Any]) -> bool:
    """Bound, or found unschedulable with the scheduler's message."""
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return bool(condition.get("message"))
    return False


def scheduled_message(pod: dict[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or "")
    return None


def fit_error(message: str) -> str:
    """The filters' part of a PodScheduled message: `0/N nodes are available: <the count of
    each reason>.`, without what the PostFilter plugins add after it (in v1.36 DRA's `no new
    claims to deallocate,` then `preemption: ...`). No reason has a `. ` inside."""
    head = message.split(" preemption:", 1)[0]
    end = head.find(". ")
    return head if end < 0 else head[: end + 1]


@dataclass
class Replay:
    """One run of one scenario on `cluster`, in a namespace of its own."""

    cluster: TestCluster
    scenario: dict[str, Any]
    scheduler: str | None = None  # a profile other than the default one

    def __post_init__(self) -> None:
        self.namespace = f"corpus-{uuid.uuid4().hex[:8]}"
        self.nodes: list[str] = []
        self.cluster_objects: list[str] = []  # paths of cluster-scoped objects created
        self.object_pods: set[str] = set()  # pods among `objects`: not the workload's

    def raw(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> Any:
        code, answer = self.cluster.raw(method, path, body, ctype)
        if code not in (200, 201):
            raise CaptureError(f"{method} {path}: {code} {answer}")
        return answer

    def run(self) -> Outcome:
        try:
            self.create()
            return self.settle()
        finally:
            self.remove()

    # --- creating

    def create(self) -> None:
        others = self.raw("GET", "/api/v1/nodes")["items"]
        if others:  # the scheduler would count them: the scenario would not be the one written
            names = ", ".join(n["metadata"]["name"] for n in others)
            raise CaptureError(f"the cluster has nodes already ({names}): it must have none")
        self.raw("POST", "/api/v1/namespaces", {"metadata": {"name": self.namespace}})
        # The service account controller would make it within moments; pods need it now.
        code, answer = self.cluster.raw(
            "POST",
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts",
            {"metadata": {"name": "default"}},
        )
        if code not in (201, 409):  # 409: the controller was quicker
            raise CaptureError(f"the namespace's service account: {code} {answer}")
        for node in self.scenario.get("nodes") or ():
            self.create_node(node)
        for obj in self.scenario.get("objects") or ():
            self.create_object(obj)
        workload = copy.deepcopy(self.scenario["workload"])
        if workload["kind"] not in WORKLOADS:
            raise CaptureError(f"workload kind {workload['kind']} is not one the corpus knows")
        if self.scheduler is not None:
            spec = (
                workload["spec"]
                if workload["kind"] == "Pod"
                else workload["spec"]["template"]["spec"]
            )
            spec["schedulerName"] = self.scheduler
        self.create_object(workload, workload=True)

    def create_node(self, node: dict[str, Any]) -> None:
        """The node with the scenario's labels, taints and allocatable, Ready and without the
        not-ready taint that registration adds. Annotated `reconcile.test/kubelet=none`: the
        control plane's own stand-in kubelet, if it runs one, leaves it and its pods alone
        (it would start a pod that has Succeeded again); the harness's takes it over."""
        name = node["name"]
        spec: dict[str, Any] = {}
        if node.get("taints"):
            spec["taints"] = node["taints"]
        if node.get("unschedulable"):
            spec["unschedulable"] = True
        allocatable = {k: str(v) for k, v in (node.get("allocatable") or {}).items()}
        status = {"capacity": allocatable, "allocatable": allocatable}
        manifest = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": dict(node.get("labels") or {}),
                "annotations": {"reconcile.test/kubelet": "none"},
            },
            "spec": spec,
            "status": status,  # never a moment without it, whoever looks
        }
        self.raw("POST", "/api/v1/nodes", manifest)
        self.nodes.append(name)
        path = f"/api/v1/nodes/{name}"
        created = self.raw("PATCH", f"{path}/status", {"status": status}, MERGE)
        kubelet = self.cluster.kubelet
        assert kubelet is not None
        kubelet.adopt(created)
        now = self.raw("GET", path)
        taints = [t["key"] for t in (now.get("spec") or {}).get("taints") or ()]
        if (
            now["status"].get("allocatable") != allocatable
            or "node.kubernetes.io/not-ready" in taints
        ):
            raise CaptureError(f"node {name} is not as the scenario says: {now}")

    def create_object(self, obj: dict[str, Any], workload: bool = False) -> None:
        body = copy.deepcopy(obj)
        status = body.pop("status", None)
        body.setdefault("metadata", {})
        if obj["kind"] not in CLUSTER_SCOPED:
            body["metadata"]["namespace"] = self.namespace
        path = _collection(body, self.namespace)
        created = self.raw("POST", path, body)
        name = created["metadata"]["name"]
        if obj["kind"] in CLUSTER_SCOPED:
            self.cluster_objects.append(f"{path}/{name}")
        if obj["kind"] == "Pod" and not workload:
            self.object_pods.add(name)
        if status is not None:
            self.raw("PATCH", f"{path}/{name}/status", {"status": status}, MERGE)

    # --- waiting

    def workload_pods(self) -> list[dict[str, Any]]:
        found = self.raw("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        return [p for p in found["items"] if p["metadata"]["name"] not in self.object_pods]

    def wanted(self, pods: list[dict[str, Any]]) -> int | None:
        """How many pods the controller makes, when that is known yet."""
        workload = self.scenario["workload"]
        kind, spec = workload["kind"], workload.get("spec") or {}
        if kind == "Pod":
            return 1
        if kind in ("Deployment", "ReplicaSet"):
            return int(spec.get("replicas", 1))
        if kind == "Job":
            parallelism = int(spec.get("parallelism", 1))
            completions = spec.get("completions")
            return parallelism if completions is None else min(parallelism, int(completions))
        if kind == "StatefulSet":
            # OrderedReady: the next replica only once every one before it runs and is Ready
            ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
            if ordered and any(not (p.get("spec") or {}).get("nodeName") for p in pods):
                return len(pods)
            return int(spec.get("replicas", 1))
        if kind == "DaemonSet":
            path = f"{_collection(workload, self.namespace)}/{workload['metadata']['name']}"
            daemonset = self.raw("GET", path)
            status = daemonset.get("status") or {}
            if status.get("observedGeneration", 0) < daemonset["metadata"]["generation"]:
                return None
            return int(status.get("desiredNumberScheduled", 0))
        raise CaptureError(f"workload kind {kind}")

    def snapshot(self) -> tuple[Outcome, bool]:
        pods = self.workload_pods()
        wanted = self.wanted(pods)
        settled = (
            wanted is not None
            and len(pods) == wanted
            and all(_decided(p) for p in pods)
            and not any(p["metadata"].get("deletionTimestamp") for p in pods)
        )
        bound = Counter(
            str(p["spec"]["nodeName"]) for p in pods if (p.get("spec") or {}).get("nodeName")
        )
        messages = sorted(
            {
                m
                for p in pods
                if (m := scheduled_message(p)) is not None and not p["spec"].get("nodeName")
            }
        )
        outcome: Outcome = {
            "wanted": len(pods),
            "placed": sum(bound.values()),
            "nodes": dict(sorted(bound.items())),
            "reason": None,
            "message": None,
            "messages": messages,
        }
        if messages:
            outcome["message"] = messages[0]
            outcome["reason"] = fit_error(messages[0])
        return outcome, settled

    def settle(self) -> Outcome:
        deadline = time.monotonic() + TIMEOUT
        last: Outcome | None = None
        since = time.monotonic()
        while True:
            outcome, settled = self.snapshot()
            now = time.monotonic()
            if not settled or outcome != last:
                last, since = (outcome if settled else None), now
            elif now - since >= QUIET:
                break
            if now > deadline:
                raise CaptureError(
                    f"{self.scenario['name']}: not settled after {TIMEOUT:g}s: {outcome}"
                )
            time.sleep(POLL)
        if len(outcome["messages"]) > 1:
            raise CaptureError(
                f"{self.scenario['name']}: pending pods disagree: {outcome['messages']}"
            )
        del outcome["messages"]
        return outcome

    # --- removing

    def remove(self) -> None:
        """Everything this replay made, gone: its pods before the nodes they are bound to."""
        namespace = f"/api/v1/namespaces/{self.namespace}"
        self.cluster.raw("DELETE", namespace)  # terminating: no controller makes pods any more
        deadline = time.monotonic() + TIMEOUT
        while True:
            self.cluster.raw("DELETE", f"{namespace}/pods", NOW)
            code, pods = self.cluster.raw("GET", f"{namespace}/pods")
            if code == 404 or not pods.get("items"):
                break
            if time.monotonic() > deadline:
                raise CaptureError(f"pods of {self.namespace} still there: {pods['items']}")
            time.sleep(POLL)
        for path in reversed(self.cluster_objects):
            self.cluster.raw("DELETE", path, NOW)
        kubelet = self.cluster.kubelet
        for name in self.nodes:
            if kubelet is not None:
                kubelet.forget(name)
            self.cluster.raw("DELETE", f"/api/v1/nodes/{name}", NOW)
        for name in self.nodes:
            while self.cluster.raw("GET", f"/api/v1/nodes/{name}")[0] != 404:
                if time.monotonic() > deadline:
                    raise CaptureError(f"node {name} still there")
                time.sleep(POLL)
        for path in self.cluster_objects:
            while self.cluster.raw("GET", path)[0] != 404:
                if time.monotonic() > deadline:
                    raise CaptureError(f"{path} still there")
                time.sleep(POLL)


def replay(cluster: TestCluster, scenario: dict[str, Any], scheduler: str | None = None) -> Outcome:
    """What the real scheduler decides for `scenario`, the cluster left as it was."""
    return Replay(cluster, scenario, scheduler).run()


# --- capturing --------------------------------------------------------------------------


def agree(name: str, outcomes: list[Outcome]) -> Outcome:
    """The outcome of several replays: `nodes` null where they bound differently; any other
    difference is an error."""
    first = outcomes[0]
    for other in outcomes[1:]:
        for key in ("wanted", "placed", "reason", "message"):
            if other[key] != first[key]:
                raise CaptureError(
                    f"{name}: replays differ in {key}: {first[key]!r} / {other[key]!r}"
                )
    agreed = dict(first)
    if any(o["nodes"] != first["nodes"] for o in outcomes):
        agreed["nodes"] = None
    return agreed


@contextmanager
def any_fit_scheduler(binary: Path, kubeconfig: Path) -> Iterator[str]:
    """A second kube-scheduler whose one profile scores nothing: among the nodes the filters
    leave it picks one at random, so that replays through it show every outcome the filters
    allow."""
    with tempfile.TemporaryDirectory(prefix="any-fit-") as directory:
        config = Path(directory) / "config.yaml"
        config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {str(kubeconfig)!r}}}\n"
            "leaderElection: {leaderElect: false}\n"
            "profiles:\n"
            f"  - schedulerName: {ANY_FIT}\n"
            "    plugins:\n"
            "      preScore: {disabled: [{name: '*'}]}\n"
            "      score: {disabled: [{name: '*'}]}\n"
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = (Path(directory) / "scheduler.log").open("w")
        process = subprocess.Popen(
            [
                str(binary),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield ANY_FIT
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def capture(
    cluster: TestCluster,
    paths: list[Path],
    repeat: int,
    explore: int,
    any_fit: str | None,
    report: Callable[[str], None] = print,
) -> None:
    for path in paths:
        scenario = load(path)
        started = time.monotonic()
        outcomes = [replay(cluster, scenario) for _ in range(repeat)]
        if any_fit is not None:
            outcomes += [replay(cluster, scenario, any_fit) for _ in range(explore)]
        outcome = agree(scenario["name"], outcomes)
        write_expected(path, outcome)
        took = (time.monotonic() - started) / len(outcomes)
        seen = sorted({str(o["nodes"]) for o in outcomes})
        report(
            f"{path.stem}: {outcome} ({len(outcomes)} replays, {took:.1f}s each"
            + (f"; bound: {' | '.join(seen)})" if len(seen) > 1 else ")")
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="scenarios (file names without .yaml)")
    parser.add_argument("--kubeconfig", default=os.environ.get("RECONCILE_TEST_KUBECONFIG"))
    parser.add_argument("--repeat", type=int, default=3, help="replays with the default scheduler")
    parser.add_argument("--any-fit", type=Path, help="a kube-scheduler binary to explore with")
    parser.add_argument("--explore", type=int, default=12, help="replays through --any-fit")
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error("no kubeconfig: pass --kubeconfig or set RECONCILE_TEST_KUBECONFIG")
    kubeconfig = Path(args.kubeconfig).resolve()
    paths = scenario_paths(args.names)
    cluster = TestCluster(kubeconfig)
    kubelet = cluster.kubelet
    assert kubelet is not None
    reset(cluster)
    kubelet.start()
    try:
        if args.any_fit is not None:
            with any_fit_scheduler(args.any_fit, kubeconfig) as name:
                capture(cluster, paths, args.repeat, args.explore, name)
        else:
            capture(cluster, paths, args.repeat, 0, None)
    except CaptureError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        kubelet.stop()
        cluster.api_client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
