"""Planning and rendering, without a cluster: drift, inventory, prune, stale plans, views."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from reconcile.cli.output import Format
from reconcile.cli.views import view_for
from reconcile.desired.models import DesiredNode, DesiredState
from reconcile.diagnostics import PlanRefused, ReconcileError, Severity, Source, StalePlan
from reconcile.engine import saved
from reconcile.engine.checks import Projection
from reconcile.engine.diff import Action, NodeChange, fact_drift
from reconcile.engine.facts import BY_FACT, RULES, Fact
from reconcile.engine.nodes.apply import apply_plan
from reconcile.engine.nodes.plan import INVENTORY_ANNOTATION, build_plan
from reconcile.engine.objects.apply import apply_objects
from reconcile.engine.plan import ClusterIdentity, ObjectPlan, Plan, PlanOptions
from reconcile.engine.results import ApplyResult, NodeResult, ObjectResult
from reconcile.engine.saved import check_fresh
from reconcile.gpu.checks import GpuPolicy, driver_coverage
from reconcile.gpu.provenance import label_fights
from reconcile.kube.objects import LiveNode
from tests.fake import FakeCluster

GOLDEN = Path(__file__).parents[1] / "golden"


def desired(**nodes: dict[str, str | None]) -> DesiredState:
    return DesiredState(
        nodes={
            name: DesiredNode(name, labels, Source(f"desired/nodes/{name}.yaml", 4, 9))
            for name, labels in nodes.items()
        }
    )


def live(name: str, labels: dict[str, str], rv: str = "10", **annotations: str) -> LiveNode:
    return LiveNode(name=name, resource_version=rv, labels=labels, annotations=dict(annotations))


def test_drift_compares_only_declared_keys_and_keeps_absent_apart_from_empty() -> None:
    changes = fact_drift(
        Fact.LABEL,
        {"a.io/set": "1", "a.io/empty": "", "a.io/gone": None, "a.io/same": "x"},
        {"a.io/set": "2", "a.io/gone": "", "a.io/same": "x", "a.io/other": "untouched"},
    )
    assert [(c.key, c.action, c.before, c.after, c.shown_value) for c in changes] == [
        ("a.io/empty", Action.ADD, None, "", '""'),
        ("a.io/gone", Action.REMOVE, "", None, "-"),
        ("a.io/set", Action.UPDATE, "2", "1", "1"),
    ]


def test_plan_records_resource_version_and_new_inventory() -> None:
    plan = build_plan(
        desired(n1={"a.io/x": "1", "a.io/y": None}),
        [live("n1", {"a.io/x": "0", "a.io/y": "1"}, rv="42")],
    )

    [node] = plan.nodes
    assert node.resourceVersion == "42"
    assert node.inventory == ("a.io/x",)
    assert node.patch() == {
        "metadata": {
            "labels": {"a.io/x": "1", "a.io/y": None},
            "annotations": {INVENTORY_ANNOTATION: "a.io/x"},
            "resourceVersion": "42",
        }
    }


def test_in_sync_node_is_not_in_the_plan() -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {"a.io/x": "1"})])
    assert plan.nodes == () and not plan.has_drift


def test_missing_node_is_drift() -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [])
    assert plan.has_drift
    assert [(m.name, m.source) for m in plan.missingNodes] == [("n1", "desired/nodes/n1.yaml:4:9")]


def test_prune_removes_only_what_reconcile_set_and_no_longer_declares() -> None:
    node = live(
        "n1",
        {"a.io/x": "1", "a.io/old": "1", "a.io/theirs": "1"},
        **{INVENTORY_ANNOTATION: "a.io/old,a.io/x"},
    )
    state = desired(n1={"a.io/x": "1"})

    without = build_plan(state, [node])
    assert without.nodes == ()
    assert [(p.node, p.key) for p in without.prunable] == [("n1", "a.io/old")]

    pruned = build_plan(state, [node], PlanOptions(prune=True))
    [plan] = pruned.nodes
    assert [(c.key, c.action) for c in plan.changes] == [("a.io/old", Action.REMOVE)]
    assert plan.inventory == ("a.io/x",)


def test_a_node_nothing_declares_is_pruned_by_its_inventory_and_others_are_not_planned() -> None:
    managed = live(
        "gone",
        {"a.io/old": "1", "a.io/theirs": "1"},
        **{INVENTORY_ANNOTATION: "a.io/old", "example.com/other": "x"},
    )
    untouched = live("never", {"a.io/old": "1"}, **{"example.com/other": "x"})
    state = desired(n1={"a.io/x": "1"})
    nodes = [managed, untouched, live("n1", {"a.io/x": "1"}, **{INVENTORY_ANNOTATION: "a.io/x"})]

    without = build_plan(state, nodes)
    assert without.nodes == ()
    assert [(p.node, p.key) for p in without.prunable] == [("gone", "a.io/old")]

    [plan] = build_plan(state, nodes, PlanOptions(prune=True)).nodes
    assert (plan.name, plan.source, plan.inventory) == ("gone", "", ())
    assert [(c.key, c.action, c.source) for c in plan.changes] == [
        ("a.io/old", Action.REMOVE, None)
    ]
    assert plan.patch()["metadata"] == {
        "labels": {"a.io/old": None},
        "annotations": {INVENTORY_ANNOTATION: None},
        "resourceVersion": "10",
    }


def test_prune_never_removes_a_label_the_kubelet_owns_whatever_the_inventory_says() -> None:
    node = live(
        "n1",
        {"a.io/x": "0", "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": "z1"},
        **{INVENTORY_ANNOTATION: "a.io/x,kubernetes.io/os,topology.kubernetes.io/zone"},
    )
    state = desired(n1={"a.io/x": "1"})

    assert build_plan(state, [node]).prunable == ()
    [plan] = build_plan(state, [node], PlanOptions(prune=True)).nodes
    assert [(c.key, c.action) for c in plan.changes] == [("a.io/x", Action.UPDATE)]
    assert plan.inventory == ("a.io/x",)


def test_prune_never_removes_a_controllers_taint_or_a_rollouts_mark() -> None:
    node = LiveNode(
        name="n1",
        resource_version="1",
        labels={"a.io/x": "0"},
        annotations={
            INVENTORY_ANNOTATION: "a.io/x",
            "reconcile.dev/managed-taints": "node.kubernetes.io/unschedulable:NoSchedule",
            "reconcile.dev/managed-annotations": "reconcile.dev/upgrade-target",
            "reconcile.dev/upgrade-target": "550.90.07",
        },
        taints=({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},),
    )
    state = desired(n1={"a.io/x": "1"})

    assert build_plan(state, [node]).prunable == ()
    [plan] = build_plan(state, [node], PlanOptions(prune=True)).nodes
    assert [(c.key, c.action) for c in plan.changes] == [("a.io/x", Action.UPDATE)]
    assert plan.inventory == ("a.io/x",)


def test_without_prune_the_inventory_keeps_undeclared_keys_for_later() -> None:
    node = live("n1", {"a.io/x": "0", "a.io/old": "1"}, **{INVENTORY_ANNOTATION: "a.io/old,a.io/x"})
    [plan] = build_plan(desired(n1={"a.io/x": "1"}), [node]).nodes
    assert plan.inventory == ("a.io/old", "a.io/x")


def test_owner_is_attributed_and_a_fight_with_the_writer_is_warned() -> None:
    node = LiveNode(
        name="n1",
        resource_version="1",
        labels={"nvidia.com/gpu.count": "4"},
        label_managers={"nvidia.com/gpu.count": "nfd-master"},
    )
    state = desired(n1={"nvidia.com/gpu.count": "8"})
    plan = build_plan(state, [node], policy=GpuPolicy())

    assert plan.nodes[0].changes[0].owner == "gpu-feature-discovery"
    [fight] = label_fights(Projection(state, [node], plan.nodes))
    assert (fight.severity, fight.kind) == (Severity.WARNING, "label-fight")
    assert fight.subject == "n1 nvidia.com/gpu.count"
    assert "re-asserts it on its next resync" in fight.message


def test_restoring_a_hand_edit_is_not_a_fight() -> None:
    node = LiveNode(
        name="n1",
        resource_version="1",
        labels={"nvidia.com/gpu.count": "9"},
        label_managers={"nvidia.com/gpu.count": "kubectl-label"},
    )
    state = desired(n1={"nvidia.com/gpu.count": "2"})
    plan = build_plan(state, [node], policy=GpuPolicy())
    assert list(label_fights(Projection(state, [node], plan.nodes))) == []


CLUSTER = ClusterIdentity(server="https://127.0.0.1:6443", kubeSystemUID="4f1c-uid")
TREE = "sha256:" + "ab" * 32


def test_saved_plan_round_trips(tmp_path: Path) -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {})]).bound(CLUSTER, TREE)
    plan.save(tmp_path / "plan.json")
    assert saved.load(tmp_path / "plan.json") == plan


def test_a_plan_without_what_it_was_made_from_is_not_a_saved_plan(tmp_path: Path) -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {})])
    plan.save(tmp_path / "plan.json")
    with pytest.raises(ReconcileError, match=r"\(cluster: Input should be an object\)"):
        saved.load(tmp_path / "plan.json")


@pytest.mark.parametrize("document", ["{}", '{"nodes": []}', "[]", '{"apiVersion": 1}'])
def test_documents_that_are_not_plans_are_refused_with_the_schema_message(
    tmp_path: Path, document: str
) -> None:
    (tmp_path / "plan.json").write_text(document)
    with pytest.raises(ReconcileError, match="is not a saved reconcile plan"):
        saved.load(tmp_path / "plan.json")


def test_an_edited_plan_no_longer_matches_its_digest(tmp_path: Path) -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {})]).bound(CLUSTER, TREE)
    plan.save(tmp_path / "plan.json")
    text = (tmp_path / "plan.json").read_text()
    (tmp_path / "plan.json").write_text(text.replace('"after": "1"', '"after": "2"'))
    with pytest.raises(ReconcileError, match="was changed after `reconcile plan` wrote it"):
        saved.load(tmp_path / "plan.json")


def test_a_plan_file_that_is_not_utf8_or_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_bytes(b'{"kind": "Plan", "x": "\xff\xfe"}')
    with pytest.raises(ReconcileError, match="is not a saved reconcile plan"):
        saved.load(tmp_path / "plan.json")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ReconcileError, match=r"cannot read plan .*fifo: not a regular file"):
        saved.load(tmp_path / "fifo")  # would block forever if it were opened


KEY = b"pipeline-key"


def test_a_signed_plan_verifies_only_under_its_own_key(tmp_path: Path) -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {})]).bound(CLUSTER, TREE)
    signed = saved.sign(plan, KEY)
    assert signed.signature is not None and signed.signature.startswith("hmac-sha256:")
    signed.save(tmp_path / "plan.json")
    loaded = saved.load(tmp_path / "plan.json")  # the signature is not part of the digest
    saved.check_signature(loaded, KEY, "plan.json")
    with pytest.raises(PlanRefused, match="does not verify with RECONCILE_PLAN_KEY"):
        saved.check_signature(loaded, b"another-key", "plan.json")
    with pytest.raises(PlanRefused, match="is not signed, and RECONCILE_PLAN_KEY requires"):
        saved.check_signature(plan, KEY, "plan.json")
    with pytest.raises(PlanRefused, match="is signed, but RECONCILE_PLAN_KEY is not set"):
        saved.check_signature(loaded, None, "plan.json")
    saved.check_signature(plan, None, "plan.json")  # no key, no signature: the digest alone


def test_a_resigned_edit_does_not_verify(tmp_path: Path) -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {})]).bound(CLUSTER, TREE)
    signed = saved.sign(plan, KEY)
    edited = signed.model_copy(update={"forceConflicts": True, "digest": None})
    edited = edited.model_copy(update={"digest": edited.body_digest()})  # resealed, not resigned
    with pytest.raises(PlanRefused, match="does not verify"):
        saved.check_signature(edited, KEY, "plan.json")


OPTION_FLAGS = [
    ("prune", "--prune"),
    ("allowEmptyPrune", "--allow-empty-prune"),
    ("pruneNamespaceContents", "--prune-namespace-contents"),
    ("forceConflicts", "--force-conflicts"),
    ("recreate", "--recreate"),
    ("allowMissingNodes", "--allow-missing-nodes"),
    ("allowEvictions", "--allow-evictions"),
    ("selector", "--selector"),
]


def test_every_plan_option_has_its_flag() -> None:
    assert [(f, PlanOptions.flag(f)) for f in PlanOptions.model_fields] == OPTION_FLAGS
    assert PlanOptions.of(allow_empty_prune=True, prune=True) == PlanOptions(
        prune=True, allowEmptyPrune=True
    )


def test_a_plan_records_its_options_between_its_origin_and_its_changes() -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [], PlanOptions(allowMissingNodes=True))
    assert plan.options == PlanOptions(allowMissingNodes=True)
    fields = list(Plan.model_fields)
    assert fields[: fields.index("nodes")] == [
        "apiVersion",
        "kind",
        "cluster",
        "desiredDigest",
        "digest",
        *PlanOptions.model_fields,
    ]


@pytest.mark.parametrize(("field", "flag"), [o for o in OPTION_FLAGS if o[0] != "selector"])
def test_a_saved_plan_needs_the_options_it_was_planned_with(field: str, flag: str) -> None:
    plan = Plan(cluster=CLUSTER, desiredDigest=TREE).model_copy(update={field: True})
    with pytest.raises(PlanRefused, match=f"was planned with {flag}, and apply was not given it"):
        saved.check_origin(plan, CLUSTER, TREE, PlanOptions())
    saved.check_origin(plan, CLUSTER, TREE, PlanOptions(**{field: True}))
    with pytest.raises(PlanRefused, match=f"was planned without {flag}, and apply was given it"):
        saved.check_origin(
            Plan(cluster=CLUSTER, desiredDigest=TREE), CLUSTER, TREE, PlanOptions(**{field: True})
        )


def test_a_saved_plan_needs_the_selector_it_was_planned_with() -> None:
    plan = Plan(cluster=CLUSTER, desiredDigest=TREE, selector="pool=a")
    saved.check_origin(plan, CLUSTER, TREE, PlanOptions(selector="pool=a"))
    for given, shown in ((None, "none"), ("pool=b", "pool=b")):
        with pytest.raises(
            PlanRefused, match=f"planned with --selector pool=a, and apply was given {shown}:"
        ):
            saved.check_origin(plan, CLUSTER, TREE, PlanOptions(selector=given))
    with pytest.raises(PlanRefused, match=r"planned with --selector \(none\), and apply was given"):
        saved.check_origin(
            Plan(cluster=CLUSTER, desiredDigest=TREE), CLUSTER, TREE, PlanOptions(selector="x=y")
        )


def test_differences_name_each_change_planning_does_not_give() -> None:
    state = desired(n1={"a.io/x": "1", "a.io/y": "2"})
    nodes = [live("n1", {}, rv="5")]
    replanned = build_plan(state, nodes)
    assert list(saved.differences(replanned, replanned, nodes)) == []
    [node] = replanned.nodes
    x, y = node.changes
    edited = replanned.model_copy(
        update={
            "nodes": (
                node.model_copy(update={"changes": (x.model_copy(update={"after": "9"}), y)}),
            )
        }
    )
    assert list(saved.differences(edited, replanned, nodes)) == ["n1 a.io/x 9 (planning gives 1)"]
    fewer = replanned.model_copy(update={"nodes": (node.model_copy(update={"changes": (x,)}),)})
    assert list(saved.differences(fewer, replanned, nodes)) == [
        "n1 a.io/y 2 (planned now, not in the plan)"
    ]
    # A node planning gives nothing for, and drift that appeared since (not in the plan).
    assert list(
        saved.differences(
            replanned, build_plan(state, [live("n1", {"a.io/x": "1", "a.io/y": "2"})]), nodes
        )
    ) == [
        "n1 a.io/x 1 (planning gives no change)",
        "n1 a.io/y 2 (planning gives no change)",
    ]
    assert list(saved.differences(Plan(), replanned, nodes)) == []


def test_stale_check_names_the_node_and_both_versions() -> None:
    plan = build_plan(
        desired(n1={"a.io/x": "1"}, n2={"a.io/x": "1"}),
        [live("n1", {}, rv="5"), live("n2", {}, rv="6")],
    )
    check_fresh(plan, [live("n1", {}, rv="5"), live("n2", {}, rv="6")])
    with pytest.raises(StalePlan) as raised:
        check_fresh(plan, [live("n1", {}, rv="7")])
    assert str(raised.value) == (
        "plan is stale: n1 (resourceVersion 5 -> 7), n2 (deleted) changed since the plan was made; "
        "nothing was applied. Run `reconcile plan` again."
    )
    # a node that moved but already carries exactly the planned change is not stale
    check_fresh(plan, [live("n1", {"a.io/x": "1"}, rv="9"), live("n2", {}, rv="6")])


class _DropsLabels(FakeCluster):
    """A server that silently ignores the label keys `drop` of every patch."""

    def __init__(self, drop: set[str]) -> None:
        super().__init__()
        self.drop = drop

    def patch_node(self, name: str, patch: dict[str, Any], *, dry_run: bool = False) -> LiveNode:
        metadata = dict(patch["metadata"])
        metadata["labels"] = {k: v for k, v in metadata["labels"].items() if k not in self.drop}
        return super().patch_node(name, {**patch, "metadata": metadata}, dry_run=dry_run)


def test_apply_reports_a_change_the_server_did_not_take() -> None:
    cluster = _DropsLabels({"a.io/y"})
    cluster.add_node("n1", {"a.io/x": "0"})
    plan = build_plan(desired(n1={"a.io/x": "1", "a.io/y": "2"}), cluster.list_nodes())

    result = apply_plan(plan, cluster, desired=desired(n1={"a.io/x": "1", "a.io/y": "2"}))

    assert not result.ok
    [node] = result.nodes
    assert [c.key for c in node.applied] == ["a.io/x"]
    assert node.error == "the server's answer does not carry a.io/y"


GOLDEN_PLAN = Plan.model_validate(
    {
        "nodes": [
            {
                "name": "lab-node-1",
                "resourceVersion": "17",
                "source": "desired/nodes/lab-node-1.yaml:5:9",
                "inventory": ["nvidia.com/gpu.count"],
                "changes": [
                    {
                        "key": "example.com/empty",
                        "action": "add",
                        "before": None,
                        "after": "",
                        "owner": None,
                    },
                    {
                        "key": "nvidia.com/gpu.count",
                        "action": "update",
                        "before": "9",
                        "after": "2",
                        "owner": "gpu-feature-discovery",
                    },
                ],
            },
            {
                "name": "lab-node-2",
                "resourceVersion": "18",
                "source": "desired/nodes/lab-node-2.yaml:5:9",
                "inventory": [],
                "changes": [
                    {
                        "key": "nvidia.com/gpu.present",
                        "action": "remove",
                        "before": "true",
                        "after": None,
                        "owner": "gpu-feature-discovery",
                    }
                ],
            },
        ],
        "missingNodes": [{"name": "lab-node-3", "source": "desired/nodes/lab-node-3.yaml:5:9"}],
        "objects": [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "namespace": "",
                "name": "team-a",
                "plural": "namespaces",
                "namespaced": False,
                "source": "desired/workloads/a.yaml:1:1",
                "action": "create",
                "manifest": {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": "team-a"},
                },
            },
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "namespace": "gpu-drv",
                "name": "trainer",
                "plural": "deployments",
                "namespaced": True,
                "source": "desired/workloads/gpu-drv.yaml:49:1",
                "action": "update",
                "resourceVersion": "31",
                "changes": [
                    {"path": ["spec", "replicas"], "action": "update", "before": 4, "after": 3},
                    {
                        "path": ["metadata", "labels", "app.kubernetes.io/part-of"],
                        "action": "add",
                        "after": "lab",
                    },
                    {
                        "path": ["spec", "template", "spec", "tolerations"],
                        "action": "remove",
                        "before": [{"operator": "Exists"}],
                    },
                ],
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": "nfd-lab",
                "name": "old-job",
                "plural": "pods",
                "namespaced": True,
                "source": "",
                "action": "prune",
                "resourceVersion": "7",
            },
        ],
        "findings": [
            {
                "severity": "error",
                "kind": "driver-image-missing",
                "subject": "lab-node-3",
                "message": "driver image 550-6.8.0-52-generic-ubuntu24.04 is not in the support matrix",
            }
        ],
    }
)


# The trainer's replicas change alone, as an apply result carries it.
TRAINER_REPLICAS = next(o for o in GOLDEN_PLAN.objects if o.kind == "Deployment").model_copy(
    update={
        "changes": tuple(
            c
            for o in GOLDEN_PLAN.objects
            if o.kind == "Deployment"
            for c in o.changes
            if c.path == ("spec", "replicas")
        )
    }
)


def _golden(name: str, rendered: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), (
        f"{name} differs; rerun with UPDATE_GOLDEN=1 after checking the change"
    )


@pytest.mark.parametrize(
    ("fmt", "name"),
    [(Format.TEXT, "plan.txt"), (Format.MARKDOWN, "plan.md"), (Format.JSON, "plan.json")],
)
def test_plan_views_match_golden_files(fmt: Format, name: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    view_for(fmt, out, err).plan(GOLDEN_PLAN)
    _golden(name, out.getvalue())
    if fmt is Format.TEXT:
        _golden("plan.stderr.txt", err.getvalue())


def test_show_owner_adds_a_fourth_column() -> None:
    out = io.StringIO()
    view_for(Format.TEXT, out, io.StringIO()).plan(GOLDEN_PLAN, show_owner=True)
    assert out.getvalue().splitlines()[:3] == [
        'lab-node-1 example.com/empty "" unknown',
        "lab-node-1 nvidia.com/gpu.count 2 gpu-feature-discovery",
        "lab-node-2 nvidia.com/gpu.present - gpu-feature-discovery",
    ]


def test_json_plan_is_the_saved_plan_format() -> None:
    out = io.StringIO()
    view_for(Format.JSON, out, io.StringIO()).plan(GOLDEN_PLAN)
    assert Plan.model_validate(json.loads(out.getvalue())) == GOLDEN_PLAN


def _golden_apply_result() -> ApplyResult:
    change = NodeChange(
        key="nvidia.com/gpu.count",
        action=Action.UPDATE,
        before="9",
        after="2",
        owner="gpu-feature-discovery",
    )
    return ApplyResult(
        objects=(
            ObjectResult("Deployment/gpu-drv/trainer", changed=TRAINER_REPLICAS),
            ObjectResult("Pod/nfd-lab/a100-job", error='pods "a100-job" not found'),
        ),
        nodes=(
            NodeResult("lab-node-1", applied=(change,)),
            NodeResult("lab-node-2", error='nodes "lab-node-2" not found (404 NotFound)'),
        ),
        missingNodes=GOLDEN_PLAN.missingNodes,
    )


def test_apply_views_match_golden_files() -> None:
    result = _golden_apply_result()
    for fmt, name in (
        (Format.TEXT, "apply.txt"),
        (Format.MARKDOWN, "apply.md"),
        (Format.JSON, "apply.json"),
    ):
        out, err = io.StringIO(), io.StringIO()
        view_for(fmt, out, err).apply(result)
        _golden(
            name, out.getvalue() + ("---stderr---\n" + err.getvalue() if err.getvalue() else "")
        )


def test_the_json_apply_result_is_its_model_dumped_and_reads_back_as_it() -> None:
    from reconcile.cli.documents import ApplyDocument

    document = ApplyDocument.of(_golden_apply_result())
    printed = (GOLDEN / "apply.json").read_text()

    assert json.loads(printed) == document.model_dump(mode="json")
    assert ApplyDocument.model_validate_json(printed) == document


GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/cuda.driver.major": "550",
    "feature.node.kubernetes.io/kernel-version.full": "5.15.0-119-generic",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
}


def _matrix_state(labels: dict[str, str | None]) -> DesiredState:
    from reconcile.desired.models import MatrixRow

    row = MatrixRow("550", "5.15.0-119-generic", "ubuntu22.04", Source("m.csv", 2, 1))
    return DesiredState(
        nodes={"g": DesiredNode("g", labels, Source("desired/nodes/g.yaml", 4, 9))},
        matrix=(row,),
    )


@pytest.mark.parametrize("how", ["prune", "null"])
def test_a_removed_driver_label_is_a_coverage_finding_whether_pruned_or_null(how: str) -> None:
    kept = {k: v for k, v in GPU_LABELS.items() if k != "nvidia.com/cuda.driver.major"}
    declared: dict[str, str | None] = dict(kept)
    if how == "null":
        declared["nvidia.com/cuda.driver.major"] = None
    inventory = ",".join(sorted(GPU_LABELS))
    node = live("g", dict(GPU_LABELS), **{INVENTORY_ANNOTATION: inventory})
    state = _matrix_state(declared)
    plan = build_plan(state, [node], PlanOptions(prune=True))
    assert [(c.key, c.after) for n in plan.nodes for c in n.changes] == [
        ("nvidia.com/cuda.driver.major", None)
    ]
    findings = list(driver_coverage(Projection(state, [node], plan.nodes)))
    assert [(f.kind, f.subject) for f in findings] == [("driver-tag-incomplete", "g")]


def test_pruning_every_managed_label_is_refused_unless_allowed() -> None:
    from reconcile.diagnostics import EmptyPrune

    node = live("g", dict(GPU_LABELS), **{INVENTORY_ANNOTATION: ",".join(sorted(GPU_LABELS))})
    with pytest.raises(EmptyPrune, match="would remove all 5 label"):
        build_plan(desired(g={}), [node], PlanOptions(prune=True))
    allowed = build_plan(desired(g={}), [node], PlanOptions(prune=True, allowEmptyPrune=True))
    assert len(allowed.nodes[0].changes) == 5
    # declaring them all as null is a decision, not an empty prune
    nulls = build_plan(desired(g=dict.fromkeys(GPU_LABELS)), [node], PlanOptions(prune=True))
    assert len(nulls.nodes[0].changes) == 5


def test_a_node_plan_carries_file_line_and_column() -> None:
    plan = build_plan(desired(n1={"a.io/x": "1"}), [live("n1", {"a.io/x": "0"})])
    assert [node.source for node in plan.nodes] == ["desired/nodes/n1.yaml:4:9"]


def test_markdown_of_an_objects_only_plan_says_nothing_about_nodes() -> None:
    only_objects = GOLDEN_PLAN.model_copy(
        update={"nodes": (), "missingNodes": (), "findings": (), "warnings": (), "prunable": ()}
    )
    out = io.StringIO()
    view_for(Format.MARKDOWN, out, io.StringIO()).plan(only_objects)
    text = out.getvalue()
    assert "label change" not in text and "**Nodes:**" not in text
    assert text.startswith(
        "#### reconcile plan\n\n- **Objects:** 3 to change (1 create, 1 prune, 1 update)\n\n"
    )


def _facts_node(
    annotations: dict[str, str | None] | None = None, taints: dict[str, str | None] | None = None
) -> DesiredState:
    source = Source("desired/nodes/n1.yaml", 4, 9)
    node = DesiredNode("n1", {}, source, annotations=annotations or {}, taints=taints or {})
    return DesiredState(nodes={"n1": node})


def test_annotations_and_taints_are_node_facts_at_their_own_paths() -> None:
    node = LiveNode(
        name="n1",
        resource_version="7",
        labels={},
        annotations={"example.com/owner": "infra"},
        taints=(
            {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "t"},
        ),
    )
    state = _facts_node(
        annotations={"example.com/owner": "ml platform"},
        taints={"nvidia.com/gpu:NoSchedule": "present", "dedicated:NoSchedule": None},
    )
    [node_plan] = build_plan(state, [node]).nodes

    assert [(c.path, c.shown_key, c.shown_value) for c in node_plan.changes] == [
        (
            ("metadata", "annotations", "example.com/owner"),
            "annotation:example.com/owner",
            '"ml platform"',
        ),
        (("spec", "taints", "dedicated:NoSchedule"), "taint:dedicated:NoSchedule", "-"),
        (
            ("spec", "taints", "nvidia.com/gpu:NoSchedule"),
            "taint:nvidia.com/gpu:NoSchedule",
            "present",
        ),
    ]
    assert node_plan.inventory == (
        "annotation:example.com/owner",
        "taint:nvidia.com/gpu:NoSchedule",
    )
    assert node_plan.patch() == {
        "metadata": {
            "labels": {},
            "annotations": {
                "example.com/owner": "ml platform",
                INVENTORY_ANNOTATION: None,
                "reconcile.dev/managed-annotations": "example.com/owner",
                "reconcile.dev/managed-taints": "nvidia.com/gpu:NoSchedule",
            },
            "resourceVersion": "7",
        },
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "t"},
                {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"},
            ]
        },
    }


def test_a_taint_value_change_keeps_its_place_and_prune_removes_only_inventoried_facts() -> None:
    node = LiveNode(
        name="n1",
        resource_version="7",
        labels={},
        annotations={
            "example.com/other": "not ours",
            "example.com/old": "ours",
            "reconcile.dev/managed-annotations": "example.com/old",
        },
        taints=(
            {"key": "a", "effect": "NoSchedule"},
            {"key": "b", "value": "1", "effect": "NoExecute"},
        ),
    )
    state = _facts_node(taints={"a:NoSchedule": "x"})
    plan = build_plan(state, [node])
    assert [p.key for p in plan.prunable] == ["annotation:example.com/old"]
    [node_plan] = plan.nodes
    assert node_plan.taints == (
        {"key": "a", "effect": "NoSchedule", "value": "x"},
        {"key": "b", "value": "1", "effect": "NoExecute"},
    )
    [pruning] = build_plan(state, [node], PlanOptions(prune=True, allowEmptyPrune=True)).nodes
    assert {c.shown_key for c in pruning.changes if c.after is None} == {
        "annotation:example.com/old"
    }


def test_wide_object_lines_add_the_live_value() -> None:
    from reconcile.cli.output import object_lines

    assert object_lines(TRAINER_REPLICAS, wide=True) == [
        "Deployment/gpu-drv/trainer spec.replicas 4 3"
    ]
    assert object_lines(TRAINER_REPLICAS) == ["Deployment/gpu-drv/trainer spec.replicas 3"]


def test_one_live_fact_reads_as_the_whole_live_map_does() -> None:
    node = LiveNode(
        name="n1",
        resource_version="1",
        labels={"a.io/x": "1", "a.io/empty": ""},
        annotations={"a.io/note": "n", INVENTORY_ANNOTATION: "a.io/x"},
        taints=(
            {"key": "gpu", "value": "old", "effect": "NoSchedule"},
            {"key": "gpu", "value": "new", "effect": "NoSchedule"},
            {"key": "bare", "effect": "NoExecute"},
        ),
    )
    for rule in RULES:
        facts = rule.live(node)
        keys = [*facts, "a.io/missing", INVENTORY_ANNOTATION, "gpu", "gpu:NoExecute"]
        assert {k: rule.get(node, k) for k in keys} == {k: facts.get(k) for k in keys}
    assert BY_FACT[Fact.ANNOTATION].get(node, INVENTORY_ANNOTATION) is None
    assert BY_FACT[Fact.TAINT].get(node, "gpu:NoSchedule") == "new"


def test_apply_never_deletes_a_node_whatever_the_plan_says() -> None:
    node = ObjectPlan(
        apiVersion="v1",
        kind="Node",
        namespace="",
        name="lab-node-2",
        plural="nodes",
        namespaced=False,
        source="",
        action="prune",
        resourceVersion="7",
    )
    cluster = FakeCluster()
    cluster.add_node("lab-node-2")
    [result] = apply_objects(Plan(objects=(node,)), cluster, saved=True)
    assert (result.error, cluster.writes) == ("a Node is never pruned", [])
    assert [n.name for n in cluster.list_nodes()] == ["lab-node-2"]


def test_groups_that_disagree_on_a_huge_annotation_are_named_without_echoing_it() -> None:
    from reconcile.desired.models import DesiredGroup, LabelSelector
    from reconcile.engine.groups import GroupConflict

    def group(name: str, value: str) -> DesiredGroup:
        facts = DesiredNode(
            name, {}, Source(f"desired/groups/{name}.yaml", 4, 9), annotations={"a.io/n": value}
        )
        return DesiredGroup(name, LabelSelector(matchLabels={"pool": "a"}), facts)

    state = DesiredState(groups=(group("a", "x" * 200_000), group("b", "y")))

    with pytest.raises(GroupConflict) as raised:
        build_plan(state, [live("n1", {"pool": "a"})])

    message = str(raised.value)
    assert f"group a (desired/groups/a.yaml) says '{'x' * 63}...(200002 bytes)" in message
    assert "group b (desired/groups/b.yaml) says 'y'" in message
    assert len(message) < 1000


def test_a_node_over_the_annotation_budget_after_apply_is_a_blocking_finding() -> None:
    from reconcile.engine.budget import annotation_budget_check

    limit = 256 * 1024
    near = {"example.com/big": "v" * (limit - len("example.com/big") - 10)}
    nodes = [live("full", {}, **near), live("roomy", {})]
    state = desired(full={"a.io/new": "1"}, roomy={"a.io/new": "1"})
    plan = build_plan(state, nodes)

    findings = annotation_budget_check(Projection(state, nodes, plan.nodes))

    [finding] = findings
    assert (finding.subject, finding.kind, finding.blocksApply) == (
        "full",
        "annotations-too-long",
        True,
    )
    # the label inventory the write adds is what goes over
    assert finding.message.startswith(
        f"its annotations would total {limit - 10 + len(INVENTORY_ANNOTATION) + 8} bytes"
    )
