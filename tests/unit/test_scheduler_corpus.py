"""The placement simulation against what the real kube-scheduler v1.36 decided: every
scenario of tests/data/placement (and its dra/ directory), whose `expected` block was
captured from a live control plane by capture.py, replayed offline through place_all."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.engine.capacity import Placement, place_all, pod_template, running_pods
from reconcile.kube import dra
from reconcile.kube.resources import resources
from reconcile.kube.scheduler import NodeView

CORPUS = Path(__file__).parents[1] / "data" / "placement"
SCENARIOS = sorted([*CORPUS.glob("*.yaml"), *CORPUS.glob("dra/*.yaml")])
DRA_KINDS = {"ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate"}


def _scenario(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _nodes(scenario: dict[str, Any]) -> list[NodeView]:
    return [
        NodeView(
            node["name"],
            {"kubernetes.io/hostname": node["name"], **(node.get("labels") or {})},
            bool(node.get("unschedulable")),
            tuple(node.get("taints") or ()),
            resources(node.get("allocatable") or {}),
        )
        for node in scenario.get("nodes") or ()
    ]


def _placed(scenario: dict[str, Any]) -> Placement:
    objects = scenario.get("objects") or []
    workload = dict(scenario["workload"])
    workload["metadata"] = {"namespace": "default", **workload["metadata"]}
    template = pod_template(workload)
    assert template is not None
    pods = [
        {**o, "metadata": {"namespace": "default", **o["metadata"]}}
        for o in objects
        if o["kind"] == "Pod"
    ]
    claims = None
    if any(o["kind"] in DRA_KINDS for o in objects) or template.spec.get("resourceClaims"):
        claims = dra.Cluster.of(objects, "default")
    runtime_classes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "RuntimeClass"}
    return place_all(
        [template], _nodes(scenario), running_pods(pods), None, claims, runtime_classes
    )[0]


def _named(message: str) -> str:
    """A claim as the scheduler names it, without what differs between a capture and
    here: the capture's namespace, and the random end of a name made from a template."""
    message = re.sub(r"claim [^/\s]+/", "claim ", message)
    return re.sub(r"-(?:[a-z0-9]{5}|<generated>):", "-*:", message)


def _wanted(scenario: dict[str, Any], result: Placement) -> int:
    """How many pods the controller made: a StatefulSet that starts its pods in order
    (OrderedReady, the default) makes the next only once the one before runs."""
    workload = scenario["workload"]
    ordered = (workload.get("spec") or {}).get("podManagementPolicy", "OrderedReady")
    if workload["kind"] == "StatefulSet" and ordered == "OrderedReady":
        return min(result.wanted, result.placed + 1)
    return result.wanted


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(CORPUS)))
def test_the_simulation_decides_as_the_real_scheduler(path: Path) -> None:
    scenario = _scenario(path)
    expected = scenario.get("expected") or {}
    if expected.get("wanted") is None:
        pytest.skip("no outcome captured from the real scheduler yet")
    result = _placed(scenario)
    if not result.evaluated:  # the scheduler uses what is not modelled: said, not guessed
        assert str(result.reason).startswith("not evaluated: ")
        assert result.placed < expected["wanted"] or expected["placed"] == expected["wanted"]
        return
    if expected.get("message") == "":  # held back before scheduling: no condition at all
        assert (result.placed, str(result.reason).startswith("held back")) == (0, True)
        return
    assert (_wanted(scenario, result), result.placed) == (expected["wanted"], expected["placed"])
    if expected.get("reason"):
        assert _named(str(result.reason).split(" (")[0]) == _named(expected["reason"])
    if expected.get("nodes") is not None:
        assert dict(Counter(result.landed)) == {k: v for k, v in expected["nodes"].items() if v}
