"""`reconcile upgrade` as the application layer takes it: which requests are a pool's
rollout and which one node's upgrade, what is refused before desired/ is read, and how a
pool's state changes become the document's events and the watch's tally."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from reconcile.app.rollouts import (
    DesiredAfter,
    DriverUpgrade,
    Pacing,
    RolledOut,
    _StateEvents,
    _stop_when,
)
from reconcile.diagnostics import ReconcileError
from reconcile.gpu.journal import Step
from reconcile.gpu.rollout import RolloutDocument, RolloutPlan

VERSION = "550.90.07"
STATE = "nvidia.com/gpu-driver-upgrade-state"


@pytest.mark.parametrize(
    ("request_", "pool"),
    [
        (DriverUpgrade(VERSION, ("n0",)), False),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(max_parallel=1)), False),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(max_unavailable="25%")), False),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(wait_timeout=60.0)), False),
        (DriverUpgrade(VERSION, ("n0",), dry_run=True, write_desired=True), False),
        (DriverUpgrade(VERSION, ("n0", "n0")).checked(), False),
        (DriverUpgrade(VERSION, ("n0", "n1")), True),
        (DriverUpgrade(VERSION, selector="pool=a"), True),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(max_parallel=2)), True),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(max_unavailable="1")), True),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(max_unavailable="50%")), True),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(canary="n0")), True),
        (DriverUpgrade(VERSION, ("n0",), pacing=Pacing(wait_for_completion="app=x")), True),
        (DriverUpgrade(VERSION, ("n0",), document=True), True),
        (DriverUpgrade(VERSION, ("n0",), document=True, dry_run=True), True),
    ],
)
def test_a_pool_is_what_the_user_asked_for(request_: DriverUpgrade, pool: bool) -> None:
    assert request_.pool is pool


def test_a_node_named_twice_is_upgraded_once_in_the_order_given() -> None:
    checked = DriverUpgrade(VERSION, ("n1", "n0", "n1")).checked()
    assert checked.nodes == ("n1", "n0")
    assert checked.pool


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (DriverUpgrade(VERSION, ("Bad_Node",)), 'invalid node name "Bad_Node"'),
        (
            DriverUpgrade(VERSION, ("n0",), pacing=Pacing(canary="Bad_Node")),
            'invalid node name "Bad_Node"',
        ),
        (DriverUpgrade(VERSION), "give the NODE(s) to upgrade, or --selector"),
        (DriverUpgrade(VERSION, ("n0",), selector="a=b"), "give the NODE(s) to upgrade"),
        (DriverUpgrade("550.90", ("n0",)), "driver version '550.90' is not MAJOR.MINOR.REV"),
    ],
)
def test_a_request_that_cannot_run_is_refused_before_desired_is_read(
    request_: DriverUpgrade, error: str
) -> None:
    with pytest.raises(ReconcileError, match="^" + re.escape(error)):
        request_.checked()


class _Watch:
    """Records what an upgrade tells its watch."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, Any]] = []

    def note(self, line: str) -> None:
        self.heard.append(("note", line))

    def step(self, step: Step) -> None:
        self.heard.append(("step", step))

    def planned(self, rollout: RolloutDocument) -> None:
        self.heard.append(("planned", rollout))

    def detail(self, step: Step) -> None:
        self.heard.append(("detail", step))

    def moved(self, node: str, state: str, done: int, started: int) -> None:
        self.heard.append(("moved", (node, state, done, started)))


def test_state_changes_become_events_and_a_tally_other_steps_pass_through() -> None:
    watch = _Watch()
    events = _StateEvents(watch, "nvidia.com/gpu-driver-upgrade-state", "upgrade-done")
    events(Step("n0", STATE, "upgrade-required"))
    events(Step("n0", "spec.unschedulable", "true"))
    events(Step("n1", STATE, "upgrade-required"))
    events(Step("n0", STATE, "upgrade-done"))

    assert watch.heard == [
        ("moved", ("n0", "upgrade-required", 0, 1)),
        ("detail", Step("n0", "spec.unschedulable", "true")),
        ("moved", ("n1", "upgrade-required", 0, 2)),
        ("moved", ("n0", "upgrade-done", 1, 1)),
    ]
    assert [(e.node, e.state) for e in events.events] == [
        ("n0", "upgrade-required"),
        ("n1", "upgrade-required"),
        ("n0", "upgrade-done"),
    ]
    assert all(len(e.time) == 20 and e.time.endswith("Z") for e in events.events)


def test_a_signal_stops_the_rollout_and_a_finished_run_ends_the_watcher_quietly() -> None:
    stops: list[str] = []
    over = threading.Event()
    over.set()
    _stop_when([], lambda: stops.append("stop"), over)  # returns: the run is over
    assert stops == []
    _stop_when([2], lambda: stops.append("stop"), threading.Event())
    assert stops == ["stop"]


def test_a_dry_runs_document_is_its_plan() -> None:
    planned = RolloutDocument.of(RolloutPlan((), ("n0",), 1), dry_run=True, driver=VERSION)
    rolled = RolledOut(planned, DesiredAfter())
    assert rolled.document is planned
    assert rolled.outcome is None
