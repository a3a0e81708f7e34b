"""The command line's frame: the `reconcile` group, the options every command takes, the
`-o` formats a command renders, and the one place failures become exit codes.

Commands live beside it, one module per area (reconciling.py: validate, plan, apply;
gpu.py: the GPU facts; toolbox.py: import, rbac, placement, schemas, the sandbox;
watching.py: watch). Each parses argv into a typed request, calls one operation, renders
one view (views.py, in the output contract of output.py) and maps the result to an exit
code. A command's module is imported when that command runs (COMMANDS), and modules that
need the `kubernetes` client inside the commands that talk to a cluster, so a command
pays for its own imports only: `validate`, `sanitize` and `schemas` start fast, and
`plan` sends its first request sooner.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import importlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.cli.output import (
    EXIT_ERROR,
    EXIT_SIGINT,
    Format,
    configure_logging,
    log,
    severity_prefix,
)
from reconcile.diagnostics import Diagnostic, InvalidInput, ReconcileError

if TYPE_CHECKING:
    from reconcile.desired.fleet import DesiredFleet
    from reconcile.desired.models import DesiredState
    from reconcile.engine.operations import PlanRequest
    from reconcile.engine.plan import Plan
    from reconcile.kube.client import Cluster


F = TypeVar("F", bound=Callable[..., Any])

YOUNG_GC_THRESHOLD: Final = 200_000

# command -> the module of reconcile.cli that defines it, imported when it is asked for.
COMMANDS: Final = {
    **dict.fromkeys(("validate", "plan", "apply"), "reconciling"),
    **dict.fromkeys(("sanitize", "audit", "drivers", "report", "upgrade"), "gpu"),
    **dict.fromkeys(("placement", "import", "rbac", "schemas", "completion", "sandbox"), "toolbox"),
    "watch": "watching",
}


@dataclass(frozen=True)
class Globals:
    desired: Path
    kubeconfig: str | None
    context: str | None
    output: Format
    request_timeout: float = 30.0
    connected: list[Cluster] = dataclasses.field(default_factory=list)
    # A fleet's clusters connected to before desired/ was read (reading_ahead): each
    # taken by the first `connect` of its target, or the error connecting to it met.
    ahead: dict[str, Cluster | ReconcileError] = dataclasses.field(default_factory=dict)

    def connect(self, timeout: float | None = None, target: Target | None = None) -> Cluster:
        """The cluster (a fleet's `target`); transient failures are retried until `timeout`
        (overall) runs out."""
        if target is None or target.name is None:
            in_cluster = target is not None and target.in_cluster
            return self.connect_to(timeout, self.context, in_cluster=in_cluster)
        found = self.ahead.pop(target.name, None)
        if isinstance(found, ReconcileError):
            raise found
        if found is not None:
            return found
        return self.connect_to(timeout, target.context, in_cluster=target.in_cluster)

    def connect_to(
        self, timeout: float | None, context: str | None, *, in_cluster: bool = False
    ) -> Cluster:
        """The cluster of kubeconfig `context` (or the one reconcile runs in)."""
        from reconcile.kube.client import Cluster

        cluster = Cluster.connect(
            self.kubeconfig,
            context,
            request_timeout=self.request_timeout,
            timeout=timeout,
            in_cluster=in_cluster,
        )
        if not cluster.tls_verified and all(c.server != cluster.server for c in self.connected):
            log.warning("TLS verification is off for %s", cluster.server)
        self.connected.append(cluster)
        return cluster

    def connect_later(self, timeout: float | None = None) -> Callable[[], Cluster]:
        """`connect`, when the caller gets that far."""
        return functools.partial(self.connect, timeout)


@contextmanager
def reading_ahead(
    g: Globals, timeout: float | None, *, fleet_clusters: tuple[str, ...] | None = None
) -> Iterator[Callable[[], Cluster]]:
    """The kubeconfig's cluster, what every plan reads first (its identity, every node)
    already being read while the caller reads desired/: at fleet scale the LIST is most of
    a plan, and the API server answers it while desired/ is parsed. Only reads go out
    before desired/ is known to be valid; when the caller stops early (an invalid tree),
    the reads stop too. A kubeconfig problem is raised when the cluster is asked for, so
    desired/'s own problems come first, as ever.

    In a fleet, with `fleet_clusters` (the --cluster names, () for all), each cluster
    clusters.yaml names is read ahead the same way and taken by `g.connect` for its
    target; without it (apply: its waves read each cluster when they reach it), a fleet
    connects to each cluster later."""
    if (g.desired / "clusters.yaml").is_file():
        started = _fleet_ahead(g, timeout, fleet_clusters) if fleet_clusters is not None else []
        try:
            yield g.connect_later(timeout)
        finally:
            for cluster in started:
                cluster.stop_reading_ahead(wait=False)
            for cluster in started:
                cluster.stop_reading_ahead()
        return
    try:
        cluster = g.connect(timeout)
    except ReconcileError as e:
        problem = e

        def refused() -> Cluster:
            raise problem

        yield refused
        return
    cluster.read_ahead()
    try:
        yield lambda: cluster
    finally:
        cluster.stop_reading_ahead()


def _fleet_ahead(g: Globals, timeout: float | None, chosen: tuple[str, ...]) -> list[Cluster]:
    """Each chosen cluster of the fleet connected to and read ahead (g.ahead), when
    clusters.yaml reads on its own and the command line is one the fleet accepts; the
    clusters reading."""
    from reconcile.desired import fleet as fleets

    found = fleets.clusters(g.desired)
    if found is None or g.context or not set(chosen) <= {c.name for c in found}:
        return []  # refused or reported once desired/ is read: nothing is asked
    started = []
    for member in found:
        if chosen and member.name not in chosen:
            continue
        try:
            cluster = g.connect_to(timeout, member.context, in_cluster=member.inCluster)
        except ReconcileError as e:
            g.ahead[member.name] = e  # the cluster's own error, when its plan asks for it
            continue
        cluster.read_ahead()
        g.ahead[member.name] = cluster
        started.append(cluster)
    return started


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A Go-style duration (300s, 5m, 1h30m) or plain seconds."""
    import re

    text = value.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 300s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def parallel_option(command: F) -> F:
    """--parallel, as every command that writes many nodes takes it."""
    return click.option(
        "--parallel",
        type=click.IntRange(1, 64),
        default=8,
        show_default=True,
        help="Nodes written at once: never more requests than this in flight.",
    )(command)


def common_options(command: F) -> F:
    """The options every command takes, gathered into one `Globals` argument `g`."""

    @click.option(
        "--desired",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("desired"),
        show_default=True,
        help="Directory holding the desired state.",
    )
    @click.option(
        "--kubeconfig",
        metavar="PATH",
        help="Kubeconfig file; default $KUBECONFIG (files joined by ':'), ~/.kube/config.",
    )
    @click.option("--context", metavar="NAME", help="Kubeconfig context to use.")
    @click.option(
        "-o",
        "--output",
        type=click.Choice([f.value for f in Format]),
        default=Format.TEXT.value,
        show_default=True,
        help="Output format.",
    )
    @click.option(
        "--request-timeout",
        default="30s",
        show_default=True,
        callback=duration,
        metavar="DURATION",
        help="Longest wait for one API request.",
    )
    @click.option("-v", "--verbose", count=True, help="Also say what was asked of the API server.")
    @click.option(
        "-q", "--quiet", is_flag=True, help="Only errors on stderr: no notes, no warnings."
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        desired: Path,
        kubeconfig: str | None,
        context: str | None,
        output: str,
        request_timeout: float,
        verbose: int,
        quiet: bool,
        **kwargs: Any,
    ) -> Any:
        configure_logging(verbose=verbose, quiet=quiet)
        g = Globals(desired, kubeconfig, context, Format(output), request_timeout)
        try:
            return command(*args, g=g, **kwargs)
        finally:
            for cluster in g.connected:
                log.debug(
                    "%d request(s) to %s, %d retried",
                    cluster.requests,
                    cluster.server,
                    cluster.retries,
                )
                cluster.close()

    return wrapper  # type: ignore[return-value]


def outputs(*allowed: Format) -> Callable[[F], F]:
    """The `-o` formats a command renders; any other is refused with exit 2 before the
    command runs, never silently ignored. Goes under @common_options."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, g: Globals, **kwargs: Any) -> Any:
            if g.output not in allowed:
                name = click.get_current_context().command_path
                shown = ", ".join(f.value for f in allowed)
                fail(f"{name} does not render -o {g.output.value}: use {shown}")
            return command(*args, g=g, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


TEXT_AND_JSON: Final = (Format.TEXT, Format.JSON)
ALL_FORMATS: Final = (Format.TEXT, Format.JSON, Format.MARKDOWN)
# plan and apply: the drift lines, also wide.
DRIFT_FORMATS: Final = (*ALL_FORMATS, Format.WIDE)


@contextmanager
def stoppable() -> Iterator[list[int]]:
    """While applying, SIGINT and SIGTERM only ask to stop: requests in flight finish,
    nothing new starts, and what was applied is still reported. The list receives the
    signal's number. (The handler just appends: a lock taken in a handler can deadlock.)"""
    received: list[int] = []

    def on_signal(number: int, frame: FrameType | None) -> None:
        received.append(number)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class Phases:
    """The step a long command is at, as one line on stderr when stderr is a terminal
    (never in a pipe or a log); cleared when the command has its answer."""

    def __init__(self, *, shown: bool = True) -> None:
        self.shown = shown and sys.stderr.isatty()

    def __call__(self, name: str) -> None:
        if self.shown:
            sys.stderr.write(f"\r\x1b[K{name}...")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def gpu_plan(cluster: Cluster, request: PlanRequest, *, quiet: bool = False) -> Plan:
    """The plan with the GPU domain's policy and checks (gpu.checks.plan): what `plan`
    and `apply` run, each step shown on a terminal (unless `quiet`: clusters of a fleet
    are planned at once)."""
    from reconcile.gpu import checks as gpu

    phases = Phases(shown=not quiet)
    try:
        return gpu.plan(request, cluster, phase=phases)
    finally:
        phases.done()


def progress_bar(noun: str) -> Callable[[int, int], None] | None:
    """A one-line counter on stderr, when stderr is a terminal."""
    err = sys.stderr
    if not err.isatty():
        return None

    def show(done: int, total: int) -> None:
        err.write(f"\rapplying: {done}/{total} {noun}" + ("\n" if done == total else ""))
        err.flush()

    return show


def stdout() -> TextIO:
    return sys.stdout


def stderr() -> TextIO:
    """Where errors go: always shown, whatever -q says (notes and warnings are logged)."""
    return sys.stderr


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """One `error:` line (whatever the message holds), then exit. A URL in it loses its
    user info: a password embedded in the server URL is never printed."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    stderr().write(f"{severity_prefix('error', sys.stderr)} {diag.without_userinfo(line)}\n")
    sys.exit(code)


def plan_key() -> bytes | None:
    """The key saved plans are signed and verified with (RECONCILE_PLAN_KEY), if set."""
    import os

    key = os.environ.get("RECONCILE_PLAN_KEY")
    if key is None:
        return None
    if not key.strip():
        fail("RECONCILE_PLAN_KEY is set but empty: set it to a secret, or unset it")
    return key.encode()


@contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """Turn our exceptions into messages on stderr and exit code 2; Ctrl-C into 130."""
    try:
        yield
    except InvalidInput as e:
        from reconcile.cli.views import render_diagnostics

        render_diagnostics(e.diagnostics, stderr())
        fail(f"{e}: nothing was changed in the cluster")
    except ReconcileError as e:
        fail(str(e))
    except KeyboardInterrupt:
        stderr().write("interrupted\n")
        sys.exit(EXIT_SIGINT)


def check_node_name(node: str) -> None:
    """A NODE argument that is not a valid node name never reaches a request path."""
    from reconcile.kube.validation import name_problem

    problem = name_problem(node, "node")
    if problem:
        fail(problem)


@dataclass(frozen=True)
class Target:
    """One cluster a command works on: its name in the fleet (None without a fleet), its
    desired state, and how to reach it (else the kubeconfig's current context)."""

    name: str | None
    state: DesiredState
    context: str | None = None
    in_cluster: bool = False


@dataclass(frozen=True)
class Loaded:
    """desired/ as read: one tree, or a fleet of them; and every problem found."""

    fleet: DesiredFleet | None
    state: DesiredState
    problems: list[Diagnostic]


def load_tree(g: Globals, *, coverage_check: bool) -> Loaded:
    """desired/ loaded, and every problem with it: the files, then (when they load) the
    GPU label conventions and what can never schedule, for each cluster's tree of a
    fleet (each problem once). `coverage_check` adds the support-matrix check that
    `plan` makes against the cluster instead."""
    from reconcile.desired import fleet as fleets
    from reconcile.engine import placement, workloads
    from reconcile.gpu import drivers

    fleet, state, problems = fleets.load(g.desired)
    if not diag.has_errors(problems):
        found = [
            problem
            for tree in (fleet.trees.values() if fleet is not None else (state,))
            for problem in (
                *drivers.desired_diagnostics(tree, coverage_check=coverage_check),
                *placement.desired_diagnostics(tree),
                *workloads.desired_diagnostics(tree),
            )
        ]
        problems = sorted(dict.fromkeys([*problems, *found]), key=diag.sort_key)
    return Loaded(fleet, state, problems)


def desired_problems(g: Globals, *, coverage_check: bool) -> tuple[DesiredState, list[Diagnostic]]:
    """The one tree of desired/ (empty for a fleet) and every problem found in it."""
    loaded = load_tree(g, coverage_check=coverage_check)
    return loaded.state, loaded.problems


def _checked(g: Globals) -> Loaded:
    from reconcile.cli.views import render_diagnostics

    loaded = load_tree(g, coverage_check=False)
    if diag.has_errors(loaded.problems):
        raise InvalidInput(loaded.problems)
    render_diagnostics(loaded.problems, stderr())
    return loaded


def load_or_fail(g: Globals) -> DesiredState:
    """The validated desired state; every problem printed and exit 2 if there is one. A
    command that works on one tree refuses a fleet."""
    loaded = _checked(g)
    if loaded.fleet is not None:
        fail(
            f"{g.desired}/clusters.yaml declares a fleet: this command works on one "
            "cluster's tree; use a command that takes --cluster"
        )
    return loaded.state


def one_target(g: Globals, cluster: str | None, command: str) -> Target:
    """The one cluster a command that works on a single cluster runs on: in a fleet the
    one --cluster names (required), else the kubeconfig's."""
    fleet, targets = load_targets(g, (cluster,) if cluster else ())
    if fleet is not None and cluster is None:
        names = ", ".join(c.name for c in fleet.clusters)
        fail(f"{command} works on one cluster of the fleet: give --cluster NAME (one of: {names})")
    return targets[0]


def load_targets(g: Globals, clusters: tuple[str, ...]) -> tuple[DesiredFleet | None, list[Target]]:
    """The clusters a fleet-aware command works on: every cluster of the fleet, or those
    named by --cluster; without a fleet, the one cluster of the kubeconfig."""
    loaded = _checked(g)
    fleet = loaded.fleet
    if fleet is None:
        if clusters:
            fail(f"--cluster needs a fleet: {g.desired}/clusters.yaml not found")
        return None, [Target(None, loaded.state)]
    if g.context:
        fail("--context does not apply to a fleet: each cluster names its context in clusters.yaml")
    names = [c.name for c in fleet.clusters]
    unknown = [c for c in clusters if c not in names]
    if unknown:
        fail(f"--cluster {unknown[0]}: the fleet has no such cluster (it has: {', '.join(names)})")
    chosen = [c for c in fleet.clusters if not clusters or c.name in clusters]
    return fleet, [Target(c.name, fleet.trees[c.name], c.context, c.inCluster) for c in chosen]


class _Main(click.Group):
    """The command group, with the last-resort handler: a bug is still exit 2 and one
    `error:` line (never exit 1, which a pipeline reads as "drift"); the traceback
    only with -v. Commands are loaded as they are asked for (click's lazy-loading
    pattern): each module registers its commands on `main` when imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"reconcile.cli.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        configure_logging(verbose=0, quiet=False)  # set again by the command's -v/-q
        # The cyclic collector less often, as mypy tunes it: a plan of 10,000 nodes makes
        # millions of objects (labels, nodes, files) and almost no cycles, and at the
        # default threshold (700) collecting costs a third of its CPU time.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            raise  # stdout went away (`| head`): click handles it
        except Exception as e:
            if log.isEnabledFor(logging.DEBUG):
                import traceback

                traceback.print_exc(file=sys.stderr)
                hint = ""
            else:
                hint = " (run with -v for the traceback)"
            text = str(e).splitlines()[0][:300] if str(e) else ""
            fail(f"internal error: {type(e).__name__}: {text}{hint}")


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="reconcile-gpu", prog_name="reconcile")
def main() -> None:
    """Git as the source of truth for GPU node labels, driver images and workloads.

    \b
    reconcile validate    check desired/ offline (exit 0 clean, 2 on errors)
    reconcile plan        print drift as `<node> <key> <value>` (exit 0 in sync, 1 drift, 2 error)
    reconcile apply       fix the drift (exit 0 converged, 2 anything failed)
    reconcile sandbox     a local Kubernetes-compatible API server to try it on
    """


def run() -> None:
    """The `reconcile` command and `python -m reconcile`: `main`, then, as the process
    ends, what is still alive kept out of the interpreter's last collections. They would
    walk every object a command made (a plan of 10,000 nodes: some 50 ms) and find no
    cycle worth freeing in a process about to exit; atexit handlers still run (the
    client's temporary certificate files are removed)."""
    try:
        main(prog_name="reconcile")
    finally:
        gc.freeze()
