"""Many clusters: each one's failure is its own, waves stop at the first that fails or does
not converge, and a saved fleet plan is checked cluster by cluster."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from reconcile.diagnostics import PlanRefused, ReconcileError
from reconcile.engine.fleet import FleetPlan, Outcome, each, in_waves
from reconcile.engine.plan import ClusterIdentity, Plan


def test_a_clusters_error_is_its_outcome_and_the_others_still_run_in_order() -> None:
    def work(cluster: str) -> int:
        if cluster == "b":
            raise ReconcileError("b is down")
        return len(cluster)

    assert each(["a", "b", "ccc"], work) == [
        Outcome("a", value=1),
        Outcome("b", error="b is down"),
        Outcome("ccc", value=3),
    ]


def test_at_most_limit_clusters_are_worked_on_at_once() -> None:
    three = threading.Barrier(3, timeout=0.2)  # passed only if three run at once

    def work(cluster: str) -> bool:
        try:
            three.wait()
        except threading.BrokenBarrierError:
            return False
        return True

    outcomes = each(list("abcd"), work, limit=2)
    assert [(o.cluster, o.value) for o in outcomes] == [(c, False) for c in "abcd"]


def test_a_wave_that_fails_or_does_not_converge_stops_the_run_before_the_next() -> None:
    converged = {"a": True, "b": True, "c": False, "d": True}
    touched: list[str] = []

    def work(cluster: str) -> str:
        touched.append(cluster)
        return cluster

    run = in_waves([["a", "b"], ["c"], ["d"]], work, lambda c: converged[c])
    assert (run.stopped_after, run.not_started) == (2, ("d",))
    assert sorted(touched) == ["a", "b", "c"]

    def failing(cluster: str) -> str:
        raise ReconcileError(f"{cluster} refused")

    run = in_waves([["a"], ["b", "c"]], failing, lambda c: True)
    assert (run.stopped_after, run.not_started) == (1, ("b", "c"))
    assert run.outcomes == (Outcome("a", error="a refused"),)

    done = in_waves([["a"], ["b"]], work, lambda c: True)
    assert (done.stopped_after, done.not_started) == (None, ())


def test_a_fleet_plan_is_saved_and_loaded_with_each_plan_checked(tmp_path: Path) -> None:
    plan = Plan().bound(
        ClusterIdentity(server="https://east", kubeSystemUID="u1"), "sha256:" + "0" * 64
    )
    path = tmp_path / "fleet.json"
    FleetPlan(fleet="prod", plans={"east": plan}).save(path)
    assert FleetPlan.load(path).plans == {"east": plan}

    edited = path.read_text().replace('"prune": false', '"prune": true', 1)
    path.write_text(edited)
    with pytest.raises(ReconcileError, match=r"\(cluster east\) was changed after"):
        FleetPlan.load(path)

    path.write_text('{"kind": "FleetPlan"}')
    with pytest.raises(PlanRefused, match="is not a saved fleet plan: fleet"):
        FleetPlan.load(path)
