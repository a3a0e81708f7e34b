"""Placement: the upstream nodeaffinity table, the scheduler's filters and words, replicas
under anti-affinity, a brute-force cross-check, and what validate refuses offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcile.cli.output import placement_line
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Severity, Source
from reconcile.engine import capacity, placement
from reconcile.engine.capacity import PodTemplate, place
from reconcile.kube import scheduler
from reconcile.kube.scheduler import NodeSelector, NodeView, preferred_score

UPSTREAM = json.loads((Path(__file__).parents[1] / "data/upstream/nodeaffinity.json").read_text())


def _node(case_node: dict[str, Any] | None) -> NodeView | None:
    if case_node is None:
        return None
    metadata = case_node.get("metadata") or {}
    return NodeView(metadata.get("name", ""), metadata.get("labels") or {})


def _cases(test: str) -> list[dict[str, Any]]:
    return [c for c in UPSTREAM["cases"] if c["test"] == test]


def _problems(found: Any) -> list[dict[str, str]]:
    return [{"type": p.type, "field": p.field, "detail": p.detail} for p in found]


@pytest.mark.parametrize("case", _cases("TestNodeSelectorMatch"), ids=lambda c: c["name"])
def test_upstream_node_selector_match(case: dict[str, Any]) -> None:
    selector = NodeSelector.parse(case["nodeSelector"])
    if case["wantErr"]:
        assert _problems(selector.problems) == case["wantErr"]
        return
    assert selector.problems == ()
    assert selector.matches(_node(case["node"])) is case["match"]


@pytest.mark.parametrize(
    "case", _cases("TestPodMatchesNodeSelectorAndAffinityTerms"), ids=lambda c: c["name"]
)
def test_upstream_pod_matches_node_selector_and_affinity_terms(case: dict[str, Any]) -> None:
    node = _node(case["node"])
    assert node is not None
    assert (
        scheduler.required_node_affinity_matches(case["pod"].get("spec") or {}, node)
        is case["match"]
    )


@pytest.mark.parametrize(
    "case", _cases("TestPreferredSchedulingTermsScore"), ids=lambda c: c["name"]
)
def test_upstream_preferred_scheduling_terms_score(case: dict[str, Any]) -> None:
    score, problems = preferred_score(case["preferredSchedulingTerms"], _node(case["node"]))
    if case["wantErr"]:
        assert _problems(problems) == case["wantErr"]
    else:
        assert (score, problems) == (case["wantScore"], [])


@pytest.mark.parametrize(
    "case", _cases("TestNodeSelectorRequirementsAsSelector"), ids=lambda c: c["name"]
)
def test_upstream_requirements_as_selector(case: dict[str, Any]) -> None:
    from reconcile.kube.scheduler import _requirements_as_selector

    selector, problems = _requirements_as_selector(case["matchExpressions"], case["path"])
    if case["wantErr"]:
        assert _problems(problems) == case["wantErr"]
    elif case["wantSelector"].get("nothing"):
        assert (
            selector is not None
            and not selector.matches({})
            and not selector.matches({"foo": "bar"})
        )
    else:
        assert str(selector) == case["wantSelector"]["string"]


# --- brute force ------------------------------------------------------------------------------

KEYS = ["a.io/x", "a.io/y", "gpu"]
VALUES = ["1", "2", "10", "v", ""]
OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


def _reference(terms: list[list[dict[str, Any]]], labels: dict[str, str]) -> bool:
    """The documented semantics, written out directly: terms OR-ed, expressions AND-ed."""

    def integer(text: str) -> int | None:
        body = text[1:] if text[:1] in "+-" else text
        return int(text) if body.isdigit() and body.isascii() else None

    def expression_matches(expression: dict[str, Any]) -> bool:
        key, operator, values = (
            expression["key"],
            expression["operator"],
            expression.get("values", []),
        )
        present = key in labels
        if operator == "In":
            return present and labels[key] in values
        if operator == "NotIn":
            return not present or labels[key] not in values
        if operator == "Exists":
            return present
        if operator == "DoesNotExist":
            return not present
        have = integer(labels[key]) if present else None
        want = integer(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want

    return any(term and all(expression_matches(e) for e in term) for term in terms)


def _expression() -> st.SearchStrategy[dict[str, Any]]:
    def build(key: str, operator: str, values: list[str]) -> dict[str, Any]:
        if operator in ("Exists", "DoesNotExist"):
            return {"key": key, "operator": operator}
        if operator in ("Gt", "Lt"):
            return {"key": key, "operator": operator, "values": [values[0] if values[0] else "1"]}
        return {"key": key, "operator": operator, "values": values}

    return st.builds(
        build,
        st.sampled_from(KEYS),
        st.sampled_from(OPERATORS),
        st.lists(st.sampled_from(VALUES), min_size=1, max_size=3),
    )


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    terms=st.lists(st.lists(_expression(), min_size=1, max_size=3), min_size=1, max_size=3),
    labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
)
def test_evaluator_agrees_with_a_brute_force_reference(
    terms: list[list[dict[str, Any]]], labels: dict[str, str]
) -> None:
    # A term that does not parse (Gt "v") is dropped: it matches nothing, as the reference says.
    selector = NodeSelector.parse({"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]})
    assert selector.matches(NodeView("n", labels)) is _reference(terms, labels)


# --- the scheduler's filters and words -------------------------------------------------------

GPU = {"gpu": "true", "kubernetes.io/hostname": "n"}


def _pod(**spec: Any) -> PodTemplate:
    return PodTemplate("Pod/ns/p", "Pod", "ns", spec, {}, 1)


def _affinity(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


def test_pending_reason_is_the_schedulers_histogram() -> None:
    nodes = [
        NodeView("a", {"gpu": "true"}, unschedulable=True),
        NodeView("b", {}),
        NodeView(
            "c",
            {"gpu": "true"},
            taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
        ),
        NodeView("d", {}),
    ]
    result = place(_pod(affinity=_affinity({"key": "gpu", "operator": "Exists"})), nodes)
    assert placement_line(result) == (
        "Pod/ns/p 0/1 PENDING 1: 0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
    )


def test_with_no_node_at_all_the_reason_is_the_schedulers_and_never_empty() -> None:
    # kube-scheduler v1.36 with no node: the PodScheduled condition's message.
    assert placement_line(place(_pod(), [])) == (
        "Pod/ns/p 0/1 PENDING 1: no nodes available to schedule pods"
    )
    daemon = PodTemplate("DaemonSet/ns/d", "DaemonSet", "ns", {}, {}, 0, daemon=True)
    assert place(daemon, []).reason == "no nodes available to schedule pods"
    assert scheduler.scheduler_message(2, []) == "0/2 nodes are available."


def _daemon_set(selector: dict[str, str]) -> DesiredState:
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-agent", "namespace": "n"},
        "spec": {"template": {"spec": {"nodeSelector": selector}}},
    }
    return DesiredState(manifests=(Manifest(body, Source("w.yaml", 1, 1)),))


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        ([], "no nodes available to schedule pods"),
        (
            [NodeView("a", {})],
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        ),
    ],
)
def test_a_daemon_set_with_no_node_yet_is_a_note(nodes: list[NodeView], reason: str) -> None:
    found = placement.impact(_daemon_set({"gpu": "true"}), nodes, nodes, unchanged=frozenset())
    assert [(f.severity, f.kind, f.subject, f.blocksApply) for f in found] == [
        (Severity.NOTE, "daemonset-no-nodes", "DaemonSet/n/gpu-agent", False)
    ]
    assert found[0].message == (
        f"no node will run it after apply ({reason}); its pods start as matching nodes join"
    )
    assert not found[0].is_error and found[0].is_note


def test_tolerations_and_the_default_not_ready_toleration() -> None:
    tainted = NodeView(
        "c",
        {"gpu": "true"},
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    )
    tolerating = _pod(
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    assert place(tolerating, [tainted]).nodes == ("c",)
    no_execute = NodeView(
        "d", {}, taints=({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},)
    )
    assert place(_pod(), [no_execute]).nodes == ("d",)  # admission tolerates it for 300 s
    not_ready = NodeView(
        "e", {}, taints=({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},)
    )
    assert place(_pod(), [not_ready]).nodes == ()
    prefer = NodeView("f", {}, taints=({"key": "x", "effect": "PreferNoSchedule"},))
    assert place(_pod(), [prefer]).nodes == ("f",)


def test_node_selector_and_affinity_must_both_hold() -> None:
    nodes = [NodeView("a", {"gpu": "true", "zone": "1"}), NodeView("b", {"gpu": "true"})]
    pod = _pod(
        nodeSelector={"zone": "1"},
        affinity=_affinity({"key": "gpu", "operator": "In", "values": ["true"]}),
    )
    assert place(pod, nodes).nodes == ("a",)


def test_an_unparseable_term_matches_nothing_but_others_still_do() -> None:
    node = NodeView("n", {"gpu": "1"})
    selector = NodeSelector.parse(
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["abc"]}]},
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["1"]}]},
            ]
        }
    )
    assert selector.matches(node)
    only_bad = NodeSelector.parse(
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["abc"]}]}
            ]
        }
    )
    assert not only_bad.matches(node)
    assert not NodeSelector.parse({"nodeSelectorTerms": [{}]}).matches(node)


def test_required_anti_affinity_on_hostname_counts_replicas() -> None:
    spec = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "trainer"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }
    template = PodTemplate(
        "Deployment/gpu-drv/trainer", "Deployment", "gpu-drv", spec, {"app": "trainer"}, 4
    )
    nodes = [NodeView(f"n{i}", {"kubernetes.io/hostname": f"n{i}"}) for i in range(3)]
    result = place(template, nodes)
    assert (result.nodes, result.pending) == (("n0", "n1", "n2"), 1)
    assert placement_line(result) == (
        "Deployment/gpu-drv/trainer 3/4 -> n0 (1), n1 (1), n2 (1); PENDING 1: "
        "0/3 nodes are available: "
        "3 node(s) didn't match pod anti-affinity rules."
    )
    assert place(template, [*nodes, NodeView("n3", {"kubernetes.io/hostname": "n3"})]).ok
    other = PodTemplate("Deployment/gpu-drv/web", "Deployment", "gpu-drv", spec, {"app": "web"}, 4)
    assert place(other, nodes).ok  # the term selects trainer pods, not its own


def test_pod_templates_of_every_workload_kind() -> None:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}
    cases = {
        "Deployment": ({"replicas": 3, "template": template}, 3),
        "StatefulSet": ({"template": template}, 1),
        "Job": ({"parallelism": 2, "template": template}, 2),
        "CronJob": ({"jobTemplate": {"spec": {"template": template}}}, 1),
        "DaemonSet": ({"template": template}, 0),
    }
    for kind, (spec, replicas) in cases.items():
        found = capacity.pod_template(
            {"kind": kind, "metadata": {"name": "w", "namespace": "n"}, "spec": spec}
        )
        assert found is not None and found.replicas == replicas and found.labels == {"app": "x"}, (
            kind
        )
    assert capacity.pod_template({"kind": "ConfigMap", "metadata": {"name": "c"}}) is None


def test_a_spec_that_is_not_an_object_has_no_pod_template() -> None:
    """A custom resource's spec may be a string (its schema refuses it, not this), and a
    workload's spec too: no pod template, never an internal error."""
    gateway_class = {"kind": "GatewayClass", "metadata": {"name": "g"}, "spec": "an object"}
    assert capacity.pod_template(gateway_class) is None
    job = capacity.pod_template({"kind": "CronJob", "metadata": {"name": "j"}, "spec": "x"})
    assert job is not None and job.spec == {}


def _manifest(spec: dict[str, Any]) -> DesiredState:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": spec,
    }
    return DesiredState(manifests=(Manifest(body, Source("w.yaml", 1, 1)),))


def test_validate_refuses_gt_with_a_non_integer() -> None:
    [problem] = placement.desired_diagnostics(
        _manifest(
            {
                "affinity": _affinity(
                    {"key": "nvidia.com/cuda.driver.major", "operator": "Gt", "values": ["5x"]}
                )
            }
        )
    )
    assert problem.severity is Severity.ERROR
    assert problem.summary == (
        "Pod \"p\": Gt '5x' on nvidia.com/cuda.driver.major is not an integer: the API server admits it, "
        "the scheduler never matches it"
    )


def test_validate_warns_on_not_in_without_an_exists_gate() -> None:
    [problem] = placement.desired_diagnostics(
        _manifest(
            {
                "affinity": _affinity(
                    {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-A10"]}
                )
            }
        )
    )
    assert problem.severity is Severity.WARNING
    assert (
        "NotIn on nvidia.com/gpu.product also matches nodes without that label" in problem.summary
    )
    gated = _affinity(
        {"key": "nvidia.com/gpu.present", "operator": "Exists"},
        {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-A10"]},
    )
    assert placement.desired_diagnostics(_manifest({"affinity": gated})) == []


def test_validate_refuses_a_selector_of_only_empty_terms() -> None:
    empty: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}
        }
    }
    [problem] = placement.desired_diagnostics(_manifest({"affinity": empty}))
    assert (
        problem.summary == 'Pod "p": every node selector term is empty: it can never be scheduled'
    )


# --- tolerations and the taint manager ---------------------------------------------------------

ML = {"key": "dedicated", "value": "ml", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"operator": "Exists"}, ML, True),  # an empty key with Exists: every taint
        ({"operator": "Exists", "effect": "NoSchedule"}, ML, False),
        ({"key": "dedicated", "operator": "Exists"}, ML, True),  # an empty effect: every effect
        ({"key": "dedicated", "value": "ml"}, ML, True),  # no operator: Equal
        ({"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}, ML, True),
        ({"key": "dedicated", "value": "cpu"}, ML, False),  # the value does not match
        ({"key": "dedicated"}, ML, False),  # Equal to the empty value
        ({"key": "dedicated"}, {"key": "dedicated", "effect": "NoExecute"}, True),
        ({"key": "other", "operator": "Exists"}, ML, False),
        ({"key": "dedicated", "operator": "Unknown"}, ML, False),
        # TaintTolerationComparisonOperators: the taint's value against the toleration's
        ({"key": "gpu", "operator": "Gt", "value": "4"}, {"key": "gpu", "value": "8"}, True),
        ({"key": "gpu", "operator": "Gt", "value": "8"}, {"key": "gpu", "value": "8"}, False),
        ({"key": "gpu", "operator": "Lt", "value": "8"}, {"key": "gpu", "value": "4"}, True),
        ({"key": "gpu", "operator": "Lt", "value": "8"}, {"key": "gpu", "value": "04"}, False),
        ({"key": "gpu", "operator": "Gt", "value": "x"}, {"key": "gpu", "value": "8"}, False),
    ],
)
def test_a_toleration_tolerates_a_taint_as_upstream_says(
    toleration: dict[str, Any], taint: dict[str, Any], tolerated: bool
) -> None:
    assert scheduler.tolerates(toleration, taint) is tolerated


def _seconds(seconds: int, **toleration: Any) -> dict[str, Any]:
    return {"effect": "NoExecute", "tolerationSeconds": seconds, **toleration}


@pytest.mark.parametrize(
    ("tolerations", "taints", "delay"),
    [
        ([], [ML], 0),  # not tolerated: at once
        ([{"key": "dedicated", "value": "cpu"}], [ML], 0),
        ([{"operator": "Exists"}], [ML], None),  # tolerated for good
        ([_seconds(60, key="dedicated", operator="Exists")], [ML], 60),
        ([_seconds(0, key="dedicated", operator="Exists")], [ML], 0),
        ([_seconds(-5, key="dedicated", operator="Exists")], [ML], 0),
        # The first toleration that matches is the one used, in the pod's order.
        ([_seconds(60, key="dedicated", operator="Exists"), {"operator": "Exists"}], [ML], 60),
        ([{"operator": "Exists"}, _seconds(60, key="dedicated", operator="Exists")], [ML], None),
        # The least tolerationSeconds over every NoExecute taint of the node.
        (
            [_seconds(300, key="a", operator="Exists"), _seconds(60, key="b", operator="Exists")],
            [{"key": "a", "effect": "NoExecute"}, {"key": "b", "effect": "NoExecute"}],
            60,
        ),
        # One untolerated NoExecute taint is at once, whatever tolerates the others.
        (
            [_seconds(300, key="a", operator="Exists")],
            [{"key": "a", "effect": "NoExecute"}, {"key": "b", "effect": "NoExecute"}],
            0,
        ),
        ([], [{"key": "a", "effect": "NoSchedule"}], None),  # only NoExecute evicts
        ([], [], None),
    ],
)
def test_when_the_taint_manager_evicts_a_running_pod(
    tolerations: list[dict[str, Any]], taints: list[dict[str, Any]], delay: int | None
) -> None:
    assert scheduler.eviction_delay({"tolerations": tolerations}, taints) == delay


def _running(name: str, node: str, phase: str = "Running", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, **spec},
        "status": {"phase": phase},
    }


def _evictions(
    before: tuple[dict[str, Any], ...],
    after: tuple[dict[str, Any], ...],
    pods: list[dict[str, Any]],
    *,
    allowed: bool = False,
) -> list[Any]:
    return placement.evictions(
        [NodeView("n", {}, taints=before)],
        [NodeView("n", {}, taints=after)],
        capacity.running_pods(pods),
        allowed=allowed,
    )


def test_a_new_no_execute_taint_names_the_pods_it_evicts_and_blocks_apply() -> None:
    pods = [
        _running("b", "n"),
        _running("a", "n", tolerations=[_seconds(60, key="dedicated", operator="Exists")]),
        _running("forever", "n", tolerations=[{"key": "dedicated", "operator": "Exists"}]),
        _running("done", "n", phase="Succeeded"),  # terminal: nothing to evict
        _running("failed", "n", phase="Failed"),
        _running("elsewhere", "m"),
    ]
    [finding] = _evictions((), (ML,), pods)
    assert (finding.severity, finding.kind, finding.subject, finding.blocksApply) == (
        Severity.ERROR,
        "eviction",
        "n",
        True,
    )
    assert finding.message == (
        "taint dedicated=ml:NoExecute evicts 2 running pod(s) that do not tolerate it (or only "
        "for their tolerationSeconds): ns/a (after 60s), ns/b; --allow-evictions accepts it"
    )
    [allowed] = _evictions((), (ML,), pods, allowed=True)
    assert (allowed.severity, allowed.blocksApply) == (Severity.WARNING, False)
    assert allowed.message.endswith("ns/a (after 60s), ns/b")


def test_a_value_change_evicts_the_pods_that_tolerated_the_old_value() -> None:
    pods = [_running("cpu-only", "n", tolerations=[{"key": "dedicated", "value": "cpu"}])]
    cpu = {**ML, "value": "cpu"}
    [finding] = _evictions((cpu,), (ML,), pods)
    assert finding.message.startswith("taint dedicated=ml:NoExecute evicts 1 running pod(s)")
    assert _evictions((cpu,), (cpu,), pods) == []  # unchanged: not this plan's doing


def test_what_does_not_evict_is_no_finding() -> None:
    pods = [_running("p", "n")]
    no_schedule = {**ML, "effect": "NoSchedule"}
    assert _evictions((), (no_schedule,), pods) == []  # the stranding check's business
    assert _evictions((ML,), (), pods) == []  # a taint removed evicts nothing
    assert _evictions((), (ML,), []) == []  # nothing runs there


def test_the_evicted_pods_named_are_bounded() -> None:
    pods = [_running(f"p{i}", "n") for i in range(8)]
    [finding] = _evictions((), ({"key": "dedicated", "effect": "NoExecute"},), pods)
    assert finding.message == (
        "taint dedicated:NoExecute evicts 8 running pod(s) that do not tolerate it: ns/p0, "
        "ns/p1, ns/p2, ns/p3, ns/p4 and 3 more; --allow-evictions accepts it"
    )
