"""A NoExecute taint evicts the running pods that do not tolerate it the moment it lands:
`plan` names them in an error finding, `apply` (fresh or saved) and `watch --correct`
write nothing toward it, and `--allow-evictions` makes it a warning that lets it through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.test_prune_guards import snapshot
from tests.e2e.test_watch import eventually, watching
from tests.support import TestCluster, markdown_table_rows, run_cli

TAINT = "taint:dedicated:NoExecute"
ON_NODE_1 = "gpu-drv/trainer-5c8f7d6b9c-q9m4x, nfd-lab/or-job, nfd-lab/train-a"
FINDING = (
    "lab-node-1: taint dedicated=ml:NoExecute evicts 3 running pod(s) that do not tolerate it: "
    f"{ON_NODE_1}; --allow-evictions accepts it"
)
ML_POOL = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: ml
selector:
  matchLabels: {kubernetes.io/hostname: lab-node-1}
taints:
- {key: dedicated, value: ml, effect: NoExecute}
"""


def _taint_node_1(workdir: Path) -> None:
    (workdir / "desired" / "groups").mkdir(exist_ok=True)
    (workdir / "desired" / "groups" / "ml.yaml").write_text(ML_POOL)


def _taints(cluster: TestCluster, node: str) -> list[dict[str, Any]]:
    return list(cluster.node(node)["spec"].get("taints") or ())


def _pod(name: str, node: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "tolerations": tolerations,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def _node(name: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A cordoned node: on a real cluster the scheduler places none of the lab's pending
    pods there; the test binds its own pods by name."""
    spec: dict[str, Any] = {"unschedulable": True}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
    }


def test_a_no_execute_taint_over_running_pods_is_an_error_finding_naming_them(
    lab: TestCluster, workdir: Path
) -> None:
    _taint_node_1(workdir)

    plan = run_cli("plan", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.code == 2
    assert f"lab-node-1 {TAINT} ml" in plan.lines
    assert f"error: {FINDING}" in plan.stderr.splitlines()

    document = json.loads(
        run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig).stdout
    )
    [eviction] = [f for f in document["findings"] if f["kind"] == "eviction"]
    assert eviction == {
        "severity": "error",
        "kind": "eviction",
        "subject": "lab-node-1",
        "message": FINDING.removeprefix("lab-node-1: "),
        "blocksApply": True,
    }
    assert document["allowEvictions"] is False

    markdown = run_cli("plan", "-o", "markdown", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert markdown.code == 2
    assert ["error", "lab-node-1", FINDING.removeprefix("lab-node-1: ")] in markdown_table_rows(
        markdown.stdout
    )


def test_apply_refuses_the_eviction_and_leaves_the_cluster_unchanged(
    lab: TestCluster, workdir: Path
) -> None:
    _taint_node_1(workdir)
    before = snapshot(lab)

    apply = run_cli("apply", cwd=workdir, kubeconfig=lab.kubeconfig)

    assert apply.code == 2
    assert apply.stdout == ""
    assert f"rejected: {FINDING}" in apply.stderr.splitlines()
    assert [line for line in apply.stderr.splitlines() if line.startswith("error:")] == [
        "error: 1 refusal(s) above: nothing was applied"
    ]
    assert snapshot(lab) == before


def test_allow_evictions_makes_it_a_warning_and_apply_writes_the_taint(
    lab: TestCluster, workdir: Path
) -> None:
    _taint_node_1(workdir)

    plan = run_cli("plan", "--allow-evictions", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.code == 2  # the placement errors the taint makes remain
    warning = FINDING.removesuffix("; --allow-evictions accepts it")
    assert f"warning: {warning}" in plan.stderr.splitlines()
    assert "error: lab-node-1" not in plan.stderr

    apply = run_cli("apply", "--allow-evictions", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert apply.code == 0, apply.stderr
    assert f"lab-node-1 {TAINT} ml" in apply.lines
    assert {"key": "dedicated", "value": "ml", "effect": "NoExecute"} in [
        {k: v for k, v in t.items() if k != "timeAdded"} for t in _taints(lab, "lab-node-1")
    ]


def test_pods_that_tolerate_it_are_not_named_and_a_limited_toleration_says_when(
    lab: TestCluster, workdir: Path
) -> None:
    lab.create(_pod("tolerates", "lab-node-1", [{"key": "dedicated", "operator": "Exists"}]))
    lab.create(
        _pod(
            "for-a-minute",
            "lab-node-1",
            [{"key": "dedicated", "value": "ml", "effect": "NoExecute", "tolerationSeconds": 60}],
        )
    )
    lab.create(_pod("other-value", "lab-node-1", [{"key": "dedicated", "value": "cpu"}]))
    _taint_node_1(workdir)

    plan = run_cli("plan", "-o", "json", cwd=workdir, kubeconfig=lab.kubeconfig)

    [eviction] = [f for f in json.loads(plan.stdout)["findings"] if f["kind"] == "eviction"]
    assert eviction["message"] == (
        "taint dedicated=ml:NoExecute evicts 5 running pod(s) that do not tolerate it (or only "
        "for their tolerationSeconds): default/for-a-minute (after 60s), default/other-value, "
        f"{ON_NODE_1}; --allow-evictions accepts it"
    )


def test_a_saved_plan_with_the_eviction_is_refused_and_one_made_allowing_it_applies(
    lab: TestCluster, workdir: Path
) -> None:
    _taint_node_1(workdir)
    saved = workdir / "plan.json"
    assert run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig).code == 2
    before = snapshot(lab)

    refused = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert refused.code == 2
    assert f"rejected: {FINDING}" in refused.stderr.splitlines()
    late = run_cli("apply", str(saved), "--allow-evictions", cwd=workdir, kubeconfig=lab.kubeconfig)
    assert late.code == 2
    assert "the plan was planned without --allow-evictions, and apply was given it" in late.stderr
    assert snapshot(lab) == before

    allowed = run_cli(
        "plan", "--allow-evictions", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig
    )
    assert allowed.code == 2
    assert json.loads(saved.read_text())["allowEvictions"] is True
    unflagged = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert unflagged.code == 2
    assert "the plan was planned with --allow-evictions, and apply was not given it" in (
        unflagged.stderr
    )
    assert snapshot(lab) == before
    apply = run_cli(
        "apply", "--allow-evictions", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig
    )
    assert apply.code == 0, apply.stderr
    assert f"lab-node-1 {TAINT} ml" in apply.lines


def test_a_saved_plan_is_refused_when_a_pod_it_would_evict_started_since(
    lab: TestCluster, workdir: Path
) -> None:
    lab.seed([_node("lab-node-5")])  # on a real cluster: Ready, its not-ready taint gone
    (workdir / "desired" / "nodes" / "lab-node-5.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: lab-node-5}\n"
        "taints:\n- {key: dedicated, value: ml, effect: NoExecute}\n"
    )
    saved = workdir / "plan.json"
    plan = run_cli("plan", "--out", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert plan.code == 1
    assert "evicts" not in plan.stderr  # nothing runs there yet
    lab.create(_pod("late", "lab-node-5", []))
    before = snapshot(lab)

    apply = run_cli("apply", str(saved), cwd=workdir, kubeconfig=lab.kubeconfig)

    # Pods start without the node's resourceVersion moving: planning again finds them.
    assert apply.code == 2
    assert apply.stderr.splitlines()[-2:] == [
        "rejected: lab-node-5: taint dedicated=ml:NoExecute evicts 1 running pod(s) that do "
        "not tolerate it: default/late; --allow-evictions accepts it",
        "error: 1 refusal(s) above: nothing was applied",
    ]
    assert snapshot(lab) == before


def test_watch_corrects_nothing_toward_an_eviction(lab: TestCluster, workdir: Path) -> None:
    _taint_node_1(workdir)
    before = snapshot(lab)
    with watching(lab, workdir / "desired", correct=True) as (heard, _):
        assert heard.blocking and f"{FINDING}" in heard.blocking[-1]
        assert f"lab-node-1 {TAINT} ml" in heard.drift_lines()
        assert heard.drift_lines("corrected") == []
    assert snapshot(lab) == before


def test_watch_does_not_put_back_a_taint_that_now_evicts_a_pod(
    lab: TestCluster, workdir: Path
) -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoExecute"}
    # It tolerates the taint for an hour: it runs there, and putting the taint back once it
    # is gone would start that hour.
    lab.seed(
        [
            _node("lab-node-5", [taint]),
            _pod("an-hour", "lab-node-5", [{**taint, "tolerationSeconds": 3600}]),
        ]
    )
    (workdir / "desired" / "nodes" / "lab-node-5.yaml").write_text(
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: lab-node-5}\n"
        "taints:\n- {key: dedicated, value: ml, effect: NoExecute}\n"
    )
    with watching(lab, workdir / "desired", correct=True) as (heard, _):
        assert not heard.blocking  # in sync: nothing to say
        status, body = lab.raw(
            "PATCH",
            "/api/v1/nodes/lab-node-5",
            {"spec": {"taints": None}},
            "application/merge-patch+json",
        )
        assert status == 200, body
        eventually(lambda: f"lab-node-5 {TAINT} ml" in heard.drift_lines(), "the drift")
        eventually(lambda: heard.failures, "the refusal")
        assert heard.failures == [
            (
                "lab-node-5",
                "not corrected: taint dedicated=ml:NoExecute evicts 1 running pod(s) that do "
                "not tolerate it (or only for their tolerationSeconds): default/an-hour (after "
                "3600s); --allow-evictions accepts it",
            )
        ]
        assert [line for line in heard.lines if line[:2] == ("corrected", "lab-node-5")] == []
    assert [t for t in _taints(lab, "lab-node-5") if t["key"] == "dedicated"] == []


def test_watch_allow_evictions_needs_correct(workdir: Path) -> None:
    result = run_cli("watch", "--allow-evictions", cwd=workdir)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        "error: --allow-evictions accepts what a correction evicts: it needs --correct"
    ]
