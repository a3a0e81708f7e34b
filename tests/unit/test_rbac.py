"""The least privilege for a desired/ tree: workload grants only where desired/ declares
kinds, limited by name wherever RBAC can, and the fixed grants every command needs."""

from __future__ import annotations

from typing import Any

from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Source
from reconcile.engine import rbac
from reconcile.engine.grants import Rule, Scope
from reconcile.engine.rbac import (
    cluster_rules,
    declared_rules,
    namespace_rules,
    service_account_problem,
)


def _state(*objects: tuple[str, str, str, str]) -> DesiredState:
    """Manifests from (apiVersion, kind, namespace, name)."""
    manifests = []
    for api_version, kind, namespace, name in objects:
        metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
        body = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
        manifests.append(Manifest(body, Source(f"desired/workloads/{name}.yaml", 1, 1)))
    return DesiredState(manifests=tuple(manifests))


def _grants(
    rules: list[Rule],
) -> list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return [(r.group, r.resources, r.verbs, r.names) for r in rules]


def test_an_empty_tree_needs_only_what_the_operations_declare() -> None:
    declared = [r for r in declared_rules() if r.where is Scope.CLUSTER]
    assert cluster_rules(DesiredState()) == declared
    grants = _grants(declared)
    assert ("", ("nodes",), ("get", "list", "patch", "watch"), ()) in grants
    assert ("", ("namespaces",), ("get",), ("kube-system",)) in grants
    roles = namespace_rules(DesiredState())
    assert sorted(roles) == ["default", "reconcile-system"]
    inventory = ("", ("configmaps",), ("get", "patch"), ("reconcile-inventory",))
    assert inventory in _grants(roles["default"])
    lease = ("coordination.k8s.io", ("leases",), ("get", "update"), ("reconcile",))
    assert lease in _grants(roles["reconcile-system"])


def test_a_domains_rules_are_merged_into_the_engines() -> None:
    drains = Rule("", ("pods",), ("get",), why="drains read the pods they evict")
    pods = [g for g in _grants(cluster_rules(DesiredState(), also=[drains])) if g[1] == ("pods",)]
    assert pods == [("", ("pods",), ("get", "list"), ())]


def test_namespaced_kinds_are_granted_in_their_namespaces_only() -> None:
    state = _state(
        ("apps/v1", "Deployment", "ml", "trainer"),
        ("v1", "ConfigMap", "ml", "settings"),
        ("v1", "Service", "web", "front"),
        ("v1", "ConfigMap", "kube-system", "extra"),
    )
    roles = namespace_rules(state)
    assert _grants(roles["ml"]) == [
        ("", ("configmaps",), rbac.WORKLOAD_VERBS, ()),
        ("apps", ("deployments",), rbac.WORKLOAD_VERBS, ()),
    ]
    assert _grants(roles["web"]) == [("", ("services",), rbac.WORKLOAD_VERBS, ())]
    # the namespaces they live in, not created by desired/, are read by name to plan
    assert ("", ("namespaces",), ("get",), ("ml", "web")) in _grants(cluster_rules(state))


def test_cluster_scoped_kinds_are_limited_to_the_declared_names_where_rbac_can() -> None:
    state = _state(
        ("v1", "Namespace", "", "ml"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "viewer"),
        ("v1", "ConfigMap", "ml", "settings"),
    )
    grants = _grants(cluster_rules(state))
    assert ("", ("namespaces",), ("list", "create"), ()) in grants
    assert ("", ("namespaces",), ("get", "patch", "delete"), ("ml",)) in grants
    assert (
        "rbac.authorization.k8s.io",
        ("clusterroles",),
        ("get", "patch", "delete"),
        ("viewer",),
    ) in grants
    # ml is created by desired/: no separate read of it to check it exists
    assert not [g for g in grants if g[1] == ("namespaces",) and g[2] == ("get",) and "ml" in g[3]]


def test_the_objects_bind_each_role_to_the_service_account_and_create_needed_namespaces() -> None:
    state = _state(("v1", "Namespace", "", "ml"), ("v1", "ConfigMap", "ml", "settings"))
    found = [o.document for o in rbac.objects(state, "ops/reconciler")]

    kinds = [(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in found]
    assert kinds[:4] == [
        ("ServiceAccount", "ops", "reconciler"),
        ("ClusterRole", "", "reconcile"),
        ("ClusterRoleBinding", "", "reconcile"),
        ("Namespace", "", "ml"),
    ]
    bindings: list[dict[str, Any]] = [d for d in found if d["kind"].endswith("Binding")]
    assert {d["metadata"].get("namespace", "") for d in bindings} == {"", "default", "ml", "ops"}
    assert all(
        d["subjects"] == [{"kind": "ServiceAccount", "name": "reconciler", "namespace": "ops"}]
        for d in bindings
    )


def test_a_service_account_is_named_namespace_slash_name() -> None:
    assert service_account_problem("reconcile-system/reconcile") is None
    assert "namespace must be a DNS label" in (service_account_problem("Bad_NS/x") or "")
    assert "name must be a DNS subdomain" in (service_account_problem("ns/") or "")
