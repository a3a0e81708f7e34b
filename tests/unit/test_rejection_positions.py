"""A rejection by the API server placed at the line of the field it names, in every form
the server writes field paths, with the fix for a null where an object is required."""

from __future__ import annotations

import pytest

from reconcile.desired.models import Manifest
from reconcile.desired.problems import manifest_path
from reconcile.desired.yamlpos import parse_yaml
from reconcile.diagnostics import ApiError, Invalid, Source
from reconcile.engine.objects.plan import null_hint, rejected_at, rejected_fields

FILE = "desired/workloads/gpu.yaml"
TEXT = """\
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata:
  name: gpu-cluster-policy
  labels:
    nvidia.com/gpu.product: A100
spec:
  validator:
    plugin:
    repository: nvcr.io
  template:
    spec:
      containers:
        - name: side
          image: busybox
        - name: web
          image: nginx
          ports:
            - containerPort: 80
              protocol: TCP
          resources:
            limits: "x"
"""


def _manifest() -> Manifest:
    [doc], problems = parse_yaml(TEXT, FILE)
    assert problems == []
    return Manifest(doc.data, doc.at(()), doc.values, doc.keys)


@pytest.mark.parametrize(
    ("field", "path"),
    [
        ("spec.validator.plugin", ("spec", "validator", "plugin")),
        (
            "spec.template.spec.containers[1].image",
            ("spec", "template", "spec", "containers", 1, "image"),
        ),
        (
            "metadata.labels[nvidia.com/gpu.product]",
            ("metadata", "labels", "nvidia.com/gpu.product"),
        ),
        (
            '.spec.template.spec.containers[name="web"].resources.limits',
            ("spec", "template", "spec", "containers", 1, "resources", "limits"),
        ),
        (
            '.spec.template.spec.containers[name="web"].ports[containerPort=80,protocol="TCP"]',
            ("spec", "template", "spec", "containers", 1, "ports", 0),
        ),
        # As far as the manifest has it: a field it does not write, an item it lacks.
        ("spec.validator.driver.image", ("spec", "validator")),
        (
            'spec.template.spec.containers[name="gone"].image',
            ("spec", "template", "spec", "containers"),
        ),
        ("spec.template.spec.containers[7]", ("spec", "template", "spec", "containers")),
        ("", ()),
    ],
)
def test_the_api_servers_field_paths_as_paths_into_the_manifest(
    field: str, path: tuple[str | int, ...]
) -> None:
    assert manifest_path(field, _manifest().body) == path


def test_a_cause_is_placed_at_its_key_not_at_the_document() -> None:
    error = Invalid(
        422,
        "Invalid",
        'ClusterPolicy.nvidia.com "gpu-cluster-policy" is invalid: spec.validator.plugin: '
        'Invalid value: "null": spec.validator.plugin in body must be of type object: "null"',
        (
            {
                "reason": "FieldValueTypeInvalid",
                "message": 'Invalid value: "null": spec.validator.plugin in body must be of '
                'type object: "null"',
                "field": "spec.validator.plugin",
            },
        ),
    )
    assert rejected_at(_manifest(), error) == Source(FILE, 9, 5)
    assert null_hint(error) == "write {} or remove the key"


def test_the_field_is_read_from_the_message_when_no_cause_names_it() -> None:
    crd = ApiError(422, "Invalid", 'spec.validator.plugin in body must be of type array: "null"')
    assert rejected_fields(crd) == ["spec.validator.plugin"]
    assert rejected_at(_manifest(), crd) == Source(FILE, 9, 5)
    assert null_hint(crd) == "write [] or remove the key"
    typed = ApiError(
        500,
        "InternalError",
        "failed to create typed patch object (/gpu-cluster-policy; nvidia.com/v1, "
        'Kind=ClusterPolicy): .spec.template.spec.containers[name="web"].resources.limits: '
        "expected map, got &{x}",
    )
    assert rejected_at(_manifest(), typed) == Source(FILE, 22, 13)
    assert null_hint(typed) is None


def test_a_list_item_is_placed_at_the_item_and_a_label_at_its_key() -> None:
    ports = ApiError(422, "Invalid", "", ({"field": "spec.template.spec.containers[1].ports[0]"},))
    assert rejected_at(_manifest(), ports) == Source(FILE, 19, 15)
    label = ApiError(422, "Invalid", "", ({"field": "metadata.labels[nvidia.com/gpu.product]"},))
    assert rejected_at(_manifest(), label) == Source(FILE, 6, 5)


def test_a_rejection_naming_no_field_of_the_manifest_stays_at_the_document() -> None:
    for error in (
        ApiError(422, "Invalid", "no field here"),
        ApiError(422, "Invalid", "x", ({"field": "status.phase"}, {"field": "<nil>"})),
    ):
        assert rejected_at(_manifest(), error) == Source(FILE, 1, 1)
