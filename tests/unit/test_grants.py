"""The RBAC each operation declares is merged into one rule per resource and scope, and
the GPU commands' rules reach `reconcile rbac` only through what gpu/ declares."""

from __future__ import annotations

from reconcile.desired.models import DesiredState
from reconcile.engine import rbac
from reconcile.engine.grants import Rule, Scope, merged
from reconcile.gpu import operations as gpu


def test_rules_on_the_same_resource_merge_their_verbs_and_reasons_in_declared_order() -> None:
    rules = [
        Rule("", ("nodes",), ("list", "patch"), why="plan lists"),
        Rule("", ("pods",), ("list",), why="placement"),
        Rule("", ("nodes",), ("watch", "get"), why="watch follows"),
        Rule("", ("nodes",), ("get",)),
        Rule("", ("nodes",), ("get",), ("one",), why="by name"),
        Rule("", ("nodes",), ("get",), where="default"),
        Rule("", ("nodes",), ("get",), where=Scope.OWN_NAMESPACE),
    ]

    assert merged(rules) == [
        Rule("", ("nodes",), ("get", "list", "patch", "watch"), why="plan lists; watch follows"),
        Rule("", ("pods",), ("list",), why="placement"),
        Rule("", ("nodes",), ("get",), ("one",), why="by name"),
        Rule("", ("nodes",), ("get",), where="default"),
        Rule("", ("nodes",), ("get",), where=Scope.OWN_NAMESPACE),
    ]


def test_the_engine_alone_grants_no_drain_and_gpu_rules_add_it_and_the_gate_jobs() -> None:
    def granted(rules: list[Rule]) -> set[tuple[str, str]]:
        return {(resource, verb) for r in rules for resource in r.resources for verb in r.verbs}

    engine = granted(rbac.cluster_rules(DesiredState()))
    with_gpu = granted(rbac.cluster_rules(DesiredState(), gpu.RBAC))

    assert ("pods/eviction", "create") not in engine
    assert ("poddisruptionbudgets", "list") not in engine
    assert with_gpu - engine == {
        ("pods", "get"),
        ("pods/eviction", "create"),
        ("poddisruptionbudgets", "list"),
        ("jobs", "create"),
        ("jobs", "get"),
    }


def test_rules_for_the_service_accounts_namespace_land_in_its_role() -> None:
    roles = rbac.namespace_rules(DesiredState(), "ops")

    assert sorted(roles) == ["default", "ops"]
    assert {r.resources for r in roles["ops"]} == {("leases",)}
    assert {r.resources for r in roles["default"]} == {("configmaps",), ("events",)}
