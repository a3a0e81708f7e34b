"""Resource fit: a pod's effective request as component-helpers computes it, the
scheduler's reasons per node, every replica taking its share, fragmentation in words,
and the outcome that depends on where other workloads land said as such."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.cli.output import placement_line
from reconcile.desired.models import DesiredState, Manifest
from reconcile.diagnostics import Source
from reconcile.engine.capacity import PodTemplate, RunningPod, place, place_all, running_pods
from reconcile.engine.placement import impact
from reconcile.kube.quantity import QuantityError, parse_quantity
from reconcile.kube.resources import insufficient, pod_requests, resources
from reconcile.kube.scheduler import NodeView


def _container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if requests is not None:
        spec["requests"] = requests
    if limits is not None:
        spec["limits"] = limits
    return {"name": "c", "image": "i", "resources": spec, **extra}


def _node(name: str, *, labels: dict[str, str] | None = None, **allocatable: str) -> NodeView:
    offered = {
        "pods": "110",
        **{
            k.replace("_", "/").replace("nvidia/", "nvidia.com/"): v for k, v in allocatable.items()
        },
    }
    return NodeView(
        name, {"kubernetes.io/hostname": name, **(labels or {})}, allocatable=resources(offered)
    )


def _gpus(
    count: int, replicas: int = 1, name: str = "train", kind: str = "Deployment", **spec: Any
) -> PodTemplate:
    body = {"containers": [_container(limits={"nvidia.com/gpu": count})], **spec}
    return PodTemplate(f"{kind}/ml/{name}", kind, "ml", body, {"app": name}, replicas, name=name)


# --- quantities and requests -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        ("500m", "1/2"),
        ("1Gi", "1073741824"),
        ("1e3", "1000"),
        ("1.5", "3/2"),
        ("2k", "2000"),
        ("128974848", "128974848"),
        ("129e6", "129000000"),
        ("123Mi", "128974848"),
        ("1n", "1/1000000000"),
    ],
)
def test_quantities_parse_exactly_as_the_api_server_reads_them(text: str, exact: str) -> None:
    assert str(parse_quantity(text)) == exact


@pytest.mark.parametrize("text", ["", "1 Gi", "Gi", "1.2.3", "1gb", "--1"])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_cpu_is_counted_in_millicores_rounded_up_and_the_rest_in_whole_units() -> None:
    assert resources({"cpu": "0.0001", "memory": "1.5", "nvidia.com/gpu": 2}) == {
        "cpu": 1,
        "memory": 2,
        "nvidia.com/gpu": 2,
    }


def test_a_missing_request_is_its_limit() -> None:
    spec = {"containers": [_container({"cpu": "1"}, {"cpu": "2", "memory": "1Gi"})]}
    assert pod_requests(spec) == {"cpu": 1000, "memory": 1 << 30}


def test_init_containers_count_at_their_largest_sidecars_add_to_both_phases() -> None:
    # Upstream TestPodRequestsAndLimits "restartable init container": app 1 cpu, an init
    # container of 2, then a sidecar of 1 and an init container of 2 after it (2 + 1).
    spec = {
        "initContainers": [
            _container({"cpu": "2"}),
            _container({"cpu": "1"}, restartPolicy="Always"),
            _container({"cpu": "2.5"}),
        ],
        "containers": [_container({"cpu": "1"})],
    }
    assert pod_requests(spec) == {"cpu": 3500}  # max(1 + 1, 2, 2.5 + 1)
    spec["initContainers"] = spec["initContainers"][:2]
    assert pod_requests(spec) == {"cpu": 2000}  # max(1 + 1, 2, 1)


def test_overhead_is_added_and_pod_level_requests_replace_the_containers() -> None:
    spec = {
        "containers": [_container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "resources": {"requests": {"cpu": "4"}},
    }
    assert pod_requests(spec) == {
        "cpu": 4250,
        "memory": (1 << 30) + 120 * (1 << 20),
        "nvidia.com/gpu": 1,
    }


def test_the_reasons_are_the_schedulers_one_per_shortfall() -> None:
    allocatable = resources({"cpu": "2", "memory": "1Gi", "pods": "1", "nvidia.com/gpu": "1"})
    used = resources({"cpu": "1", "pods": "1"})
    request = resources({"cpu": "2", "memory": "512Mi", "nvidia.com/gpu": "2"})
    assert insufficient(request, allocatable, used) == [
        "Too many pods",
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
    ]
    assert insufficient({}, allocatable, {"pods": 0}) == []


# --- one workload --------------------------------------------------------------------------


def test_a_pod_that_fits_nowhere_gets_the_schedulers_histogram() -> None:
    nodes = [
        _node("a", cpu="8", nvidia_gpu="4"),
        _node("b", cpu="8"),
        _node("c", cpu="8", labels={"pool": "cpu"}),
    ]
    template = _gpus(8, nodeSelector={"pool": "cpu"})
    result = place(template, nodes)
    assert placement_line(result) == (
        "Deployment/ml/train 0/1 PENDING 1: 0/3 nodes are available: 1 Insufficient "
        "nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."
    )


def test_every_replica_takes_its_share_before_the_next_is_placed() -> None:
    nodes = [_node("a", nvidia_gpu="8"), _node("b", nvidia_gpu="4")]
    # Where the replicas land (two on a, one on b), then where else they could.
    assert placement_line(place(_gpus(4, replicas=3), nodes)) == (
        "Deployment/ml/train 3/3 -> a (2), b (1); candidates: a,b"
    )
    result = place(_gpus(4, replicas=4), nodes)
    assert (result.placed, result.pending) == (3, 1)
    assert result.reason == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_fragmentation_is_said_in_words() -> None:
    nodes = [_node(n, nvidia_gpu="8") for n in "abc"]
    running = [
        RunningPod(
            f"Pod/x/{n}", n, {"containers": [_container(limits={"nvidia.com/gpu": 2})]}, "x", n
        )
        for n in "abc"
    ]
    result = place(_gpus(8), nodes, running, dict.fromkeys("abc", "a100"))
    assert result.reason == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
        "(18 nvidia.com/gpu free in pool a100, at most 6 on one node)"
    )
    mixed = place(_gpus(8), nodes, running)
    assert str(mixed.reason).endswith(
        "(18 nvidia.com/gpu free on the 3 nodes it may use, at most 6 on one node)"
    )


def test_too_many_pods_counts_the_pods_already_there() -> None:
    node = NodeView("a", {}, allocatable=resources({"pods": "2", "cpu": "4"}))
    running = [RunningPod(f"Pod/x/p{i}", "a", {"containers": []}, "x", f"p{i}") for i in range(2)]
    assert place(_gpus(0), [node], running).reason == "0/1 nodes are available: 1 Too many pods."


def test_finished_pods_hold_nothing() -> None:
    items = [
        {
            "metadata": {"name": n, "namespace": "x"},
            "spec": {"nodeName": "a", "containers": [_container(limits={"nvidia.com/gpu": 8})]},
            "status": {"phase": phase},
        }
        for n, phase in (("done", "Succeeded"), ("failed", "Failed"), ("running", "Running"))
    ]
    assert [p.name for p in running_pods(items)] == ["running"]


def test_a_declared_workloads_own_pods_are_its_replicas_not_extra_load() -> None:
    node = _node("a", nvidia_gpu="8")
    owned = {
        "metadata": {
            "name": "train-7d9f-abcde",
            "namespace": "ml",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-7d9f", "controller": True}],
        },
        "spec": {"nodeName": "a", "containers": [_container(limits={"nvidia.com/gpu": 4})]},
    }
    other = {
        **owned,
        "metadata": {
            **owned["metadata"],
            "name": "other",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "trainer-x-1", "controller": True}],
        },
    }
    assert place(_gpus(4, replicas=2), [node], running_pods([owned])).ok
    assert not place(_gpus(4, replicas=2), [node], running_pods([owned, other])).ok


def test_anti_affinity_and_resources_together() -> None:
    spec: dict[str, Any] = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "train"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }
    nodes = [_node("a", nvidia_gpu="8"), _node("b", nvidia_gpu="8"), _node("c", nvidia_gpu="2")]
    result = place(_gpus(4, replicas=3, affinity=spec["affinity"]), nodes)
    assert (result.placed, result.reason) == (
        2,
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match pod "
        "anti-affinity rules.",
    )


def test_topology_spread_keeps_the_skew() -> None:
    spec: dict[str, Any] = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "train"}},
            }
        ]
    }
    nodes = [
        _node("a", nvidia_gpu="8", labels={"zone": "1"}),
        _node("b", nvidia_gpu="1", labels={"zone": "2"}),
    ]
    result = place(
        _gpus(1, replicas=4, topologySpreadConstraints=spec["topologySpreadConstraints"]), nodes
    )
    # 1 in zone 2 fills it; zone 1 may then hold at most 2 (skew 1).
    assert (result.placed, result.reason) == (
        3,
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match pod "
        "topology spread constraints.",
    )


def test_a_daemonset_waits_only_on_the_nodes_without_room() -> None:
    template = PodTemplate(
        "DaemonSet/x/agent",
        "DaemonSet",
        "x",
        {"containers": [_container({"cpu": "2"})]},
        {},
        0,
        daemon=True,
    )
    nodes = [_node("a", cpu="4"), _node("b", cpu="1"), _node("c", cpu="8")]
    result = place(template, nodes)
    assert placement_line(result) == (
        "DaemonSet/x/agent 2/3 -> a (1), c (1); PENDING 1: 0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


def test_behind_another_workload_it_fits_on_some_schedules_only() -> None:
    # 4 then 8 GPUs over nodes of 8 and 4: the 4 lands on the emptier node (a) in this
    # simulation, stranding the 8; the scheduler could put it on b.
    nodes = [_node("a", nvidia_gpu="8", cpu="8"), _node("b", nvidia_gpu="4", cpu="4")]
    small, big = _gpus(4, name="small"), _gpus(8, name="big")
    results = place_all([small, big], nodes)
    assert results[0].ok
    assert placement_line(results[1]) == (
        "Deployment/ml/big 0/1 PENDING 1 (fits on some schedules): 0/2 nodes are available: "
        "2 Insufficient nvidia.com/gpu. (8 nvidia.com/gpu free on the 2 nodes it may use, at "
        "most 4 on one node)"
    )


def test_where_room_is_not_known_fit_is_not_evaluated() -> None:
    assert place(_gpus(8, replicas=5), [NodeView("declared", {})]).ok


# --- in the plan ---------------------------------------------------------------------------


def _state(*bodies: dict[str, Any]) -> DesiredState:
    return DesiredState(
        manifests=tuple(Manifest(b, Source("desired/workloads/w.yaml", 1, 1)) for b in bodies)
    )


def test_a_change_that_takes_room_away_says_before_and_after() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "t"}},
                "spec": {"containers": [_container(limits={"nvidia.com/gpu": 4})]},
            },
        },
    }
    before = [_node("a", nvidia_gpu="8")]
    after = [
        NodeView(
            "a",
            before[0].labels,
            allocatable=resources({"pods": "110", "nvidia.com/mig-1g.10gb": "56"}),
        )
    ]
    found = impact(_state(deployment), before, after, unchanged=frozenset())
    assert [(f.kind, f.message) for f in found] == [
        (
            "unschedulable",
            "no node will take it after apply (2/2 placed before): 0/1 nodes are available: "
            "1 Insufficient nvidia.com/gpu.",
        )
    ]


def test_a_node_whose_room_shrinks_under_its_running_pods_blocks_apply() -> None:
    before = [_node("a", nvidia_gpu="8")]
    after = [
        NodeView(
            "a",
            before[0].labels,
            allocatable=resources({"pods": "110", "nvidia.com/mig-1g.10gb": "56"}),
        )
    ]
    pod = RunningPod(
        "Pod/ml/job", "a", {"containers": [_container(limits={"nvidia.com/gpu": 2})]}, "ml", "job"
    )
    found = impact(DesiredState(), before, after, unchanged=frozenset(), pods=[pod])
    assert [(f.kind, f.subject, f.blocksApply) for f in found] == [("capacity-stranded", "a", True)]
    assert found[0].message.startswith(
        "its running pods request 2 nvidia.com/gpu (it will offer 0, 8 now) after apply: ml/job "
        "lose what they run on"
    )


def test_fragmentation_names_the_node_group_the_nodes_are_in() -> None:
    from reconcile.desired.models import DesiredGroup, DesiredNode, LabelSelector
    from reconcile.engine.placement import placement
    from reconcile.kube.objects import LiveNode

    group = DesiredGroup(
        "a100",
        LabelSelector(matchLabels={"pool": "a100"}),
        DesiredNode("a100", {}, Source("desired/groups/a100.yaml", 1, 1)),
    )
    training = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "parallelism": 1,
            "template": {
                "spec": {
                    "nodeSelector": {"pool": "a100"},
                    "containers": [_container(limits={"nvidia.com/gpu": 8})],
                }
            },
        },
    }
    live = [
        LiveNode(n, "1", {"pool": "a100"}, allocatable={"pods": "110", "nvidia.com/gpu": "8"})
        for n in ("a", "b", "c")
    ]
    busy = [
        {
            "metadata": {"name": f"p-{n}", "namespace": "x"},
            "spec": {"nodeName": n, "containers": [_container(limits={"nvidia.com/gpu": 3})]},
        }
        for n in ("a", "b", "c")
    ]
    state = DesiredState(
        groups=(group,), manifests=(Manifest(training, Source("desired/workloads/j.yaml", 1, 1)),)
    )
    [result] = placement(state, live, busy)
    assert str(result.reason).endswith(
        "(15 nvidia.com/gpu free in pool a100, at most 5 on one node)"
    )


@pytest.mark.parametrize(
    ("extra", "feature"),
    [
        ({"schedulingGates": [{"name": "wait"}]}, "scheduling gates"),
        (
            {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
                        ]
                    }
                }
            },
            "required pod affinity",
        ),
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
            "volumes claimed from storage",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "minDomains": 3,
                        "topologyKey": "zone",
                        "labelSelector": {"matchLabels": {"app": "train"}},
                    }
                ]
            },
            "topology spread with minDomains",
        ),
    ],
)
def test_what_is_not_modelled_is_said_not_guessed(extra: dict[str, Any], feature: str) -> None:
    result = place(_gpus(1, **extra), [_node("a", nvidia_gpu="8", labels={"zone": "1"})])
    assert not result.evaluated
    assert placement_line(result).startswith(
        f"Deployment/ml/train 1/1 NOT EVALUATED: not evaluated: {feature}"
    )
    assert str(result.reason).endswith("the filters modelled place 1/1")


def test_host_ports_are_not_modelled() -> None:
    ported = {"containers": [{**_container(), "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    template = PodTemplate("Pod/ml/web", "Pod", "ml", ported, {}, 1, name="web")
    assert "host ports (NodePorts)" in str(place(template, [_node("a", cpu="1")]).reason)
