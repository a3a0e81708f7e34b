"""The GPU facts: the label audit, driver image tags and coverage, the report, upgrades,
and sanitizing vendor strings into label values."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from reconcile.app.rollouts import DEFAULT_MAX_UNAVAILABLE, NodeUpgraded, Pacing
from reconcile.app.session import Session
from reconcile.cli.app import (
    ALL_FORMATS,
    TEXT_AND_JSON,
    Phases,
    check_node_name,
    common_options,
    duration,
    main,
    outputs,
    stderr,
    stdout,
)
from reconcile.cli.fleets import cluster_option, per_cluster
from reconcile.cli.output import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_SIGINT,
    Format,
    for_cluster,
    log,
    upgrade_line,
)
from reconcile.diagnostics import ReconcileError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Unpack

    from reconcile.app.rollouts import FactRollout, RolledOut, UpgradeOptions
    from reconcile.cli.views import View
    from reconcile.gpu.change import NodeStatus
    from reconcile.gpu.drivers import AuditFinding, Coverage
    from reconcile.gpu.journal import Step
    from reconcile.gpu.operations import Report
    from reconcile.gpu.rollout import RolloutDocument

F = TypeVar("F", bound=Callable[..., Any])

# rollout and upgrade: the Lease each run holds (gpu/lock.py).
LEASE_DURATION = click.option(
    "--lease-duration",
    default="30s",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How long the run's Lease (one rollout at a time on a node) outlives its last "
    "renewal: after a crash, how long until a rerun may take its nodes over.",
)


@main.command(context_settings={"ignore_unknown_options": True})
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("values", nargs=-1, required=True)
def sanitize(session: Session, output: Format, values: tuple[str, ...]) -> int:
    """Make vendor strings valid label values: one output line per VALUE.

    \b
    Every character outside [A-Za-z0-9_.-] becomes '-', the result is cut to 63
    characters, then non-alphanumerics are trimmed from both ends:
      reconcile sanitize "NVIDIA A100-SXM4-40GB"   ->   NVIDIA-A100-SXM4-40GB
    A value with nothing left is an error (exit 2), never an empty line.
    """
    from reconcile.cli.views import view_for
    from reconcile.kube.labels import sanitize_label_value

    results = [(value, sanitize_label_value(value)) for value in values]
    failed = [value for value, sanitized in results if not sanitized]
    view_for(output).sanitized(results)
    if len(failed) == 1:
        raise ReconcileError(
            f"{failed[0]!r} has no alphanumeric character to keep: it cannot be a label value"
        )
    if failed:
        raise ReconcileError(
            f"{', '.join(repr(v) for v in failed)} have no alphanumeric character to keep: "
            "they cannot be label values"
        )
    return EXIT_OK


@main.command()
@common_options
@outputs(*ALL_FORMATS)
@cluster_option
def audit(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """Check the GPU label conventions on every live GPU node (nvidia.com/gpu.present=true).

    One line `<node> <key> <reason>` per finding (missing, not-a-number, too-long,
    bad-format; allocatable=<n> when nvidia.com/gpu.count disagrees with the GPUs the
    kubelet offers) and exit 1; otherwise the single line OK and exit 0.
    """
    from reconcile.cli.views import view_for
    from reconcile.gpu import operations

    def show(view: View, findings: list[AuditFinding]) -> int:
        view.audit(findings)
        return EXIT_DRIFT if findings else EXIT_OK

    return per_cluster(
        session,
        view_for(output),
        clusters,
        lambda _, cluster: operations.audit(cluster),
        show,
        needs_desired=False,
    )


@main.group("drivers")
def drivers_group() -> None:
    """Precompiled driver images: each GPU node's tag, and the support matrix's coverage."""


@drivers_group.command("tag")
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("node", required=False)
@click.option("--all", "all_nodes", is_flag=True, help="Every GPU node, as `<node> <tag>` lines.")
def drivers_tag(session: Session, output: Format, node: str | None, all_nodes: bool) -> int:
    """The precompiled driver image tag of a live node:
    `<cuda.driver.major>-<kernel-version.full>-<os_release.ID><os_release.VERSION_ID>`.

    A missing or empty part is an error (exit 2) naming the label, never an odd tag.
    """
    from reconcile.cli.views import view_for
    from reconcile.gpu import operations

    if bool(node) == all_nodes:
        raise ReconcileError("give a NODE or --all")
    if node:
        check_node_name(node)
    found = operations.tags(session.connect(), node)
    view_for(output).tags(found, with_node=all_nodes)
    if problems := [t.problem for t in found if t.problem]:
        raise ReconcileError("; ".join(problems))
    return EXIT_OK


@drivers_group.command("audit")
@common_options
@outputs(*ALL_FORMATS)
@cluster_option
def drivers_audit(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """Every live GPU node whose driver image is not in desired/drivers/: `<node> MISSING <tag>`
    and exit 1; otherwise OK and exit 0. A node whose tag cannot be built is an error (exit 2)."""
    from reconcile.cli.views import view_for
    from reconcile.gpu import operations

    broken: list[str] = []

    def show(view: View, coverage: list[Coverage]) -> int:
        # A node whose tag cannot be built is listed too (`<node> UNKNOWN <why>`): stdout
        # never says OK while the exit code says the audit could not be completed.
        missing = [c for c in coverage if not c.covered]
        view.image_audit(missing)
        broken.extend(f"{c.node}: {c.problem}" for c in missing if c.tag is None)
        return EXIT_DRIFT if missing else EXIT_OK

    code = per_cluster(
        session,
        view_for(output),
        clusters,
        lambda target, cluster: operations.image_audit(target.state, cluster),
        show,
    )
    if broken:
        raise ReconcileError("; ".join(broken))
    return code


@main.command()
@common_options
@outputs(*TEXT_AND_JSON)
@cluster_option
def report(session: Session, output: Format, clusters: tuple[str, ...]) -> int:
    """A summary computed now from the live cluster and desired/: NODES= (GPU nodes),
    SKEW= (GPU nodes whose driver image is missing), MATRIX_ROWS=, and per GPU node its
    tag and driver upgrade state, as shell-sourceable KEY=value lines (in a fleet, each
    cluster's variables start with its name: LAB__NODES=)."""
    from reconcile.cli.views import report_prefix, view_for
    from reconcile.gpu import operations

    view = view_for(output)

    def show(shown: View, summary: Report) -> int:
        shown.report(summary)
        for node in summary.nodes:
            if node.problem:
                log.warning("%s: %s", node.name, node.problem)
        return EXIT_OK

    def one_variable_each(reports: Mapping[str | None, Report]) -> None:
        if (refusal := view.report_refusal(reports)) is not None:
            raise ReconcileError(refusal)

    return per_cluster(
        session,
        view,
        clusters,
        lambda target, cluster: operations.report(target.state, cluster),
        show,
        first=report_prefix,
        check=one_variable_each,
    )


def _pacing_options(command: F) -> F:
    """A pool's pacing options, given to the command as one `pacing` argument."""

    @click.option(
        "--max-parallel",
        type=click.IntRange(1, 100),
        default=1,
        show_default=True,
        help="Nodes changed at once (a batch).",
    )
    @click.option(
        "--max-unavailable",
        default=DEFAULT_MAX_UNAVAILABLE,
        show_default=True,
        metavar="N|P%",
        help="Selected nodes that may be cordoned or not Ready at once (percent rounds up).",
    )
    @click.option("--canary", metavar="NODE", help="This node alone, first.")
    @click.option(
        "--wait-for-completion",
        metavar="POD-SELECTOR",
        help="Before draining a node, wait for its pods matching this selector to finish.",
    )
    @click.option(
        "--wait-timeout",
        default="1h",
        show_default=True,
        callback=duration,
        metavar="DURATION",
        help="How long --wait-for-completion waits per node.",
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        max_parallel: int,
        max_unavailable: str,
        canary: str | None,
        wait_for_completion: str | None,
        wait_timeout: float,
        **kwargs: Any,
    ) -> Any:
        pacing = Pacing(max_parallel, max_unavailable, canary, wait_for_completion, wait_timeout)
        return command(*args, pacing=pacing, **kwargs)

    return wrapper  # type: ignore[return-value]


@main.command()
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("nodes", nargs=-1)
@click.option(
    "--driver",
    "version",
    required=True,
    metavar="MAJOR.MINOR.REV",
    help="The driver version to move to, e.g. 550.90.07.",
)
@click.option("-l", "--selector", metavar="SELECTOR", help="The pool: every node it selects.")
@_pacing_options
@click.option(
    "--dry-run", is_flag=True, help="Run the preflight and print the steps, change nothing."
)
@click.option(
    "--timeout",
    default="300s",
    show_default=True,
    callback=duration,
    help="How long evictions may take (retried every 5 s).",
)
@click.option(
    "--ignore-daemonsets",
    is_flag=True,
    help="Leave DaemonSet pods on the node (they cannot be evicted).",
)
@click.option("--force", is_flag=True, help="Also evict pods that no controller recreates.")
@click.option(
    "--write-desired/--no-write-desired",
    default=True,
    show_default=True,
    help="Update the driver labels in desired/ after the upgrade (the node files or the "
    "group that declares them; comments and order kept), so that git and the cluster agree "
    "and the next apply does not revert it. --no-write-desired leaves desired/ alone and "
    "says what to change.",
)
@LEASE_DURATION
@click.option("--cluster", metavar="NAME", help="In a fleet: the cluster the nodes are in.")
def upgrade(
    session: Session,
    output: Format,
    nodes: tuple[str, ...],
    version: str,
    selector: str | None,
    pacing: Pacing,
    **options: Unpack[UpgradeOptions],
) -> int:
    """Move nodes to another driver the way the GPU Operator's upgrade controller does:
    image in the support matrix first, budgets second, then cordon, drain through the
    Eviction API, relabel, validate, uncordon. Each step moves the node's
    nvidia.com/gpu-driver-upgrade-state label; an interrupted run resumes from it.

    \b
    One NODE: its steps, one line each. A pool (--selector, or several NODEs): every node
    preflighted before the first write, then batches of --max-parallel, `<node> <state>`
    per state change.
    """
    from reconcile.app import rollouts

    request = rollouts.DriverUpgrade(
        version, nodes, selector, pacing, document=output.document, **options
    ).checked()
    from reconcile.cli.views import view_for

    view = _UpgradeView(view_for(output), dry_run=request.dry_run)
    result = rollouts.upgrade(session, request, view)
    view.render(result)
    return view.exit_code(result)


@main.group("rollout", invoke_without_command=True)
@common_options
@outputs(*TEXT_AND_JSON)
@click.option(
    "-l", "--selector", metavar="SELECTOR", help="Only the nodes it selects (default: all)."
)
@_pacing_options
@click.option(
    "--dry-run", is_flag=True, help="Run the preflight and print the batches, change nothing."
)
@click.option(
    "--timeout",
    default="300s",
    show_default=True,
    callback=duration,
    help="How long a node's evictions may take (retried every 5 s).",
)
@click.option(
    "--state-timeout",
    "settle_timeout",
    default="30m",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How long a node may take to report success and offer the new resources.",
)
@click.option(
    "--bake",
    default="0s",
    callback=duration,
    metavar="DURATION",
    help="Keep each batch healthy this long before the next starts.",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="job=FILE|prom=QUERY",
    help="After each batch: a Job of desired/gates/ run on each of its nodes must complete, "
    "or a Prometheus query ($NODES: the batch) must return no series or zeros. Repeatable.",
)
@click.option(
    "--prometheus-url",
    metavar="URL",
    callback=lambda ctx, param, value: _prometheus_url(value),
    help="The Prometheus that --gate prom= queries (http:// or https://).",
)
@click.option(
    "--gate-timeout",
    default="30m",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="How long a gate's Jobs may take.",
)
@click.option(
    "--halt-on-failure/--continue",
    "halt",
    default=True,
    show_default=True,
    help="Stop at the first node that fails, or go on with the others.",
)
@click.option(
    "--ignore-daemonsets", is_flag=True, help="Leave DaemonSet pods that use GPUs in place."
)
@click.option("--force", is_flag=True, help="Also evict GPU pods that no controller recreates.")
@LEASE_DURATION
@click.option(
    "--cluster",
    metavar="NAME",
    help="In a fleet: only this cluster (default: every cluster, wave by wave).",
)
def rollout(
    session: Session,
    output: Format,
    selector: str | None,
    pacing: Pacing,
    halt: bool,
    gates: tuple[str, ...],
    **options: Any,
) -> int:
    """Roll out the disruptive facts of the plan (a MIG layout, an operand's deploy
    label, the device plugin's config): in batches, each node cordoned, its GPU pods
    drained within the budgets, the facts written, the operator's state label waited
    for, what the node offers verified, then uncordoned.

    \b
    Everything is preflighted before the first write (the plan's blocking findings, each
    batch's drain against the budgets). Each run holds a Lease (kube-system) over its
    nodes; each node's phase is kept in its journal, the reconcile.dev/rollout annotation:
    an interrupted run resumes where it stopped, from a journal it trusts and checks
    against the node. `rollout abandon` clears a stale one. In a fleet the clusters go wave by wave, each passing the gates before the next wave.
    `reconcile rollout status` says where each node is and what blocks it.
    """
    if click.get_current_context().invoked_subcommand is not None:
        return EXIT_OK
    from reconcile.app import rollouts
    from reconcile.cli.views import view_for

    if pacing.canary is not None:
        check_node_name(pacing.canary)
    request = rollouts.FactRollout(
        selector,
        pacing,
        document=output.document,
        keep_going=not halt,
        gates=tuple(rollouts.GateSpec.parse(text) for text in gates),
        **options,
    )
    if session.is_fleet and request.cluster is None:
        return _roll_out_fleet(session, request, view_for(output))
    view = _UpgradeView(view_for(output), dry_run=request.dry_run)
    result = rollouts.roll_out_facts(session, request, view)
    view.render(result)
    return view.exit_code(result)


def _prometheus_url(value: str | None) -> str | None:
    """--prometheus-url refused as it is read, before desired/ or the cluster, unless it
    is an http:// or https:// address (never a file:// one read as if it answered)."""
    if value is None:
        return None
    from reconcile.gpu.gates import check_prometheus_url

    return check_prometheus_url(value)


def _roll_out_fleet(session: Session, request: FactRollout, view: View) -> int:
    """A fleet's rollout, wave by wave: each cluster's lines as they come, started by its
    name (-o json: one FleetResult at the end); the first cluster that stops stops the
    rest, and the exit code is that cluster's."""
    from reconcile.app import rollouts
    from reconcile.cli.views import prefixed
    from reconcile.engine.fleet import Outcome

    @contextlib.contextmanager
    def watching(name: str) -> Iterator[_UpgradeView]:
        with for_cluster(name):
            yield _UpgradeView(prefixed(view, name), dry_run=request.dry_run)

    done = rollouts.roll_out_fleet(session, request, watching)
    view.clusters(
        [Outcome(c.cluster, c.result, c.error) for c in done if c.result or c.error],
        lambda shown, rolled: shown.rollout(rolled.document),
    )
    waiting = [c.cluster for c in done if c.result is None and c.error is None]
    for cluster in (c for c in done if c.stopped):
        rest = f"; clusters not started: {', '.join(waiting)}" if waiting else ""
        outcome = cluster.result.outcome if cluster.result is not None else None
        if cluster.result is not None and cluster.result.stopped_by is not None:
            summary = outcome.summary if outcome is not None else ""
            stderr().write(f"interrupted: {cluster.cluster}: {summary}{rest}; rerun to resume\n")
            return 128 + cluster.result.stopped_by
        why = cluster.error or (outcome.summary if outcome is not None else "")
        raise ReconcileError(f"rollout stopped at cluster {cluster.cluster}: {why}{rest}")
    return EXIT_OK


@rollout.command("status")
@common_options
@outputs(*TEXT_AND_JSON)
@cluster_option
@click.option(
    "--stuck-after",
    default="15m",
    show_default=True,
    callback=duration,
    metavar="DURATION",
    help="When a node waiting on the operator counts as stuck.",
)
def rollout_status(
    session: Session, output: Format, clusters: tuple[str, ...], stuck_after: float
) -> int:
    """Where each node of a rollout is: `<node> <state> <for> <what blocks it>`, for the
    nodes in a rollout, waiting on the operator, failed, or planning a disruptive change
    (in a fleet, each cluster's). Exit 0 when nothing blocks, 1 when something does."""
    from reconcile.app import rollouts
    from reconcile.cli.views import view_for

    def show(view: View, found: list[NodeStatus]) -> int:
        view.rollout_status(found)
        return EXIT_DRIFT if any(n.blocked for n in found) else EXIT_OK

    return per_cluster(
        session,
        view_for(output),
        clusters,
        lambda target, cluster: rollouts.rollout_status(target, cluster, stuck_after),
        show,
    )


@rollout.command("abandon")
@common_options
@outputs(*TEXT_AND_JSON)
@click.argument("nodes", nargs=-1)
@click.option("-l", "--selector", metavar="SELECTOR", help="Every node it selects.")
@click.option("--cluster", metavar="NAME", help="In a fleet: the cluster the nodes are in.")
def rollout_abandon(
    session: Session,
    output: Format,
    nodes: tuple[str, ...],
    selector: str | None,
    cluster: str | None,
) -> int:
    """Forget the rollout journal of NODEs (or of the nodes a selector selects): the
    `reconcile.dev/rollout` annotation, and any marker of an earlier version, removed, so
    that the next `rollout` or `upgrade` starts those nodes afresh. Cordons are left as
    they are, and each line says how the node was left: uncordon it yourself once it is
    safe. Refused (nothing removed) for a node in a rollout that is still running.
    `<node> reconcile.dev/rollout abandoned (<how it was left>)` per node; exit 0."""
    from reconcile.app import rollouts
    from reconcile.gpu.journal import JOURNAL

    for node in nodes:
        check_node_name(node)
    done = rollouts.abandon(session, cluster, nodes, selector)
    if output.document:
        from reconcile.cli.views import write_document

        rows = [{"node": node, "left": left} for node, left in done.nodes]
        write_document(rows, stdout(), output)
        return EXIT_OK
    if not done.nodes:
        log.info("no journal on the nodes given: nothing to abandon")
    for node, left in done.nodes:
        stdout().write(f"{node} {JOURNAL} abandoned ({left})\n")
    return EXIT_OK


class _UpgradeView:
    """`upgrade`'s output. One node: each step as it happens. A pool: what `view` shows
    of it (text: its batches, `<node> <state>` per state change under a progress line on
    a terminal; json: its Rollout document at the end). Then desired/'s notes, and the
    exit code."""

    def __init__(self, view: View, *, dry_run: bool) -> None:
        self.view = view
        self.dry_run = dry_run
        self.marker = " (dry run)" if dry_run else ""
        self.progress = Phases()
        # subject -> (when its first step of this run happened, when its last did)
        self._times: dict[str, tuple[float, float]] = {}

    def note(self, line: str) -> None:
        log.info("%s", line)

    def step(self, step: Step) -> None:
        stdout().write(upgrade_line(step) + self.marker + "\n")
        stdout().flush()
        self._progress(step.subject, upgrade_line(step))

    def _progress(self, subject: str, line: str) -> None:
        """The step as progress on stderr: when it happened (UTC), how long after the
        subject's step before it and since its first (stdout keeps the line contract)."""
        if self.dry_run:
            return
        now = time.time()
        first, last = self._times.get(subject, (now, now))
        self._times[subject] = (first, now)
        log.info(
            "%s %s: done %.1f s after the step before, %.1f s into %s",
            time.strftime("%H:%M:%SZ", time.gmtime(now)),
            line,
            now - last,
            now - first,
            subject,
        )

    def planned(self, rollout: RolloutDocument) -> None:
        self.view.rollout_planned(rollout, self.marker)

    def detail(self, step: Step) -> None:
        log.debug("%s", upgrade_line(step))

    def moved(self, node: str, state: str, done: int, started: int) -> None:
        self.view.rollout_moved(node, state, clear=self.progress.done)
        self._progress(node, f"{node} {state}")
        self.progress(f"rollout: {done} done, {started} started")

    def render(self, result: NodeUpgraded | RolledOut) -> None:
        if isinstance(result, NodeUpgraded):
            return
        if result.outcome is not None:
            self.progress.done()
        self.view.rollout(result.document)
        for line in result.desired.written:
            log.info("%s: commit it", line)
        for line in result.desired.left_alone:
            log.warning("%s", line)
        if result.desired.stale is not None:
            log.info("%s", result.desired.stale)

    def exit_code(self, result: NodeUpgraded | RolledOut) -> int:
        """EXIT_OK; 128 + the signal (130 SIGINT, 143 SIGTERM), saying where a rerun
        resumes, when a signal stopped the run; a rollout stopped by a failure is a
        ReconcileError naming it."""
        if isinstance(result, NodeUpgraded):
            if result.interrupted is None:
                return EXIT_OK
            stderr().write(f"{result.interrupted}\n")
            return EXIT_SIGINT
        outcome = result.outcome
        if outcome is None or outcome.ok:
            return EXIT_OK
        if result.stopped_by is not None:
            stderr().write(f"interrupted: {outcome.summary}; rerun the same command to resume\n")
            return 128 + result.stopped_by
        raise ReconcileError(
            f"rollout stopped: {outcome.summary}; rerun the same command to resume"
        )
