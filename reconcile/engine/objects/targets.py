"""What object planning works on and fills in: each manifest as a `Target` (the resource
the API server serves it as, and the configuration reconcile applies), and the
`ObjectPlanning` that planning and prune collect their results into.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from reconcile.desired.models import Manifest
from reconcile.engine.findings import Finding
from reconcile.engine.plan import ObjectPlan
from reconcile.kube import sensitive
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import ApiResource

# At most this many dry runs in flight at once, planning and applying: a shared API server
# is not flooded.
DRY_RUNS_AT_ONCE: Final = 8


@dataclass
class ObjectPlanning:
    objects: list[ObjectPlan] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    prunable: list[str] = field(default_factory=list)
    never_pruned: list[str] = field(default_factory=list)
    inventory: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Target:
    manifest: Manifest
    resource: ApiResource
    config: dict[str, Any]
    # A custom resource whose CRD desired/ defines and the API server does not serve yet.
    pending: bool = False

    @property
    def identity(self) -> ObjectId:
        return ObjectId(self.resource.group, self.resource.kind, self.namespace, self.manifest.name)

    @property
    def id(self) -> str:
        return str(self.identity)

    @property
    def namespace(self) -> str:
        return self.manifest.namespace if self.resource.namespaced else ""

    @property
    def sensitive(self) -> bool:
        return sensitive.is_sensitive(self.resource.api_version, self.resource.kind)
