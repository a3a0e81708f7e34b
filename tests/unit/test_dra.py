"""DRA as kube-scheduler decides it: every scenario captured from the real scheduler under
tests/data/placement/dra/, replayed through reconcile.kube.dra; and the CEL environment's
Kubernetes functions one by one."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.kube import dra
from reconcile.kube.scheduler import scheduler_message

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "placement" / "dra"
DRIVER = "gpu.example.com"

# Scenarios whose pods the scheduler places with what reconcile does not model: the answer
# must say so rather than guess.
NOT_EVALUATED = {"partitionable-counters": "partitionable devices"}


def _scenarios() -> list[Path]:
    return sorted(SCENARIOS.glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def _pods(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a workload makes, in the order they are scheduled."""
    if workload["kind"] == "Pod":
        return [workload]
    replicas = int(workload["spec"].get("replicas", 1))
    template = workload["spec"]["template"]
    return [
        {
            "metadata": {
                **template.get("metadata", {}),
                "name": f"{workload['metadata']['name']}-{i}",
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        for i in range(replicas)
    ]


def _generated(text: str, namespace: str) -> str:
    """A claim name made from a template ends in five random characters upstream."""
    return re.sub(
        rf"({re.escape(namespace)}/[a-z0-9.-]+-)[a-z0-9]{{5}}\b", r"\1" + dra.GENERATED, text
    )


@pytest.mark.parametrize("path", _scenarios(), ids=lambda p: p.stem)
def test_scenario_matches_the_real_scheduler(path: Path) -> None:
    scenario = _load(path)
    expected = scenario["expected"]
    namespace = f"dra-{scenario['name']}"
    cluster = dra.Cluster.of(scenario.get("objects") or (), namespace)
    nodes = [(n["name"], dict(n.get("labels") or {})) for n in scenario["nodes"]]
    placed: dict[str, int] = {}
    forced = True
    pending: list[dra.Answer] | None = None
    for pod in _pods(scenario["workload"]):
        answers, cluster = dra.evaluate(pod, namespace, nodes, cluster)
        skipped = [a for a in answers if a.verdict is dra.Verdict.NOT_EVALUATED]
        if skipped:
            assert scenario["name"] in NOT_EVALUATED, skipped[0].reason
            assert NOT_EVALUATED[scenario["name"]] in skipped[0].reason
            return
        fitting = [a for a in answers if a.fits]
        if not fitting:
            pending = answers
            break
        forced = forced and len(fitting) == 1
        chosen = fitting[0]
        placed[chosen.node] = placed.get(chosen.node, 0) + 1
        cluster = cluster.taking(chosen, namespace)
    assert scenario["name"] not in NOT_EVALUATED
    assert sum(placed.values()) == expected["placed"]
    if forced:
        assert placed == (expected.get("nodes") or {})
    if pending is None:
        assert "message" not in expected
        return
    errors = [a for a in pending if a.verdict is dra.Verdict.ERROR]
    if errors:  # one node's error fails the whole attempt
        assert errors[0].reason == _generated(expected["message"], namespace)
        return
    verdicts = {a.verdict for a in pending}
    assert len(verdicts) == 1, pending
    verdict = verdicts.pop()
    if verdict is dra.Verdict.HELD:
        assert expected["message"] == ""  # no attempt, no condition
    elif verdict is dra.Verdict.REFUSED:
        assert expected["reason"] == f"0/{len(nodes)} nodes are available: {pending[0].reason}."
    else:
        assert verdict is dra.Verdict.UNSCHEDULABLE
        assert expected["reason"] == scheduler_message(len(nodes), (a.reason for a in pending))


def _scenario_answer(name: str, node: str) -> dra.Answer:
    scenario = _load(SCENARIOS / f"{name}.yaml")
    namespace = f"dra-{name}"
    labels = next(n["labels"] for n in scenario["nodes"] if n["name"] == node)
    cluster = dra.Cluster.of(scenario["objects"], namespace)
    return dra.allocate(scenario["workload"], namespace, node, labels, cluster)


def _devices(answer: dra.Answer) -> list[tuple[str, str]]:
    return [(d.request, str(d.id)) for c in answer.claims for d in c.devices]


def test_a_prioritized_list_takes_the_first_subrequest_that_fits() -> None:
    answer = _scenario_answer("first-available-falls-back", "n1")
    assert _devices(answer) == [("gpu/one", f"{DRIVER}/n1/gpu-0")]


def test_match_attribute_takes_two_devices_with_the_same_value() -> None:
    answer = _scenario_answer("match-attribute-numa", "n2")
    assert _devices(answer) == [("a", f"{DRIVER}/n2/gpu-0"), ("b", f"{DRIVER}/n2/gpu-1")]
    assert _scenario_answer("match-attribute-numa", "n1").reason == dra.REASON_CANNOT_ALLOCATE


def test_an_allocated_claim_holds_its_devices_and_pins_its_node() -> None:
    there = _scenario_answer("allocated-claim-pins-the-node", "n2")
    assert there.fits and there.claims[0].allocated and there.taken() == frozenset()
    elsewhere = _scenario_answer("allocated-claim-pins-the-node", "n1")
    assert elsewhere.reason == dra.REASON_NOT_AVAILABLE


def test_the_next_pod_sees_the_devices_the_first_one_took() -> None:
    scenario = _load(SCENARIOS / "one-node-has-the-gpu.yaml")
    cluster = dra.Cluster.of(scenario["objects"], "ns")
    labels = {"kubernetes.io/hostname": "n1"}
    first = dra.allocate(scenario["workload"], "ns", "n1", labels, cluster)
    assert first.taken() == {dra.DeviceId(DRIVER, "n1", "gpu-0")}
    assert first.claims[0].node_selector == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    }
    second = dra.allocate(scenario["workload"], "ns", "n1", labels, cluster.taking(first, "ns"))
    assert second.reason == dra.REASON_CANNOT_ALLOCATE


def test_a_claim_shared_by_name_is_pinned_to_the_node_of_its_first_pod() -> None:
    scenario = _load(SCENARIOS / "device-taken-by-another-claim.yaml")
    objects = [o for o in scenario["objects"] if o["kind"] != "ResourceClaimTemplate"]
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    objects.remove(claim)
    objects.append({**claim, "metadata": {"name": "shared"}, "status": {}})
    pod = copy.deepcopy(scenario["workload"])
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    cluster = dra.Cluster.of(objects, "ns")
    first = dra.allocate(pod, "ns", "n1", {}, cluster)
    assert first.fits
    cluster = cluster.taking(first, "ns")
    assert dra.allocate(pod, "ns", "n1", {}, cluster).claims[0].allocated
    assert dra.allocate(pod, "ns", "n2", {}, cluster).reason == dra.REASON_NOT_AVAILABLE


def test_a_claim_allocated_for_a_node_the_pod_cannot_use_is_given_up() -> None:
    scenario = _load(SCENARIOS / "allocated-claim-elsewhere.yaml")
    cluster = dra.Cluster.of(scenario["objects"], "ns")
    nodes: list[tuple[str, dict[str, str]]] = [("n1", {}), ("n2", {})]
    first = [dra.allocate(scenario["workload"], "ns", n, labels, cluster) for n, labels in nodes]
    assert {a.reason for a in first} == {dra.REASON_NOT_AVAILABLE}
    answers, after = dra.evaluate(scenario["workload"], "ns", nodes, cluster)
    assert [a.fits for a in answers] == [True, True]
    assert dra.DeviceId(DRIVER, "n3", "gpu-0") not in after.allocated


def test_a_pod_without_claims_fits_anywhere() -> None:
    answer = dra.allocate({"spec": {"containers": []}}, "ns", "n1", {}, dra.Cluster())
    assert answer.fits and answer.claims == ()


def test_admin_access_is_not_evaluated() -> None:
    scenario = _load(SCENARIOS / "one-node-has-the-gpu.yaml")
    objects = copy.deepcopy(scenario["objects"])
    template = next(o for o in objects if o["kind"] == "ResourceClaimTemplate")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    answer = dra.allocate(scenario["workload"], "ns", "n1", {}, dra.Cluster.of(objects, "ns"))
    assert answer.verdict is dra.Verdict.NOT_EVALUATED
    assert "adminAccess" in answer.reason


# --- CEL ------------------------------------------------------------------------------


def _device(**attributes: dict[str, Any]) -> Any:
    return dra.device_variable(
        DRIVER,
        {
            "name": "gpu-0",
            "attributes": {"model": {"string": "H100"}, **attributes},
            "capacity": {"memory": {"value": "80Gi"}, "example.com/slots": {"value": "2"}},
        },
    )


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("device.capacity['gpu.example.com'].memory.compareTo(quantity('80Gi')) == 0", True),
        ("device.capacity['gpu.example.com'].memory.compareTo(quantity('81920Mi')) == 0", True),
        ("device.capacity['gpu.example.com'].memory.compareTo(quantity('100Gi')) < 0", True),
        ("device.capacity['gpu.example.com'].memory.isGreaterThan(quantity('80Gi'))", False),
        ("device.capacity['gpu.example.com'].memory.isLessThan(quantity('0.1Ti'))", True),
        ("device.capacity['gpu.example.com'].memory == quantity('85899345920')", True),
        ("quantity('1500m').add(quantity('500m')).asInteger() == 2", True),
        ("quantity('1').sub(2).sign() == -1", True),
        ("quantity('1.5').isInteger()", False),
        ("isQuantity('2Gi') && !isQuantity('2 Gi')", True),
        ("device.capacity['example.com'].slots.asApproximateFloat() == 2.0", True),
    ],
)
def test_quantities_compare_by_value(expression: str, result: bool) -> None:
    assert dra.matches(expression, _device()) is result


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("device.attributes['gpu.example.com'].driver.isGreaterThan(semver('550.0.0'))", True),
        ("device.attributes['gpu.example.com'].driver.compareTo(semver('550.54.15')) == 0", True),
        ("device.attributes['gpu.example.com'].driver == semver('550.54.15')", True),
        ("device.attributes['gpu.example.com'].driver.major() == 550", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))", True),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))", True),
        ("semver('1.0.0+build.1') == semver('1.0.0+build.2')", True),
        ("semver('v1.2', true) == semver('1.2.0')", True),
        ("isSemver('1.02.3') || isSemver('1.2')", False),
        ("isSemver('v01.2', true)", True),
    ],
)
def test_versions_compare_as_semver(expression: str, result: bool) -> None:
    device = _device(driver={"version": "550.54.15"})
    assert dra.matches(expression, device) is result


@pytest.mark.parametrize(
    ("attributes", "expression", "result"),
    [
        ({}, "device.attributes['gpu.example.com'].model == 'H100'", True),
        (
            {"gpu.example.com/numa": {"int": 1}},
            "device.attributes['gpu.example.com'].numa == 1",
            True,
        ),
        (
            {"x.example.com/zone": {"string": "b"}},
            "device.attributes['x.example.com'].zone == 'b'",
            True,
        ),
        ({}, "device.attributes['unknown.example.com'].size() == 0", True),
        ({}, "!has(device.attributes['gpu.example.com'].family)", True),
        ({}, "device.driver == 'gpu.example.com'", True),
        ({}, "device.allowMultipleAllocations", False),
        ({"numa": {"int": 1}}, "device.attributes['gpu.example.com'].numa < 1.5", True),
        ({"numa": {"int": 1}}, "device.attributes['gpu.example.com'].numa == 1.0", True),
        ({}, "device.attributes['gpu.example.com'].model == 1", False),
        (
            {},
            "cel.bind(a, device.attributes['gpu.example.com'], a.model.lowerAscii() == 'h100')",
            True,
        ),
        ({}, "device.attributes['gpu.example.com'].model.substring(0, 1) + 'x' == 'Hx'", True),
        ({}, "'a,b,c'.split(',').join('-') == 'a-b-c' && 'abc'.indexOf('c') == 2", True),
        ({}, "false && device.attributes['gpu.example.com'].family == 'hopper'", False),
        ({}, "device.attributes['gpu.example.com'].family == 'hopper' || true", True),
    ],
)
def test_attributes_are_read_as_upstream_files_them(
    attributes: dict[str, Any], expression: str, result: bool
) -> None:
    assert dra.matches(expression, _device(**attributes)) is result


def test_a_missing_attribute_is_a_runtime_error_not_a_mismatch() -> None:
    with pytest.raises(dra.CelError, match=r"^no such key: family$"):
        dra.matches("device.attributes['gpu.example.com'].family == 'hopper'", _device())
    with pytest.raises(dra.CelError, match=r"^no such key: family$"):
        dra.matches("device.attributes['gpu.example.com']['family'] == 'hopper'", _device())


def test_the_scheduler_reports_a_runtime_error_with_the_selector_that_raised_it() -> None:
    answer = _scenario_answer("missing-attribute-is-an-error", "n1")
    assert answer.verdict is dra.Verdict.ERROR
    assert answer.reason == (
        'running "DynamicResources" filter plugin: claim dra-missing-attribute-is-an-error/'
        f"trainer-gpu-{dra.GENERATED}: selector #0: CEL runtime error: no such key: family"
    )


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.example.com'].model.find('H') == 'H'",  # regex library
        "device.attributes['gpu.example.com'].model > 1",  # wording of this error unknown
        "quantity('2 Gi') == quantity('2Gi')",
        "device.attributes['gpu.example.com'].model",  # not a bool
    ],
)
def test_what_the_environment_does_not_model_is_not_evaluated(expression: str) -> None:
    with pytest.raises(dra.NotEvaluated):
        dra.matches(expression, _device())
