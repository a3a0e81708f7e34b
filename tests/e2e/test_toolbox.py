"""The GitOps toolbox: import, running in the cluster (manifests, RBAC, in-cluster
credentials), pre-commit, completion, verbosity and colour, kubeconfigs, the wheel."""

from __future__ import annotations

import base64
import importlib
import itertools
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml

from reconcile.diagnostics import ApiError
from reconcile.kube.client import Cluster
from reconcile.sandbox import Sandbox
from reconcile.sandbox.server import RequestRecord
from tests import packaging
from tests.conftest import ClusterFactory
from tests.packaging import exec_form
from tests.support import (
    REPO,
    CliResult,
    TestCluster,
    lab_objects,
    run_cli,
    wait_for,
    without_prunes,
)

NODE_0 = "desired/nodes/lab-node-0.yaml"


# --- import -------------------------------------------------------------------------------


def test_import_writes_node_files_with_only_discovered_facts(
    lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    assert result.lines == [
        "desired/nodes/lab-node-0.yaml 12 label(s)",
        "desired/nodes/lab-node-1.yaml 13 label(s)",
        "desired/nodes/lab-node-2.yaml 1 label(s)",
    ]
    text = (tmp_path / NODE_0).read_text()
    assert text.startswith(
        "# yaml-language-server: $schema=../../schemas/nodefeatures.schema.json\n"
    )
    # The schema it points at exists, as `reconcile schemas` writes it.
    schema = tmp_path / "schemas" / "nodefeatures.schema.json"
    assert json.loads(schema.read_text())["$id"].endswith("/nodefeatures.schema.json")
    assert run_cli("schemas", "--check", cwd=tmp_path).code in (0, 1)
    assert "nodefeatures.schema.json" not in run_cli("schemas", "--check", cwd=tmp_path).stderr
    assert "kubernetes.io/hostname" not in text and "beta.kubernetes.io" not in text
    assert "nvidia.com/gpu.deploy.driver" not in text  # the operator's decision, not a fact
    assert 'nvidia.com/cuda.driver.rev: "07"' in text  # quoted: it must stay a string
    assert run_cli("validate", cwd=tmp_path).code == 0
    # git now says what the nodes are (the lab's objects, which import leaves, only --prune removes)
    plan = run_cli("plan", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert (plan.code, without_prunes(plan.lines)) == (1, []), plan.stderr


def test_reimport_changes_only_changed_values_byte_for_byte(
    lab: TestCluster, tmp_path: Path
) -> None:
    run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    path = tmp_path / NODE_0
    lines = path.read_text().splitlines(keepends=True)
    header, labels = lines[:6], lines[6:]
    # A person edits the file: comments, their own order, their own quoting.
    edited = "".join([*header, "  # the cards\n", *reversed(labels)]).replace(
        'nvidia.com/gpu.count: "4"', "nvidia.com/gpu.count: '4'  # per node"
    )
    path.write_text(edited)
    lab.label("lab-node-0", **{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559"})

    preview = run_cli("import", "--dry-run", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert preview.code == 0
    assert path.read_text() == edited  # a dry run writes nothing
    assert '-  nvidia.com/gpu.memory: "40537"' in preview.lines
    assert '+  nvidia.com/gpu.memory: "81559"' in preview.lines
    assert preview.lines[:2] == [f"--- {NODE_0}", f"+++ {NODE_0}"]

    result = run_cli("import", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert result.lines == [
        "desired/nodes/lab-node-0.yaml 12 label(s)"
    ]  # the others did not change
    assert path.read_text() == edited.replace(
        "nvidia.com/gpu.count: '4'", "nvidia.com/gpu.count: '8'"
    ).replace('nvidia.com/gpu.memory: "40537"', 'nvidia.com/gpu.memory: "81559"')


def test_import_selector_and_prefixes(lab: TestCluster, tmp_path: Path) -> None:
    result = run_cli(
        "import",
        "-l",
        "!nvidia.com/gpu.present",
        "--prefix",
        "feature.node.kubernetes.io/",
        cwd=tmp_path,
        kubeconfig=lab.kubeconfig,
    )
    assert result.lines == ["desired/nodes/lab-node-2.yaml 1 label(s)"]
    refused = run_cli(
        "import", "--prefix", "node-role.kubernetes.io/", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )
    assert refused.code == 2
    assert refused.stderr == (
        "error: --prefix node-role.kubernetes.io/: labels under kubernetes.io and k8s.io "
        "belong to the kubelet and the cluster, not to desired/\n"
    )
    assert not (tmp_path / "desired" / "nodes" / "lab-node-0.yaml").exists()


def test_import_group_by_gives_values_that_make_one_name_a_file_each(
    lab: TestCluster, tmp_path: Path
) -> None:
    lab.label("lab-node-0", **{"example.com/sku": "a100-x"})
    lab.label("lab-node-1", **{"example.com/sku": "A100_x"})

    result = run_cli(
        "import", "--group-by", "example.com/sku", cwd=tmp_path, kubeconfig=lab.kubeconfig
    )

    assert result.code == 0, result.stderr
    groups = tmp_path / "desired" / "groups"
    # In sorted order of the value: A100_x keeps the plain name, a100-x is numbered.
    assert result.lines[:2] == [
        "desired/groups/sku-a100-x.yaml 13 label(s)",
        "desired/groups/sku-a100-x-2.yaml 12 label(s)",
    ]
    assert "    example.com/sku: A100_x\n" in (groups / "sku-a100-x.yaml").read_text()
    assert "    example.com/sku: a100-x\n" in (groups / "sku-a100-x-2.yaml").read_text()
    assert "name: sku-a100-x-2\n" in (groups / "sku-a100-x-2.yaml").read_text()
    assert (
        "note: the example.com/sku values A100_x and a100-x make one group name, sku-a100-x: "
        "the group of a100-x is sku-a100-x-2"
    ) in result.stderr
    assert run_cli("validate", cwd=tmp_path).code == 0
    plan = run_cli("plan", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    assert (plan.code, without_prunes(plan.lines)) == (1, []), plan.stderr


@pytest.mark.parametrize("prefix", ["kubernetes", "k", "", "beta.", "topology", "node"])
def test_import_never_takes_a_kubelet_key_whatever_the_prefix_says(
    prefix: str, lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", "--prefix", prefix, cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 0, result.stderr
    written = sorted((tmp_path / "desired" / "nodes").glob("*.yaml"))
    assert [p.name for p in written] == ["lab-node-0.yaml", "lab-node-1.yaml", "lab-node-2.yaml"]
    for path in written:
        keys = list(yaml.safe_load(path.read_text())["labels"] or {})
        assert not [k for k in keys if "kubernetes.io/" in k and "feature.node." not in k], path
        if prefix in ("", "k"):
            assert "kubernetes.io/hostname" not in keys
    assert run_cli("validate", cwd=tmp_path).code == 0


@pytest.mark.parametrize(
    "prefix", ["kubernetes.io/", "topology.kubernetes.io/", "kubernetes.io/os"]
)
def test_import_refuses_a_prefix_under_kubernetes_io(
    prefix: str, lab: TestCluster, tmp_path: Path
) -> None:
    result = run_cli("import", "--prefix", prefix, cwd=tmp_path, kubeconfig=lab.kubeconfig)

    assert result.code == 2
    assert result.stderr.startswith(f"error: --prefix {prefix}: labels under kubernetes.io")
    assert not (tmp_path / "desired").exists()


# --- running in the cluster ---------------------------------------------------------------


def _deploy_manifests() -> list[Path]:
    """The manifests of the kustomize base (deploy/kustomization.yaml is not one)."""
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    return [REPO / "deploy" / name for name in kustomization["resources"]]


def _deploy_objects() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in _deploy_manifests():
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def test_deploy_manifests_validate_and_dry_run_on_the_server(
    lab: TestCluster, tmp_path: Path
) -> None:
    workloads = tmp_path / "desired" / "workloads"
    workloads.mkdir(parents=True)
    for path in _deploy_manifests():
        shutil.copy(path, workloads / path.name)
    assert run_cli("validate", cwd=tmp_path).code == 0

    lab.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reconcile-system"}})
    plan = run_cli("plan", "-o", "json", cwd=tmp_path, kubeconfig=lab.kubeconfig)
    document = json.loads(plan.stdout)
    assert document["findings"] == []  # every object passed the server's dry-run
    created = sorted(
        "/".join(p for p in (o["kind"], o["namespace"], o["name"]) if p)
        for o in document["objects"]
        if o["action"] == "create"
    )
    assert created == [
        "ClusterRole/reconcile",
        "ClusterRoleBinding/reconcile",
        "CronJob/reconcile-system/reconcile-apply",
        "Deployment/reconcile-system/reconcile-watch",
        "Role/default/reconcile",
        "Role/gpu-drv/reconcile",
        "Role/kube-system/reconcile",
        "Role/nfd-lab/reconcile",
        "Role/reconcile-system/reconcile",
        "RoleBinding/default/reconcile",
        "RoleBinding/gpu-drv/reconcile",
        "RoleBinding/kube-system/reconcile",
        "RoleBinding/nfd-lab/reconcile",
        "RoleBinding/reconcile-system/reconcile",
        "ServiceAccount/reconcile-system/reconcile",
    ]


# A grant: (namespace, or * for the ClusterRole; group; resource; verb; name, or "" for any).
Grant = tuple[str, str, str, str, str]
# A request as RBAC authorizes it: (namespace or ""; group; resource; verb; name or "").
Asked = tuple[str, str, str, str, str]


def _grants(documents: Iterable[dict[str, Any]]) -> set[Grant]:
    granted: set[Grant] = set()
    for obj in documents:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = obj["metadata"].get("namespace", "*")
        for rule in obj["rules"]:
            for group, resource, verb, name in itertools.product(
                rule["apiGroups"],
                rule["resources"],
                rule["verbs"],
                rule.get("resourceNames") or [""],
            ):
                granted.add((scope, group, resource, verb, name))
    return granted


def _rbac(work: Path) -> set[Grant]:
    """What `reconcile rbac` grants for the desired/ tree in `work`."""
    result = run_cli("rbac", "-o", "json", cwd=work)
    assert result.code == 0, result.stderr
    return _grants(json.loads(result.stdout)["items"])


def _asked(record: RequestRecord) -> list[Asked]:
    """What the API server authorizes for one request; a server-side apply that created
    its object is authorized as create too, as upstream does."""
    parts = [unquote(p) for p in record.path.strip("/").split("/")]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == record.resource:
        rest = rest[2:]
    name = rest[1] if len(rest) > 1 else ""
    resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
    asked = [(record.namespace, record.group, resource, record.verb, name)]
    if record.created:
        asked.append((record.namespace, record.group, resource, "create", ""))
    return asked


def _allows(grant: Grant, asked: Asked) -> bool:
    """RBAC's rule: a ClusterRole (bound cluster-wide) covers every namespace, a Role only
    its own; resourceNames never cover a request without a name (list, create)."""
    scope, group, resource, verb, name = grant
    return (
        scope in ("*", asked[0])
        and (group, resource, verb) == asked[1:4]
        and name in ("", asked[4])
    )


class _Checked:
    """Runs commands, and checks each request reconcile makes against what `reconcile
    rbac` grants for the desired/ tree the command runs on."""

    def __init__(self) -> None:
        self.asked: set[Asked] = set()

    def run(
        self, cluster: TestCluster, work: Path, *args: str, also: Iterable[Grant] = ()
    ) -> CliResult:
        assert cluster.sandbox is not None
        cluster.sandbox.clear_requests()
        result = run_cli(*args, cwd=work, kubeconfig=cluster.kubeconfig)
        self.check(cluster, work, args, also)
        return result

    def watch(self, cluster: TestCluster, work: Path) -> None:
        """`watch --correct --leader-elect` as deployed, until it corrected a drift and
        recorded it, then SIGTERM (it releases the Lease)."""
        assert cluster.sandbox is not None
        cluster.label("lab-node-1", **{"nvidia.com/gpu.count": "9"})
        cluster.sandbox.clear_requests()
        args = ("watch", "--correct", "--leader-elect", "--metrics-address", "127.0.0.1:0")
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HOME": str(work)}
        process = subprocess.Popen(
            [sys.executable, "-m", "reconcile", *args],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(
                lambda: any(
                    r.resource == "events" and r.verb == "create" for r in cluster.sandbox.requests
                ),
                what="the correction's Event",
                timeout=30,
            )
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
            assert process.returncode == 0, err
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.check(cluster, work, args, ())

    def check(
        self, cluster: TestCluster, work: Path, args: Iterable[str], also: Iterable[Grant]
    ) -> None:
        assert cluster.sandbox is not None
        grants = _rbac(work) | set(also)
        asked = [
            a
            for record in cluster.sandbox.requests
            if record.agent == "reconcile" and record.resource
            for a in _asked(record)
        ]
        denied = sorted({a for a in asked if not any(_allows(g, a) for g in grants)})
        assert denied == [], f"`reconcile {' '.join(args)}`: calls the roles do not allow"
        self.asked.update(asked)


def _tour(lab: TestCluster, work: Path, driver: TestCluster, driver_work: Path) -> set[Asked]:
    """Every command and path that talks to the API, as the e2e tests drive them; each
    checked against the roles for its desired/ tree. Returns every request made."""
    checked = _Checked()
    for args in (
        ["plan"],
        ["plan", "--prune"],
        ["apply"],
        ["audit"],
        ["report"],
        ["placement"],
        ["drivers", "tag", "--all"],
        ["drivers", "tag", "lab-node-0"],
        ["drivers", "audit"],
        ["import", "--dry-run"],
    ):
        checked.run(lab, work, *args)
    # the Deployment's watch: the Lease in the service account's namespace, an Event
    lab.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reconcile-system"}})
    checked.watch(lab, work)
    # an object in a namespace that exists but desired/ does not create
    (work / "desired" / "workloads" / "extra.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: default}\nspec:\n  containers: [{name: c, image: busybox}]\n"
    )
    assert checked.run(lab, work, "apply").code == 0
    # recreate (immutable change), a saved plan, and prune everything
    pods = work / "desired" / "workloads" / "nfd-lab.yaml"
    pods.write_text(pods.read_text().replace("NVIDIA-A100-SXM4-40GB]", "NVIDIA-A100-SXM4-80GB]"))
    assert checked.run(lab, work, "apply", "--recreate").code == 0
    saved = work / "plan.json"
    pods.write_text(pods.read_text().replace("NVIDIA-A100-SXM4-80GB]", "NVIDIA-A100-SXM4-40GB]"))
    checked.run(lab, work, "plan", "--recreate", "--out", str(saved))
    assert checked.run(lab, work, "apply", "--recreate", str(saved)).code == 0
    before = _rbac(work)  # objects leaving desired/ are pruned with the grants that made them
    for path in (work / "desired" / "workloads").glob("*.yaml"):
        path.unlink()
    pruned = checked.run(
        lab,
        work,
        "apply",
        "--prune",
        "--allow-empty-prune",
        "--prune-namespace-contents",
        also=before,
    )
    assert pruned.code == 0, pruned.stderr
    assert "Namespace/nfd-lab -" in pruned.lines
    # and back from nothing: namespaces, deployments, budgets and the inventory are created
    status, _ = lab.raw("DELETE", "/api/v1/namespaces/default/configmaps/reconcile-inventory")
    assert status == 200
    shutil.copytree(
        REPO / "desired" / "workloads", work / "desired" / "workloads", dirs_exist_ok=True
    )
    created = checked.run(lab, work, "apply")
    assert created.code == 0, created.stderr
    assert "PodDisruptionBudget/gpu-drv/trainer-pdb +" in created.lines
    # an upgrade with a drain
    status, _ = driver.raw(
        "PATCH",
        "/apis/policy/v1/namespaces/gpu-drv/poddisruptionbudgets/trainer-pdb",
        {"spec": {"minAvailable": 3}},
        "application/merge-patch+json",
    )
    assert status == 200
    result = checked.run(
        driver,
        driver_work,
        "upgrade",
        "lab-node-2",
        "--driver",
        "550.127.05",
        "--lease-duration",
        "1s",  # renewed three times a second: the renewal is asked too
    )
    assert result.code == 0, result.stderr
    # a MIG layout rolled out in two batches, a gate's Job between them (the sandbox runs
    # no Job controller: the gate halts the rollout once its time is up)
    for name, layout in (("lab-node-0", "all-1g.5gb"), ("lab-node-1", "all-disabled")):
        node = work / "desired" / "nodes" / f"{name}.yaml"
        node.write_text(node.read_text() + f"  nvidia.com/mig.config: {layout}\n")
    (work / "desired" / "gates").mkdir()
    (work / "desired" / "gates" / "diag.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: diag, namespace: nfd-lab}\n"
        "spec:\n  template:\n    spec:\n      restartPolicy: Never\n"
        "      containers: [{name: diag, image: dcgm:4}]\n"
    )
    gated = checked.run(
        lab,
        work,
        "rollout",
        "--gate",
        "job=gates/diag.yaml",
        "--gate-timeout",
        "1s",
        "--lease-duration",
        "1s",  # renewed three times a second while the gate waits its second out
    )
    assert gated.code == 2 and "halted: gate job=" in gated.stderr, gated.stderr
    assert checked.run(lab, work, "rollout", "status").code == 0
    return checked.asked


@pytest.mark.slow
def test_reconcile_rbac_allows_every_call_and_the_shipped_roles_grant_nothing_more(
    make_cluster: ClusterFactory, workdir: Path, tmp_path: Path
) -> None:
    lab = make_cluster(lab_objects("lab"))
    driver = make_cluster(lab_objects("driver-lab"))
    if lab.sandbox is None or driver.sandbox is None:
        pytest.skip("records the sandbox's request log")
    driver_work = tmp_path / "drv"
    shutil.copytree(REPO / "examples" / "driver-lab", driver_work)

    asked = _tour(lab, workdir, driver, driver_work)

    shipped = _grants(_deploy_objects())
    assert shipped == _rbac(REPO)
    unused = {g for g in shipped if not any(_allows(g, a) for a in asked)}
    # Granted ahead of its first use: the UID of kube-system identifies the cluster.
    unused.discard(("*", "", "namespaces", "get", "kube-system"))
    assert unused == set(), "the shipped roles grant what reconcile never uses"


def test_the_shipped_rbac_is_what_reconcile_rbac_prints_for_the_shipped_tree() -> None:
    printed = run_cli("rbac", cwd=REPO)
    assert printed.code == 0, printed.stderr
    assert printed.stdout == (REPO / "deploy" / "rbac.yaml").read_text(), (
        "deploy/rbac.yaml is stale: regenerate it with `reconcile rbac > deploy/rbac.yaml`"
    )
    as_json = json.loads(run_cli("rbac", "-o", "json", cwd=REPO).stdout)
    assert list(yaml.safe_load_all(printed.stdout)) == as_json["items"]


def test_rbac_grants_workload_verbs_only_where_desired_declares_objects(tmp_path: Path) -> None:
    workloads = tmp_path / "desired" / "workloads"
    workloads.mkdir(parents=True)
    (workloads / "w.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: cloud-creds, namespace: kube-system}\n"
        "stringData: {password: x}\n---\n"
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        "metadata: {name: deny, namespace: team-a}\nspec: {podSelector: {}}\n---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: viewer}\n"
        "rules: []\n"
    )
    granted = _rbac(tmp_path)
    roles = {g[0] for g in granted}
    # and the service account's own namespace, for the Lease of `watch --leader-elect`
    assert roles == {"*", "default", "kube-system", "team-a", "reconcile-system"}
    assert {g[1:] for g in granted if g[0] == "reconcile-system"} == {
        ("coordination.k8s.io", "leases", "get", "reconcile"),
        ("coordination.k8s.io", "leases", "update", "reconcile"),
        ("coordination.k8s.io", "leases", "create", ""),
    }
    # the Secret desired/ declares there, and the Leases of rollouts (one at a time on a node)
    assert {g[1:] for g in granted if g[0] == "kube-system"} == {
        ("", "secrets", verb, "") for verb in ("get", "list", "create", "patch", "delete")
    } | {
        ("coordination.k8s.io", "leases", verb, "")
        for verb in ("create", "delete", "list", "update")
    }
    assert ("team-a", "networking.k8s.io", "networkpolicies", "create", "") in granted
    # a namespace used but not created is checked by name (kube-system is granted anyway)
    assert ("*", "", "namespaces", "get", "team-a") in granted
    assert ("*", "rbac.authorization.k8s.io", "clusterroles", "delete", "viewer") in granted
    assert ("*", "rbac.authorization.k8s.io", "clusterroles", "delete", "") not in granted
    # pods are created nowhere, and nothing but reading pods and evicting them is cluster-wide
    assert not any(g[2] == "pods" and g[3] == "create" for g in granted)
    assert not any(g[0] == "*" and g[3] in ("delete", "update") and not g[4] for g in granted)
    refused = run_cli("rbac", "--service-account", "Bad/x", cwd=tmp_path)
    assert refused.code == 2
    assert refused.stderr.startswith("error: --service-account 'Bad/x': the namespace")


@pytest.mark.parametrize("kind", ["CronJob", "Deployment"])
def test_only_reconciles_container_gets_the_token_and_every_container_runs_restricted(
    kind: str,
) -> None:
    [workload] = [o for o in _deploy_objects() if o["kind"] == kind]
    [account] = [o for o in _deploy_objects() if o["kind"] == "ServiceAccount"]
    template = workload["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else workload["spec"]
    pod = template["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert account["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [token] = [v for v in pod["volumes"] if "projected" in v]
    containers = [*pod.get("initContainers", ()), *pod["containers"]]
    for container in containers:
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }, container["name"]
        mounts = {m["name"] for m in container["volumeMounts"]}
        assert (token["name"] in mounts) == (container["name"] == "reconcile"), container["name"]


def test_in_cluster_credentials_are_picked_when_there_is_no_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Sandbox(lab_objects("lab")) as sandbox:
        token, ca = tmp_path / "token", tmp_path / "ca.crt"
        token.write_text(sandbox.token or "")
        ca.write_bytes(sandbox.certificates.ca_pem)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(sandbox.port))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.delenv("KUBECONFIG", raising=False)
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_CERT_FILENAME", str(ca))

        cluster = Cluster.connect()

        assert [n.name for n in cluster.list_nodes()] == ["lab-node-0", "lab-node-1", "lab-node-2"]
        cluster.close()


def test_a_refused_pod_token_names_its_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims = {"sub": "system:serviceaccount:reconcile-system:reconcile", "aud": ["k8s"]}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    with Sandbox(lab_objects("lab")) as sandbox:
        port = sandbox.port
        token, ca = tmp_path / "token", tmp_path / "ca.crt"
        token.write_text(f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2lnbmF0dXJlLW5vdC1jaGVja2Vk")
        ca.write_bytes(sandbox.certificates.ca_pem)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(sandbox.port))
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_TOKEN_FILENAME", str(token))
        monkeypatch.setattr("kubernetes.config.incluster_config.SERVICE_CERT_FILENAME", str(ca))

        cluster = Cluster.connect(in_cluster=True)
        with pytest.raises(ApiError) as refused:
            cluster.list_nodes()
        cluster.close()

    assert str(refused.value) == (
        f"the API server https://127.0.0.1:{port} refused the credentials of service "
        'account "system:serviceaccount:reconcile-system:reconcile": 401 Unauthorized'
    )


# An exec credential plugin, as kubectl runs one: prints an ExecCredential whose token
# expires in a second (inside the client's five minutes of margin, so due at once), and
# counts its runs in a file.
EXEC_PLUGIN = """
import datetime, json, sys
with open(sys.argv[1], "a") as runs:
    runs.write("run\\n")
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {"token": sys.argv[2], "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
}))
"""


@pytest.mark.parametrize("interval", [0.0, 60.0])
def test_a_token_that_is_due_is_renewed_at_most_once_an_interval(
    interval: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client renews a due token before a request; reconcile lets it at most once a
    second (REFRESH_INTERVAL), not before every request."""
    runs = tmp_path / "runs"
    with Sandbox(lab_objects("lab")) as sandbox:
        config = sandbox.kubeconfig()
        plugin = [EXEC_PLUGIN, str(runs), sandbox.token or ""]
        exec_user = {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
        }
        config["users"][0]["user"] = {"exec": {**exec_user, "args": ["-c", *plugin]}}
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(config))
        monkeypatch.setattr("reconcile.kube.client.kubeconfig.REFRESH_INTERVAL", interval)

        cluster = Cluster.connect(str(kubeconfig))
        for _ in range(5):
            assert len(cluster.list_nodes()) == 3
        cluster.close()

    # Once as the kubeconfig is loaded; then before each request, or only before the first.
    assert len(runs.read_text().splitlines()) == (6 if interval == 0.0 else 2)


# --- the command line ---------------------------------------------------------------------


def test_version_is_the_installed_distributions() -> None:
    """The version comes from git tags when the package is built (setuptools-scm), so the
    command says what the installed distribution is, whatever that is."""
    import importlib.metadata

    result = run_cli("--version")
    expected = importlib.metadata.version("reconcile-gpu")
    assert (result.code, result.stdout) == (0, f"reconcile, version {expected}\n")


def test_the_command_exits_with_what_it_made_out_of_the_last_collections() -> None:
    """`reconcile` and `python -m reconcile` run `run`: the exit code is main's, and what
    is alive at the end is frozen (the interpreter's final collections skip it)."""
    with (REPO / "pyproject.toml").open("rb") as f:
        assert tomllib.load(f)["project"]["scripts"] == {"reconcile": "reconcile.cli:run"}
    script = (
        "import atexit, gc, runpy, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "sys.argv = ['reconcile', '--no-such-option']\n"
        "runpy.run_module('reconcile', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (2, "frozen True\n")
    assert "--no-such-option" in done.stderr


def test_each_command_is_loaded_from_the_module_that_defines_it() -> None:
    from reconcile.cli.app import COMMANDS, main

    for module in set(COMMANDS.values()):
        importlib.import_module(f"reconcile.cli.{module}")
    defined = {name: command.callback.__module__ for name, command in main.commands.items()}
    assert defined == {name: f"reconcile.cli.{module}" for name, module in COMMANDS.items()}
    listed = run_cli("--help").stdout
    assert all(f"\n  {name} " in listed for name in COMMANDS)


def test_a_command_imports_no_other_commands_module(workdir: Path) -> None:
    """validate starts without the kubernetes client or another command's module."""
    script = (
        "import sys\nfrom reconcile.cli import main\n"
        "try:\n    main(['validate'])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('reconcile.cli.', 'kubernetes')))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=workdir, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [
        "reconcile.cli.app",
        "reconcile.cli.fleets",
        "reconcile.cli.output",
        "reconcile.cli.reconciling",
        "reconcile.cli.views",
    ]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell: str) -> None:
    result = run_cli("completion", shell)
    assert result.code == 0
    assert "_RECONCILE_COMPLETE" in result.stdout


def test_completion_completes_commands_and_options() -> None:
    env = {
        **os.environ,
        "_RECONCILE_COMPLETE": "bash_complete",
        "COMP_WORDS": "reconcile pl",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "reconcile"], env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.splitlines() == ["plain,placement", "plain,plan"]
    env["COMP_WORDS"], env["COMP_CWORD"] = "reconcile plan --pr", "2"
    done = subprocess.run(
        [sys.executable, "-m", "reconcile"], env=env, capture_output=True, text=True, check=False
    )
    assert "plain,--prune" in done.stdout.splitlines()


def test_quiet_keeps_errors_and_verbose_traces_and_counts_requests(
    lab: TestCluster, workdir: Path
) -> None:
    nodes = workdir / "desired" / "nodes"
    (nodes / "lab-node-9.yaml").write_text(
        (nodes / "lab-node-2.yaml").read_text().replace("lab-node-2", "lab-node-9")
    )
    normal = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert 'warning: Pod "any-gpu-job"' not in normal.stderr  # gated NotIn: no warning
    assert "lab-node-9: declared in" in normal.stderr

    # A drifted object, so that a dry run is among the requests traced (an object in sync
    # is not dry-run).
    workloads = workdir / "desired" / "workloads" / "gpu-drv.yaml"
    workloads.write_text(workloads.read_text().replace("replicas: 4", "replicas: 3", 1))
    # A process of its own: in this one the mig-manager stand-in's requests are traced too.
    verbose = run_cli("plan", "-v", cwd=workdir, kubeconfig=lab.kubeconfig, process=True)
    assert "note: " in verbose.stderr and "request(s) to https://127.0.0.1:" in verbose.stderr
    # Each request as kubectl -v=6 traces it: method, URL with its query, status, time.
    server = re.escape(str(lab.api_client.configuration.host))
    traced = [
        line
        for line in verbose.stderr.splitlines()
        if re.fullmatch(
            rf"(GET|PATCH|POST|PUT|DELETE) {server}/\S+ \d{{3}} [A-Za-z ]+ in \d+ milliseconds",
            line,
        )
    ]
    assert f"GET {lab.api_client.configuration.host}/api/v1/nodes?limit=500 200 OK" in "\n".join(
        traced
    )
    assert any("dryRun=All 200 OK in" in line for line in traced)
    [count] = re.findall(r"note: (\d+) request\(s\) to", verbose.stderr)
    assert len(traced) == int(count)

    workloads = workdir / "desired" / "workloads" / "nfd-lab.yaml"
    workloads.write_text(
        workloads.read_text().replace(
            "          - key: nvidia.com/gpu.present\n            operator: Exists\n", ""
        )
    )
    warned = run_cli("validate", cwd=workdir)
    assert ": warning: " in warned.stderr
    quiet = run_cli("validate", "-q", cwd=workdir)
    assert (quiet.code, quiet.stderr) == (0, "")
    workloads.write_text(workloads.read_text().replace('values: ["3"]', 'values: ["3x"]'))
    still = run_cli("validate", "-q", cwd=workdir)
    assert still.code == 2
    assert "is not an integer" in still.stderr


def _run_on_a_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """stderr of a run whose stderr is a terminal."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "reconcile", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=child,
        stdin=subprocess.DEVNULL,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_colour_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    args = ["plan", "--desired", str(REPO / "desired"), "--kubeconfig", "nope.yaml"]
    coloured = _run_on_a_terminal(args, tmp_path, env)
    assert coloured == "\x1b[31merror:\x1b[0m kubeconfig not found: nope.yaml\r\n"
    plain = _run_on_a_terminal(args, tmp_path, {**env, "NO_COLOR": "1"})
    assert plain == "error: kubeconfig not found: nope.yaml\r\n"
    dumb = _run_on_a_terminal(args, tmp_path, {**env, "TERM": "dumb"})
    assert dumb == plain

    desired = tmp_path / "desired"
    shutil.copytree(REPO / "desired", desired)
    workloads = desired / "workloads" / "nfd-lab.yaml"
    workloads.write_text(
        workloads.read_text().replace(
            "          - key: nvidia.com/gpu.present\n            operator: Exists\n", ""
        )
    )
    warned = _run_on_a_terminal(["validate"], tmp_path, env)
    assert ": \x1b[33mwarning:\x1b[0m " in warned


def test_several_kubeconfig_files_and_context_as_kubectl(
    make_cluster: ClusterFactory, workdir: Path, tmp_path: Path
) -> None:
    first = make_cluster(lab_objects("lab"))
    second = make_cluster(lab_objects("lab"))
    if first.sandbox is None or second.sandbox is None:
        pytest.skip("needs two clusters")
    a = first.sandbox.write_kubeconfig(tmp_path / "a.yaml", name="lab-a")
    b = second.sandbox.write_kubeconfig(tmp_path / "b.yaml", name="lab-b")
    second.label("lab-node-0", **{"nvidia.com/gpu.count": "1"})
    joined = f"{a}{os.pathsep}{b}"

    default = run_cli("plan", cwd=workdir, env={"KUBECONFIG": joined})
    assert default.lines == [
        "lab-node-1 nvidia.com/gpu.count 2"
    ]  # the first file's current context

    chosen = run_cli("plan", "--context", "lab-b", cwd=workdir, env={"KUBECONFIG": joined})
    assert chosen.lines == [
        "lab-node-0 nvidia.com/gpu.count 4",
        "lab-node-1 nvidia.com/gpu.count 2",
    ]

    reversed_order = run_cli("plan", cwd=workdir, env={"KUBECONFIG": f"{b}{os.pathsep}{a}"})
    assert reversed_order.lines == chosen.lines
    skipped = run_cli(
        "plan", cwd=workdir, env={"KUBECONFIG": f"{tmp_path / 'gone.yaml'}{os.pathsep}{b}"}
    )
    assert skipped.lines == chosen.lines  # a missing file in the list is skipped

    flag = run_cli("plan", "--kubeconfig", str(b), cwd=workdir, env={"KUBECONFIG": str(a)})
    assert flag.lines == chosen.lines  # --kubeconfig wins over $KUBECONFIG
    joined_flag = run_cli("plan", "--kubeconfig", joined, cwd=workdir)
    assert (joined_flag.code, joined_flag.stderr) == (2, f"error: kubeconfig not found: {joined}\n")


def test_pre_commit_hook_runs_validate() -> None:
    [hook] = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "reconcile-validate"
    assert hook["entry"] == "reconcile validate"
    assert hook["pass_filenames"] is False
    assert hook["language"] == "python"


# --- the package --------------------------------------------------------------------------


@pytest.mark.slow
def test_the_images_wheel_stage_builds_a_working_reconcile(tmp_path: Path) -> None:
    """The Dockerfile's wheel stage as the release workflow runs it (no container runtime:
    the Dockerfile is read): its COPY lines make the context, no .git, the version the
    workflow passes as VERSION (the tag deploy/ runs, without its v). The wheel goes into a
    fresh virtualenv, where the image's entry point must be the installed command; and the
    sdist the release publishes must hold everything it lists."""
    build, final = packaging.dockerfile_stages()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # the image runs the console script of the wheel its build stage made, as non-root
    assert exec_form(final.one("ENTRYPOINT")) == ["reconcile"]
    assert "reconcile" in project["scripts"]
    assert final.one("RUN").split("&&")[0].split()[-1] == project["name"]
    assert final.one("USER").split(":")[0] not in ("0", "root")
    # the version comes in as VERSION, as release.yml passes it, and nowhere else
    assert build.one("ARG").split("=")[0] == "VERSION"
    run = build.one("RUN")
    assert run.startswith('SETUPTOOLS_SCM_PRETEND_VERSION_FOR_RECONCILE_GPU="$VERSION" pip wheel ')
    image_step = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    [pushed] = [
        s for s in image_step["jobs"]["image"]["steps"] if "build-push-action" in s.get("uses", "")
    ]
    assert pushed["with"]["file"] == "deploy/Dockerfile"
    assert pushed["with"]["build-args"].strip() == "VERSION=${{ steps.version.outputs.version }}"
    version = packaging.released_tag().removeprefix("v")

    context = packaging.build_context(build, tmp_path / "context")
    assert not (context / ".git").exists()
    wheels = tmp_path / "wheels"
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_RECONCILE_GPU": version}
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--wheel-dir", str(wheels), str(context)),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = wheels.glob("*.whl")
    assert wheel.name == f"reconcile_gpu-{version}-py3-none-any.whl"

    # the sdist, from this checkout (setuptools-scm lists git's files): every file it lists
    # is in it and none is a directory or a link, so a wheel builds from it
    dist = tmp_path / "dist"
    sdist_built = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert sdist_built.returncode == 0, sdist_built.stderr[-2000:]
    [sdist] = dist.glob("*.tar.gz")
    assert sdist.name == f"reconcile_gpu-{version}.tar.gz"
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if "/" in m.name}
        [sources] = [m for name, m in members.items() if name.endswith(".egg-info/SOURCES.txt")]
        listed = archive.extractfile(sources).read().decode().split()  # type: ignore[union-attr]
    assert [name for name in listed if not (name in members and members[name].isfile())] == []
    with zipfile.ZipFile(wheel) as archive:
        packaged = [n for n in archive.namelist() if not n.startswith("reconcile_gpu-")]
    assert [name for name in packaged if name not in members] == []

    venv = tmp_path / "venv"  # without pip of its own: ensurepip costs seconds; this pip installs
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # The new environment takes its dependencies from this one; reconcile only from the wheel.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "dependencies.pth").write_text(here + "\n")
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install"),
            *("--no-deps", "--no-index", str(wheel)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr

    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import reconcile, importlib.metadata as m, importlib.resources as r;"
            "print(reconcile.__file__);"
            "print(m.version('reconcile-gpu'));"
            "print(sorted(p.name for p in r.files('reconcile').joinpath('schemas').iterdir()));"
            "print(sorted(str(d).split(';')[0] for d in m.requires('reconcile-gpu') if 'extra' not in str(d)))",
        ],
        cwd=tmp_path,  # not the checkout: the import must come from the wheel
        capture_output=True,
        text=True,
        check=True,
    )
    location, installed_version, schemas, requirements = probe.stdout.splitlines()
    assert location.startswith(str(venv))
    assert installed_version == version
    assert (
        schemas
        == "['disruptivefacts.schema.json', 'driversupportmatrix.schema.json', 'fleet.schema.json', 'nodefeatures.schema.json', 'nodegroup.schema.json', 'plan.schema.json']"
    )
    assert all(
        name in requirements for name in ("kubernetes", "pydantic", "ruamel.yaml", "deepdiff")
    )
    # the entry point, as the image runs it: the command on PATH, then its arguments
    entrypoint = exec_form(final.one("ENTRYPOINT"))
    command = [str(venv / "bin" / entrypoint[0]), *entrypoint[1:]]
    said = subprocess.run(
        [*command, "--version"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert (said.returncode, said.stdout) == (0, f"reconcile, version {version}\n")
    validate = subprocess.run(
        [*command, "validate", "--desired", str(REPO / "desired")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert validate.returncode == 0, validate.stderr
    assert validate.stderr.startswith(f"note: {REPO / 'desired'} is valid: 3 node(s), ")


def test_import_refuses_a_bad_selector_and_an_invalid_desired_tree(
    lab: TestCluster, workdir: Path
) -> None:
    before = {p: p.read_bytes() for p in (workdir / "desired").rglob("*") if p.is_file()}
    bad = run_cli("import", "-l", "a b", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert bad.code == 2
    assert bad.stderr.startswith("error: unable to parse requirement: found 'b'")

    node_1 = workdir / "desired" / "nodes" / "lab-node-1.yaml"
    node_1.write_text(node_1.read_text() + '  nvidia.com/gpu.count: "3"\n')  # a duplicate key
    before[node_1] = node_1.read_bytes()
    if lab.sandbox is not None:
        lab.sandbox.clear_requests()
    broken = run_cli("import", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert broken.code == 2
    assert "desired/nodes/lab-node-1.yaml:" in broken.stderr
    if lab.sandbox is not None:
        assert lab.sandbox.requests == []
    assert {p: p.read_bytes() for p in (workdir / "desired").rglob("*") if p.is_file()} == before


def test_verbose_apply_says_what_it_wrote_and_how_long_it_took(
    lab: TestCluster, workdir: Path
) -> None:
    quiet = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert quiet.code == 0, quiet.stderr
    assert "written in" not in quiet.stderr

    drifted = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (drifted.code, drifted.stdout) == (0, "")
    lab.label("lab-node-1", **{"nvidia.com/gpu.count": "9"})
    verbose = run_cli("apply", "-v", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert verbose.code == 0, verbose.stderr
    assert verbose.stdout == "lab-node-1 nvidia.com/gpu.count 2\n"
    [line] = [line for line in verbose.stderr.splitlines() if "written in" in line]
    assert re.fullmatch(r"note: 1 node\(s\) and 0 object\(s\) written in \d+\.\d\d\d s", line), line
