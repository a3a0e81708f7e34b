"""The RBAC reconcile needs for one desired/ tree, and nothing more (`reconcile rbac`).

Each operation declares the rules it needs beside its calls (`RBAC` in operations.py,
placement.py, objects/inventory.py, watch.py, leader.py; a domain package brings its
own) and they are merged here (grants.merged); what desired/ declares adds the rest: the
namespaces it puts objects in without creating them, one Role per namespace for the
namespaced kinds it declares there, and for cluster-scoped kinds a ClusterRole rule per
kind, with the declared names wherever a verb can be limited by name. kube/client/
makes every request; a test drives every command against the sandbox and checks each
request against these rules, and each rule against the requests.

Objects removed from desired/ are pruned with the grants of the tree that declared them:
regenerate after `apply --prune` has deleted them, not before.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from reconcile.desired.models import DesiredState
from reconcile.engine import leader, operations, placement, watch
from reconcile.engine.grants import Rule, Scope, merged
from reconcile.engine.objects import inventory
from reconcile.kube.kinds import BUILTIN_NAMESPACED, plural

RBAC_API: Final = "rbac.authorization.k8s.io/v1"
ROLE_NAME: Final = "reconcile"
SERVICE_ACCOUNT: Final = "reconcile-system/reconcile"
# What planning (LIST, dry-run PATCH), applying (PATCH, create by apply) and pruning or
# recreating (GET, DELETE) do to a workload object.
WORKLOAD_VERBS: Final = ("get", "list", "create", "patch", "delete")
# The verbs of WORKLOAD_VERBS that RBAC can limit to names (list and create it cannot).
NAMED_VERBS: Final = ("get", "patch", "delete")

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


@dataclass(frozen=True)
class RbacObject:
    """One object of the output, with a comment for it and one per rule (may be empty)."""

    document: dict[str, Any]
    comment: str = ""
    rule_comments: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Declared:
    group: str
    plural: str
    namespace: str  # "" when cluster-scoped
    name: str


def declared_rules(also: Sequence[Rule] = ()) -> list[Rule]:
    """The rules the engine's operations declare and `also` (a domain's commands), merged
    in this order, which is the order of a merged rule's reasons: plan's and apply's
    (nodes, the cluster's identity, placement), `also`, the inventory's, then `watch`'s
    and its Lease's."""
    return merged(
        (*operations.RBAC, *placement.RBAC, *also, *inventory.RBAC, *watch.RBAC, *leader.RBAC)
    )


def _declared(state: DesiredState) -> list[_Declared]:
    found = []
    for manifest in state.manifests:
        namespaced = BUILTIN_NAMESPACED.get((manifest.api_version, manifest.kind))
        if namespaced is None:  # a kind the offline table does not know: as written
            namespaced = bool(manifest.namespace)
        found.append(
            _Declared(
                group=manifest.api_version.rpartition("/")[0],
                plural=plural(manifest.kind),
                namespace=manifest.namespace if namespaced else "",
                name=manifest.name,
            )
        )
    return found


def _created_namespaces(declared: list[_Declared]) -> set[str]:
    return {d.name for d in declared if (d.group, d.plural, d.namespace) == ("", "namespaces", "")}


def cluster_rules(state: DesiredState, also: Sequence[Rule] = ()) -> list[Rule]:
    """The ClusterRole's rules: those the operations declare cluster-wide (`also` among
    them), then those for what desired/ declares: the namespaces it uses without creating
    them, and its cluster-scoped kinds."""
    declared = _declared(state)
    created = _created_namespaces(declared)
    used = sorted(
        {d.namespace for d in declared if d.namespace and d.namespace not in created}
        - {operations.IDENTITY_NAMESPACE}
    )
    rules = [rule for rule in declared_rules(also) if rule.where is Scope.CLUSTER]
    if used:
        rules.append(
            Rule(
                "",
                ("namespaces",),
                ("get",),
                tuple(used),
                why="namespaces desired/ puts objects in without creating them: "
                "checked to exist before a create is planned",
            )
        )
    scoped: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in declared:
        if not d.namespace:
            scoped[d.group][d.plural].add(d.name)
    for group in sorted(scoped):
        kinds = scoped[group]
        rules.append(
            Rule(
                group,
                tuple(sorted(kinds)),
                ("list", "create"),
                why="cluster-scoped kinds desired/ declares: listed to plan; server-side "
                "apply creates them (create cannot be limited by name)",
            )
        )
        rules += [
            Rule(
                group,
                (resource,),
                NAMED_VERBS,
                tuple(sorted(kinds[resource])),
                why="applied, read and pruned by name: only the objects desired/ declares",
            )
            for resource in sorted(kinds)
        ]
    return rules


def namespace_rules(
    state: DesiredState,
    lease_namespace: str = SERVICE_ACCOUNT.partition("/")[0],
    also: Sequence[Rule] = (),
) -> dict[str, list[Rule]]:
    """namespace -> the rules of the Role reconcile needs there: the kinds desired/
    declares in it, then the rules the operations declare for it (`also` among them;
    those for the service account's own namespace in `lease_namespace`)."""
    kinds: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in _declared(state):
        if d.namespace:
            kinds[d.namespace][d.group].add(d.plural)
    placed: list[tuple[str, Rule]] = []
    for rule in declared_rules(also):
        if rule.where is Scope.OWN_NAMESPACE:
            placed.append((lease_namespace, rule))
        elif isinstance(rule.where, str):
            placed.append((rule.where, rule))
    roles: dict[str, list[Rule]] = {}
    for namespace in sorted({*kinds, *(where for where, _ in placed)}):
        rules = [
            Rule(
                group,
                tuple(sorted(kinds[namespace][group])),
                WORKLOAD_VERBS,
                why=""
                if index
                else f"the kinds desired/ declares in {namespace}: listed and dry-run "
                "to plan, applied, read and deleted to prune or recreate",
            )
            for index, group in enumerate(sorted(kinds.get(namespace, {})))
        ]
        rules += [rule for where, rule in placed if where == namespace]
        roles[namespace] = rules
    return roles


def service_account_problem(text: str) -> str | None:
    """Why NAMESPACE/NAME is not a service account reference, or None."""
    namespace, _, name = text.partition("/")
    if not _DNS_LABEL.fullmatch(namespace) or len(namespace) > 63:
        return f"{text!r}: the namespace must be a DNS label (e.g. reconcile-system)"
    if not _DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        return f"{text!r}: the name must be a DNS subdomain (e.g. reconcile)"
    return None


def _role(kind: str, namespace: str, rules: list[Rule], comment: str) -> RbacObject:
    metadata = {"name": ROLE_NAME, **({"namespace": namespace} if namespace else {})}
    return RbacObject(
        {
            "apiVersion": RBAC_API,
            "kind": kind,
            "metadata": metadata,
            "rules": [r.document() for r in rules],
        },
        comment,
        tuple(r.why for r in rules),
    )


def _binding(kind: str, role_kind: str, namespace: str, account: tuple[str, str]) -> RbacObject:
    metadata = {"name": ROLE_NAME, **({"namespace": namespace} if namespace else {})}
    return RbacObject(
        {
            "apiVersion": RBAC_API,
            "kind": kind,
            "metadata": metadata,
            "roleRef": {
                "apiGroup": RBAC_API.partition("/")[0],
                "kind": role_kind,
                "name": ROLE_NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}],
        }
    )


def objects(
    state: DesiredState, service_account: str = SERVICE_ACCOUNT, also: Sequence[Rule] = ()
) -> list[RbacObject]:
    """The ServiceAccount, the ClusterRole and its binding, the namespaces desired/ creates
    that need a Role, then a Role and RoleBinding per namespace, for `state` and the
    engine's operations with those whose rules `also` declares (a domain's commands)."""
    namespace, _, name = service_account.partition("/")
    account = (namespace, name)
    found = [
        RbacObject(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": namespace},
                # Pods get its token only where they mount it explicitly (the CronJob does,
                # for reconcile's container alone).
                "automountServiceAccountToken": False,
            }
        ),
        _role("ClusterRole", "", cluster_rules(state, also), ""),
        _binding("ClusterRoleBinding", "ClusterRole", "", account),
    ]
    roles = namespace_rules(state, namespace, also)
    found += [
        RbacObject(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": where}},
            ""
            if index
            else "namespaces desired/ creates: a Role can only be made in a namespace that "
            "exists (reconcile applies them too, and takes them over)",
        )
        for index, where in enumerate(sorted(_created_namespaces(_declared(state)) & roles.keys()))
    ]
    for where, rules in roles.items():
        found.append(_role("Role", where, rules, ""))
        found.append(_binding("RoleBinding", "Role", where, account))
    return found
