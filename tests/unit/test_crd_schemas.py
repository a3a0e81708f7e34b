"""The structural schema rules of apiextensions-apiserver and kube-openapi, offline: each
expectation is what a v1.36 kube-apiserver answered to the same custom resource
(`kubectl apply --server-side --dry-run=server`, or `create --dry-run=server` for the list
types, which server-side apply refuses earlier in its own words)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from reconcile.desired.reader import load_desired
from reconcile.engine.objects.plan import desired_diagnostics
from reconcile.kube import crds, regexp

PROPERTIES: dict[str, Any] = {
    "size": {"type": "integer", "format": "int32", "multipleOf": 2},
    "ratio": {"type": "number", "multipleOf": 0.1},
    "mode": {"type": "string", "default": "safe", "enum": ["fast", "safe"]},
    "num": {"type": "integer", "enum": [1, 2]},
    "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3, "minLength": 2},
    "word": {"type": "string", "pattern": "^[a-z]+$"},
    "surge": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+%?$", "maxLength": 3},
    "tags": {
        "type": "array",
        "x-kubernetes-list-type": "set",
        "items": {"x-kubernetes-int-or-string": True},
    },
    "nums": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "number"}},
    "objs": {
        "type": "array",
        "x-kubernetes-list-type": "set",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
    "ports": {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
        },
    },
    "mports": {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name", "proto"],
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "proto": {"type": "string", "default": "TCP"},
            },
        },
    },
    "labels": {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 2,
        "additionalProperties": {"type": "string"},
    },
    "email": {"type": "string", "format": "email"},
    "host": {"type": "string", "format": "hostname"},
    "ip": {"type": "string", "format": "ipv4"},
    "dur": {"type": "string", "format": "duration"},
    "dt": {"type": "string", "format": "date-time"},
    "q": {"type": "string", "format": "quantity"},
    "u": {"type": "string", "format": "uuid"},
    "weird": {"type": "string", "format": "foo-bar"},
    "uni": {"type": "string", "pattern": r"^\p{L}+\z"},
    "ci": {"type": "string", "pattern": "^(?i)(abort|warn)?$"},
    "slow": {"type": "string", "pattern": "^(a+)+$"},
    "nn": {"type": "string", "default": "x"},
    "emb": {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
    },
    "free": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"typed": {"type": "object", "properties": {"a": {"type": "string"}}}},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"spec": {"type": "object", "properties": PROPERTIES}},
}


def _crd(scope: str = "Namespaced", schema: dict[str, Any] = SCHEMA) -> dict[str, Any]:
    version = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [version],
        },
    }


def _widget(spec: dict[str, Any], name: str = "w") -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def _kind(scope: str = "Namespaced") -> crds.CustomKind:
    [kind] = crds.custom_kinds([_crd(scope)]).values()
    return kind


def _errors(spec: dict[str, Any]) -> list[str]:
    return sorted(str(e) for e in crds.validate_custom(_kind(), _widget(spec)))


def test_unknown_fields_are_refused_as_server_side_apply_refuses_them() -> None:
    spec = {
        "foo": 1,
        "free": {"x": 1, "typed": {"b": 1}},
        "emb": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "foo": 1}, "x": 1},
    }
    assert crds.unknown_fields(SCHEMA, _widget(spec)) == [
        ("spec", "foo"),
        ("spec", "free", "typed", "b"),
        ("spec", "emb", "metadata", "foo"),
        ("spec", "emb", "x"),
    ]
    assert crds.apply_error(_kind(), _widget({"foo": 1})) == (
        "failed to create typed patch object (default/w; example.com/v1, Kind=Widget): "
        ".spec.foo: field not declared in schema"
    )
    ok = {"free": {"x": {"y": 1}}, "emb": {"apiVersion": "v1", "kind": "X", "metadata": {}}}
    assert crds.apply_error(_kind(), _widget(ok)) is None


def test_numbers_multiple_of_format_ranges_and_enums_after_conversion() -> None:
    assert _errors({"size": 3, "ratio": 0.3}) == [
        "spec.size: Invalid value: 3: spec.size in body should be a multiple of 2"
    ]
    assert _errors({"ratio": 0.35}) == [
        "spec.ratio: Invalid value: 0.35: spec.ratio in body should be a multiple of 0.1"
    ]
    assert _errors({"size": 3000000000}) == [
        '<nil>: Invalid value: "": Checked value must be of type integer with format int32 '
        "in spec.size"
    ]
    assert _errors({"num": 1.0}) == []
    assert _errors({"num": 3}) == ['spec.num: Unsupported value: 3: supported values: "1", "2"']


def test_strings_count_runes_and_stop_at_the_first_failure() -> None:
    assert _errors({"name": "abcd"}) == ["spec.name: Too long: may not be more than 3 bytes"]
    assert _errors({"name": "é"}) == [
        'spec.name: Invalid value: "é": spec.name in body should be at least 2 chars long'
    ]
    assert _errors({"name": "ééé"}) == [
        "spec.name: Invalid value: \"ééé\": spec.name in body should match '^[a-z]+$'"
    ]


def test_int_or_string_value_validations_apply_to_the_string_branch() -> None:
    assert _errors({"surge": "25%"}) == []
    assert _errors({"surge": 12345}) == []
    assert _errors({"surge": "lot"}) == [
        "spec.surge: Invalid value: \"lot\": spec.surge in body should match '^[0-9]+%?$'"
    ]


def test_patterns_are_go_regexps_searched_in_linear_time() -> None:
    assert _errors({"word": "abc\n"}) == [
        "spec.word: Invalid value: \"abc\\n\": spec.word in body should match '^[a-z]+$'"
    ]
    assert _errors({"uni": "héllo", "ci": "WARN", "word": "xabcx"}) == []
    started = time.monotonic()
    assert len(_errors({"slow": "a" * 36 + "!"})) == 1
    assert time.monotonic() - started < 1
    assert _errors({"uni": "h1", "ci": "x"}) == [
        "spec.ci: Invalid value: \"x\": spec.ci in body should match '^(?i)(abort|warn)?$'",
        "spec.uni: Invalid value: \"h1\": spec.uni in body should match '^\\p{L}+\\z'",
    ]


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("(a", "missing closing ): `(a`"),
        ("\\C", "invalid escape sequence: `\\C`"),
        ("a{1001}", "invalid repeat count: `{1001}`"),
        ("[z-a]", "invalid character class range: `z-a`"),
        ("a**", "invalid nested repetition operator: `**`"),
        ("\\8", "invalid escape sequence: `\\8`"),
        ("(?P=n)", "invalid or unsupported Perl syntax: `(?P`"),
        ("(?<n>a)", None),
        ("\\\\C", None),
    ],
)
def test_patterns_compile_as_go_compiles_them(pattern: str, error: str | None) -> None:
    expected = None if error is None else f"error parsing regexp: {error}"
    assert regexp.compile_error(pattern) == expected


def test_list_types_set_and_map_are_unique_with_the_servers_messages() -> None:
    assert _errors({"tags": [1, "1", 1, 2, 2, 2]}) == [
        "spec.tags[2]: Duplicate value: 1",
        "spec.tags[4]: Duplicate value: 2",
    ]
    assert _errors({"nums": [1, 1.0, 1.5, 1.5]}) == ["spec.nums[3]: Duplicate value: 1.5"]
    assert _errors({"objs": [{"a": 1}, {"a": 1}]}) == ['spec.objs[1]: Duplicate value: {"a":1}']
    # A missing key is its own value: the two items without a name are duplicates.
    assert _errors({"ports": [{"port": 1}, {"port": 2}, {"name": "a"}, {"name": "a"}]}) == [
        "spec.ports[0].name: Required value",
        "spec.ports[1].name: Required value",
        "spec.ports[1]: Duplicate value: {}",
        'spec.ports[3]: Duplicate value: {"name":"a"}',
    ]
    assert _errors({"ports": [1]}) == [
        'spec.ports[0]: Invalid value: "integer": spec.ports[0] in body must be of type object: '
        '"integer"',
        "spec.ports[0]: Invalid value: 1: must be an object for an array of list-type map",
    ]
    # Defaults first: {"name": "a"} is {"name": "a", "proto": "TCP"}.
    mports = [{"name": "a"}, {"name": "a", "proto": "TCP"}, {"name": "b", "proto": "UDP"}]
    assert _errors({"mports": [*mports, {"name": "b", "proto": "UDP"}]}) == [
        'spec.mports[1]: Duplicate value: {"name":"a","proto":"TCP"}',
        'spec.mports[3]: Duplicate value: {"name":"b","proto":"UDP"}',
    ]


def test_min_and_max_properties() -> None:
    assert _errors({"labels": {}}) == [
        "spec.labels: Invalid value: 0: spec.labels in body should have at least 1 properties"
    ]
    assert _errors({"labels": {"a": "x", "b": "y", "c": "z"}}) == [
        "spec.labels: Too many: 3: must have at most 2 items"
    ]


def test_nulls_with_defaults_are_defaulted_first() -> None:
    assert _errors({"mode": None, "nn": None}) == []
    assert _errors({"name": None}) == [
        'spec.name: Invalid value: "null": spec.name in body must be of type string: "null"'
    ]


def test_the_formats_the_server_checks_and_no_others() -> None:
    spec = {
        "email": "nope",
        "host": "-x-",
        "ip": "1.2.3",
        "dur": "5 lightyears",
        "dt": "yesterday",
        "q": "lots",
        "u": "x",
        "weird": "anything",
    }
    assert _errors(spec) == [
        'spec.dt: Invalid value: "yesterday": spec.dt in body must be of type date-time: "yesterday"',
        'spec.dur: Invalid value: "5 lightyears": spec.dur in body must be of type duration: '
        '"5 lightyears"',
        'spec.email: Invalid value: "nope": spec.email in body must be of type email: "nope"',
        'spec.host: Invalid value: "-x-": spec.host in body must be of type hostname: "-x-"',
        'spec.ip: Invalid value: "1.2.3": spec.ip in body must be of type ipv4: "1.2.3"',
        'spec.u: Invalid value: "x": spec.u in body must be of type uuid: "x"',
    ]
    good = {
        "email": "a@b.c",
        "host": "example.com",
        "ip": "10.0.0.1",
        "dur": "1h30m",
        "dt": "2026-01-02T03:04:05Z",
        "u": "123e4567-e89b-12d3-a456-426614174000",
    }
    assert _errors(good) == []


def test_embedded_resources_need_apiversion_and_kind_and_valid_labels() -> None:
    assert _errors({"emb": {"metadata": {"name": "a"}}}) == [
        "spec.emb.apiVersion: Required value",
        "spec.emb.kind: Required value",
    ]
    [error] = _errors(
        {
            "emb": {
                "apiVersion": "v1",
                "kind": "X",
                "metadata": {"name": "A_b", "labels": {"bad key!": "x"}},
            }
        }
    )
    assert error.startswith('spec.emb.metadata.labels: Invalid value: "bad key!": name part must')


def test_metadata_name_is_a_dns_subdomain() -> None:
    [(error, path)] = crds.metadata_errors(_kind(), _widget({}, name="Bad_Name"))
    assert str(error).startswith(
        'metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist'
    )
    assert path == ("metadata", "name")
    cluster = crds.metadata_errors(_kind("Cluster"), _widget({}))
    assert [str(e) for e, _ in cluster] == [
        "metadata.namespace: Forbidden: not allowed on this type"
    ]


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
                word: {type: string, pattern: '^[a-z]+$'}
                bad: {type: string, pattern: '(a'}
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
  namespace: default
spec:
  word: "abc\\n"
  colour: red
"""


def test_validate_shows_each_refusal_at_its_file_line_and_column(tmp_path: Path) -> None:
    workloads = tmp_path / "desired" / "workloads"
    workloads.mkdir(parents=True)
    (workloads / "widgets.yaml").write_text(CRD_YAML)
    state, problems = load_desired(tmp_path / "desired")
    assert problems == []
    found = sorted(str(d) for d in desired_diagnostics(state))
    assert any(
        "widgets.yaml:21:46: " in d
        and "spec.validation.openAPIV3Schema.properties[spec].properties[bad].pattern: "
        'Invalid value: "(a": must be a valid regular expression, but isn\'t: '
        "error parsing regexp: missing closing ): `(a`"
        in d
        for d in found
    ), found
    assert any(
        "widgets.yaml:29:9: " in d and "spec.word in body should match '^[a-z]+$'" in d
        for d in found
    ), found
    assert any(
        "widgets.yaml:30:3: " in d and ".spec.colour: field not declared in schema" in d
        for d in found
    ), found
