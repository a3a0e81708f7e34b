"""Saved plans signed with the pipeline's plan key (RECONCILE_PLAN_KEY), and plan files
that are not plans: each refusal leaves the cluster as it was."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from tests.e2e.test_prune_guards import _reseal, _saved, _value, _workloads_drift, snapshot
from tests.plan_edits import EVIL, Place, edited, entry_for, places
from tests.support import CliResult, TestCluster, run_cli

KEY = {"RECONCILE_PLAN_KEY": "s3cret-of-the-pipeline"}
LINE = "lab-node-1 nvidia.com/gpu.count 2"


def test_a_plan_signed_by_the_plan_step_applies_only_with_its_key(
    lab: TestCluster, workdir: Path
) -> None:
    path = workdir / "plan.json"
    planned = run_cli("plan", "--out", str(path), cwd=workdir, kubeconfig=lab.kubeconfig, env=KEY)
    assert planned.code == 1, planned.stderr
    signature = json.loads(path.read_text())["signature"]
    assert (
        signature.startswith("hmac-sha256:") and KEY["RECONCILE_PLAN_KEY"] not in path.read_text()
    )
    before = snapshot(lab)

    unkeyed = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    other = {"RECONCILE_PLAN_KEY": "another-pipeline"}
    wrong = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig, env=other)

    assert (unkeyed.code, unkeyed.stdout) == (2, "")
    assert unkeyed.stderr == (
        "error: the plan is signed, but RECONCILE_PLAN_KEY is not set to verify it: "
        "nothing was applied\n"
    )
    assert (wrong.code, wrong.stdout) == (2, "")
    assert "does not verify with RECONCILE_PLAN_KEY" in wrong.stderr
    assert snapshot(lab) == before

    applied = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig, env=KEY)
    assert (applied.code, applied.lines) == (0, [LINE]), applied.stderr


def test_with_a_plan_key_an_unsigned_or_resealed_plan_is_refused(
    lab: TestCluster, workdir: Path
) -> None:
    unsigned = _saved(lab, workdir)  # planned without the key
    before = snapshot(lab)
    refused = run_cli("apply", str(unsigned), cwd=workdir, kubeconfig=lab.kubeconfig, env=KEY)
    assert refused.code == 2
    assert "is not signed, and RECONCILE_PLAN_KEY requires a signed plan" in refused.stderr

    signed = workdir / "plan.json"
    run_cli("plan", "--out", str(signed), cwd=workdir, kubeconfig=lab.kubeconfig, env=KEY)
    _reseal(signed, _value)  # the digest recomputed, the signature kept
    resealed = run_cli("apply", str(signed), cwd=workdir, kubeconfig=lab.kubeconfig, env=KEY)
    assert resealed.code == 2
    assert "does not verify with RECONCILE_PLAN_KEY" in resealed.stderr
    assert snapshot(lab) == before


def test_an_empty_plan_key_is_an_error_before_anything_is_asked(
    sandbox_only: TestCluster, workdir: Path
) -> None:
    sandbox_only.sandbox.clear_requests()  # type: ignore[union-attr]
    result = run_cli(
        "plan",
        "--out",
        str(workdir / "plan.json"),
        cwd=workdir,
        kubeconfig=sandbox_only.kubeconfig,
        env={"RECONCILE_PLAN_KEY": " "},
    )
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == (
        "error: RECONCILE_PLAN_KEY is set but empty: set it to a secret, or unset it\n"
    )
    assert sandbox_only.sandbox.requests == []  # type: ignore[union-attr]
    assert not (workdir / "plan.json").exists()


def test_a_plan_file_that_is_a_fifo_is_refused_not_waited_on(
    lab: TestCluster, workdir: Path
) -> None:
    fifo = workdir / "plan.json"
    os.mkfifo(fifo)
    # Were it opened, the read would block until a writer came: this one comes late.
    late = threading.Timer(20, lambda: fifo.write_text("{}") if fifo.exists() else None)
    late.daemon = True
    late.start()
    before = snapshot(lab)
    try:
        result = run_cli("apply", str(fifo), cwd=workdir, kubeconfig=lab.kubeconfig)
    finally:
        late.cancel()
        fifo.unlink()
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == f"error: cannot read plan {fifo}: not a regular file\n"
    assert snapshot(lab) == before


def test_a_plan_file_that_is_not_utf8_is_one_error_line(lab: TestCluster, workdir: Path) -> None:
    path = workdir / "plan.json"
    path.write_bytes(b'{"apiVersion": "reconcile.dev/v1alpha1", "kind": "Plan\xff"}')
    before = snapshot(lab)
    result = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert (result.code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {path} is not a saved reconcile plan (")
    assert snapshot(lab) == before


# --- everything apply writes is planned again: no field of the file is taken on trust ------

POOL = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata: {name: ml}
selector:
  matchLabels: {kubernetes.io/hostname: lab-node-2}
annotations: {example.com/pool: ml}
taints:
- {key: dedicated, value: ml, effect: NoSchedule}
"""
SETTINGS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: gpu-drv}
data: {mode: fast}
"""


def _one_refusal(result: CliResult) -> str:
    assert (result.code, result.stdout) == (2, ""), result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: "), line
    return line


def test_an_entry_with_no_changes_appended_for_another_node_is_refused(
    lab: TestCluster, workdir: Path
) -> None:
    """The attack as it was seen: an entry for another node with `changes: []`, a
    NoExecute taint and a rewritten inventory annotation, at that node's resourceVersion,
    and an object inventory without the Deployment, the PDB and the Namespace; the digest
    recomputed, no plan key. Applying it tainted the node and left those objects out of the
    inventory for good, printed one line and exited 0."""
    path = _saved(lab, workdir)
    version = lab.node("lab-node-2")["metadata"]["resourceVersion"]
    _, recorded = lab.raw("GET", "/api/v1/namespaces/default/configmaps/reconcile-inventory")
    kept = [e for e in recorded["data"]["objects"].splitlines() if "gpu-drv" not in e]

    def edit(doc: dict[str, Any]) -> None:
        entry = dict(doc["nodes"][0], name="lab-node-2", resourceVersion=version)
        entry.update(changes=[], taints=[EVIL], inventory=["evil", "taint:evil:NoExecute"])
        doc["nodes"].append(entry)
        doc["inventory"] = kept

    _reseal(path, edit)
    before = snapshot(lab)

    line = _one_refusal(run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig))

    assert line.startswith(
        "error: the plan is not what planning gives now: lab-node-2 "
        "annotation:reconcile.dev/managed-labels, annotation:reconcile.dev/managed-taints, "
        "taints (planning gives nothing for this node): nothing was applied"
    ), line
    assert snapshot(lab) == before
    assert "taints" not in lab.node("lab-node-2")["spec"]


def test_an_object_inventory_edited_into_a_plan_without_objects_is_refused(
    lab: TestCluster, workdir: Path
) -> None:
    path = _saved(lab, workdir)
    assert json.loads(path.read_text())["objects"] == []
    _reseal(path, lambda doc: doc.update(inventory=[]))
    before = snapshot(lab)

    line = _one_refusal(run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig))

    assert "the object inventory to record (not the one planning gives)" in line
    assert snapshot(lab) == before


def test_an_untouched_saved_plan_applies_and_applying_it_again_writes_nothing(
    lab: TestCluster, workdir: Path
) -> None:
    path = _saved(lab, workdir)

    first = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    after = snapshot(lab)
    again = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)

    assert (first.code, first.lines) == (0, [LINE]), first.stderr
    assert (again.code, again.lines) == (0, []), again.stderr
    assert snapshot(lab) == after
    assert lab.node("lab-node-1")["metadata"]["labels"]["nvidia.com/gpu.count"] == "2"


def _rich_plan(lab: TestCluster, workdir: Path) -> Path:
    """A plan holding every kind of thing apply writes: a label change (lab-node-1), an
    annotation and a taint with the node's whole taint list (lab-node-2), an object
    update (the Namespace, the Deployment), a create (a ConfigMap) and the inventory
    that records it. nfd-lab's objects are left out of desired/ (not pruned: no
    --prune), which keeps each re-planning short."""
    desired = workdir / "desired"
    (desired / "workloads" / "nfd-lab.yaml").unlink()
    (desired / "groups").mkdir()
    (desired / "groups" / "ml.yaml").write_text(POOL)
    (desired / "workloads" / "settings.yaml").write_text(SETTINGS)
    _workloads_drift(workdir)
    return _saved(lab, workdir)


def _through_the_cli(place: Place) -> bool:
    """Each field of each node entry, and the object inventory. Each edit costs a whole
    apply against the cluster: the objects' fields (test_prune_guards.py edits them
    through the command line too) and what lies deeper are walked in the unit test."""
    if place[0] == "nodes":
        return len(place) == 3 or place[3:] == ("-",)
    return place[0] == "inventory" and place[1:] in ((), (0,), ("-",))


def test_every_field_apply_would_write_is_planned_again(lab: TestCluster, workdir: Path) -> None:
    """Through the command line, against the cluster: an edit of each field of each node
    entry and of the object inventory, and an entry with no changes for each node (the
    digest recomputed, no plan key), is refused with one error line and nothing written;
    the plan as saved then applies. Every place of a plan, walked against FakeCluster:
    tests/unit/test_saved.py."""
    path = _rich_plan(lab, workdir)
    saved = json.loads(path.read_text())
    assert saved["inventory"] and saved["nodes"][1]["taints"], saved  # all kinds are there
    edits = [(p, edited(saved, p)) for p in places(saved) if _through_the_cli(p)]
    for node in lab.raw("GET", "/api/v1/nodes")[1]["items"]:
        name, version = node["metadata"]["name"], node["metadata"]["resourceVersion"]
        edits.append((("nodes", "+", name), entry_for(saved, name, version)))
    before = snapshot(lab)
    edited_path = workdir / "edited.json"

    for where, document in edits:
        edited_path.write_text(json.dumps(document))
        _reseal(edited_path, lambda doc: None)
        result = run_cli("apply", str(edited_path), cwd=workdir, kubeconfig=lab.kubeconfig)
        assert result.code == 2, (where, result.stdout, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and "nothing was applied" in line, (where, line)
        assert snapshot(lab) == before, where

    applied = run_cli("apply", str(path), cwd=workdir, kubeconfig=lab.kubeconfig)
    assert applied.code == 0, applied.stderr
    assert "lab-node-2 taint:dedicated:NoSchedule ml" in applied.lines
