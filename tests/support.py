"""Helpers shared by the tests: the real CLI in a subprocess, and a cluster to run it on.

The cluster is the embedded sandbox, or a real one when RECONCILE_TEST_KUBECONFIG names
a kubeconfig: objects are then seeded (and removed afterwards) through the API itself,
so the same end-to-end test checks the sandbox's fidelity against the real thing.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client, config

from reconcile.gpu import standin
from reconcile.gpu.standin import MigManagerStandIn
from reconcile.kube.crds import is_established
from reconcile.sandbox import Sandbox
from reconcile.sandbox.main import parse_seed, seed_text
from reconcile.sandbox.resources import custom_resources, resource_for
from tests.kubelet import NodeStandIn

REPO = Path(__file__).resolve().parents[1]
DESIRED = REPO / "desired"
REAL_KUBECONFIG = os.environ.get("RECONCILE_TEST_KUBECONFIG")


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def run_cli(
    *args: str,
    cwd: Path | None = None,
    kubeconfig: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    stdin: str | None = None,
    process: bool = False,
) -> CliResult:
    """`reconcile ARGS` as a user runs it: real argv, real exit code, stdout and stderr apart.

    In-process through click's runner (a process costs a second of imports); `process=True`
    runs the installed module in a separate process, for what only a process shows."""
    environment = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "RECONCILE_PLAN_KEY")
    }
    environment["HOME"] = str(cwd or REPO)  # never a developer's ~/.kube/config
    environment["NO_COLOR"] = "1"
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(kubeconfig)
    environment.update(env or {})
    if process:
        completed = subprocess.run(
            [sys.executable, "-m", "reconcile", *args],
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            check=False,
        )
        result = CliResult(completed.returncode, completed.stdout, completed.stderr)
    else:
        result = _run_in_process(list(args), cwd, environment, stdin)
    assert_no_credentials(
        result.stdout + result.stderr, kubeconfig or environment.get("KUBECONFIG")
    )
    return result


def _run_in_process(
    args: list[str], cwd: Path | None, environment: dict[str, str], stdin: str | None
) -> CliResult:
    from click.testing import CliRunner

    from reconcile.cli import main

    unset: dict[str, str | None] = {k: None for k in os.environ if k not in environment}
    runner = CliRunner()
    with contextlib.chdir(cwd or Path.cwd()):
        outcome = runner.invoke(
            main,
            args,
            input=stdin,
            env={**unset, **environment},
            prog_name="reconcile",
            catch_exceptions=True,
        )
    if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
        raise outcome.exception
    return CliResult(outcome.exit_code, outcome.stdout, outcome.stderr)


def credentials(kubeconfig: Path | str | None) -> list[str]:
    """The secrets a kubeconfig holds: tokens, passwords, client keys."""
    if kubeconfig is None or not Path(kubeconfig).exists():
        return []
    # libyaml's loader: the same document as safe_load, without pure-Python scanning of a
    # long certificate on every CLI run of the suite.
    document = yaml.load(Path(kubeconfig).read_text(), Loader=yaml.CSafeLoader) or {}
    found = []
    for user in document.get("users") or ():
        for key in ("token", "password", "client-key-data", "client-certificate-data"):
            value = (user.get("user") or {}).get(key)
            if value and len(str(value)) >= 8:  # shorter ones are test stand-ins, not secrets
                found.append(str(value))
    return found


def assert_no_credentials(output: str, kubeconfig: Path | str | None) -> None:
    """Every CLI run of the suite is checked: no credential of its kubeconfig is printed."""
    for secret in credentials(kubeconfig):
        assert secret not in output, "a credential from the kubeconfig appeared in the output"
        assert secret[:12] not in output, "part of a credential appeared in the output"


def lab_objects(seed: str = "lab") -> list[dict[str, Any]]:
    """load_seed(seed): parsed once per text, a fresh deep copy for every caller."""
    return copy.deepcopy(_parsed_seed(*seed_text(seed)))


@functools.cache
def _parsed_seed(text: str, shown: str) -> list[dict[str, Any]]:
    return parse_seed(text, shown)


def copy_desired(target: Path, source: Path = DESIRED) -> Path:
    """A private copy of a desired/ tree that a test may change."""
    destination = target / "desired"
    shutil.copytree(source, destination)
    return destination


class TestCluster:
    """A cluster a test drives through the official client (and its kubeconfig)."""

    __test__ = False  # not a test class, despite the name

    def __init__(self, kubeconfig: Path, sandbox: Sandbox | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.sandbox = sandbox
        self.api_client = config.new_client_from_config(str(kubeconfig), persist_config=False)
        self.core = client.CoreV1Api(self.api_client)
        self._created: list[tuple[str, str, str, str]] = []
        self._uids: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name) -> uid
        self._crds: list[dict[str, Any]] = []  # what the seed's custom resources resolve by
        # On a real cluster: the kubelet of every node the harness creates (none is behind
        # an API-created Node), so that the suite needs no stand-in of the cluster's own.
        self.kubelet = None if sandbox is not None else NodeStandIn(self.raw, SEEDED)
        # mig-manager's part for the GPU nodes (reconcile/gpu/standin.py), on every test
        # cluster from `start_cluster` to `stop_cluster`.
        self.mig_manager: MigManagerStandIn | None = None

    @property
    def is_sandbox(self) -> bool:
        return self.sandbox is not None

    def start_mig_manager(self) -> None:
        """Stand in for mig-manager on the GPU nodes: what they carry now is taken as
        applied, a change of `nvidia.com/mig.config` from now on is carried out."""
        if self.mig_manager is None:
            self.mig_manager = MigManagerStandIn(standin.connect(self.kubeconfig)).start()

    def stop_mig_manager(self) -> None:
        if self.mig_manager is not None:
            self.mig_manager.stop()
            self.mig_manager.cluster.close()
            self.mig_manager = None

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        """One HTTP request through the client's connection; (status, decoded JSON body)."""
        headers = {"Accept": accept, "Content-Type": content_type}
        url = self.api_client.configuration.host + path
        self.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        payload = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
        response = self.api_client.rest_client.pool_manager.request(
            method, url, body=payload, headers=headers, preload_content=True
        )
        data = response.data
        try:
            decoded = json.loads(data) if data else None
        except ValueError:
            decoded = data.decode()
        return response.status, decoded

    def node(self, name: str) -> dict[str, Any]:
        status, body = self.raw("GET", f"/api/v1/nodes/{name}")
        assert status == 200, body
        return dict(body)

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def resource_versions(self) -> dict[str, str]:
        """name -> resourceVersion of every node: a cheap fingerprint of the cluster."""
        status, body = self.raw("GET", "/api/v1/nodes")
        assert status == 200, body
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in body["items"]}

    def label(self, node: str, **labels: str | None) -> dict[str, Any]:
        status, body = self.raw(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": labels}},
            "application/merge-patch+json",
        )
        assert status == 200, body
        return dict(body)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object through the API, its status through the status subresource (a
        Node's, on a real cluster, with its creation).

        On a real cluster the controllers are live: owner references are pointed at the
        owners' real UIDs (else the garbage collector deletes the dependents), a Deployment
        is created paused (its controller would otherwise replace the seeded ReplicaSet),
        and status is written on a fresh read (the scheduler and the stand-in kubelet may
        have moved the object already)."""
        resource = resource_for(obj["apiVersion"], obj["kind"]) or resource_for(
            obj["apiVersion"], obj["kind"], custom_resources(self._crds)
        )
        assert resource is not None, obj["kind"]
        body = copy.deepcopy(obj)
        # A Node's status goes with its creation on a real cluster, as a kubelet registers
        # it: the control plane's own stand-in kubelet gives a node it finds not Ready its
        # own capacity (8 GPUs) by a patch made on what it read, which can land after a
        # status written separately and undo it.
        status_part = None if self._status_on_create(obj) else body.pop("status", None)
        metadata = body["metadata"]
        namespace = metadata.get("namespace", "default") if resource.namespaced else ""
        if not self.is_sandbox:
            metadata.pop("uid", None)
            metadata.pop("resourceVersion", None)
            # Owners by their real UIDs; an owner not created yet adopts its dependent
            # itself, as a real controller does with matching orphans.
            owners = []
            for owner in metadata.get("ownerReferences") or ():
                uid = self._uids.get((owner["kind"], namespace, owner["name"]))
                if uid is not None:
                    owners.append({**owner, "uid": uid})
            if owners:
                metadata["ownerReferences"] = owners
            else:
                metadata.pop("ownerReferences", None)
            if obj["kind"] == "Deployment":
                body.setdefault("spec", {})["paused"] = True
            if namespace in SYSTEM_NAMESPACES:  # so that `reset` finds it after a crash
                metadata.setdefault("labels", {})[SEEDED] = "true"
        prefix = f"/apis/{resource.group_version}" if resource.group else "/api/v1"
        collection = (
            f"{prefix}/namespaces/{namespace}/{resource.plural}"
            if resource.namespaced
            else f"{prefix}/{resource.plural}"
        )
        labels = metadata.get("labels") or {}
        if not self.is_sandbox and labels.get("app.kubernetes.io/managed-by") == "reconcile":
            created = self._applied_by_reconcile(collection, body)
        else:
            code, created = self.raw("POST", collection, body)
            assert code == 201, created
        name = created["metadata"]["name"]
        self._created.append((collection, name, resource.kind, namespace))
        self._uids[(resource.kind, namespace, name)] = created["metadata"]["uid"]
        if status_part is not None:
            created = self._write_status(f"{collection}/{name}", created, status_part)
        if self.kubelet is not None and resource.kind == "Node":
            self.kubelet.register(created)
            code, created = self.raw("GET", f"{collection}/{name}")
            assert code == 200, created
        if resource.kind == "CustomResourceDefinition":
            self._crds.append(self._established(f"{collection}/{name}"))
        if not self.is_sandbox and resource.kind == "Namespace":
            # Pods are refused until the service account controller has made `default`.
            account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
            wait_for(lambda: self.raw("GET", account)[0] == 200, what=f"{name}'s default account")
        return dict(created)

    def _status_on_create(self, obj: dict[str, Any]) -> bool:
        return not self.is_sandbox and obj["kind"] == "Node" and "status" in obj

    def _established(self, path: str) -> dict[str, Any]:
        """The CRD at `path` once it is Established (its custom resources are served)."""
        wait_for(lambda: is_established(self.raw("GET", path)[1]), what=f"{path} Established")
        return dict(self.raw("GET", path)[1])

    def _applied_by_reconcile(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """An object the lab says reconcile applied, as a real `reconcile apply` leaves it:
        created by server-side apply as field manager `reconcile`, which alone owns what
        it declares. What the lab adds that reconcile does not declare (a pod's node, a
        paused rollout) is handed to another manager, as the scheduler holds a binding.
        (The sandbox's seeded objects have no field owners at all: neither meets a
        conflict that the lab would not.)"""
        body = copy.deepcopy(body)
        for server_owned in ("managedFields", "creationTimestamp", "generation", "selfLink"):
            body["metadata"].pop(server_owned, None)
        path = f"{collection}/{body['metadata']['name']}"
        spec = body.get("spec") or {}
        extra = {k: spec[k] for k in ("nodeName", "paused") if k in spec}

        def apply(manager: str, config: dict[str, Any], created: bool = False) -> dict[str, Any]:
            code, answer = self.raw(
                "PATCH",
                f"{path}?fieldManager={manager}&force=true",
                config,
                "application/apply-patch+yaml",
            )
            assert code == (201 if created else 200), answer
            return dict(answer)

        applied = apply("reconcile", body, created=True)
        if extra:
            metadata = {
                k: body["metadata"][k] for k in ("name", "namespace") if k in body["metadata"]
            }
            apply(
                "seed",
                {
                    "apiVersion": body["apiVersion"],
                    "kind": body["kind"],
                    "metadata": metadata,
                    "spec": extra,
                },
            )
            released = copy.deepcopy(body)
            for key in extra:
                del released["spec"][key]
            applied = apply("reconcile", released)
        return applied

    def _write_status(
        self, path: str, current: dict[str, Any], status: dict[str, Any]
    ) -> dict[str, Any]:
        for _ in range(10):
            current["status"] = status
            code, written = self.raw("PUT", f"{path}/status", current)
            if code == 200:
                return dict(written)
            assert code == 409, written  # moved on since: read it again and retry
            code, current = self.raw("GET", path)
            assert code == 200, current
        raise AssertionError(f"{path}: status kept conflicting")

    def seed(self, objects: Iterable[dict[str, Any]]) -> None:
        """Create the objects (namespaces and nodes first, owners before dependents); on a
        real cluster a failed seed removes what it created before failing."""
        # Pods before their ReplicaSet on a real cluster: see `create`.
        pods = 3 if self.is_sandbox else 2.5
        order = {
            "CustomResourceDefinition": -1,
            "Namespace": 0,
            "Node": 1,
            "Deployment": 2,
            "Pod": pods,
            "ReplicaSet": 3,
        }
        try:
            for obj in sorted(objects, key=lambda o: order.get(o["kind"], 4.0)):
                if obj["kind"] == "Namespace" and self._exists(
                    f"/api/v1/namespaces/{obj['metadata']['name']}"
                ):
                    continue
                crd = f"{CRD_COLLECTION}/{obj['metadata']['name']}"
                if obj["kind"] == "CustomResourceDefinition" and self._exists(crd):
                    # A real cluster keeps an operator's CRDs (NFD's) between tests.
                    self._crds.append(self._established(crd))
                    continue
                self.create(obj)
        except BaseException:
            if not self.is_sandbox:
                self.cleanup()
            raise
        if not self.is_sandbox:
            self._settle()

    def _settle(self) -> None:
        """Wait for what a real cluster does after seeding: every node Ready without the
        not-ready taint and every bound pod Running (the harness's stand-in kubelet, see
        tests/kubelet.py, or the cluster's own), every budget's status computed by the
        disruption controller."""

        def nodes_ready() -> bool:
            for node in self.raw("GET", "/api/v1/nodes")[1]["items"]:
                conditions = (node.get("status") or {}).get("conditions") or ()
                taints = (node.get("spec") or {}).get("taints") or ()
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                    return False
                if any(t["key"] == "node.kubernetes.io/not-ready" for t in taints):
                    return False
            return True

        def pods_running() -> bool:
            pods = self.raw("GET", "/api/v1/pods")[1]["items"]
            return all(
                (p.get("status") or {}).get("phase") == "Running"
                for p in pods
                if (p.get("spec") or {}).get("nodeName")
            )

        wait_for(nodes_ready, what="nodes to be Ready")
        wait_for(pods_running, what="bound pods to run")
        status, budgets = self.raw("GET", "/apis/policy/v1/poddisruptionbudgets")
        assert status == 200, budgets
        for budget in budgets["items"]:
            metadata = budget["metadata"]
            path = (
                f"/apis/policy/v1/namespaces/{metadata['namespace']}"
                f"/poddisruptionbudgets/{metadata['name']}"
            )
            wait_for(
                lambda path=path: (
                    (self.raw("GET", path)[1].get("status") or {}).get("observedGeneration")
                    is not None
                ),
                what=f"{path} status",
            )

    def _exists(self, path: str) -> bool:
        return self.raw("GET", path)[0] == 200

    def cleanup(self) -> None:
        """Leave the real cluster as a fresh one: what the test created in the namespaces
        every cluster has (a Secret in kube-system), then everything `reset` removes."""
        self.stop_mig_manager()
        if self.kubelet is not None:
            self.kubelet.stop()  # the nodes go: nothing to keep up any more
        now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        for collection, name, kind, namespace in reversed(self._created):
            # Seeded cluster-scoped custom resources (the lab's NodeFeatureRule) too:
            # reset removes only those reconcile manages.
            custom = not namespace and resource_for(collection_version(collection), kind) is None
            if namespace in SYSTEM_NAMESPACES or custom:
                self.raw("DELETE", f"{collection}/{name}", now)
        reset(self)
        self._created.clear()
        self.api_client.close()


def settled(cluster: TestCluster, path: str, *, quiet: float = 1.0) -> None:
    """Wait until the object at `path` is observed at its generation and its
    resourceVersion holds for `quiet` seconds: on a real cluster a controller writes a
    fresh Deployment's status for a while (each write a new resourceVersion, which makes a
    plan made meanwhile stale); the sandbox runs none."""
    if cluster.is_sandbox:
        return

    def quiet_now() -> bool:
        first = cluster.raw("GET", path)[1]
        status = first.get("status") or {}
        if status.get("observedGeneration", 0) < first["metadata"].get("generation", 0):
            return False
        time.sleep(quiet)
        again = cluster.raw("GET", path)[1]
        return bool(again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"])

    wait_for(quiet_now, what=f"{path} to settle", timeout=60)


def without_prunes(lines: list[str]) -> list[str]:
    """A plan's lines but what only --prune removes (`... - (--prune)`): the objects the
    lab seed's inventory says reconcile applied, when a tree does not declare them."""
    return [line for line in lines if not line.endswith(" (--prune)")]


def wait_for(condition: Any, *, what: str, timeout: float = 60.0) -> None:
    """Poll `condition` until it holds (bounded, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


# The label of what the harness creates in the namespaces every cluster has.
# What `plan` and `apply` ask while they read desired/ (the read ahead: which cluster it
# is, every node). A tree found invalid stops them there: nothing else is asked, nothing
# is written.
READ_AHEAD: Final = frozenset({("get", "namespaces"), ("list", "nodes")})


def asked_beyond_read_ahead(requests: Iterable[Any]) -> list[str]:
    """The requests that are not the read ahead's (each `VERB resource`)."""
    return [f"{r.verb} {r.resource}" for r in requests if (r.verb, r.resource) not in READ_AHEAD]


SEEDED = "reconcile.test/seeded"
# What a fresh cluster has: everything else a test made goes in `reset`.
SYSTEM_NAMESPACES = frozenset({"default", "kube-node-lease", "kube-public", "kube-system"})
_CLUSTER_KINDS = (
    # What placement tests publish as a DRA driver would, and the classes they declare.
    "/apis/resource.k8s.io/v1/resourceslices",
    "/apis/resource.k8s.io/v1/deviceclasses",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    # Last: a CRD goes with its custom resources (its finalizer deletes them first).
    CRD_COLLECTION := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
)


def reset(cluster: TestCluster) -> None:
    """Remove everything tests make on a real cluster: every namespace but the system
    ones, what reconcile or a test put in `default`, the cluster-scoped objects reconcile
    manages, and every node.

    A namespace goes as the namespace controller takes it, only without its requeue
    delays: marked for deletion (it refuses new content from then on), every collection
    in it deleted with no grace period (no kubelet confirms), then finalized. The next
    test then meets a fresh cluster, never a terminating namespace."""
    collections = _namespaced_collections(cluster)
    status, namespaces = cluster.raw("GET", "/api/v1/namespaces")
    assert status == 200, namespaces
    now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    for namespace in namespaces["items"]:
        name = namespace["metadata"]["name"]
        if name in SYSTEM_NAMESPACES:
            continue
        cluster.raw("DELETE", f"/api/v1/namespaces/{name}")
        for collection in collections:
            cluster.raw("DELETE", collection.format(namespace=name), now)
        code, current = cluster.raw("GET", f"/api/v1/namespaces/{name}")
        if code == 200:
            current["spec"]["finalizers"] = []
            cluster.raw("PUT", f"/api/v1/namespaces/{name}/finalize", current)
        wait_for(
            lambda name=name: cluster.raw("GET", f"/api/v1/namespaces/{name}")[0] == 404,
            what=f"namespace {name} to go",
        )
    # kube-node-lease: the Leases of the harness's stand-in kubelet
    for namespace in ("default", "kube-system", "kube-node-lease"):
        for collection in collections:
            cluster.raw(
                "DELETE",
                f"{collection.format(namespace=namespace)}?labelSelector={SEEDED}",
                now,
            )
    # The Events watch --correct records on nodes (in default): a test counts its own.
    cluster.raw("DELETE", "/apis/events.k8s.io/v1/namespaces/default/events", now)
    # The rollouts' Leases (reconcile/gpu/lock.py), a dead holder's among them.
    cluster.raw(
        "DELETE",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        "?labelSelector=reconcile.dev%2Frollout",
        now,
    )
    for collection in collections:
        path = collection.format(namespace="default")
        status, found = cluster.raw("GET", path)
        for item in found.get("items") or () if status == 200 else ():
            name = item["metadata"]["name"]
            if name in ("kube-root-ca.crt", "default", "kubernetes"):
                continue  # the control plane's own: the CA bundle, the service account, the API service
            if (item["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") or (
                "/pods" in path or "/configmaps" in path or "/poddisruptionbudgets" in path
            ):
                cluster.raw("DELETE", f"{path}/{name}", now)
    for collection in _CLUSTER_KINDS:
        status, found = cluster.raw(
            "GET", f"{collection}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dreconcile"
        )
        for item in found.get("items") or () if status == 200 else ():
            cluster.raw("DELETE", f"{collection}/{item['metadata']['name']}")
    wait_for(
        lambda: (
            not cluster.raw(
                "GET", f"{CRD_COLLECTION}?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dreconcile"
            )[1].get("items")
        ),
        what="custom resource definitions to go",
    )
    cluster.raw("DELETE", "/api/v1/nodes", now)
    wait_for(
        lambda: not cluster.raw("GET", "/api/v1/nodes")[1].get("items"),
        what="nodes to go",
    )


def collection_version(collection: str) -> str:
    """`/apis/g/v/...` -> `g/v`, `/api/v1/...` -> `v1`."""
    parts = collection.strip("/").split("/")
    return parts[1] if parts[0] == "api" else f"{parts[1]}/{parts[2]}"


def _namespaced_collections(cluster: TestCluster) -> list[str]:
    """Every namespaced collection that can be deleted, as a path with {namespace}."""
    found = []
    _, groups = cluster.raw("GET", "/apis")
    versions = ["v1", *(g["preferredVersion"]["groupVersion"] for g in groups["groups"])]
    for version in versions:
        base = "/api/v1" if version == "v1" else f"/apis/{version}"
        status, document = cluster.raw("GET", base)
        for resource in document.get("resources") or () if status == 200 else ():
            if "/" in resource["name"] or not resource["namespaced"]:
                continue
            if "deletecollection" in resource["verbs"]:
                found.append(base + "/namespaces/{namespace}/" + resource["name"])
    return found


def start_cluster(objects: list[dict[str, Any]], directory: Path) -> TestCluster:
    kubeconfig = directory / "kubeconfig"
    if REAL_KUBECONFIG:
        shutil.copy(REAL_KUBECONFIG, kubeconfig)
        cluster = TestCluster(kubeconfig)
        reset(cluster)  # whatever an earlier test or run left behind
        assert cluster.kubelet is not None
        cluster.kubelet.start()
        cluster.seed(objects)
        try:
            cluster.start_mig_manager()
        except BaseException:
            cluster.cleanup()
            raise
        return cluster
    # The stand-in's polling is the cluster's own traffic, not the tests': unrecorded.
    sandbox = Sandbox(objects, unrecorded_agents={standin.AGENT}).start()
    sandbox.write_kubeconfig(kubeconfig)
    cluster = TestCluster(kubeconfig, sandbox)
    try:
        cluster.start_mig_manager()
    except BaseException:
        sandbox.stop()
        raise
    return cluster


def stop_cluster(cluster: TestCluster) -> None:
    """The mig-manager stand-in stopped first, then the sandbox (or, on a real cluster,
    everything the test made removed)."""
    if cluster.sandbox is not None:
        cluster.stop_mig_manager()
        cluster.api_client.close()
        cluster.sandbox.stop()
    else:
        cluster.cleanup()


# A node of four A100s as GPU Feature Discovery and mig-manager leave it, MIG off.
A100_MIG_LABELS: Final = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
}


def mig_node(
    name: str,
    *,
    layout: str | None = "all-disabled",
    strategy: str = "mixed",
    product: str = "NVIDIA-A100-SXM4-40GB",
    gpus: int = 8,
    capable: str = "true",
    resources: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A MIG-capable GPU node as GPU Feature Discovery labels it, with `resources` (its
    GPUs whole by default) as both capacity and allocatable."""
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/mig.capable": capable,
        "nvidia.com/mig.strategy": strategy,
    }
    if layout is not None:
        labels["nvidia.com/mig.config"] = layout
    gpu = resources if resources is not None else {"nvidia.com/gpu": str(gpus)}
    listed = {"cpu": "64", "memory": "512Gi", "pods": "110", **gpu}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "status": {
            "capacity": dict(listed),
            "allocatable": dict(listed),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-01T00:00:00Z",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
            ],
        },
    }


def mig_states(cluster: TestCluster, node: str, *, timeout: float = 30.0) -> list[str]:
    """The values `nvidia.com/mig.config.state` takes on `node`, in order, read every
    20 ms until it is `success` or `failed`."""
    return each_mig_states(cluster, node, timeout=timeout)[node]


def each_mig_states(
    cluster: TestCluster, *nodes: str, timeout: float = 30.0
) -> dict[str, list[str]]:
    """`mig_states` of several nodes changing side by side (one LIST every 20 ms)."""
    seen: dict[str, list[str]] = {node: [] for node in nodes}
    deadline = time.monotonic() + timeout
    while not all(s and s[-1] in ("success", "failed") for s in seen.values()):
        if time.monotonic() > deadline:
            raise AssertionError(f"no success or failed after {timeout:g}s: {seen}")
        status, found = cluster.raw("GET", "/api/v1/nodes")
        assert status == 200, found
        for item in found["items"]:
            states = seen.get(item["metadata"]["name"])
            state = (item["metadata"].get("labels") or {}).get("nvidia.com/mig.config.state")
            if states is not None and state is not None and (not states or states[-1] != state):
                states.append(state)
        time.sleep(0.02)
    return seen


def wait_seen(stand_in: MigManagerStandIn, *nodes: str) -> None:
    """Wait until the stand-in has taken in `nodes` as they are now (a change made before
    would count as their seed)."""
    wait_for(lambda: set(nodes) <= set(stand_in.applied), what=f"the stand-in to see {nodes}")


def _markdown_tokens(markdown: str) -> list[Any]:
    from markdown_it import MarkdownIt

    return list(MarkdownIt("commonmark", {"html": True}).enable("table").parse(markdown))


def markdown_table_rows(markdown: str) -> list[list[str]]:
    """Every table body row as GFM reads it: the text of each cell (code spans unwrapped)."""
    rows: list[list[str]] = []
    cells: list[str] | None = None
    in_body = False
    for token in _markdown_tokens(markdown):
        if token.type in ("tbody_open", "tbody_close"):
            in_body = token.type == "tbody_open"
        elif in_body and token.type == "tr_open":
            cells = []
        elif in_body and token.type == "tr_close" and cells is not None:
            rows.append(cells)
        elif in_body and token.type == "inline" and cells is not None:
            cells.append("".join(child.content for child in token.children or ()))
    return rows


def markdown_html(markdown: str) -> list[str]:
    """The raw HTML a markdown renderer would pass through: none, for safe output."""
    found = []
    for token in _markdown_tokens(markdown):
        if token.type == "html_block":
            found.append(token.content)
        found += [c.content for c in token.children or () if c.type == "html_inline"]
    return found
