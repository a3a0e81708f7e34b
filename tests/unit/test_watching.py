"""What `watch` refuses before anything is sent, what its options ask the watcher for, and
what each report moves in its metrics."""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconcile import diagnostics as diag
from reconcile.app.metrics import WatchMetrics, bind_address
from reconcile.app.watching import Metered, WatchSettings, _stopped_by_signals
from reconcile.diagnostics import ReconcileError
from reconcile.engine.diff import Action, NodeChange
from reconcile.engine.plan import PlanOptions


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prune": True}, "--prune removes labels: it needs --correct"),
        (
            {"allow_evictions": True},
            "--allow-evictions accepts what a correction evicts: it needs --correct",
        ),
        ({"correct": True, "resync": 9.5}, "--resync must be at least 10s"),
        ({"desired_interval": 0.5}, "--desired-interval must be at least 1s"),
        ({"watch_timeout": 0.5}, "--watch-timeout must be at least 10s"),
        ({"lease": "nolease"}, "--lease 'nolease' is not NAMESPACE/NAME"),
        ({"lease": "/name"}, "--lease '/name' is not NAMESPACE/NAME"),
        ({"lease": "namespace/"}, "--lease 'namespace/' is not NAMESPACE/NAME"),
        (
            {"metrics_address": "nonsense"},
            "--metrics-address 'nonsense' is not HOST:PORT (e.g. 127.0.0.1:8397, :8397)",
        ),
    ],
)
def test_each_bad_option_is_refused_with_its_message(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ReconcileError) as refused:
        WatchSettings(**options).check(tmp_path)
    assert str(refused.value) == message


def test_of_several_problems_the_first_in_the_commands_order_is_told(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "clusters.yaml").write_text("")
    bad = WatchSettings(prune=True, resync=0.0, lease="bad", metrics_address="bad")
    correct: dict[str, Any] = {"correct": True, "resync": 10.0}
    steps: list[tuple[Path, dict[str, Any], str]] = [
        (fleet, {}, "--prune removes labels"),
        (fleet, {"correct": True}, "--resync must be at least 10s"),
        (fleet, correct, f"{fleet}/clusters.yaml declares a fleet"),
        (tmp_path, correct, "--lease 'bad'"),
        (tmp_path, {**correct, "lease": "a/b"}, "--metrics-address 'bad'"),
    ]
    for desired, fixed, first in steps:
        with pytest.raises(ReconcileError) as refused:
            dataclasses.replace(bad, **fixed).check(desired)
        assert str(refused.value).startswith(first)
    dataclasses.replace(bad, **correct, lease="a/b", metrics_address="127.0.0.1:0").check(tmp_path)


def test_a_fleet_is_refused_before_desired_is_read(tmp_path: Path) -> None:
    (tmp_path / "clusters.yaml").write_text("not: [valid")
    with pytest.raises(ReconcileError, match="declares a fleet: watch follows one cluster"):
        WatchSettings(correct=True).check(tmp_path)


def test_the_defaults_and_the_minimum_intervals_run(tmp_path: Path) -> None:
    WatchSettings().check(tmp_path)
    WatchSettings(resync=10.0, desired_interval=1.0, watch_timeout=10.0).check(tmp_path)


def test_the_lease_is_its_namespace_and_name() -> None:
    assert WatchSettings(lease="kube-system/reconcile").lease_name() == (
        "kube-system",
        "reconcile",
    )


def test_a_leader_is_elected_only_for_a_watch_that_writes() -> None:
    assert WatchSettings(leader_elect=True, correct=True).elects
    assert not WatchSettings(leader_elect=True).elects
    assert not WatchSettings(correct=True).elects


def test_the_watchers_request_carries_every_option() -> None:
    request = WatchSettings(
        correct=True,
        prune=True,
        allow_empty_prune=True,
        allow_missing_image=True,
        allow_evictions=True,
        force_conflicts=True,
        parallel=3,
        resync=42.0,
        desired_interval=2.0,
        watch_timeout=90.4,
    ).request("replica-1")
    planning = request.planning
    assert planning.options == PlanOptions(
        prune=True, allowEmptyPrune=True, forceConflicts=True, allowEvictions=True
    )
    assert (request.correct, request.allow_refused, request.parallel) == (True, True, 3)
    assert (request.resync, request.desired_interval) == (42.0, 2.0)
    assert (request.watch_timeout, request.instance) == (90, "replica-1")


class Heard:
    """Every report an observer is given, by name, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append(name)


def change(key: str) -> NodeChange:
    return NodeChange(key=key, action=Action.UPDATE, before="1", after="2")


def value(metrics: WatchMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_each_report_reaches_the_observer_and_moves_its_metric() -> None:
    heard, metrics = Heard(), WatchMetrics()
    metered = Metered(heard, metrics)
    metered.drift("n", [change("a")])
    metered.object_drift([])
    metered.corrected("n", [change("a"), change("b")])
    metered.corrected_objects([])
    metered.failed("n", "conflict")
    metered.flap("n", "a", "someone", 60.0)
    metered.flap("m", "a", "someone", 60.0)
    metered.tree("sha256:x", [diag.error("bad")])
    metered.blocked(["finding"])
    metered.synced({"label": 3, "object": 1})
    metered.restarted("expired")
    assert not metrics.ready.is_set()
    metered.ready()
    assert heard.calls == [
        "drift",
        "object_drift",
        "corrected",
        "corrected_objects",
        "failed",
        "flap",
        "flap",
        "tree",
        "blocked",
        "synced",
        "restarted",
        "ready",
    ]
    assert metrics.ready.is_set()
    assert value(metrics, "reconcile_corrections_total") == 2
    assert value(metrics, "reconcile_apply_errors_total") == 1
    assert value(metrics, "reconcile_flaps_total", key="a") == 2
    assert value(metrics, "reconcile_desired_valid") == 0
    assert value(metrics, "reconcile_drift", kind="label") == 3
    assert value(metrics, "reconcile_drift", kind="object") == 1
    assert (value(metrics, "reconcile_last_sync_timestamp_seconds") or 0) > 0
    assert value(metrics, "reconcile_watch_restarts_total") == 1
    metered.tree("sha256:y", [diag.warning("fine")])
    assert value(metrics, "reconcile_desired_valid") == 1


def test_a_signal_stops_the_watch_and_the_handlers_before_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with _stopped_by_signals(stop):
        signal.raise_signal(signal.SIGTERM)
        assert stop.wait(5)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# Prometheus (9090), its Pushgateway and Alertmanager (9091-9094) and the exporters of its
# wiki's default port allocations (9100-9999, every one allocated; 9464 OpenTelemetry's).
PROMETHEUS_ALLOCATED = range(9090, 10000)


def test_the_default_metrics_port_is_none_that_prometheus_or_an_exporter_uses() -> None:
    from reconcile.cli.watching import watch

    option = next(p for p in watch.params if p.name == "metrics_address")
    assert option.default == WatchSettings().metrics_address
    _, port = bind_address(WatchSettings().metrics_address)
    assert port not in PROMETHEUS_ALLOCATED
    assert port not in range(10248, 10261)  # the kubelet's and the control plane's
