"""deploy/monitoring/: the alerts and the dashboard ask only for metrics `reconcile watch`
serves, by the names its own registry gives them (read from WatchMetrics, not copied)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.app.metrics import WatchMetrics
from tests.support import REPO

MONITORING = REPO / "deploy" / "monitoring"
# PromQL words that are not metric names: set operators, modifiers, and what follows them
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def _served() -> dict[str, set[str]]:
    """Every series name a watch's /metrics can have, with its label names: a counter `x`
    is served as `x_total` (and `x_created`), a gauge under its own name."""
    metrics = WatchMetrics()
    labels = {
        v._name: set(v._labelnames) for v in vars(metrics).values() if hasattr(v, "_labelnames")
    }
    served: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        names = (
            [f"{family.name}_total", f"{family.name}_created"]
            if family.type == "counter"
            else [family.name]
        )
        for name in names:
            served[name] = labels[family.name]
    return served


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    aggregations, keywords, label names (in braces or grouping clauses), strings or
    durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = GROUPING.sub("", text)
    text = re.sub(r"\$\w+", "", text)  # Grafana variables
    names = set()
    for found in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[found.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if found.group() in KEYWORDS or re.fullmatch(
            r"\d", text[found.start() - 1 : found.start()] or "x"
        ):
            continue
        names.add(found.group())
    return names


def _label_names(expr: str) -> set[str]:
    """Labels an expression groups by or matches on."""
    labels = set()
    for clause in GROUPING.findall(expr):
        labels |= set(re.findall(r"\w+", clause.split("(", 1)[1]))
    for block in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", block))
    return labels


# added by the scrape (the Prometheus Operator's PodMonitor), not by reconcile
SCRAPE_LABELS = {"namespace", "pod", "instance", "job", "container"}


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert document["kind"] == "PrometheusRule"
    return [r for group in document["spec"]["groups"] for r in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def test_the_metric_names_are_read_from_the_registry() -> None:
    served = _served()
    assert "reconcile_corrections_total" in served and "reconcile_drift" in served
    assert served["reconcile_drift"] == {"kind"}
    assert served["reconcile_flaps_total"] == {"key"}
    assert _metric_names(
        'sum by (kind) (rate(a_total{x="y"}[5m])) / ignoring(kind) b > 0 or absent(c)'
    ) == {"a_total", "b", "c"}


def test_every_alert_asks_for_metrics_watch_serves_and_says_what_to_do() -> None:
    served = _served()
    rules = _rules()
    assert {r["alert"] for r in rules} >= {
        "ReconcileDriftPersists",
        "ReconcileDesiredInvalid",
        "ReconcileFlapping",
        "ReconcileNoLeader",
        "ReconcileCorrectionsFailing",
    }
    for rule in rules:
        names = _metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= set(served), f"{rule['alert']}: {names - set(served)} not served"
        known = set().union(*(served[n] for n in names)) | SCRAPE_LABELS
        assert _label_names(rule["expr"]) <= known, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_dashboard_query_asks_for_metrics_watch_serves() -> None:
    served = _served()
    exprs = _dashboard_exprs()
    assert len(exprs) >= 8
    for expr in exprs:
        query = (
            expr.removeprefix("label_values(").rsplit(",", 1)[0] if "label_values" in expr else expr
        )
        names = _metric_names(query)
        assert names and names <= set(served), f"{expr}: {names - set(served)} not served"
        known = set().union(*(served[n] for n in names)) | SCRAPE_LABELS
        assert _label_names(expr) <= known, expr
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    assert dashboard["uid"] == "reconcile-watch"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"${datasource}"}


def test_the_pod_monitor_scrapes_the_watch_deployments_metrics_port(tmp_path: Path) -> None:
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    watch = yaml.safe_load((REPO / "deploy" / "watch.yaml").read_text())
    pod = watch["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert endpoint["port"] in ports
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(kubectl).exists():
        pytest.skip(
            "kubectl is not installed: deploy/monitoring is rendered by `kubectl kustomize`"
        )
    rendered = subprocess.run(
        [kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    kinds = {d["kind"]: d for d in yaml.safe_load_all(rendered.stdout)}
    assert set(kinds) == {"ConfigMap", "PodMonitor", "PrometheusRule"}
    assert kinds["ConfigMap"]["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert json.loads(kinds["ConfigMap"]["data"]["dashboard.json"])["uid"] == "reconcile-watch"
