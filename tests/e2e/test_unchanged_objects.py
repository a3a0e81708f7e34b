"""An object whose live state already holds what desired/ declares, under reconcile's own
apply entry, is in sync without a dry run; anything that moved it is still planned.

On the sandbox the request log shows which objects were dry-run; on a real control plane
the same plans are checked by what they print.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ClusterFactory
from tests.support import TestCluster, lab_objects, run_cli

SETTINGS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: steady
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: steady
data:
  mode: single
  level: "1"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: server
  namespace: steady
spec:
  replicas: 0
  selector:
    matchLabels:
      app: server
  template:
    metadata:
      labels:
        app: server
    spec:
      containers:
      - name: server
        image: registry.example/server:1
        args: ["--port", "8080"]
        ports:
        - containerPort: 8080
        resources:
          requests:
            cpu: 1000m
"""
CONFIG_MAP = "/api/v1/namespaces/steady/configmaps/settings"


@pytest.fixture
def steady(make_cluster: ClusterFactory, tmp_path: Path) -> tuple[TestCluster, Path]:
    """The lab's nodes, and a tree of a namespace, a ConfigMap and a Deployment, applied."""
    cluster = make_cluster([o for o in lab_objects("lab") if o["kind"] == "Node"])
    work = tmp_path / "tree"
    (work / "desired" / "workloads").mkdir(parents=True)
    (work / "desired" / "workloads" / "steady.yaml").write_text(SETTINGS)
    applied = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    return cluster, work


def _dry_runs(cluster: TestCluster) -> list[str]:
    assert cluster.sandbox is not None
    return sorted(
        r.path for r in cluster.sandbox.requests if r.method == "PATCH" and "dryRun" in r.query
    )


def _edit_by_hand(cluster: TestCluster, data: dict[str, str]) -> None:
    """The ConfigMap's data changed as `kubectl edit` changes it (an update, its manager)."""
    status, body = cluster.raw(
        "PATCH",
        CONFIG_MAP + "?fieldManager=kubectl-edit",
        {"data": data},
        "application/merge-patch+json",
    )
    assert status == 200, body


def _plan(cluster: TestCluster, work: Path) -> tuple[int, list[str], list[str] | None]:
    if cluster.sandbox is not None:
        cluster.sandbox.clear_requests()
    plan = run_cli("plan", cwd=work, kubeconfig=cluster.kubeconfig)
    assert plan.code in (0, 1), plan.stderr
    return plan.code, plan.lines, _dry_runs(cluster) if cluster.sandbox is not None else None


def test_an_applied_tree_plans_in_sync_without_a_dry_run_but_its_normalised_value(
    steady: tuple[TestCluster, Path],
) -> None:
    cluster, work = steady
    code, lines, dry_runs = _plan(cluster, work)
    assert (code, lines) == (0, [])
    if dry_runs is not None:
        # The Namespace and the ConfigMap hold exactly what was applied. The Deployment's
        # port leaves its key field `protocol` to the server's default (and a real server
        # stores `cpu: 1000m` as `1`): only the server can say it is unchanged.
        assert dry_runs == ["/apis/apps/v1/namespaces/steady/deployments/server"]


def test_a_hand_edit_of_a_value_is_planned_and_taken_back(
    steady: tuple[TestCluster, Path],
) -> None:
    cluster, work = steady
    _edit_by_hand(cluster, {"mode": "multi"})
    code, lines, dry_runs = _plan(cluster, work)
    assert (code, lines) == (1, ["ConfigMap/steady/settings data.mode single"])
    if dry_runs is not None:
        assert CONFIG_MAP in dry_runs
    applied = run_cli("apply", cwd=work, kubeconfig=cluster.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert cluster.raw("GET", CONFIG_MAP)[1]["data"]["mode"] == "single"


def test_a_field_dropped_from_git_or_added_by_hand_is_planned(
    steady: tuple[TestCluster, Path],
) -> None:
    cluster, work = steady
    tree = work / "desired" / "workloads" / "steady.yaml"
    tree.write_text(SETTINGS.replace('  level: "1"\n', ""))
    code, lines, dry_runs = _plan(cluster, work)
    assert (code, lines) == (1, ["ConfigMap/steady/settings data.level -"])
    if dry_runs is not None:
        assert CONFIG_MAP in dry_runs

    tree.write_text(SETTINGS)
    _edit_by_hand(cluster, {"extra": "by-hand"})
    # A field reconcile never set is not its drift: in sync, and the object untouched.
    code, lines, _ = _plan(cluster, work)
    assert (code, lines) == (0, [])
