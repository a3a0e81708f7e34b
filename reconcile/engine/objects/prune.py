"""Pruning by inventory: `--prune` deletes an object only if the inventory lists it,
desired/ no longer holds it, and it still carries reconcile's managed-by label; without
`--prune` such an object is only prunable.

Pruning is guarded: deleting every object of the inventory at once (an empty checkout, a
wrong --desired) needs --allow-empty-prune, and a Namespace is not pruned while desired/
still declares objects in it, nor while it holds objects reconcile does not manage
(unless --prune-namespace-contents), and a CustomResourceDefinition is not pruned while
custom resources of it remain in the cluster. A Node is never pruned, whatever the inventory says
(desired/ declares node facts in node files and groups, never as a Node object).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Final

from reconcile.desired.models import DesiredState
from reconcile.diagnostics import ApiError, EmptyPrune, Severity
from reconcile.engine.findings import Finding
from reconcile.engine.objects.inventory import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    inventory_entry,
    parse_inventory_entry,
    read_inventory,
)
from reconcile.engine.objects.targets import ObjectPlanning, Target
from reconcile.engine.plan import ObjectAction, ObjectPlan
from reconcile.kube import crds
from reconcile.kube.api import ObjectApi, ResourceFinder
from reconcile.kube.kinds import apply_rank, workload_id
from reconcile.kube.objects import ApiResource

# Kinds --prune never deletes, whatever an (older) inventory lists: deleting a Node
# deregisters a machine, and node facts are not objects (desired/nodes, desired/groups).
NEVER_PRUNED: Final = frozenset({("v1", "Node")})


# What the control plane puts in every namespace by itself: not content a person made.
NAMESPACE_DEFAULTS: Final = frozenset(
    {
        ("", "ServiceAccount", "default"),
        ("", "ConfigMap", "kube-root-ca.crt"),
        # OpenShift (and MicroShift) publish their service CA the same way.
        ("", "ConfigMap", "openshift-service-ca.crt"),
    }
)
# Kinds that record or mirror other objects rather than being made by anyone.
NAMESPACE_BOOKKEEPING: Final = frozenset(
    {("", "Event"), ("events.k8s.io", "Event"), ("", "Endpoints"), ("", "PodTemplate")}
)


def plan_prune(
    state: DesiredState,
    targets: list[Target],
    discovery: ResourceFinder,
    cluster: ObjectApi,
    planning: ObjectPlanning,
    *,
    prune: bool,
    allow_empty_prune: bool,
    prune_namespace_contents: bool,
) -> None:
    current = read_inventory(cluster)
    wanted = {
        inventory_entry(t.resource.api_version, t.resource.kind, t.namespace, t.manifest.name)
        for t in targets
    }
    kept: set[str] = set(wanted)
    prunes: list[ObjectPlan] = []
    for entry in current:
        if entry in wanted:
            continue
        parsed = parse_inventory_entry(entry)
        if parsed is None:
            continue
        api_version, kind, namespace, name = parsed
        if (api_version, kind) in NEVER_PRUNED:
            planning.never_pruned.append(workload_id(kind, namespace, name))
            continue  # not kept: the next apply drops the entry from the inventory
        resource = discovery.resource_for(api_version, kind)
        if resource is None:
            continue
        live = cluster.get_object(resource, namespace, name)
        labels = ((live or {}).get("metadata") or {}).get("labels") or {}
        if live is None or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            continue  # gone, or no longer ours: never deleted
        object_id = workload_id(kind, namespace, name)
        if not prune:
            planning.prunable.append(object_id)
            kept.add(entry)
            continue
        prunes.append(
            ObjectPlan(
                apiVersion=api_version,
                kind=kind,
                namespace=namespace,
                name=name,
                plural=resource.plural,
                namespaced=resource.namespaced,
                source="",
                action=ObjectAction.PRUNE,
                resourceVersion=str(live["metadata"].get("resourceVersion") or ""),
            )
        )
    if prunes and not allow_empty_prune and not wanted & set(current):
        shown = ", ".join(p.id for p in prunes[:5]) + (
            f" and {len(prunes) - 5} more" if len(prunes) > 5 else ""
        )
        raise EmptyPrune(
            f"--prune would delete all {len(prunes)} object(s) reconcile manages ({shown}), "
            "because desired/ declares none of them: nothing was changed. Check --desired; "
            "to delete them all on purpose, pass --allow-empty-prune"
        )
    for pruned in (p for p in prunes if p.kind == "Namespace" and not p.namespaced):
        planning.findings.extend(
            _namespace_prune_findings(
                pruned.name,
                targets,
                current,
                discovery,
                cluster,
                prune_namespace_contents=prune_namespace_contents,
            )
        )
    pruned_ids = {p.id for p in prunes}
    for pruned in (p for p in prunes if crds.is_crd(p.apiVersion, p.kind)):
        planning.findings.extend(_crd_prune_findings(pruned, pruned_ids, cluster))
    prunes.sort(key=lambda p: (apply_rank(p.kind), p.kind, p.namespace, p.name), reverse=True)
    planning.objects.extend(prunes)
    inventory = tuple(sorted(kept))
    if state.manifests or current:
        planning.inventory = inventory if inventory != tuple(sorted(current)) else None


def _crd_prune_findings(
    pruned: ObjectPlan, pruned_ids: set[str], cluster: ObjectApi
) -> list[Finding]:
    """Deleting a CRD deletes every custom resource of it: refused while any remains in
    the cluster that this same prune does not delete first."""
    live = cluster.get_object(pruned.resource, "", pruned.name)
    remaining: list[str] = []
    for kind in crds.custom_kinds([live or {}]).values():
        try:
            items = cluster.list_objects(
                ApiResource(kind.group, kind.version, kind.plural, kind.kind, kind.namespaced)
            )
        except ApiError:
            continue  # not served: nothing of it can remain
        for item in items:
            metadata = item.get("metadata") or {}
            object_id = workload_id(
                kind.kind, str(metadata.get("namespace") or ""), str(metadata.get("name"))
            )
            if object_id not in pruned_ids:
                remaining.append(object_id)
    if not remaining:
        return []
    remaining = sorted(set(remaining))
    shown = ", ".join(remaining[:5]) + (
        f" and {len(remaining) - 5} more" if len(remaining) > 5 else ""
    )
    return [
        Finding(
            severity=Severity.ERROR,
            blocksApply=True,
            kind="prune-crd-in-use",
            subject=pruned.id,
            message=(
                f"{len(remaining)} custom resource(s) of it remain in the cluster ({shown}): "
                "deleting the CustomResourceDefinition deletes them too. Delete them first, "
                "or declare the CustomResourceDefinition again"
            ),
        )
    ]


def _namespace_prune_findings(
    namespace: str,
    targets: list[Target],
    inventory: Iterable[str],
    discovery: ResourceFinder,
    cluster: ObjectApi,
    *,
    prune_namespace_contents: bool,
) -> list[Finding]:
    """Why deleting `namespace` would take more with it than the plan shows: objects
    desired/ still declares there, or live objects reconcile does not manage."""
    subject = workload_id("Namespace", "", namespace)
    declared = sorted(t.id for t in targets if t.resource.namespaced and t.namespace == namespace)
    if declared:
        return [
            Finding(
                severity=Severity.ERROR,
                blocksApply=True,
                kind="prune-namespace-in-use",
                subject=subject,
                message=(
                    f"desired/ no longer declares this namespace but still declares "
                    f"{len(declared)} object(s) in it ({', '.join(declared)}): deleting it "
                    "deletes them too. Declare the Namespace again, or remove those objects"
                ),
            )
        ]
    if prune_namespace_contents:
        return []
    managed = set()
    for entry in inventory:
        parsed = parse_inventory_entry(entry)
        if parsed is not None and parsed[2] == namespace:
            managed.add((parsed[0].rpartition("/")[0], parsed[1], parsed[3]))
    others: Counter[str] = Counter()
    unreadable: list[str] = []
    for resource in discovery.namespaced_listable():
        if (resource.group, resource.kind) in NAMESPACE_BOOKKEEPING:
            continue
        try:
            items = cluster.list_objects(resource, namespace)
        except ApiError:
            unreadable.append(resource.plural)
            continue
        for item in items:
            metadata = item.get("metadata") or {}
            identity = (resource.group, resource.kind, str(metadata.get("name")))
            if identity in managed or identity in NAMESPACE_DEFAULTS:
                continue
            if metadata.get("ownerReferences"):
                continue  # goes with its owner, which is counted itself
            others[resource.kind] += 1
    if not others and not unreadable:
        return []
    parts = [f"{n} {kind}" for kind, n in sorted(others.items())]
    if unreadable:
        parts.append(f"unknown ({', '.join(sorted(unreadable))} could not be listed)")
    return [
        Finding(
            severity=Severity.ERROR,
            blocksApply=True,
            kind="prune-namespace-not-empty",
            subject=subject,
            message=(
                f"the namespace holds {sum(others.values())} object(s) reconcile does not "
                f"manage ({', '.join(parts)}): deleting it deletes them too. Pass "
                "--prune-namespace-contents to delete it anyway"
            ),
        )
    ]
