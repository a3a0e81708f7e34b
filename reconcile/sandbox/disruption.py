"""PodDisruptionBudget accounting and the Eviction API, as the disruption controller
(pkg/controller/disruption) and the eviction REST handler (pkg/registry/core/pod/storage)
do them.

The sandbox runs the controller synchronously after every write to pods, budgets and
their controllers, so `status.disruptionsAllowed` is current at once instead of after
the few seconds a real controller takes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, Final

from reconcile.kube.selector import SelectorError, from_label_selector
from reconcile.sandbox.errors import ApiStatus
from reconcile.sandbox.resources import BY_PATH
from reconcile.sandbox.store import Obj, Store

PODS: Final = BY_PATH[("", "v1", "pods")]
PDBS: Final = BY_PATH[("policy", "v1", "poddisruptionbudgets")]
REPLICASETS: Final = BY_PATH[("apps", "v1", "replicasets")]
DEPLOYMENTS: Final = BY_PATH[("apps", "v1", "deployments")]
STATEFULSETS: Final = BY_PATH[("apps", "v1", "statefulsets")]

SUCCESS: Final = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}
BLOCKED_MESSAGE: Final = "Cannot evict pod as it would violate the pod's disruption budget."


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pod_labels(pod: Obj) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def selects(pdb: Obj, pod: Obj) -> bool:
    """policy/v1: an empty selector selects every pod of the namespace, a null one none."""
    try:
        return from_label_selector((pdb.get("spec") or {}).get("selector")).matches(
            _pod_labels(pod)
        )
    except SelectorError:
        return False


def _scaled(value: Any, total: int, *, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    percent = int(str(value).rstrip("%"))
    exact = percent * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def _expected_scale(store: Store, pods: list[Obj]) -> int:
    """Sum of the replicas of the pods' controllers (Deployment via ReplicaSet, StatefulSet)."""
    seen: dict[tuple[str, str], int] = {}
    for pod in pods:
        namespace = pod["metadata"].get("namespace", "")
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or () if o.get("controller")), None
        )
        if owner is None:
            seen[("Pod", pod["metadata"]["name"])] = 1
            continue
        replicas = 1
        if owner.get("kind") == "ReplicaSet":
            rs = store.peek(REPLICASETS.key, (namespace, owner.get("name", "")))
            deployment_owner = next(
                (
                    o
                    for o in ((rs or {}).get("metadata") or {}).get("ownerReferences") or ()
                    if o.get("kind") == "Deployment"
                ),
                None,
            )
            if deployment_owner is not None:
                deployment = store.peek(
                    DEPLOYMENTS.key, (namespace, deployment_owner.get("name", ""))
                )
                owner = deployment_owner
                replicas = int(((deployment or {}).get("spec") or {}).get("replicas", 1))
            else:
                replicas = int(((rs or {}).get("spec") or {}).get("replicas", 1))
        elif owner.get("kind") == "StatefulSet":
            sts = store.peek(STATEFULSETS.key, (namespace, owner.get("name", "")))
            replicas = int(((sts or {}).get("spec") or {}).get("replicas", 1))
        seen[(str(owner.get("kind")), str(owner.get("name")))] = replicas
    return sum(seen.values())


def pdb_status(store: Store, pdb: Obj, clock: Callable[[], str]) -> dict[str, Any]:
    namespace = pdb["metadata"].get("namespace", "")
    spec = pdb.get("spec") or {}
    pods = [p for p in store.values(PODS.key, namespace) if selects(pdb, p)]
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    if isinstance(min_available, int):
        expected, desired = len(pods), min_available
    elif min_available is not None:
        expected = _expected_scale(store, pods)
        desired = _scaled(min_available, expected, round_up=True)
    elif max_unavailable is not None:
        expected = _expected_scale(store, pods)
        desired = max(0, expected - _scaled(max_unavailable, expected, round_up=True))
    else:
        expected, desired = len(pods), 0
    previous = pdb.get("status") or {}
    disrupted = {
        name: when
        for name, when in (previous.get("disruptedPods") or {}).items()
        if any(p["metadata"]["name"] == name for p in pods)
    }
    healthy = sum(
        1
        for p in pods
        if is_ready(p)
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] not in disrupted
    )
    allowed = max(0, healthy - desired) if expected > 0 else 0
    condition_status = "True" if allowed > 0 else "False"
    old_condition: dict[str, Any] = next(
        (c for c in previous.get("conditions") or () if c.get("type") == "DisruptionAllowed"), {}
    )
    condition = {
        "type": "DisruptionAllowed",
        "status": condition_status,
        "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
        "message": "",
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "lastTransitionTime": old_condition.get("lastTransitionTime")
        if old_condition.get("status") == condition_status
        else clock(),
    }
    status: dict[str, Any] = {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    return status


def check_eviction(store: Store, pod: Obj, clock: Callable[[], str]) -> Obj | None:
    """The budget to update if the eviction may go ahead (None: no budget involved);
    raises the API server's 429 (budget spent) or 500 (several budgets)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
        return None  # not running: no budget counts it
    namespace = pod["metadata"].get("namespace", "")
    budgets = [b for b in store.values(PDBS.key, namespace) if selects(b, pod)]
    if not budgets:
        return None
    if len(budgets) > 1:
        raise ApiStatus(
            500,
            "InternalError",
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            {},
        )
    budget = copy.deepcopy(budgets[0])
    status = budget.get("status") or pdb_status(store, budget, clock)
    unhealthy_policy = (budget.get("spec") or {}).get(
        "unhealthyPodEvictionPolicy", "IfHealthyBudget"
    )
    if not is_ready(pod) and (
        unhealthy_policy == "AlwaysAllow"
        or status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0)
    ):
        return None  # an unready pod does not count towards the budget
    if status.get("disruptionsAllowed", 0) <= 0:
        raise ApiStatus(
            429,
            "TooManyRequests",
            BLOCKED_MESSAGE,
            {
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": (
                            f"The disruption budget {budget['metadata']['name']} needs "
                            f"{status.get('desiredHealthy', 0)} healthy pods and has "
                            f"{status.get('currentHealthy', 0)} currently"
                        ),
                    }
                ]
            },
        )
    status = dict(status)
    status["disruptionsAllowed"] = status["disruptionsAllowed"] - 1
    status["disruptedPods"] = {
        **(status.get("disruptedPods") or {}),
        pod["metadata"]["name"]: clock(),
    }
    budget["status"] = status
    return budget
