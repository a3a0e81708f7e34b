"""watch: the plan kept current, drift reported as it appears, corrected on request.

The command and its observer: each line as it happens, shown by the view -o chose (text,
or JSON Lines). The watch itself is reconcile.app.watching's, its metrics and endpoints
reconcile.app.metrics'."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from reconcile import diagnostics as diag
from reconcile.app.metrics import DEFAULT_METRICS_ADDRESS
from reconcile.app.session import Session
from reconcile.cli.app import common_options, duration, main, outputs, parallel_option
from reconcile.cli.output import EXIT_OK, Format, log

if TYPE_CHECKING:
    from reconcile.cli.views import View
    from reconcile.engine.diff import NodeChange
    from reconcile.engine.plan import ObjectPlan


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Reporter:
    """The watch's observer: each drift or correction shown by `view` as it happens (RFC
    3339 timestamp first), one event at a time; its notes and warnings logged."""

    def __init__(self, view: View) -> None:
        self.view = view
        self.lock = threading.Lock()

    def _nodes(self, event: str, node: str, changes: Sequence[NodeChange]) -> None:
        when = _now()
        with self.lock:
            self.view.watched_nodes(when, event, node, changes)

    def _objects(self, event: str, objects: Sequence[ObjectPlan]) -> None:
        when = _now()
        with self.lock:
            self.view.watched_objects(when, event, objects)

    # --- WatchObserver ----------------------------------------------------------------------

    def drift(self, node: str, changes: Sequence[NodeChange]) -> None:
        self._nodes("drift", node, changes)

    def object_drift(self, objects: Sequence[ObjectPlan]) -> None:
        self._objects("drift", objects)

    def corrected(self, node: str, changes: Sequence[NodeChange]) -> None:
        self._nodes("corrected", node, changes)

    def corrected_objects(self, objects: Sequence[ObjectPlan]) -> None:
        self._objects("corrected", objects)

    def failed(self, subject: str, message: str) -> None:
        log.warning("%s: %s", subject, message)

    def flap(self, node: str, key: str, writer: str, backoff: float) -> None:
        log.warning(
            "%s %s: %s keeps changing it back (corrected too often): left alone for %gs",
            node,
            key,
            writer,
            backoff,
        )

    def tree(self, digest: str, problems: Sequence[diag.Diagnostic]) -> None:
        from reconcile.cli.views import render_diagnostics

        render_diagnostics(list(problems), sys.stderr)
        if not diag.has_errors(problems):
            log.info("desired/ %s is in force", digest[:19])
        else:
            log.warning("desired/ does not validate: the last valid tree stays in force")

    def blocked(self, findings: Sequence[str]) -> None:
        for finding in findings:
            log.warning("not correcting: %s", finding)
        if not findings:
            log.info("no finding stops corrections any more")

    def synced(self, drift: Mapping[str, int]) -> None:
        """Nothing printed: the drift by kind is a metric."""

    def restarted(self, reason: str) -> None:
        log.warning("watch restarted: %s", reason)

    def ready(self) -> None:
        """Nothing printed: readiness is /readyz's."""


@main.command()
@common_options
@outputs(Format.TEXT, Format.JSON)
@click.option(
    "--correct",
    is_flag=True,
    help="Fix drift as it appears, each line written ending (corrected) (default: report only).",
)
@click.option(
    "--prune",
    is_flag=True,
    help="With --correct: also remove labels reconcile set that desired/ no longer declares.",
)
@click.option(
    "--allow-empty-prune",
    is_flag=True,
    help="With --prune: allow removing every label reconcile manages (an empty desired/).",
)
@click.option(
    "--allow-missing-image",
    is_flag=True,
    help="Correct nodes onto driver images the support matrix does not list.",
)
@click.option(
    "--allow-evictions",
    is_flag=True,
    help="With --correct: correct toward a NoExecute taint even when it evicts running pods.",
)
@click.option(
    "--force-conflicts",
    is_flag=True,
    help="With --correct: take back fields another field manager took (server-side apply force).",
)
@parallel_option
@click.option(
    "--resync",
    default="10m",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="Re-plan everything (workload objects included) this often (at least 10s).",
)
@click.option(
    "--desired-interval",
    default="5s",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How often to look for a new desired/ tree (file sizes and times; nothing is sent; "
    "at least 1s).",
)
@click.option(
    "--metrics-address",
    default=DEFAULT_METRICS_ADDRESS,
    show_default=True,
    metavar="HOST:PORT",
    help="Serve /metrics, /healthz and /readyz here (port 0: any free port).",
)
@click.option(
    "--leader-elect",
    is_flag=True,
    help="Write only while holding a coordination.k8s.io Lease; standbys report.",
)
@click.option(
    "--lease",
    default="reconcile-system/reconcile",
    show_default=True,
    metavar="NAMESPACE/NAME",
    help="The Lease --leader-elect takes.",
)
@click.option(
    "--watch-timeout",
    default="5m",
    callback=duration,
    show_default=True,
    metavar="DURATION",
    help="Renew the watch request this often (the API server ends it then; at least 10s).",
)
def watch(session: Session, output: Format, **options: Any) -> int:
    """Follow the nodes and report each drift as it appears: `<time> <node> <key> <value>`.
    With --correct, fix it with apply's guarded write and print the lines changed (a full
    plan's corrections --parallel at a time). Runs until SIGTERM or Ctrl-C, then exits 0."""
    from reconcile.app import watching
    from reconcile.cli.views import view_for

    settings = watching.WatchSettings(**options)
    watching.watch(session, settings, observer=_Reporter(view_for(output)))
    return EXIT_OK
