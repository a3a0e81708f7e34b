"""Saved plans: may this plan file be applied here? The one home of that answer.

A saved plan (`plan --out FILE`) is applied only when it is exactly what planning gives
again, from the same desired/ tree, against the live cluster, with the options apply was
given. Its own digest only catches an edit that did not recompute it; what makes an edited
plan harmless is that nothing in it is taken on trust:

- its schema and its digest (a file truncated or edited by hand), and with a plan key
  (RECONCILE_PLAN_KEY) an HMAC-SHA256 signature, so a pipeline can prove that a plan came
  from its own plan step;
- the cluster it was made for (the kube-system namespace's UID) and the tree (its digest);
- the options it was planned with (`--prune`, `--force-conflicts`, `--recreate`, ...): they
  must be the ones apply is given, so a file alone never grants a destructive option;
- every planned node and object has not moved since (else "stale"), unless a node already
  carries exactly its planned change (applying twice writes nothing);
- and then everything apply would write is what re-planning gives now: every node entry
  whole (its changes, taints, inventory, resourceVersion), an entry with no changes too;
  every object (action, manifest, plural, scope, changes, the people whose changes it
  takes back); and the object inventory, whether or not the plan holds objects. A node
  planning gives nothing for passes only when it carries all its entry would write
  already. The first difference is named, before anything is written.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

from pydantic import ValidationError

from reconcile import files
from reconcile.diagnostics import PlanRefused, ReconcileError, StalePlan
from reconcile.engine.facts import Fact, shown_key
from reconcile.engine.plan import (
    ClusterIdentity,
    NodePlan,
    ObjectAction,
    ObjectPlan,
    Plan,
    PlanOptions,
    SavedPlan,
)
from reconcile.kube import sensitive
from reconcile.kube.api import ObjectApi
from reconcile.kube.kinds import ObjectId
from reconcile.kube.objects import LiveNode

SIGNATURE_PREFIX: Final = "hmac-sha256:"

# A saved plan is a few megabytes at fleet scale; a file far larger is not one.
MAX_PLAN_BYTES: Final = 512 * 1024 * 1024


def read(path: Path) -> bytes:
    """The bytes of a plan file: a regular file (a FIFO or a device would block or never
    end), read once; a link on the command line is followed to it."""
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise ReconcileError(f"{path} is not a saved reconcile plan: larger than 512 MiB")
        return files.read_regular(path.resolve())
    except files.UnsafeFile:
        raise ReconcileError(f"cannot read plan {path}: not a regular file") from None
    except OSError as e:
        raise ReconcileError(f"cannot read plan {path}: {e.strerror or e}") from e


def parse(document: bytes | dict[str, Any], where: str) -> Plan:
    """A saved plan, checked against plan.schema.json and its own digest."""
    try:
        if isinstance(document, bytes):
            saved = SavedPlan.model_validate_json(document)
        else:
            saved = SavedPlan.model_validate(document)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        at = ".".join(str(p) for p in first["loc"]) or "(document)"
        raise ReconcileError(
            f"{where} is not a saved reconcile plan ({at}: {first['msg']}); "
            "write one with `reconcile plan --out FILE`"
        ) from None
    plan = Plan.model_validate(saved.model_dump())
    if plan.body_digest() != saved.digest:
        raise ReconcileError(
            f"{where} was changed after `reconcile plan` wrote it (its digest {saved.digest} "
            f"does not match its content, {plan.body_digest()}): nothing was applied. "
            "Run `reconcile plan --out FILE` again"
        )
    return plan


def load(path: Path) -> Plan:
    """The single-cluster plan saved at `path` (schema and digest checked)."""
    return parse(read(path), str(path))


def _mac(key: bytes, plan: Plan) -> str:
    assert plan.digest is not None
    return SIGNATURE_PREFIX + hmac.new(key, plan.digest.encode(), hashlib.sha256).hexdigest()


def sign(plan: Plan, key: bytes) -> Plan:
    """The plan with an HMAC-SHA256 of its digest under `key` (the digest covers the body)."""
    return plan.model_copy(update={"signature": _mac(key, plan)})


def check_signature(plan: Plan, key: bytes | None, where: str) -> None:
    """Refuse a plan whose signature does not verify under `key`, an unsigned plan when
    there is a key, and a signed plan when there is none to verify it with."""
    if key is None:
        if plan.signature is not None:
            raise PlanRefused(
                f"{where} is signed, but RECONCILE_PLAN_KEY is not set to verify it: "
                "nothing was applied"
            )
        return
    if plan.signature is None:
        raise PlanRefused(
            f"{where} is not signed, and RECONCILE_PLAN_KEY requires a signed plan: "
            "nothing was applied. Make it with `reconcile plan --out FILE` and the same key"
        )
    if not hmac.compare_digest(plan.signature, _mac(key, plan)):
        raise PlanRefused(
            f"{where} has a signature that does not verify with RECONCILE_PLAN_KEY "
            "(signed with another key, or edited): nothing was applied"
        )


def check_origin(
    plan: Plan, identity: ClusterIdentity, desired_digest: str, options: PlanOptions
) -> None:
    """Refuse a plan made for another cluster, from another tree, or with other options."""
    if plan.cluster is None or plan.desiredDigest is None:
        raise PlanRefused("the plan does not say which cluster and desired/ tree it was made from")
    if plan.cluster.kubeSystemUID != identity.kubeSystemUID:
        raise PlanRefused(
            f"the plan was made for another cluster ({plan.cluster.server}, kube-system uid "
            f"{plan.cluster.kubeSystemUID}); this is {identity.server} (kube-system uid "
            f"{identity.kubeSystemUID}): nothing was applied"
        )
    if desired_digest != plan.desiredDigest:
        raise PlanRefused(
            f"the plan was made from another desired/ tree ({plan.desiredDigest}) than the one "
            f"here ({desired_digest}): nothing was applied. Re-run `reconcile plan --out FILE`"
        )
    for field in PlanOptions.model_fields:
        planned, given = getattr(plan, field), getattr(options, field)
        if planned != given:
            flag = PlanOptions.flag(field)
            if isinstance(planned, str) or isinstance(given, str):
                raise PlanRefused(
                    f"the plan was planned with {flag} {planned or '(none)'}, and apply was given "
                    f"{given or 'none'}: a saved plan is applied with the options it was planned "
                    "with. Nothing was applied"
                )
            said = "was planned with" if planned else "was planned without"
            raise PlanRefused(
                f"the plan {said} {flag}, and apply {'was not' if planned else 'was'} given it: "
                "a saved plan is applied with the options it was planned with, so a plan file "
                "alone never grants one. Nothing was applied"
            )


def check_fresh(plan: Plan, live: Iterable[LiveNode]) -> None:
    """Raise StalePlan when any planned node changed since the plan was made, unless it
    already carries exactly the planned changes (a plan applied once already, or the same
    change made by another writer): applying it again then writes nothing."""
    nodes = {node.name: node for node in live}

    def moved(node_plan: NodePlan) -> str | None:
        now = nodes.get(node_plan.name)
        if now is None:
            return _moved(node_plan.name, node_plan.resourceVersion, None)
        if not node_plan.converged(now):  # nothing of it missing: in place already
            return None
        return _moved(node_plan.name, node_plan.resourceVersion, now.resource_version)

    _refuse_moved([moved(node_plan) for node_plan in plan.nodes])


def _moved(subject: str, planned: str | None, now: str | None) -> str | None:
    """How `subject` moved since the plan, or None when it did not."""
    if now == planned:
        return None
    shown = "deleted" if now is None else f"resourceVersion {planned} -> {now}"
    return f"{subject} ({shown})"


def _refuse_moved(moved: Iterable[str | None]) -> None:
    if found := [m for m in moved if m]:
        raise StalePlan(
            "plan is stale: " + ", ".join(found) + " changed since the plan was made; "
            "nothing was applied. Run `reconcile plan` again."
        )


def check_objects_fresh(plan: Plan, cluster: ObjectApi) -> None:
    """Raise StalePlan when an object of a saved plan changed (or appeared) since."""
    moved: list[str | None] = []
    for obj in plan.objects:
        live = cluster.get_object(obj.resource, obj.namespace, obj.name)
        now = str(live["metadata"].get("resourceVersion")) if live is not None else None
        if obj.action is ObjectAction.CREATE:
            moved.append(None if now is None else f"{obj.id} (created by someone else since)")
        else:
            moved.append(_moved(obj.id, obj.resourceVersion, now))
    _refuse_moved(moved)


def check_manifests(plan: Plan, configs: Mapping[ObjectId, dict[str, Any]]) -> None:
    """Raise StalePlan when an object the plan holds only by digest (a Secret) is no
    longer declared in desired/ exactly as planned: its configuration comes from there."""
    moved: list[str | None] = []
    for obj in plan.objects:
        if obj.manifestDigest is None:
            continue
        config = configs.get(obj.identity)
        if config is None:
            moved.append(f"{obj.id} (no longer in desired/)")
        elif sensitive.manifest_digest(config) != obj.manifestDigest:
            moved.append(f"{obj.id} (changed in desired/)")
    _refuse_moved(moved)


def differences(
    saved: Plan,
    replanned: Plan,
    live: Sequence[LiveNode],
    recorded: Callable[[], Sequence[str]] | None = None,
) -> Iterator[str]:
    """Where what applying the saved plan would write is not what planning gives now.

    Every node entry is compared whole (its changes, inventory, taints, resourceVersion,
    source, refusal), an entry with no changes too: the patch writes its taints and
    inventory annotations whatever its changes say. A node planning gives nothing for is
    accepted only when it already carries everything its entry would write (a plan
    applied once already: applying it again writes nothing). The object inventory is
    compared whether or not the plan holds objects; `recorded` reads the one the cluster
    holds, which a plan may record again when planning records none. What re-planning
    gives beyond the saved plan (drift that appeared since) is not applied and is no
    difference."""
    nodes = {node.name: node for node in live}
    fresh = {node.name: node for node in replanned.nodes}
    seen: set[str] = set()
    for node_plan in saved.nodes:
        if node_plan.name in seen:
            yield f"{node_plan.name} (in the plan twice)"
            continue
        seen.add(node_plan.name)
        now = nodes.get(node_plan.name)
        if now is not None and not written(node_plan, now):
            continue  # in place already: applying it writes nothing
        yield from _node_differences(node_plan, fresh.get(node_plan.name), now)
    objects = {obj.identity: obj for obj in replanned.objects}
    seen_objects: set[str] = set()
    for obj in saved.objects:
        if obj.id in seen_objects:
            yield f"{obj.id} (in the plan twice)"
            continue
        seen_objects.add(obj.id)
        yield from _object_differences(obj, objects.get(obj.identity))
    if saved.inventory != replanned.inventory and not (
        replanned.inventory is None
        and saved.inventory is not None
        and recorded is not None
        and sorted(saved.inventory) == sorted(recorded())
    ):
        yield "the object inventory to record (not the one planning gives)"


def written(node_plan: NodePlan, live: LiveNode) -> list[str]:
    """What applying `node_plan` would change on `live`, as drift lines name it (a label
    bare, `annotation:<key>`, inventory annotations included; `taints` for the taint
    list); empty when the node carries all of it already."""
    patch = node_plan.patch(with_precondition=False)
    metadata = cast("dict[str, dict[str, str | None]]", patch["metadata"])
    found = [c.shown_key for c in node_plan.converged(live)]
    for key, value in metadata["labels"].items():
        if live.labels.get(key) != value and key not in found:
            found.append(key)
    for key, value in metadata["annotations"].items():
        shown = shown_key(Fact.ANNOTATION, key)
        if live.annotations.get(key) != value and shown not in found:
            found.append(shown)
    if node_plan.taints is not None and _taints(node_plan.taints) != _taints(live.taints):
        found.append("taints")
    return found


def _taints(taints: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A taint list as a write changes it: the API server stamps `timeAdded` on a
    NoExecute taint itself, so a list that only lacks it writes nothing new."""
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]


def _node_differences(
    saved: NodePlan, fresh: NodePlan | None, live: LiveNode | None
) -> Iterator[str]:
    if fresh is None:
        for change in saved.changes:
            yield f"{saved.name} {change.shown_key} {change.shown_value} (planning gives no change)"
        if not saved.changes:  # what it writes all the same: its taints, its inventories
            what = ", ".join(written(saved, live)) if live is not None else "an entry"
            yield f"{saved.name} {what} (planning gives nothing for this node)"
        return
    planned = {(c.fact, c.key): c for c in fresh.changes}
    for change in saved.changes:
        now = planned.pop((change.fact, change.key), None)
        if now is None:
            yield f"{saved.name} {change.shown_key} {change.shown_value} (planning gives no change)"
        elif now != change:
            yield (
                f"{saved.name} {change.shown_key} {change.shown_value} "
                f"(planning gives {now.shown_value})"
            )
    for change in planned.values():
        yield f"{saved.name} {change.shown_key} {change.shown_value} (planned now, not in the plan)"
    for field in ("inventory", "taints", "refusal", "resourceVersion", "source"):
        if getattr(saved, field) != getattr(fresh, field):
            yield f"{saved.name} {field} (not what planning gives)"


def _object_differences(saved: ObjectPlan, fresh: ObjectPlan | None) -> Iterator[str]:
    if fresh is None:
        yield f"{saved.id} {saved.action} (planning gives no change)"
        return
    if saved.action != fresh.action:
        yield f"{saved.id} action {saved.action} (planning gives {fresh.action})"
        return
    for field in (
        "apiVersion",  # not part of its identity: the version the request is sent to
        "plural",
        "namespaced",
        "manifest",
        "manifestDigest",
        "resourceVersion",
        "changes",
        "takenFrom",
        "source",
    ):
        if getattr(saved, field) != getattr(fresh, field):
            yield f"{saved.id} {field} (not what planning gives)"


def refuse_differences(
    saved: Plan,
    replanned: Plan,
    live: Sequence[LiveNode],
    recorded: Callable[[], Sequence[str]] | None = None,
) -> None:
    """Raise PlanRefused naming the first difference, if there is one."""
    for difference in differences(saved, replanned, live, recorded):
        raise PlanRefused(
            f"the plan is not what planning gives now: {difference}: nothing was applied. "
            "Re-run `reconcile plan --out FILE`"
        )
