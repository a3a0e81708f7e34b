"""The plan: a frozen value that says what apply will change, and from which state. Its
vocabulary only: node facts are planned in nodes/plan.py, workload objects in objects/plan.py.

Every drifted node records the resourceVersion it was planned against, so a saved plan
can be refused as stale when its node moved on, and every write carries that version
as a precondition. A node's plan also carries the new inventory annotation: the label
keys reconcile manages there, which is what `--prune` may later remove and nothing else.

A plan also names what it was made from: the cluster (API server URL and the UID of its
`kube-system` namespace), the digest of the `desired/` tree, and a digest of its own body,
so that a saved plan can be refused when it was edited or is applied elsewhere.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel

from reconcile.desired.models import json_schemas
from reconcile.diagnostics import Severity
from reconcile.engine.diff import FieldChange, NodeChange
from reconcile.engine.facts import BY_FACT, RULES, Fact, parse_shown_key
from reconcile.engine.findings import Finding, overlay
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import ApiResource, LiveNode

__all__ = ["Finding", "Severity", "overlay"]  # re-exported for views

PLAN_API_VERSION: Final = "reconcile.dev/v1alpha1"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    # Fields said in the document only where they hold (left out while None).
    _omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        document: dict[str, Any] = handler(self)
        for field in self._omitted_when_none:
            if getattr(self, field) is None:
                document.pop(field, None)
        return document


class NodePlan(_Frozen):
    """The fact changes (labels, annotations, taints) for one node, planned against one
    resourceVersion, and what reconcile will manage there afterwards."""

    name: str
    resourceVersion: str
    source: str
    changes: tuple[NodeChange, ...]
    # The facts reconcile manages on the node after apply, as drift lines name them
    # (labels bare, `annotation:<key>`, `taint:<key>:<effect>`): what --prune may remove.
    inventory: tuple[str, ...]
    # Why apply must not write these changes unless told to (the node policy's word: for
    # GPU nodes, a driver image the support matrix does not list; --allow-missing-image).
    refusal: str | None = None
    # The node's whole taint list after apply, when a taint changes (a merge patch
    # replaces the list; the resourceVersion precondition keeps it from racing).
    taints: tuple[dict[str, Any], ...] | None = None

    def patch(self, *, with_precondition: bool = True) -> dict[str, object]:
        """The JSON merge patch for this node: every changed fact, the inventories, and
        the precondition: the whole node changes atomically or not at all."""
        changed = {c.fact for c in self.changes}
        owned = [parse_shown_key(k) for k in self.inventory]
        annotations: dict[str, str | None] = {
            c.key: c.after for c in self.changes if c.fact is Fact.ANNOTATION
        }
        for rule in RULES:
            keys = [k for fact, k in owned if fact is rule.fact]
            if rule.fact is Fact.LABEL or keys or rule.fact in changed:
                annotations[rule.inventory] = ",".join(keys) or None
        metadata: dict[str, object] = {
            "labels": {c.key: c.after for c in self.changes if c.fact is Fact.LABEL},
            "annotations": annotations,
        }
        if with_precondition:
            metadata["resourceVersion"] = self.resourceVersion
        patch: dict[str, object] = {"metadata": metadata}
        if self.taints is not None:
            patch["spec"] = {"taints": list(self.taints)}
        return patch

    def converged(self, live: LiveNode) -> list[NodeChange]:
        """Changes the live node does not carry (an empty list when all took effect)."""
        return [c for c in self.changes if BY_FACT[c.fact].get(live, c.key) != c.after]


class MissingNode(_Frozen):
    name: str
    source: str


class PrunableLabel(_Frozen):
    node: str
    key: str
    value: str


class PredictedLabel(_Frozen):
    """A label nfd-master will write (or remove: `value` None) on a node once apply
    writes the tree's NodeFeatureRules: not reconcile's write (engine/nfdrules.py)."""

    _omitted_when_none = ("value", "before")
    node: str
    key: str
    value: str | None = None
    before: str | None = None
    rules: tuple[str, ...] = ()


class ObjectAction(enum.StrEnum):
    """What apply does to a workload object."""

    CREATE = "create"
    UPDATE = "update"
    # Delete, wait until it is gone, create (a change that cannot be made in place).
    RECREATE = "recreate"
    PRUNE = "prune"

    @property
    def creates(self) -> bool:
        """The object is created by server-side apply (it is recorded in the inventory first)."""
        return self in (ObjectAction.CREATE, ObjectAction.RECREATE)

    @property
    def glyph(self) -> str | None:
        """The mark a drift line shows for the whole object (`+` created, `-` pruned);
        None when its lines show the changed fields instead."""
        return _GLYPHS.get(self)

    @property
    def dry_runs(self) -> bool:
        """The object as it will be sent can be dry-run before anything is written."""
        return self in (ObjectAction.CREATE, ObjectAction.UPDATE)


_GLYPHS: Final = {ObjectAction.CREATE: "+", ObjectAction.PRUNE: "-"}


class ObjectPlan(_Frozen):
    """What apply does to one workload object, with what it needs to do it unaided."""

    apiVersion: str
    kind: str
    namespace: str
    name: str
    plural: str
    namespaced: bool
    source: str
    action: ObjectAction
    resourceVersion: str | None = None
    changes: tuple[FieldChange, ...] = ()
    # The configuration reconcile applies (the manifest plus its managed-by label).
    manifest: dict[str, Any] | None = None
    # In its place for a Secret, whose values a plan never holds: the configuration's
    # digest. Apply reads the configuration from desired/ again and checks it against this.
    manifestDigest: str | None = None
    # The people (kubectl's field managers, objects/plan.py PEOPLE) whose changes to
    # declared fields apply takes back: it applies this object with force. A conflict
    # with any other manager is never forced unless --force-conflicts.
    takenFrom: tuple[str, ...] | None = None
    # True when the API server cannot dry-run it while planning (its kind is served only
    # once a CRD of the plan is applied, or its Namespace is one the plan creates): it was
    # checked offline only, and apply dry-runs it after writing those, before anything else.
    checkedOffline: bool | None = None
    _omitted_when_none = ("manifestDigest", "takenFrom", "checkedOffline")

    @property
    def identity(self) -> ObjectId:
        return ObjectId.of(self.apiVersion, self.kind, self.namespace, self.name)

    @property
    def id(self) -> str:
        return str(self.identity)

    @property
    def resource(self) -> ApiResource:
        group, _, version = self.apiVersion.rpartition("/")
        return ApiResource(group, version, self.plural, self.kind, self.namespaced)


class ClusterIdentity(_Frozen):
    """Which cluster a plan was made against: a URL can move, a namespace UID cannot."""

    server: str
    kubeSystemUID: str


_DIGEST: Final = r"^sha256:[0-9a-f]{64}$"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class PlanOptions(_Frozen):
    """The options a plan is made with, as `plan` and `apply` take them (each field's
    flag: `flag`) and as the plan records them: a saved plan is applied only with the same."""

    prune: bool = False
    allowEmptyPrune: bool = False
    pruneNamespaceContents: bool = False
    forceConflicts: bool = False
    recreate: bool = False
    # Declared nodes absent from the cluster are not drift (nodes come and go).
    allowMissingNodes: bool = False
    # A NoExecute taint that evicts running pods is a warning, not a finding that stops apply.
    allowEvictions: bool = False
    # Only the nodes whose live labels this selector selects (-l, kubectl's; terraform's
    # -target): their facts planned and applied, the others left as they are. Objects are
    # not affected. None: every node.
    selector: str | None = None

    @classmethod
    def of(cls, **flags: bool | str | None) -> PlanOptions:
        """The options from the command line's parameters (`allow_empty_prune=True`)."""
        return cls(**{to_camel(name): value for name, value in flags.items()})

    @staticmethod
    def flag(field: str) -> str:
        """The command-line flag of option `field`: allowEmptyPrune -> --allow-empty-prune."""
        return "--" + re.sub(r"([A-Z])", r"-\1", field).lower()

    @property
    def options(self) -> PlanOptions:
        """The options alone (of a plan: without what it holds)."""
        return PlanOptions(**{name: getattr(self, name) for name in PlanOptions.model_fields})


NO_OPTIONS: Final = PlanOptions()


class _PlanOrigin(_Frozen):
    apiVersion: Literal["reconcile.dev/v1alpha1"] = PLAN_API_VERSION
    kind: Literal["Plan"] = "Plan"
    cluster: ClusterIdentity | None = None
    # The digest of the desired/ tree the plan was computed from (DesiredState.digest).
    desiredDigest: str | None = None
    # sha256 of the plan's canonical JSON without this field: an edited plan no longer matches.
    digest: str | None = None


class _PlanContent(_Frozen):
    nodes: tuple[NodePlan, ...] = ()
    missingNodes: tuple[MissingNode, ...] = ()
    # Declared nodes that are absent and may be (`optional: true`, --allow-missing-nodes).
    absentNodes: tuple[MissingNode, ...] = ()
    # Facts reconcile set earlier that desired/ no longer declares, on any node whose
    # inventory lists them (declared or not); removed only with --prune.
    prunable: tuple[PrunableLabel, ...] = ()
    # What nfd-master will write once the tree's NodeFeatureRules are applied.
    predicted: tuple[PredictedLabel, ...] | None = None
    findings: tuple[Finding, ...] = ()
    # Workload objects in apply order (prunes last, in reverse order).
    objects: tuple[ObjectPlan, ...] = ()
    # Objects reconcile applied earlier that desired/ no longer holds; removed only with --prune.
    prunableObjects: tuple[str, ...] = ()
    # Objects the inventory lists that --prune never deletes (a Node): left alone, and
    # dropped from the inventory by the next apply.
    neverPruned: tuple[str, ...] = ()
    # The inventory of applied objects to record after apply (None: unchanged).
    inventory: tuple[str, ...] | None = None
    # An HMAC-SHA256 of `digest` under the plan key (RECONCILE_PLAN_KEY), when one was set.
    signature: str | None = None
    # A plan of every node says no selector at all (a plan saved before -l reads the same).
    _omitted_when_none = ("signature", "selector", "predicted")


class Plan(_PlanContent, PlanOptions, _PlanOrigin):
    """What apply will do: where the plan was made (cluster, tree, digest), the options it
    was made with, then the changes, in that order in its document."""

    @property
    def has_drift(self) -> bool:
        return bool(self.nodes or self.missingNodes or self.objects)

    @property
    def needs_attention(self) -> bool:
        """Drift (what only --prune removes too: the cluster is out of sync with git) or
        findings other than notes: what makes `plan` exit 1."""
        return (
            self.has_drift
            or bool(self.prunable or self.prunableObjects)
            or any(not f.is_note for f in self.findings)
        )

    @property
    def has_errors(self) -> bool:
        """An error finding (an `error:` line, what makes `apply` refuse): `plan` exits 2."""
        return any(f.is_error for f in self.findings)

    def lines(self) -> Iterator[tuple[str, NodeChange]]:
        """(node, change) pairs sorted by node then key, as the drift lines print them."""
        for node in self.nodes:
            for change in node.changes:
                yield node.name, change

    def body_digest(self) -> str:
        """The digest of everything in the plan but the digest itself (and its signature)."""
        body = self.model_dump(mode="json", exclude={"digest", "signature"})
        return digest_of(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())

    def bound(self, cluster: ClusterIdentity, desired_digest: str) -> Plan:
        """The plan with what it was made from recorded, and sealed with its own digest."""
        unsealed = self.model_copy(
            update={"cluster": cluster, "desiredDigest": desired_digest, "digest": None}
        )
        return unsealed.model_copy(update={"digest": unsealed.body_digest()})

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")


class SavedPlan(Plan):
    """A plan as a file: what it was made from is required (schemas/plan.schema.json)."""

    cluster: ClusterIdentity
    desiredDigest: str = Field(pattern=_DIGEST)
    digest: str = Field(pattern=_DIGEST)
    signature: str | None = Field(default=None, pattern=r"^hmac-sha256:[0-9a-f]{64}$")


def all_schemas() -> dict[str, dict[str, Any]]:
    """Every published JSON Schema: the desired-state kinds and the saved plan."""
    return json_schemas({"Plan": SavedPlan})
