"""Saved plans signed with the pipeline's plan key (RECONCILE_PLAN_KEY), and plan files
that are not plans: each refusal leaves the cluster as it was."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from tests.e2e.test_prune_guards import _reseal, _saved, _value, snapshot
from tests.support import TestCluster, run_cli

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
