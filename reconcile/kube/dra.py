"""Dynamic Resource Allocation (resource.k8s.io/v1) as kube-scheduler 1.36 decides it,
offline: can a pod's ResourceClaims be allocated on a node, and which devices would they
take. Pure functions of the API server's dicts (ResourceSlices, DeviceClasses,
ResourceClaims, ResourceClaimTemplates, the pod); no HTTP.

What it follows, upstream:

- the DynamicResources scheduler plugin (k8s.io/kubernetes pkg/scheduler/framework/plugins/
  dynamicresources): PreEnqueue (every claim must exist), PreFilter (device classes must
  exist), Filter (an allocated claim's node selector; otherwise the allocator);
- the allocator the 1.36 scheduler picks with its default feature gates, "incubating"
  (k8s.io/dynamic-resource-allocation structured/internal/incubating): pools gathered per
  node (newest generation, incomplete and invalid pools), sorted by driver and pool, slices
  by name; a first-fit depth-first search over claims, requests and devices, with
  prioritized lists (firstAvailable), matchAttribute constraints and device taints;
- the CEL environment of k8s.io/dynamic-resource-allocation/cel (compile.go): `device.driver`,
  `device.allowMultipleAllocations`, `device.attributes[domain].name` and
  `device.capacity[domain].name`, an unknown domain reading as an empty map, names without a
  domain filed under the driver's; plus the Kubernetes libraries of
  k8s.io/apiserver/pkg/cel/library that selectors use (quantity.go, semverlib.go), the
  strings extension (cel-go ext/strings.go), cel.bind (ext/bindings.go) and cross-type
  numeric comparisons, as custom functions over cel-python.

What it does not model comes out as NOT_EVALUATED with the reason, never as a guess:
partitionable devices (shared counters), consumable capacity and devices that allow
multiple allocations, binding conditions, admin access, per-device node selection,
distinctAttribute constraints, list-typed attributes, CEL functions beyond those above and
CEL runtime errors other than a missing key (whose wording is not known here).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

Obj = Mapping[str, Any]

# --- the scheduler's words -------------------------------------------------------------
# Captured from kube-scheduler v1.36 (tests/data/placement/dra/, capture.py) and matched
# to their source in pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go.

# Filter, when the allocator finds no solution on the node.
REASON_CANNOT_ALLOCATE: Final = "cannot allocate all claims"
# Filter, when a claim is allocated already and its node selector excludes the node.
REASON_NOT_AVAILABLE: Final = "resourceclaim not available on the node"
# Filter, when the allocator fails on the node because of a pool it cannot trust
# (structured/internal/incubating: ErrFailedAllocationOnNode).
REASON_INVALID_POOLS: Final = "invalid resource pools were encountered"
# PreFilter, for every node at once (the FitError then has no per-node histogram).
PREFILTER_NO_CLASS: Final = "request {request}: device class {cls} does not exist"
# What the PodScheduled condition says when the Filter returned an error (framework).
FILTER_ERROR: Final = 'running "DynamicResources" filter plugin: {error}'
# PreEnqueue: the pod is held back, no node is tried and no condition is written.
HELD_NOT_FOUND: Final = 'resourceclaim.resource.k8s.io "{name}" not found'
HELD_NOT_CREATED: Final = 'pod "{namespace}/{pod}": ResourceClaim not created yet'
HELD_DELETING: Final = 'resourceclaim "{name}" is being deleted'

# resource.k8s.io/v1: AllocationResultsMaxSize.
ALLOCATION_RESULTS_MAX: Final = 32
# The characters a generated claim name ends with (metadata.generateName), unknown offline.
GENERATED: Final = "<generated>"


class Verdict(enum.StrEnum):
    FITS = "fits"  # the claims are (or can be) allocated for this node
    UNSCHEDULABLE = "unschedulable"  # Filter rejects the node; `reason` is its word
    REFUSED = "refused"  # PreFilter rejects the pod on every node; `reason` says why
    HELD = "held"  # PreEnqueue holds the pod back: no node is tried, no condition
    ERROR = "error"  # the scheduling attempt fails; `reason` is the condition's message
    NOT_EVALUATED = "not evaluated"  # the scheduler would use what is not modelled here


@dataclass(frozen=True, order=True)
class DeviceId:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class DeviceResult:
    """One device of an allocation, as `status.allocation.devices.results[]` records it:
    `request` is the request's name, or `request/subrequest` for a prioritized list."""

    request: str
    id: DeviceId


@dataclass(frozen=True)
class ClaimResult:
    """One of the pod's claims on the node: `pod_claim` is its name in the pod's
    `spec.resourceClaims`, `claim` the ResourceClaim's name (ending in GENERATED for one a
    template will make), `devices` what it holds or would be given; `allocated` says it
    held them already."""

    pod_claim: str
    claim: str
    devices: tuple[DeviceResult, ...]
    allocated: bool = False
    node_selector: Obj | None = None


@dataclass(frozen=True)
class Answer:
    """Whether the pod's claims can be allocated on `node` and what they take.

    `reason` is the scheduler's own wording for UNSCHEDULABLE (the per-node reason that
    goes into FitError's histogram), REFUSED (the PreFilter message that replaces the
    histogram), HELD (PreEnqueue's, which no condition shows) and ERROR (the whole
    PodScheduled message); for NOT_EVALUATED it says what is not modelled."""

    node: str
    verdict: Verdict
    reason: str = ""
    claims: tuple[ClaimResult, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS

    def taken(self) -> frozenset[DeviceId]:
        """The devices newly allocated by this answer."""
        return frozenset(d.id for c in self.claims if not c.allocated for d in c.devices)


def _key(obj: Obj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


@dataclass(frozen=True)
class Cluster:
    """What the DRA plugin reads from the cluster: slices, classes by name, claims and
    templates by (namespace, name), and the devices allocated to claims."""

    slices: tuple[Obj, ...] = ()
    classes: Mapping[str, Obj] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], Obj] = field(default_factory=dict)
    templates: Mapping[tuple[str, str], Obj] = field(default_factory=dict)
    allocated: frozenset[DeviceId] = frozenset()

    @classmethod
    def of(cls, objects: Iterable[Obj], namespace: str = "default") -> Cluster:
        """The cluster holding `objects` (other kinds are ignored); namespaced objects
        without a namespace are taken to be in `namespace`."""
        slices: list[Obj] = []
        classes: dict[str, Obj] = {}
        claims: dict[tuple[str, str], Obj] = {}
        templates: dict[tuple[str, str], Obj] = {}
        for obj in objects:
            kind = obj.get("kind")
            ns, name = _key(obj)
            if kind == "ResourceSlice":
                slices.append(obj)
            elif kind == "DeviceClass":
                classes[name] = obj
            elif kind == "ResourceClaim":
                claims[(ns or namespace, name)] = obj
            elif kind == "ResourceClaimTemplate":
                templates[(ns or namespace, name)] = obj
        allocated = frozenset(
            device for claim in claims.values() for device in _allocated_devices(claim)
        )
        return cls(tuple(slices), classes, claims, templates, allocated)

    def taking(self, answer: Answer, namespace: str) -> Cluster:
        """The cluster once the pod of `answer` is placed on its node: its new devices
        allocated, and a claim it names (not a template's) recorded as allocated there,
        so that the next pod sharing it is pinned to the node."""
        if not answer.fits:
            return self
        claims = dict(self.claims)
        for result in answer.claims:
            key = (namespace, result.claim)
            if result.allocated or key not in claims:
                continue
            claim = dict(claims[key])
            allocation: dict[str, Any] = {
                "devices": {
                    "results": [
                        {
                            "request": d.request,
                            "driver": d.id.driver,
                            "pool": d.id.pool,
                            "device": d.id.device,
                        }
                        for d in result.devices
                    ]
                }
            }
            if result.node_selector is not None:
                allocation["nodeSelector"] = result.node_selector
            claim["status"] = {**(claim.get("status") or {}), "allocation": allocation}
            claims[key] = claim
        return replace(self, claims=claims, allocated=self.allocated | answer.taken())


def _allocated_devices(claim: Obj) -> Iterator[DeviceId]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for result in (allocation.get("devices") or {}).get("results") or ():
        yield DeviceId(str(result["driver"]), str(result["pool"]), str(result["device"]))


class NotEvaluated(Exception):
    """The scheduler would use something this module does not model."""


class _SchedulingError(Exception):
    """The allocator's error: the scheduler's attempt fails with this text."""


# --- node selectors (k8s.io/component-helpers/scheduling/corev1/nodeaffinity) -------------


def _requirement_matches(requirement: Obj, value: str | None) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or ()]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def node_selector_matches(selector: Obj, node: str, labels: Mapping[str, str]) -> bool:
    """A v1 NodeSelector: terms OR-ed, each term's expressions and fields AND-ed, an empty
    term matching nothing."""
    for term in selector.get("nodeSelectorTerms") or ():
        expressions = term.get("matchExpressions") or ()
        fields = term.get("matchFields") or ()
        if not expressions and not fields:
            continue
        if all(_requirement_matches(r, labels.get(str(r.get("key")))) for r in expressions) and all(
            _requirement_matches(r, node if r.get("key") == "metadata.name" else None)
            for r in fields
        ):
            return True
    return False


def _slice_for_node(spec: Obj, node: str, labels: Mapping[str, str]) -> bool | None:
    """NodeMatches for a slice: None when the slice says nothing this module knows."""
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node)
    if spec.get("allNodes"):
        return True
    if spec.get("nodeSelector") is not None:
        return node_selector_matches(spec["nodeSelector"], node, labels)
    return None


# --- CEL (kube/cel.py, imported when a selector is evaluated) ----------------------------


def device_variable(driver: str, device: Obj) -> Any:
    """The `device` variable a selector sees for `device` of `driver` (kube/cel.py).
    NotEvaluated for an attribute of a type not modelled."""
    from reconcile.kube import cel

    try:
        return cel.device_variable(driver, device)
    except cel.NotModelled as e:
        raise NotEvaluated(str(e)) from e


class CelError(Exception):
    """A CEL runtime error the scheduler reports, in its words."""


def matches(expression: str, device: Any) -> bool:
    """Whether a CEL selector accepts the device (kube/cel.py). Raises CelError for a
    runtime error the scheduler reports (a missing key), NotEvaluated for what is not
    modelled."""
    from reconcile.kube import cel

    try:
        return cel.matches(expression, device)
    except cel.CelError as e:
        raise CelError(str(e)) from e
    except cel.NotModelled as e:
        raise NotEvaluated(str(e)) from e


# --- pools (structured/internal/incubating/pools_incubating.go) --------------------------


@dataclass
class _Pool:
    driver: str
    name: str
    slices: list[Obj]
    incomplete: bool = False
    invalid: bool = False


def _pool_of(spec: Obj) -> tuple[str, str, int, int]:
    pool = spec.get("pool") or {}
    return (
        str(spec.get("driver")),
        str(pool.get("name")),
        int(pool.get("generation") or 0),
        int(pool.get("resourceSliceCount") or 0),
    )


def _gather_pools(slices: Sequence[Obj], node: str, labels: Mapping[str, str]) -> list[_Pool]:
    """GatherPools: the pools with devices for the node, newest generation only, sorted by
    driver and pool; incomplete (not all slices of the generation published) and invalid
    (duplicate device names) pools flagged. Raises NotEvaluated for slices using shared
    counters or per-device node selection."""
    newest: dict[tuple[str, str], tuple[int, list[Obj]]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection"):
            relevant = spec.get("perDeviceNodeSelection") or _slice_for_node(spec, node, labels)
            if relevant is not False:
                raise NotEvaluated(
                    f"ResourceSlice {_key(obj)[1]}: partitionable devices "
                    "(sharedCounters or perDeviceNodeSelection)"
                )
            continue
        if not _slice_for_node(spec, node, labels):
            continue
        driver, pool, generation, _ = _pool_of(spec)
        have = newest.get((driver, pool))
        if have is None or generation > have[0]:
            newest[(driver, pool)] = (generation, [obj])
        elif generation == have[0]:
            have[1].append(obj)
    result: list[_Pool] = []
    for (driver, pool), (generation, found) in newest.items():
        count = _pool_of(found[0]["spec"])[3]
        if len(found) != count:
            everywhere = [s for s in slices if _pool_of(s.get("spec") or {})[:2] == (driver, pool)]
            if any(_pool_of(s["spec"])[2] > generation for s in everywhere):
                continue  # obsolete: the driver is replacing this generation
            same = [s for s in everywhere if _pool_of(s["spec"])[2] == generation]
            if len(same) != count:
                result.append(_Pool(driver, pool, [], incomplete=True))
                continue
        ordered = sorted(found, key=lambda s: _key(s)[1])
        names = [str(d.get("name")) for s in ordered for d in s["spec"].get("devices") or ()]
        result.append(_Pool(driver, pool, ordered, invalid=len(names) != len(set(names))))
    return sorted(result, key=lambda p: (p.driver, p.name))


# --- the allocator (structured/internal/incubating/allocator_incubating.go) --------------


@dataclass
class _Request:
    """One request, or one subrequest of a prioritized list (`parent` set)."""

    name: str
    parent: str | None
    class_name: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    tolerations: tuple[Obj, ...]
    devices_for_all: list[tuple[DeviceId, Obj, _Pool, Obj]] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass
class _Claim:
    pod_claim: str
    name: str  # the ResourceClaim's name
    namespace: str
    spec: Obj
    requests: list[list[_Request]]  # per request: itself, or its subrequests in order
    match_attributes: list[tuple[frozenset[str], str]]
    allocated: Obj | None  # status.allocation, when allocated already


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    """resourceclaim.ToleratesTaint."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return False


def _taint_prevents(device: Obj, request: _Request) -> bool:
    return any(
        taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(_tolerates(t, taint) for t in request.tolerations)
        for taint in device.get("taints") or ()
    )


def _lookup_attribute(device: Obj, driver: str, name: str) -> Obj | None:
    """lookupAttribute: a fully qualified name, or the bare name under the driver's
    domain."""
    attributes = device.get("attributes") or {}
    if name in attributes:
        return dict(attributes[name])
    domain, _, ident = name.partition("/")
    if domain == driver and ident in attributes:
        return dict(attributes[ident])
    return None


class _Search:
    """One Allocate call: first-fit depth-first over claims, requests and devices."""

    def __init__(
        self,
        claims: list[_Claim],
        pools: list[_Pool],
        classes: Mapping[str, Obj],
        allocated: frozenset[DeviceId],
    ) -> None:
        self.claims = claims
        self.pools = pools
        self.classes = classes
        self.allocated = allocated
        self.allocating: dict[DeviceId, set[int]] = {}
        self.results: list[list[DeviceResult]] = [[] for _ in claims]
        self.slice_of: dict[DeviceId, Obj] = {}
        self.cache: dict[tuple[DeviceId, int, int, int], bool] = {}
        # matchAttribute state per claim and constraint: the value and how many devices
        self.constraint_state: list[list[tuple[Any, int]]] = [
            [(None, 0)] * len(c.match_attributes) for c in claims
        ]

    def devices(self) -> Iterator[tuple[DeviceId, Obj, _Pool, Obj]]:
        for pool in self.pools:
            if pool.incomplete or pool.invalid:
                continue
            for obj in pool.slices:
                for device in obj["spec"].get("devices") or ():
                    yield DeviceId(pool.driver, pool.name, str(device["name"])), device, pool, obj

    def selectable(
        self, key: tuple[int, int, int], request: _Request, device_id: DeviceId, device: Obj
    ) -> bool:
        cached = self.cache.get((device_id, *key))
        if cached is not None:
            return cached
        claim = self.claims[key[0]]
        variable = device_variable(device_id.driver, device)
        cls = self.classes[request.class_name]
        ok = True
        for where, selectors in (
            (f"class {request.class_name}", _selectors(cls.get("spec") or {})),
            (f"claim {claim.namespace}/{claim.name}", request.selectors),
        ):
            for i, expression in enumerate(selectors):
                try:
                    if not matches(expression, variable):
                        ok = False
                except CelError as e:
                    raise _SchedulingError(f"{where}: selector #{i}: CEL runtime error: {e}") from e
                if not ok:
                    break
            if not ok:
                break
        self.cache[(device_id, *key)] = ok
        return ok

    def in_use(self, device_id: DeviceId) -> bool:
        return device_id in self.allocated or bool(self.allocating.get(device_id))

    def add_constraints(self, c: int, request: _Request, device_id: DeviceId, device: Obj) -> bool:
        base = request.parent or request.name
        states = self.constraint_state[c]
        changed: list[int] = []
        for i, (names, attribute) in enumerate(self.claims[c].match_attributes):
            if names and base not in names and request.full_name not in names:
                continue
            value = _lookup_attribute(device, device_id.driver, attribute)
            current, count = states[i]
            if value is None or (count and value != current):
                for j in changed:
                    v, n = states[j]
                    states[j] = (v if n > 1 else None, n - 1)
                return False
            states[i] = (value if not count else current, count + 1)
            changed.append(i)
        return True

    def remove_constraints(self, c: int, request: _Request) -> None:
        base = request.parent or request.name
        states = self.constraint_state[c]
        for i, (names, _) in enumerate(self.claims[c].match_attributes):
            if names and base not in names and request.full_name not in names:
                continue
            value, count = states[i]
            states[i] = (value if count > 1 else None, count - 1)

    def allocate_device(
        self, c: int, request: _Request, device_id: DeviceId, device: Obj, must: bool
    ) -> bool:
        if self.in_use(device_id):
            return False
        if _taint_prevents(device, request):
            return False
        if not self.add_constraints(c, request, device_id, device):
            if must:
                claim = self.claims[c]
                raise _SchedulingError(
                    f"claim {claim.namespace}/{claim.name}, request {request.name}: cannot add "
                    f"device {device_id} because a claim constraint would not be satisfied"
                )
            return False
        self.allocating.setdefault(device_id, set()).add(c)
        self.results[c].append(DeviceResult(request.full_name, device_id))
        return True

    def deallocate(self, c: int, request: _Request, device_id: DeviceId) -> None:
        self.remove_constraints(c, request)
        self.allocating[device_id].discard(c)
        self.results[c].pop()

    def run(self) -> bool:
        return self.one(0, 0, 0, None, 0)

    def one(
        self, c: int, r: int, d: int, sub: int | None, start: int
    ) -> bool:  # allocateOne; `start` is the device position to resume from
        if c >= len(self.claims):
            return True
        claim = self.claims[c]
        if r >= len(claim.requests):
            return self.one(c + 1, 0, 0, None, 0)
        choices = claim.requests[r]
        if sub is None:
            return any(self.one(c, r, d, s, start) for s in range(len(choices)))
        request = choices[sub]
        if request.all_devices and not request.devices_for_all:
            return False
        if d >= request.count:
            return self.one(c, r + 1, 0, None, 0)
        if len(self.results[c]) + request.count - d > ALLOCATION_RESULTS_MAX:
            return False
        if request.all_devices:
            device_id, device, _, _ = request.devices_for_all[d]
            if not self.allocate_device(c, request, device_id, device, must=True):
                return False
            if self.one(c, r, d + 1, sub, 0):
                return True
            self.deallocate(c, request, device_id)
            return False
        for position, (device_id, device, _, obj) in enumerate(self.devices()):
            if position < start or self.in_use(device_id):
                continue
            if not self.selectable((c, r, sub), request, device_id, device):
                continue
            if not self.allocate_device(c, request, device_id, device, must=False):
                continue
            self.slice_of[device_id] = obj
            if self.one(c, r, d + 1, sub, position + 1):
                return True
            self.deallocate(c, request, device_id)
        return False


def _selectors(spec: Obj) -> tuple[str, ...]:
    found: list[str] = []
    for selector in spec.get("selectors") or ():
        cel = selector.get("cel")
        if cel is None:
            raise NotEvaluated("a selector that is not CEL")
        found.append(str(cel.get("expression", "")))
    return tuple(found)


def _request(name: str, parent: str | None, body: Obj) -> _Request:
    if body.get("adminAccess") is not None:
        raise NotEvaluated(f"request {name}: adminAccess")
    if body.get("capacity") is not None:
        raise NotEvaluated(f"request {name}: capacity requests (consumable capacity)")
    mode = body.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise NotEvaluated(f"request {name}: allocationMode {mode}")
    return _Request(
        name=name,
        parent=parent,
        class_name=str(body.get("deviceClassName") or ""),
        selectors=_selectors(body),
        all_devices=mode == "All",
        count=int(body.get("count") or 1) if mode == "ExactCount" else 0,
        tolerations=tuple(body.get("tolerations") or ()),
    )


def _claim(pod_claim: str, name: str, namespace: str, claim: Obj) -> _Claim:
    spec = claim.get("spec") or {}
    devices = spec.get("devices") or {}
    requests: list[list[_Request]] = []
    for request in devices.get("requests") or ():
        rname = str(request.get("name"))
        if request.get("firstAvailable"):
            requests.append(
                [_request(str(s.get("name")), rname, s) for s in request["firstAvailable"]]
            )
        elif request.get("exactly") is not None:
            requests.append([_request(rname, None, request["exactly"])])
        else:
            raise NotEvaluated(f"request {rname}: neither exactly nor firstAvailable")
    constraints: list[tuple[frozenset[str], str]] = []
    for constraint in devices.get("constraints") or ():
        if constraint.get("matchAttribute"):
            constraints.append(
                (frozenset(constraint.get("requests") or ()), str(constraint["matchAttribute"]))
            )
        else:
            raise NotEvaluated("a constraint other than matchAttribute (distinctAttribute)")
    allocation = (claim.get("status") or {}).get("allocation")
    return _Claim(pod_claim, name, namespace, spec, requests, constraints, allocation)


def _pod_claims(pod: Obj, namespace: str, cluster: Cluster) -> list[_Claim] | Answer:
    """PreEnqueue and PreFilter: the pod's claims, or the answer for every node when the
    pod is held back (a claim missing), refused (a device class missing) or outside
    what is modelled."""
    metadata = pod.get("metadata") or {}
    pod_name = str(metadata.get("name") or "")
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    claims: list[_Claim] = []
    try:
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
            pod_claim = str(entry.get("name"))
            if entry.get("resourceClaimName"):
                name = str(entry["resourceClaimName"])
                found = cluster.claims.get((namespace, name))
            elif entry.get("resourceClaimTemplateName"):
                if statuses.get(pod_claim):
                    name = str(statuses[pod_claim])
                    found = cluster.claims.get((namespace, name))
                else:
                    template = cluster.templates.get(
                        (namespace, str(entry["resourceClaimTemplateName"]))
                    )
                    if template is None:
                        held = HELD_NOT_CREATED.format(namespace=namespace, pod=pod_name)
                        return Answer("", Verdict.HELD, held)
                    # The resourceclaim controller makes a fresh claim from the template.
                    name = f"{pod_name}-{pod_claim}-{GENERATED}"
                    found = {"spec": (template.get("spec") or {}).get("spec") or {}}
            else:
                return Answer("", Verdict.NOT_EVALUATED, f"pod claim {pod_claim}: no source")
            if found is None:
                return Answer("", Verdict.HELD, HELD_NOT_FOUND.format(name=name))
            if (found.get("metadata") or {}).get("deletionTimestamp"):
                return Answer("", Verdict.HELD, HELD_DELETING.format(name=name))
            claims.append(_claim(pod_claim, name, namespace, found))
        for claim in claims:
            if claim.allocated is not None:
                if any(
                    r.get("adminAccess") or r.get("shareID") or r.get("consumedCapacity")
                    for r in (claim.allocated.get("devices") or {}).get("results") or ()
                ):
                    return Answer("", Verdict.NOT_EVALUATED, "an allocation shares devices")
                continue
            for choices in claim.requests:
                for request in choices:
                    if request.class_name not in cluster.classes:
                        refused = PREFILTER_NO_CLASS.format(
                            request=request.full_name, cls=request.class_name
                        )
                        return Answer("", Verdict.REFUSED, refused)
    except NotEvaluated as e:
        return Answer("", Verdict.NOT_EVALUATED, str(e))
    return claims


def _modelled_devices(pools: list[_Pool]) -> None:
    for pool in pools:
        for obj in pool.slices:
            for device in obj["spec"].get("devices") or ():
                for key, why in (
                    ("consumesCounters", "partitionable devices (consumesCounters)"),
                    ("allowMultipleAllocations", "devices that allow multiple allocations"),
                    ("bindingConditions", "binding conditions"),
                    ("bindsToNode", "bindsToNode"),
                ):
                    if device.get(key):
                        raise NotEvaluated(
                            f"device {pool.driver}/{pool.name}/{device['name']}: {why}"
                        )
                for name, typed in (device.get("attributes") or {}).items():
                    if not {"int", "bool", "string", "version"} & set(typed):
                        raise NotEvaluated(f"attribute {name}: list-typed values")


def _node_selector(
    devices: list[DeviceResult], slice_of: Mapping[DeviceId, Obj], node: str
) -> Obj | None:
    """createNodeSelector: the node by name when a device's slice names it; else the
    single-term node selectors of the slices merged; None when every device is
    reachable from all nodes."""
    expressions: list[Obj] = []
    fields: list[Obj] = []
    for result in devices:
        spec = slice_of[result.id]["spec"]
        if spec.get("nodeName"):
            name_term = {"key": "metadata.name", "operator": "In", "values": [node]}
            return {"nodeSelectorTerms": [{"matchFields": [name_term]}]}
        terms = (spec.get("nodeSelector") or {}).get("nodeSelectorTerms") or ()
        if terms:
            expressions += [
                e for e in terms[0].get("matchExpressions") or () if e not in expressions
            ]
            fields += [f for f in terms[0].get("matchFields") or () if f not in fields]
    if not expressions and not fields:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def allocate(
    pod: Obj, namespace: str, node: str, labels: Mapping[str, str], cluster: Cluster
) -> Answer:
    """The DynamicResources plugin's answer for `pod` (in `namespace`) on the node named
    `node` with `labels`: FITS with the devices per claim, or the verdict and the
    scheduler's reason. A pod without claims fits with no claims."""
    found = _pod_claims(pod, namespace, cluster)
    if isinstance(found, Answer):
        return replace(found, node=node)
    results: list[ClaimResult | None] = [None] * len(found)
    to_allocate: list[tuple[int, _Claim]] = []
    for i, claim in enumerate(found):
        if claim.allocated is None:
            to_allocate.append((i, claim))
            continue
        selector = claim.allocated.get("nodeSelector")
        if selector is not None and not node_selector_matches(selector, node, labels):
            return Answer(node, Verdict.UNSCHEDULABLE, REASON_NOT_AVAILABLE)
        devices = tuple(
            DeviceResult(str(r.get("request")), d)
            for r, d in zip(
                (claim.allocated.get("devices") or {}).get("results") or (),
                _allocated_devices({"status": {"allocation": claim.allocated}}),
                strict=True,
            )
        )
        results[i] = ClaimResult(claim.pod_claim, claim.name, devices, True, selector)
    if to_allocate:
        try:
            pools = _gather_pools(cluster.slices, node, labels)
            _modelled_devices(pools)
            search = _Search([c for _, c in to_allocate], pools, cluster.classes, cluster.allocated)
            for c, claim in enumerate(search.claims):
                minimum = 0
                for r, choices in enumerate(claim.requests):
                    for s, request in enumerate(choices):
                        if request.all_devices:
                            _all_devices(search, (c, r, s), request)
                    minimum += min(
                        len(q.devices_for_all) if q.all_devices else q.count for q in choices
                    )
                if minimum > ALLOCATION_RESULTS_MAX:
                    raise _SchedulingError(
                        f"claim {claim.namespace}/{claim.name}: number of requested devices "
                        f"{minimum} exceeds the claim limit of {ALLOCATION_RESULTS_MAX}"
                    )
            done = search.run()
        except NotEvaluated as e:
            return Answer(node, Verdict.NOT_EVALUATED, str(e))
        except _SchedulingError as e:
            return Answer(node, Verdict.ERROR, FILTER_ERROR.format(error=e))
        if not done:
            if any(p.invalid for p in pools):
                return Answer(node, Verdict.UNSCHEDULABLE, REASON_INVALID_POOLS)
            return Answer(node, Verdict.UNSCHEDULABLE, REASON_CANNOT_ALLOCATE)
        for c, (i, claim) in enumerate(to_allocate):
            devices = tuple(search.results[c])
            selector = _node_selector(list(devices), search.slice_of, node)
            results[i] = ClaimResult(claim.pod_claim, claim.name, devices, False, selector)
    return Answer(node, Verdict.FITS, claims=tuple(r for r in results if r is not None))


def _all_devices(search: _Search, key: tuple[int, int, int], request: _Request) -> None:
    """validateDeviceRequest for allocationMode All: every selectable device of the
    node's pools, or an error when a pool cannot be trusted to be whole."""
    claim = search.claims[key[0]]
    for pool in search.pools:
        state = "being updated" if pool.incomplete else "invalid" if pool.invalid else ""
        if state:
            raise _SchedulingError(
                f"claim {claim.namespace}/{claim.name}, request {request.name}: asks for all "
                f"devices, but resource pool {pool.driver}/{pool.name} is currently {state}"
            )
    for device_id, device, pool, obj in search.devices():
        if search.selectable(key, request, device_id, device):
            request.devices_for_all.append((device_id, device, pool, obj))
            search.slice_of[device_id] = obj
    request.count = len(request.devices_for_all)


def evaluate(
    pod: Obj, namespace: str, nodes: Sequence[tuple[str, Mapping[str, str]]], cluster: Cluster
) -> tuple[list[Answer], Cluster]:
    """`allocate` on every node, then what the plugin's PostFilter does when no node fits:
    a claim allocated for a node the pod cannot use, and reserved for no pod, is
    deallocated and the pod tried again (the scheduler does that one claim per attempt;
    the end is the same). Returns the answers of the last attempt and the cluster it saw.
    An ERROR on any node is the pod's outcome: the scheduler's attempt stops there."""
    answers = [allocate(pod, namespace, name, labels, cluster) for name, labels in nodes]
    if any(a.fits for a in answers) or not any(a.reason == REASON_NOT_AVAILABLE for a in answers):
        return answers, cluster
    claims = dict(cluster.claims)
    freed: set[DeviceId] = set()
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        key = (namespace, str(entry.get("resourceClaimName") or ""))
        claim = claims.get(key)
        status = (claim or {}).get("status") or {}
        if claim is None or not status.get("allocation") or status.get("reservedFor"):
            continue
        freed.update(_allocated_devices(claim))
        claims[key] = {**claim, "status": {k: v for k, v in status.items() if k != "allocation"}}
    if not freed:
        return answers, cluster
    cluster = replace(cluster, claims=claims, allocated=cluster.allocated - freed)
    return [allocate(pod, namespace, name, labels, cluster) for name, labels in nodes], cluster
