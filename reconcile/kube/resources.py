"""What a pod asks of a node and whether the node has it: NodeResourcesFit to the letter.

A pod's request (k8s.io/component-helpers/resource PodRequests): for each resource the
larger of the app containers' sum plus the restartable init containers (sidecars), and,
for each ordinary init container in order, its request plus the sidecars started before
it; pod-level requests (`spec.resources`) replace the containers' for the resources
they name that pod-level resources support (cpu, memory and every `hugepages-<size>`:
IsSupportedPodLevelResource); then `spec.overhead` is added. A missing request is the limit (the API server's
defaulting). The scheduler compares integers: millicores for cpu, whole units for the
rest (`quantity.milli_value`, `quantity.value`).

A node fits (pkg/scheduler/framework/plugins/noderesources/fit.go fitsRequest) when one
more pod stays within its `pods`, and every requested resource (a zero request asks
nothing) is at most its allocatable minus what the pods bound to it request; each
shortfall is one reason, `Too many pods` or `Insufficient <resource>`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reconcile.kube.quantity import QuantityError, milli_value, value

# A resource name -> its amount in the scheduler's integer units.
Resources = dict[str, int]

CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
# What pod-level resources (spec.resources) may set: IsSupportedPodLevelResource
# (k8s.io/component-helpers/resource/helpers.go): cpu, memory, hugepages-<size>.
_POD_LEVEL: Final = frozenset({"cpu", "memory"})
HUGEPAGES_PREFIX: Final = "hugepages-"
TOO_MANY_PODS: Final = "Too many pods"


def amount(name: str, quantity: Any) -> int:
    """One quantity in the scheduler's units: millicores for cpu, whole units otherwise.
    Anything unparseable counts as zero (the API server would have refused it)."""
    if isinstance(quantity, str | int | float):
        return _amount(name == CPU, quantity)
    return 0


@functools.lru_cache(maxsize=4096)  # a fleet's pods ask for a handful of distinct amounts
def _amount(milli: bool, quantity: str | int | float) -> int:
    try:
        return milli_value(quantity) if milli else value(quantity)
    except (QuantityError, TypeError, ValueError):
        return 0


def resources(quantities: Mapping[str, Any] | None) -> Resources:
    """A ResourceList (`{cpu: 500m, nvidia.com/gpu: 1}`) in the scheduler's units."""
    return {str(name): amount(str(name), q) for name, q in (quantities or {}).items()}


def _add(total: Resources, more: Mapping[str, int]) -> None:
    for name, quantity in more.items():
        total[name] = total.get(name, 0) + quantity


def _at_least(total: Resources, other: Mapping[str, int]) -> None:
    for name, quantity in other.items():
        if quantity > total.get(name, 0):
            total[name] = quantity


def is_supported_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith(HUGEPAGES_PREFIX)


def container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests, each missing one defaulted to its limit."""
    spec = container.get("resources") or {}
    found = resources(spec.get("limits"))
    found.update(resources(spec.get("requests")))
    return found


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """What the pod asks of the node it lands on (component-helpers PodRequests)."""
    total: Resources = {}
    for container in spec.get("containers") or ():
        _add(total, container_requests(container))
    sidecars: Resources = {}
    init: Resources = {}
    for container in spec.get("initContainers") or ():
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _at_least(init, sidecars)
        else:
            during = dict(requests)
            _add(during, sidecars)
            _at_least(init, during)
    _at_least(total, init)
    pod_level = resources((spec.get("resources") or {}).get("requests"))
    for name, quantity in pod_level.items():
        if is_supported_pod_level_resource(name):
            total[name] = quantity
    _add(total, resources(spec.get("overhead")))
    return {name: quantity for name, quantity in total.items() if quantity}


def requested(pods: Iterable[Mapping[str, int]]) -> Resources:
    """What pods bound to one node request between them, `pods` counting each."""
    total: Resources = {}
    count = 0
    for requests in pods:
        _add(total, requests)
        count += 1
    total[PODS] = total.get(PODS, 0) + count
    return total


def insufficient(
    request: Mapping[str, int], allocatable: Mapping[str, int], used: Mapping[str, int]
) -> list[str]:
    """Why the node cannot take the pod, in the scheduler's words, in its order: `Too many
    pods`, then `Insufficient <resource>` for cpu, memory, ephemeral-storage and each
    other resource asked for. Empty when it fits. `used` counts its pods under `pods`."""
    reasons = []
    if used.get(PODS, 0) + 1 > allocatable.get(PODS, 0):
        reasons.append(TOO_MANY_PODS)
    for name, quantity in request.items():
        if name != PODS and quantity > allocatable.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def room_for(
    request: Mapping[str, int], allocatable: Mapping[str, int], used: Mapping[str, int]
) -> int:
    """How many more pods of `request` the node takes."""
    most = allocatable.get(PODS, 0) - used.get(PODS, 0)
    for name, quantity in request.items():
        if name != PODS and quantity > 0:
            most = min(most, (allocatable.get(name, 0) - used.get(name, 0)) // quantity)
    return max(most, 0)
