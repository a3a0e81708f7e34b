"""Custom resources beside their CustomResourceDefinitions in one desired/ tree.

A custom resource whose kind a CRD in the tree defines is validated offline against that
CRD's schema for its served version (`validate`, each problem at its field's line). Until
the API server serves the kind it cannot be dry-run: planning shows it as a create with a
note, and apply waits, after the CRDs, until each is Established and its kind served.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from reconcile import diagnostics as diag
from reconcile.desired.models import DesiredState, Manifest
from reconcile.desired.problems import field_path
from reconcile.diagnostics import Diagnostic, ReconcileError
from reconcile.kube import crds, labels
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import ApiResource
from reconcile.kube.validation import FieldError

CRDS: Final = ApiResource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


def tree_kinds(manifests: Iterable[Manifest]) -> dict[tuple[str, str], crds.CustomKind]:
    """(apiVersion, kind) -> the served version of a kind a CRD in the tree defines."""
    return crds.custom_kinds(m.body for m in manifests if crds.is_crd(m.api_version, m.kind))


def resource(custom: crds.CustomKind) -> ApiResource:
    """The resource the API server will serve the kind as, once the CRD is established."""
    return ApiResource(custom.group, custom.version, custom.plural, custom.kind, custom.namespaced)


def desired_diagnostics(state: DesiredState) -> list[Diagnostic]:
    """Offline: every custom resource of a kind the tree's CRDs define, against the
    schema of its served version (after defaulting, as the API server validates), each
    problem at its field; a field the schema does not declare is an error, as server-side
    apply refuses it. A CRD whose pattern Go's regexp does not compile is refused at the
    pattern."""
    kinds = tree_kinds(state.manifests)
    found: list[Diagnostic] = []
    for manifest in state.manifests:
        if crds.is_crd(manifest.api_version, manifest.kind):
            for problem, path in crds.crd_schema_errors(manifest.body):
                found.append(
                    diag.error(
                        f"CustomResourceDefinition {labels.shown(manifest.name, labels.SHOWN_NAME)}"
                        f" is invalid: {problem.shown(labels.SHOWN_NAME)}",
                        manifest.at(path),
                        "patterns are Go regular expressions (RE2 syntax); "
                        "the API server refuses the CRD",
                    )
                )
            continue
        custom = kinds.get((manifest.api_version, manifest.kind))
        if custom is None:
            continue
        if custom.namespaced and not manifest.namespace:
            found.append(
                diag.error(
                    f"metadata.namespace is required: {manifest.kind} is namespaced "
                    f"(CustomResourceDefinition {custom.crd})",
                    manifest.at(("metadata",)),
                    "desired state names its namespaces; nothing defaults to the context's",
                )
            )
        elif not custom.namespaced and manifest.namespace:
            found.append(
                diag.error(
                    f"{manifest.kind} is cluster-scoped (CustomResourceDefinition {custom.crd}): "
                    "it has no namespace",
                    manifest.at(("metadata", "namespace")),
                    "remove metadata.namespace",
                )
            )
        shown = (
            f"{manifest.kind}.{custom.group} "
            f"{labels.shown(manifest.name, labels.SHOWN_NAME)} is invalid: "
        )
        schema_of = f"the schema of {custom.api_version} in CustomResourceDefinition {custom.crd}"
        located = [
            (problem, path)
            for problem, path in crds.metadata_errors(custom, manifest.body)
            if problem.field == "metadata.name"
        ] + crds.located_errors(custom, manifest.body)
        problems = [problem for problem, _ in located]
        for problem, path in located:
            found.append(
                diag.error(
                    shown + problem.shown(labels.SHOWN_NAME),
                    manifest.at(path),
                    _null_fix(problem.detail) + schema_of,
                )
            )
        found += rule_diagnostics(custom, manifest, problems, shown)
        for path in crds.unknown_fields(custom.schema, manifest.body):
            found.append(
                diag.error(
                    shown + crds.unknown_field_message(path),
                    manifest.at(path, key=True),
                    f"server-side apply refuses a field {schema_of} does not declare "
                    "(a plain create would drop it); declare it in the schema or remove it",
                )
            )
    return found


# --- CEL validation rules (x-kubernetes-validations): kube/celrules.py --------------------


def rule_diagnostics(
    custom: crds.CustomKind,
    manifest: Manifest,
    problems: Sequence[FieldError],
    shown: str,
    old: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """The CEL rules of the kind's schema on the manifest, after its schema errors: none
    run when one of those blocks them (the server's one note instead); a rule not
    evaluated here is a warning naming it."""
    if not crds_have_rules(custom):
        return []
    from reconcile.kube import celrules

    rules_of = f"a validation rule of {custom.api_version} in CustomResourceDefinition {custom.crd}"
    if any(celrules.blocks_rules(p) for p in problems):
        return [
            diag.error(
                shown + celrules.NOT_CHECKED.shown(labels.SHOWN_NAME),
                manifest.source,
                "correct the errors above; the rules are checked once they are",
            )
        ]
    verdict = celrules.validate(custom.schema, crds.defaulted(custom.schema, manifest.body), old)
    found = [
        diag.error(
            shown + error.shown(labels.SHOWN_NAME),
            manifest.at(field_path("" if error.field == "<nil>" else error.field)),
            rules_of,
        )
        for error in verdict.errors
    ]
    for rule in verdict.unchecked:
        found.append(
            diag.warning(
                f"{manifest.kind}.{custom.group} {labels.shown(manifest.name, labels.SHOWN_NAME)}: "
                f"validation rule {rule.rule!r} at {rule.field} checked by the API server only "
                f"({rule.why})",
                manifest.at(field_path("" if rule.field == "<nil>" else rule.field)),
                f"{rules_of} that is not evaluated offline",
            )
        )
    return found


def changing_kinds(
    tree: Mapping[tuple[str, str], crds.CustomKind], live_crds: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], crds.CustomKind]:
    """The kinds whose CRD the cluster serves with another schema than the tree's: apply
    writes the tree's CRD first, so its custom resources will be judged by rules the
    cluster's dry run does not know yet."""
    served = crds.custom_kinds(live_crds)
    return {
        key: kind
        for key, kind in tree.items()
        if key in served and served[key].schema != kind.schema
    }


def update_rule_errors(
    custom: crds.CustomKind, merged: Mapping[str, Any], live: Mapping[str, Any]
) -> list[FieldError]:
    """The CEL rules of the tree's schema on an update: `merged` the object the update
    makes (the dry run's result), `live` the object before it, so transition rules
    (oldSelf) run and unchanged values ratchet, as the API server will judge it once the
    tree's CRD is written. What is not evaluated offline is left to the server."""
    if not crds_have_rules(custom):
        return []
    from reconcile.kube import celrules

    return celrules.validate(custom.schema, merged, live).errors


_HAS_RULES: dict[int, tuple[Mapping[str, Any], bool]] = {}


def crds_have_rules(custom: crds.CustomKind) -> bool:
    """Whether the schema carries any x-kubernetes-validations, once per schema (the
    CEL engine is imported only for a tree that has some)."""
    cached = _HAS_RULES.get(id(custom.schema))
    if cached is None or cached[0] is not custom.schema:
        cached = (custom.schema, "x-kubernetes-validations" in repr(custom.schema))
        _HAS_RULES[id(custom.schema)] = cached
    return cached[1]


def _null_fix(detail: str) -> str:
    """What to write instead of a null (an empty `plugin:` in YAML) where the schema wants
    an object or a list, as the start of the hint; else nothing."""
    for wanted, empty in (("object", "{}"), ("array", "[]")):
        if detail.endswith(f'must be of type {wanted}: "null"'):
            return f"write {empty} or remove the key; "
    return ""


def wait_served(
    custom: crds.CustomKind, cluster: ObjectApi, *, timeout: float, sleep: Any = time.sleep
) -> None:
    """Until the CRD is Established and discovery serves its kind; ReconcileError after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        crd = cluster.get_object(CRDS, "", custom.crd)
        # Discovery is read anew: the group-version did not exist a moment ago.
        if (
            crd is not None
            and crds.is_established(crd)
            and cluster.discovery().resource_for(custom.api_version, custom.kind) is not None
        ):
            return
        if time.monotonic() > deadline:
            state = (
                "not Established"
                if crd is None or not crds.is_established(crd)
                else (f"Established, but {custom.api_version} {custom.kind} is not served")
            )
            raise ReconcileError(
                f"CustomResourceDefinition {custom.crd} is {state} after {timeout:g}s: "
                "its custom resources were not applied; run apply again once it is"
            )
        sleep(delay)
        delay = min(delay * 2, 1.0)


def plan_kinds(
    objects: Iterable[Mapping[str, Any] | None],
) -> dict[tuple[str, str], crds.CustomKind]:
    """The kinds the CRDs among a plan's configurations define."""
    return crds.custom_kinds(
        o
        for o in objects
        if o is not None and crds.is_crd(str(o.get("apiVersion")), str(o.get("kind")))
    )
