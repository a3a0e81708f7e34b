"""The sandbox serves the CRDs it is given as an API server does: created without a
status, then Established by its controller; its group and version in discovery; custom
resources pruned, defaulted and validated by the schema; gone with their CRD. Run on a
real cluster too (RECONCILE_TEST_KUBECONFIG), where these are the API server's answers."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import ClusterFactory
from tests.support import wait_for

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
GROUP = "sandbox.reconcile.dev"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": f"things.{GROUP}",
        "labels": {"app.kubernetes.io/managed-by": "reconcile"},
    },
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {
            "plural": "things",
            "singular": "thing",
            "kind": "Thing",
            "listKind": "ThingList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "mode": {"type": "string", "default": "safe"},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_crd_is_established_served_and_takes_its_resources_with_it(
    make_cluster: ClusterFactory,
) -> None:
    cluster = make_cluster([])
    status, created = cluster.raw("POST", CRDS, CRD)
    assert status == 201, created

    def established() -> bool:
        found = cluster.raw("GET", f"{CRDS}/things.{GROUP}")[1]
        conditions = (found.get("status") or {}).get("conditions") or ()
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(established, what="the CRD to be established")
    wait_for(
        lambda: cluster.raw("GET", f"/apis/{GROUP}/v1")[0] == 200, what="its group-version served"
    )
    status, document = cluster.raw("GET", f"/apis/{GROUP}/v1")
    assert next((r["name"], r["kind"], r["namespaced"]) for r in document["resources"]) == (
        "things",
        "Thing",
        True,
    )
    assert GROUP in [g["name"] for g in cluster.raw("GET", "/apis")[1]["groups"]]

    things = f"/apis/{GROUP}/v1/namespaces/default/things"
    thing = {"apiVersion": f"{GROUP}/v1", "kind": "Thing", "metadata": {"name": "t"}}
    status, refused = cluster.raw("POST", things, {**thing, "spec": {"size": "big"}})
    assert status == 422, refused
    assert 'spec.size in body must be of type integer: "string"' in refused["message"]
    status, stored = cluster.raw("POST", things, {**thing, "spec": {"size": 1, "colour": "red"}})
    assert status == 201, stored
    assert stored["spec"] == {"size": 1, "mode": "safe"}  # pruned, defaulted

    assert cluster.raw("DELETE", f"{CRDS}/things.{GROUP}")[0] == 200
    wait_for(lambda: cluster.raw("GET", f"{CRDS}/things.{GROUP}")[0] == 404, what="the CRD to go")
    assert cluster.raw("GET", f"/apis/{GROUP}/v1")[0] == 404


def test_server_side_apply_refuses_an_undeclared_field_and_a_crd_with_a_bad_pattern(
    make_cluster: ClusterFactory,
) -> None:
    """As a v1.36 API server answers: the typed patch refuses the field (a 500 without a
    reason) and names the namespace only as the patch gives it; a pattern Go does not compile refuses the CRD."""
    cluster = make_cluster([])
    bad = copy.deepcopy(CRD)
    schema = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["size"] = {"type": "string", "pattern": "(a"}
    status, refused = cluster.raw("POST", CRDS, bad)
    assert status == 422, refused
    assert (
        "spec.validation.openAPIV3Schema.properties[spec].properties[size].pattern: "
        'Invalid value: "(a": must be a valid regular expression, but isn\'t: '
        "error parsing regexp: missing closing ): `(a`"
    ) in refused["message"]

    assert cluster.raw("POST", CRDS, CRD)[0] == 201
    wait_for(
        lambda: cluster.raw("GET", f"/apis/{GROUP}/v1")[0] == 200, what="its group-version served"
    )
    thing = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": {"size": 1, "colour": "red"},
    }
    status, refused = cluster.raw(
        "PATCH",
        f"/apis/{GROUP}/v1/namespaces/default/things/t?fieldManager=test",
        thing,
        content_type="application/apply-patch+yaml",
    )
    assert status == 500, refused
    assert refused["message"] == (
        f"failed to create typed patch object (/t; {GROUP}/v1, Kind=Thing): "
        ".spec.colour: field not declared in schema"
    )
    assert "reason" not in refused
