"""The command line's frame: the `reconcile` group, the options every command takes, the
`-o` formats a command renders, and the one place failures become exit codes.

Commands live beside it, one module per area (reconciling.py: validate, plan, apply;
gpu.py: the GPU facts; toolbox.py: import, rbac, placement, schemas, the sandbox;
watching.py: watch). Each parses argv into a typed request, calls one operation, shows
the result on the view `-o` chose (views.py, in the output contract of output.py) and
maps the result to an exit code. A command's module is imported when that command runs (COMMANDS), and modules that
need the `kubernetes` client inside the commands that talk to a cluster, so a command
pays for its own imports only: `validate`, `sanitize` and `schemas` start fast, and
`plan` sends its first request sooner.
"""

from __future__ import annotations

import functools
import gc
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, TextIO, TypeVar

import click

from reconcile import diagnostics as diag
from reconcile.app.session import Session
from reconcile.cli.output import (
    EXIT_ERROR,
    EXIT_SIGINT,
    Format,
    configure_logging,
    log,
    severity_prefix,
)
from reconcile.diagnostics import Diagnostic, InvalidInput, ReconcileError, Severity

F = TypeVar("F", bound=Callable[..., Any])

YOUNG_GC_THRESHOLD: Final = 200_000

# command -> the module of reconcile.cli that defines it, imported when it is asked for.
COMMANDS: Final = {
    **dict.fromkeys(("validate", "plan", "apply"), "reconciling"),
    **dict.fromkeys(("sanitize", "audit", "drivers", "report", "upgrade", "rollout"), "gpu"),
    **dict.fromkeys(("placement", "import", "rbac", "schemas", "completion", "sandbox"), "toolbox"),
    "watch": "watching",
    "nfd": "nfd",
}


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


def _warnings(problems: Sequence[Diagnostic]) -> None:
    """desired/'s warnings, printed once it is read (before anything else happens)."""
    from reconcile.cli.views import render_diagnostics

    render_diagnostics(problems, stderr())


def common_options(command: F) -> F:
    """The options every command takes: a `Session` argument `session`, and `output`."""

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
        # What this command renders (`outputs`), and only that, in its --help; any other
        # is refused by `outputs`, in one `error:` line naming these.
        metavar="[" + "|".join(f.value for f in getattr(command, "formats", tuple(Format))) + "]",
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
    @click.option(
        "-v",
        "--verbose",
        count=True,
        help="Also trace each API request on stderr as kubectl -v=6 does: method, URL, "
        "status, milliseconds (never a header or body).",
    )
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
        session = Session(desired, kubeconfig, context, request_timeout, on_problems=_warnings)
        try:
            return command(*args, session=session, output=Format(output), **kwargs)
        finally:
            session.close()

    return wrapper  # type: ignore[return-value]


def outputs(*allowed: Format) -> Callable[[F], F]:
    """The `-o` formats a command renders (with -o json, -o yaml too: the same document),
    the only choices its --help offers; any other is refused with exit 2 before the
    command runs, never silently ignored. Goes under @common_options."""
    if Format.JSON in allowed and Format.YAML not in allowed:
        allowed = (*allowed, Format.YAML)

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, output: Format, **kwargs: Any) -> Any:
            if output not in allowed:
                name = click.get_current_context().command_path
                shown = ", ".join(f.value for f in allowed)
                raise ReconcileError(f"{name} does not render -o {output.value}: use {shown}")
            return command(*args, output=output, **kwargs)

        wrapper.formats = allowed  # type: ignore[attr-defined]  # read by common_options
        return wrapper  # type: ignore[return-value]

    return decorate


TEXT_AND_JSON: Final = (Format.TEXT, Format.JSON)
ALL_FORMATS: Final = (Format.TEXT, Format.JSON, Format.MARKDOWN)
# plan and apply: the drift lines, also wide.
DRIFT_FORMATS: Final = (*ALL_FORMATS, Format.WIDE)


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


def _error(message: str) -> NoReturn:
    """One `error:` line (whatever the message holds), then exit 2. A URL in it loses its
    user info: a password embedded in the server URL is never printed."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    stderr().write(f"{severity_prefix(Severity.ERROR, sys.stderr)} {diag.without_userinfo(line)}\n")
    sys.exit(EXIT_ERROR)


def check_node_name(node: str) -> None:
    """A NODE argument that is not a valid node name never reaches a request path."""
    from reconcile.kube.validation import name_problem

    problem = name_problem(node, "node")
    if problem:
        raise ReconcileError(problem)


class Suggesting(click.Group):
    """A group that answers an unknown command with the commands it may have meant
    (`reconcile aply`: did you mean 'apply'?), as click answers an unknown option."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its --help ending with its exit codes (output.EXIT_CODES)."""
        from reconcile.cli.output import exit_codes_epilog

        command = super().get_command(ctx, cmd_name)
        if command is not None and command.epilog is None:
            path = f"{ctx.command_path} {cmd_name}".split(" ", 1)[1]
            command.epilog = exit_codes_epilog(path)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            import difflib

            name = args[0] if args else ""
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            if not close:
                raise
            meant = " or ".join(repr(c) for c in close)
            raise click.UsageError(
                f"No such command {name!r}. Did you mean {meant}?", ctx
            ) from None


class _Main(Suggesting):
    """The command group, with the last-resort handler: a bug is still exit 2 and one
    `error:` line (never exit 1, which a pipeline reads as "drift"); the traceback
    only with -v. Commands are loaded as they are asked for (click's lazy-loading
    pattern): each module registers its commands on `main` when imported."""

    # Its groups (`rollout`, `drivers`) suggest too.
    group_class = Suggesting

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"reconcile.cli.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        configure_logging(verbose=0, quiet=False)  # set again by the command's -v/-q
        # The cyclic collector less often, as mypy tunes it: a plan at fleet scale makes
        # millions of objects (labels, nodes, files) and almost no cycles, and at the
        # default threshold (700) collecting is a large share of its CPU time.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
        try:
            code = super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            raise  # stdout went away (`| head`): click handles it
        except InvalidInput as e:
            from reconcile.cli.views import render_diagnostics

            render_diagnostics(e.diagnostics, stderr())
            _error(f"{e}: nothing was changed in the cluster")
        except ReconcileError as e:
            _error(str(e))
        except KeyboardInterrupt:
            stderr().write("interrupted\n")
            sys.exit(EXIT_SIGINT)
        except Exception as e:
            if log.isEnabledFor(logging.DEBUG):
                import traceback

                traceback.print_exc(file=sys.stderr)
                hint = ""
            else:
                hint = " (run with -v for the traceback)"
            text = str(e).splitlines()[0][:300] if str(e) else ""
            _error(f"internal error: {type(e).__name__}: {text}{hint}")
        if code:
            sys.exit(code)
        return code


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
    walk every object a command made (docs/performance.md) and find no
    cycle worth freeing in a process about to exit; atexit handlers still run (the
    client's temporary certificate files are removed)."""
    try:
        main(prog_name="reconcile")
    finally:
        gc.freeze()
