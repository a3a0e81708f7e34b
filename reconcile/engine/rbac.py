"""The RBAC reconcile needs for one desired/ tree, and nothing more (`reconcile rbac`).

Computed from what desired/ declares and what each command calls (cluster.py is the only
caller; a test drives every command against the sandbox and checks each request against
these rules, and each rule against the requests):

- cluster-wide, whatever desired/ holds: nodes (`plan`, `apply`, `upgrade`, `audit`...),
  pods read and evicted (placement impact, drains), budgets read (drains), and namespace
  kube-system by name (its UID identifies the cluster);
- workload kinds only where desired/ declares them: one Role per namespace for the
  namespaced kinds it declares there, and for cluster-scoped kinds a ClusterRole rule per
  kind, with the declared names wherever a verb can be limited by name;
- the inventory ConfigMap `default/reconcile-inventory` by name;
- for `watch`: watching nodes, creating Events in `default`, and the Lease
  `reconcile` in the service account's namespace.

Objects removed from desired/ are pruned with the grants of the tree that declared them:
regenerate after `apply --prune` has deleted them, not before.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Final

from reconcile.desired.models import DesiredState
from reconcile.engine.workloads import INVENTORY_NAME, INVENTORY_NAMESPACE
from reconcile.kube.kinds import BUILTIN_NAMESPACED, plural

RBAC_API: Final = "rbac.authorization.k8s.io/v1"
ROLE_NAME: Final = "reconcile"
SERVICE_ACCOUNT: Final = "reconcile-system/reconcile"
# Where `watch --correct` records Events about nodes, and the Lease `--leader-elect` takes
# (in the service account's namespace).
EVENT_NAMESPACE: Final = "default"
LEASE_NAME: Final = "reconcile"
# Read to identify the cluster: the UID of kube-system is fixed for a cluster's lifetime.
IDENTITY_NAMESPACE: Final = "kube-system"
# What planning (LIST, dry-run PATCH), applying (PATCH, create by apply) and pruning or
# recreating (GET, DELETE) do to a workload object.
WORKLOAD_VERBS: Final = ("get", "list", "create", "patch", "delete")
# The verbs of WORKLOAD_VERBS that RBAC can limit to names (list and create it cannot).
NAMED_VERBS: Final = ("get", "patch", "delete")

# What the YAML output says first: where it comes from and when to regenerate it.
HEADER: Final = (
    "The least privilege reconcile needs (plan, apply --prune/--recreate, watch, upgrade,",
    "audit, report, import, placement) for the desired/ tree this was generated from, by",
    "`reconcile rbac`. Regenerate it when desired/ changes; keep the old grants until",
    "`apply --prune` has deleted what left desired/. Discovery (/api, /apis) needs no",
    "grant: the default system:discovery role allows it to every authenticated user.",
)

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)


@dataclass(frozen=True)
class Rule:
    """One PolicyRule, and why reconcile needs it (a comment in the YAML)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    why: str = ""

    def document(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources)}
        if self.names:
            rule["resourceNames"] = list(self.names)
        rule["verbs"] = list(self.verbs)
        return rule


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


def cluster_rules(state: DesiredState) -> list[Rule]:
    declared = _declared(state)
    created = _created_namespaces(declared)
    used = sorted(
        {d.namespace for d in declared if d.namespace and d.namespace not in created}
        - {IDENTITY_NAMESPACE}
    )
    rules = [
        Rule(
            "",
            ("nodes",),
            ("get", "list", "patch", "watch"),
            why="node labels: one paginated LIST to plan, one PATCH per drifted node; "
            "upgrade and `drivers tag` read one node; `watch` follows them",
        ),
        Rule(
            "",
            ("namespaces",),
            ("get",),
            (IDENTITY_NAMESPACE,),
            why="the UID of kube-system identifies the cluster",
        ),
    ]
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
    rules += [
        Rule(
            "",
            ("pods",),
            ("get", "list"),
            why="pods are listed to find the ones a label change strands; upgrade lists "
            "the pods on its node and waits for evicted ones to go",
        ),
        Rule(
            "",
            ("pods/eviction",),
            ("create",),
            why="a drain evicts through the Eviction API, which respects budgets; "
            "never a plain delete",
        ),
        Rule(
            "policy",
            ("poddisruptionbudgets",),
            ("list",),
            why="upgrade checks the budgets of the pods a drain would evict",
        ),
    ]
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
    state: DesiredState, lease_namespace: str = SERVICE_ACCOUNT.partition("/")[0]
) -> dict[str, list[Rule]]:
    """namespace -> the rules of the Role reconcile needs there (`watch --leader-elect`
    takes its Lease in `lease_namespace`, the service account's)."""
    kinds: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in _declared(state):
        if d.namespace:
            kinds[d.namespace][d.group].add(d.plural)
    roles: dict[str, list[Rule]] = {}
    for namespace in sorted({*kinds, INVENTORY_NAMESPACE, EVENT_NAMESPACE, lease_namespace}):
        rules = []
        for index, group in enumerate(sorted(kinds.get(namespace, {}))):
            rules.append(
                Rule(
                    group,
                    tuple(sorted(kinds[namespace][group])),
                    WORKLOAD_VERBS,
                    why=""
                    if index
                    else f"the kinds desired/ declares in {namespace}: listed and dry-run "
                    "to plan, applied, read and deleted to prune or recreate",
                )
            )
        if namespace == INVENTORY_NAMESPACE:
            rules += [
                Rule(
                    "",
                    ("configmaps",),
                    ("get", "patch"),
                    (INVENTORY_NAME,),
                    why="the inventory of applied objects (what --prune may delete): "
                    "read by plan, written by apply",
                ),
                Rule(
                    "",
                    ("configmaps",),
                    ("create",),
                    why="the first apply creates the inventory; RBAC cannot limit create "
                    "by resourceNames (the name of a new object is not known when create "
                    "is authorized), so create on configmaps is granted in this namespace "
                    "only",
                ),
            ]
        if namespace == EVENT_NAMESPACE:
            rules.append(
                Rule(
                    "events.k8s.io",
                    ("events",),
                    ("create",),
                    why="`watch --correct` records an Event on each node it corrects "
                    "(events about cluster-scoped objects live in default)",
                )
            )
        if namespace == lease_namespace:
            rules += [
                Rule(
                    "coordination.k8s.io",
                    ("leases",),
                    ("get", "update"),
                    (LEASE_NAME,),
                    why="`watch --leader-elect`: one replica writes, while it holds the Lease",
                ),
                Rule(
                    "coordination.k8s.io",
                    ("leases",),
                    ("create",),
                    why="the first replica creates the Lease (create cannot be limited by name)",
                ),
            ]
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


def objects(state: DesiredState, service_account: str = SERVICE_ACCOUNT) -> list[RbacObject]:
    """The ServiceAccount, the ClusterRole and its binding, the namespaces desired/ creates
    that need a Role, then a Role and RoleBinding per namespace, for `state`."""
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
        _role("ClusterRole", "", cluster_rules(state), ""),
        _binding("ClusterRoleBinding", "ClusterRole", "", account),
    ]
    roles = namespace_rules(state, namespace)
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
