"""Custom resources beside their CRDs: offline schema validation at the field's line,
planning before the CRD is served, apply waiting for it, and the CRD prune guard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconcile.desired.models import DesiredState, Manifest
from reconcile.desired.reader import load_desired
from reconcile.diagnostics import Invalid, Source
from reconcile.engine.objects import custom
from reconcile.engine.objects.apply import apply_objects, preflight_objects
from reconcile.engine.objects.plan import desired_configs, desired_diagnostics, plan_objects
from reconcile.engine.plan import ObjectAction, Plan, PlanOptions
from reconcile.kube import crds
from tests.fake import CRDS, FakeCluster

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "format": "int32"},
                "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                "port": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "since": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "limits": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        }
    },
}


def _crd(kind: str = "Widget", schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def _widget(spec: dict[str, Any], name: str = "w") -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def _errors(spec: dict[str, Any]) -> list[str]:
    [widget] = crds.custom_kinds([_crd()]).values()
    return [str(e) for e in crds.validate_custom(widget, _widget(spec))]


def test_a_valid_custom_resource_has_no_errors() -> None:
    spec = {"size": 2, "port": "http", "note": None, "since": "2026-01-02T03:04:05Z"}
    assert _errors({**spec, "extra": {"any": {"thing": 1}}, "limits": {"a": 1}}) == []
    assert _errors({"size": 2, "port": 8080, "tags": ["a"]}) == []


def test_types_required_enums_formats_and_bounds_are_the_servers() -> None:
    assert _errors({"size": "two"}) == [
        'spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"'
    ]
    assert _errors({}) == ["spec.size: Required value"]
    assert _errors({"size": 1, "mode": "slow"}) == [
        'spec.mode: Unsupported value: "slow": supported values: "fast", "safe"'
    ]
    assert _errors({"size": 0}) == [
        "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"
    ]
    assert _errors({"size": 1, "since": "yesterday"}) == [
        'spec.since: Invalid value: "yesterday": spec.since in body must be of type date-time: '
        '"yesterday"'
    ]
    assert _errors({"size": 1, "port": 1.5}) == [
        'spec.port: Invalid value: "number": spec.port in body must be of type integer,string: '
        '"number"'
    ]
    assert _errors({"size": 1, "tags": [1], "limits": {"a": "x"}}) == [
        'spec.tags[0]: Invalid value: "integer": spec.tags[0] in body must be of type string: '
        '"integer"',
        'spec.limits.a: Invalid value: "string": spec.limits.a in body must be of type integer: '
        '"string"',
    ]


def test_null_is_refused_unless_nullable_or_defaulted() -> None:
    """defaulting/algorithm.go runs first: a non-nullable null with a default takes it."""
    assert _errors({"size": 1, "note": None}) == []
    assert _errors({"size": 1, "since": None}) == [
        'spec.since: Invalid value: "null": spec.since in body must be of type string: "null"'
    ]
    assert _errors({"size": 1, "mode": None}) == []


def test_defaults_are_applied_before_validation_and_for_the_stored_object() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "required": ["mode"],
                "properties": {"mode": {"type": "string", "default": "safe"}},
            }
        },
    }
    [widget] = crds.custom_kinds([_crd(schema=schema)]).values()
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert crds.validate_custom(widget, body) == []
    assert crds.defaulted(widget.schema, body)["spec"] == {"mode": "safe"}


def test_unknown_fields_are_pruned_except_below_preserve_unknown_fields() -> None:
    obj = _widget({"size": 1, "colour": "red", "extra": {"free": 1}})
    assert crds.unknown_fields(SCHEMA, obj) == [("spec", "colour")]


def _write(tmp_path: Path, text: str) -> Path:
    workloads = tmp_path / "desired" / "workloads"
    workloads.mkdir(parents=True)
    (workloads / "widgets.yaml").write_text(text)
    return tmp_path / "desired"


CRD_YAML = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
---
"""


def test_validate_reports_a_schema_error_at_the_fields_line(tmp_path: Path) -> None:
    desired = _write(
        tmp_path,
        CRD_YAML + "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
        "  namespace: default\nspec:\n  size: big\n  colour: red\n",
    )
    state, problems = load_desired(desired)
    assert problems == []
    found = sorted(str(d) for d in desired_diagnostics(state))
    assert any(
        ":28:9: " in d and "spec.size in body must be of type integer" in d for d in found
    ), found
    assert any(
        ":29:3: " in d and ".spec.colour: field not declared in schema" in d for d in found
    ), found


def test_an_empty_key_where_the_schema_wants_an_object_says_what_to_write(
    tmp_path: Path,
) -> None:
    """The GPU Operator's sample ClusterPolicy has `validator: {plugin: }`: a null."""
    crd = CRD_YAML.replace(
        "                size: {type: integer}\n",
        "                size: {type: integer}\n"
        "                validator:\n"
        "                  type: object\n"
        "                  properties: {plugin: {type: object}}\n",
    )
    desired = _write(
        tmp_path,
        crd + "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
        "  namespace: default\nspec:\n  validator:\n    plugin:\n",
    )
    state, problems = load_desired(desired)
    assert problems == []
    [found] = desired_diagnostics(state)
    assert found.source is not None and found.source.line == 32
    assert 'spec.validator.plugin in body must be of type object: "null"' in found.message
    assert found.detail.startswith("write {} or remove the key; the schema of example.com/v1")


def _manifest(body: dict[str, Any]) -> Manifest:
    return Manifest(body, Source("desired/workloads/w.yaml", 1, 1))


def test_a_custom_resource_whose_crd_is_only_in_the_tree_plans_as_a_create() -> None:
    cluster = FakeCluster()
    state = DesiredState(manifests=(_manifest(_crd()), _manifest(_widget({"size": 1}))))
    planning = plan_objects(state, cluster, PlanOptions())
    assert [(o.kind, o.action) for o in planning.objects] == [
        ("CustomResourceDefinition", ObjectAction.CREATE),
        ("Widget", ObjectAction.CREATE),
    ]
    [note] = planning.findings
    assert (note.kind, note.blocksApply, note.subject) == ("not-dry-run", False, "Widget/default/w")
    # A saved plan's objects are dry-run before anything is written: the custom resource
    # is left for after its CRD.
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    assert preflight_objects(plan, cluster, saved=True) == []


def test_apply_creates_the_crd_then_waits_until_served_then_its_resources() -> None:
    cluster = FakeCluster()
    cluster.establish_crds = False
    state = DesiredState(manifests=(_manifest(_crd()), _manifest(_widget({"size": 1}))))
    planning = plan_objects(state, cluster, PlanOptions())
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    waited = []

    def establish_later(crd: crds.CustomKind, cluster_: Any, *, timeout: float) -> None:
        waited.append(crd.crd)
        cluster.establish(crd.crd)
        real_wait(crd, cluster_, timeout=timeout)

    real_wait = custom.wait_served
    custom.wait_served = establish_later  # type: ignore[assignment]
    try:
        results = apply_objects(plan, cluster, saved=False, configs=desired_configs(state))
    finally:
        custom.wait_served = real_wait
    assert [r.error for r in results if r.error] == []
    assert waited == ["widgets.example.com"]
    assert [w for w in cluster.writes if w[0] == "apply"][-2:] == [
        ("apply", "widgets/default/w"),
        ("apply", "configmaps/default/reconcile-inventory"),
    ]


def test_a_crd_never_established_stops_the_apply_before_its_resources() -> None:
    cluster = FakeCluster()
    cluster.establish_crds = False
    state = DesiredState(manifests=(_manifest(_crd()), _manifest(_widget({"size": 1}))))
    planning = plan_objects(state, cluster, PlanOptions())
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    results = apply_objects(plan, cluster, saved=False, served_wait=0.2)
    assert [r.changed is not None for r in results] == [True, False]
    assert "widgets.example.com is not Established after 0.2s" in str(results[1].error)
    assert cluster.get_object(CRDS, "", "widgets.example.com") is not None
    assert not any("widgets/" in w[1] for w in cluster.writes)


def test_a_resource_rejected_after_the_wait_stops_everything_after_it() -> None:
    cluster = FakeCluster()
    state = DesiredState(
        manifests=(
            _manifest(_crd()),
            _manifest(_widget({"size": 1}, name="a")),
            _manifest(_widget({"size": 1}, name="b")),
        )
    )
    planning = plan_objects(state, cluster, PlanOptions())
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    applying = cluster.apply_object

    def refusing_b(resource: Any, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        if body["metadata"]["name"] == "b":
            raise Invalid(422, "Invalid", 'Widget.example.com "b" is invalid: spec.size: ...')
        return applying(resource, body, **options)

    cluster.apply_object = refusing_b  # type: ignore[method-assign]
    results = apply_objects(plan, cluster, saved=False)
    assert [(r.id, bool(r.error)) for r in results] == [
        ("CustomResourceDefinition/widgets.example.com", False),
        ("Widget/default/b", True),
    ]
    assert not any("widgets/" in w[1] for w in cluster.writes)


def test_a_crd_is_not_pruned_while_resources_of_it_remain() -> None:
    cluster = FakeCluster()
    crd, widget = _manifest(_crd()), _manifest(_widget({"size": 1}))
    state = DesiredState(manifests=(crd, widget))
    planning = plan_objects(state, cluster, PlanOptions())
    plan = Plan(objects=tuple(planning.objects), inventory=planning.inventory)
    assert not any(r.error for r in apply_objects(plan, cluster, saved=False))
    # The Widget is no longer declared but is kept (not ours to prune any more).
    live = cluster.list_objects(custom.resource(next(iter(custom.tree_kinds([crd]).values()))))
    assert [w["metadata"]["name"] for w in live] == ["w"]
    pruning = plan_objects(DesiredState(manifests=(widget,)), cluster, PlanOptions.of(prune=True))
    [finding] = [f for f in pruning.findings if f.kind == "prune-crd-in-use"]
    assert finding.blocksApply
    assert "Widget/default/w" in finding.message
    # Pruned together, the resources go first (reverse order) and nothing blocks.
    pruning = plan_objects(
        DesiredState(manifests=(_manifest(_widget({"size": 1}, name="x")),)),
        cluster,
        PlanOptions.of(prune=True, allowEmptyPrune=True),
    )
    assert not [f for f in pruning.findings if f.kind == "prune-crd-in-use"]
