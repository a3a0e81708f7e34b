"""The output contract, in one place: exit codes, every kind of line reconcile prints, and
the notes and warnings on stderr.

stdout carries results only, one line per fact, sorted, tab-free, grep/awk-friendly:
`<node> <key> <value>` (annotations `annotation:<key>`, taints `taint:<key>:<effect>`;
`""` for empty, `-` for must be absent), `<kind>/<ns>/<name> <field> <value>` for objects
(`+ ` create, `- ` prune). Notes and warnings go to stderr through the standard `logging`
module, so `-q` and `-v` are levels; errors are written there directly, always.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, TextIO

from reconcile.diagnostics import Severity
from reconcile.engine.facts import shown_value

if TYPE_CHECKING:
    from reconcile.engine.capacity import Placement
    from reconcile.engine.diff import NodeChange
    from reconcile.engine.findings import Finding
    from reconcile.engine.plan import ObjectPlan
    from reconcile.gpu.drivers import AuditFinding
    from reconcile.gpu.journal import Step

# kubectl diff / argocd app diff: 0 in sync, 1 drift or findings, 2 error.
EXIT_OK: Final = 0
EXIT_DRIFT: Final = 1
EXIT_ERROR: Final = 2
EXIT_SIGINT: Final = 130


class Format(enum.StrEnum):
    TEXT = "text"
    JSON = "json"
    MARKDOWN = "markdown"
    # The text lines with the live value (and a node fact's owner) added, as
    # `kubectl get -o wide` adds columns: the default text stays the contract.
    WIDE = "wide"
    # The JSON document as YAML (kubectl's -o yaml): wherever -o json is, the same data.
    YAML = "yaml"

    @property
    def document(self) -> bool:
        """A machine-readable document (JSON or YAML), not lines."""
        return self in (Format.JSON, Format.YAML)


# --- lines on stdout -------------------------------------------------------------------------


# Every command's exit codes, the end of its --help (cli/app.py) and of its row in
# docs/commands.md. One contract: 0 in sync or done, 1 drift (what only --prune removes
# too), 2 an error of any kind, including an error finding that makes apply refuse.
EXIT_CODES: Final = {
    "validate": "0 clean, 2 errors",
    "plan": "0 in sync, 1 drift (what only --prune removes too), 2 an error or an error finding",
    "apply": "0 converged, 2 anything failed or was refused, 130 interrupted (SIGINT), 143 (SIGTERM)",
    "watch": "0 after SIGTERM/SIGINT, 2 when it cannot start",
    "sanitize": "0, 2 if one has nothing left",
    "audit": "0 OK, 1 findings, 2 error",
    "drivers": "see each command",
    "drivers tag": "0, 2 a part is missing",
    "drivers audit": "0 OK, 1 missing, 2 no support matrix or a tag cannot be built",
    "upgrade": "0 done, 2 refused or failed, 130 interrupted (SIGINT), 143 (SIGTERM)",
    "rollout": (
        "0 done, 2 refused, failed or halted by a gate, 130 interrupted (SIGINT), 143 (SIGTERM)"
    ),
    "rollout status": "0 nothing blocks, 1 something does, 2 error",
    "rollout abandon": "0 done, 2 refused (a node in a running rollout: nothing removed)",
    "placement": "0 all placed, 1 something pending, 2 error",
    "report": "0, 2 no support matrix or a variable clash",
    "import": "0, 2 error",
    "rbac": "0, 2 invalid desired/",
    "completion": "0",
    "schemas": "0 written or up to date, 1 --check: out of date, 2 error",
    "sandbox": "0 (with CMD: its code), 2 when it cannot start",
    "nfd": "see each command",
    "nfd eval": "0 evaluated, 2 an invalid rule or input",
    "nfd features": "0 printed, 2 no NFD CRDs, no NodeFeature of the node, or a cluster error",
}


def exit_codes_epilog(command: str) -> str | None:
    """`Exit codes: ...` for the end of `command`'s --help (None: a command not listed)."""
    codes = EXIT_CODES.get(command)
    return None if codes is None else f"Exit codes: {codes}."


def plan_exit(errors: bool, attention: bool) -> int:
    """A plan's exit code: 2 when it has an error finding (an `error:` line: apply would
    refuse, or the change must not merge as it is), 1 when the cluster is out of sync
    with git (drift, what only --prune removes, a warning), else 0."""
    if errors:
        return EXIT_ERROR
    return EXIT_DRIFT if attention else EXIT_OK


def prune_line(subject: str, key: str | None = None) -> str:
    """What only `--prune` removes, on its line: `<node> <key> - (--prune)` for a fact,
    `<object> - (--prune)` for an object."""
    return f"{subject} {key} - (--prune)" if key is not None else f"{subject} - (--prune)"


def predicted_line(node: str, key: str, value: str | None) -> str:
    """A label nfd-master will write (`-`: remove) once the tree's NodeFeatureRules are
    applied: `<node> <key> <value> (nfd)`, marked as not reconcile's write."""
    return f"{node} {key} {'-' if value is None else value} (nfd)"


def node_line(
    node: str, change: NodeChange, *, show_owner: bool = False, wide: bool = False
) -> str:
    line = f"{node} {change.shown_key} {change.shown_value}"
    if wide:  # `<node> <key> <live> <value> <owner>`
        line = (
            f"{node} {change.shown_key} {shown_value(change.before)} {change.shown_value} "
            f"{change.owner or 'unknown'}"
        )
    elif show_owner:
        line += f" {change.owner or 'unknown'}"
        if change.source:
            line += f" {change.source}"
    return line + (" (rollout)" if change.rollout else "")


def object_lines(obj: ObjectPlan, *, wide: bool = False) -> list[str]:
    """`<id> +` to create, `<id> -` to prune, else one line per changed field, as a node's
    fact lines: `<id> <field> <value>`, `-` for a field removed (with `wide`, the live
    value before the desired one and the field manager that set it last:
    `<id> <field> <live> <value> <manager>`)."""
    if obj.action.glyph is not None:
        return [f"{obj.id} {obj.action.glyph}"]
    if not wide:
        return [f"{obj.id} {c.shown_path} {c.shown_value}" for c in obj.changes]
    return [
        f"{obj.id} {c.shown_path} {c.shown_before} {c.shown_value}"
        + (f" {c.manager}" if c.manager else "")
        for c in obj.changes
    ]


# The columns of `-o wide` (kubectl's header row): live before desired, who wrote it last.
WIDE_HEADER: Final = "SUBJECT KEY LIVE DESIRED OWNER"


def placement_line(result: Placement) -> str:
    """Where the replicas land, then what else could take them:
    `<workload> <placed>/<wanted> -> <node> (<replicas>), ...; candidates: <node>,<node>`
    when every replica has a place; else `<workload> <placed>/<wanted> [-> <node>
    (<replicas>), ...;] PENDING <how many>: <the scheduler's reason>`."""
    head = f"{result.template.id} {result.placed}/{result.wanted}"
    if not result.evaluated:
        return f"{head} NOT EVALUATED: {result.reason}"
    counted: dict[str, int] = {}
    for node in result.landed:
        counted[node] = counted.get(node, 0) + 1
    lands = ", ".join(f"{node} ({n})" for node, n in sorted(counted.items()))
    if result.ok:
        where = f" -> {lands};" if lands else ""
        return f"{head}{where} candidates: {','.join(result.nodes) or '(none)'}"
    where = f" -> {lands};" if lands else ""
    schedules = " (fits on some schedules)" if result.some_schedules else ""
    count = f" {result.pending}" if result.wanted else ""
    return f"{head}{where} PENDING{count}{schedules}: {result.reason}"


def watch_marker(event: str) -> str:
    """The end of a watch's text line: ` (corrected)` for a change `watch --correct` wrote,
    nothing for a drift it reports. The plan's line before it stays as it is, as
    ` (rollout)` and ` (--prune)` end a plan's line."""
    return " (corrected)" if event == "corrected" else ""


def name_first(cluster: str) -> str:
    """A fleet's text lines on stdout: `<cluster> <line>`."""
    return f"{cluster} "


def audit_line(finding: AuditFinding) -> str:
    return f"{finding.node} {finding.key} {finding.reason}"


def upgrade_line(step: Step) -> str:
    """`<node> <key> <value>` as the upgrade moves; `<pod> evicted` for an eviction
    (`<pod> evict` in a dry run's plan)."""
    return " ".join(part for part in (step.subject, step.field, step.value) if part)


# --- stderr ----------------------------------------------------------------------------------

_COLOURS: Final = {
    Severity.ERROR: "\x1b[31m",
    Severity.WARNING: "\x1b[33m",
    Severity.NOTE: "\x1b[36m",
}


def severity_prefix(severity: Severity, stream: TextIO) -> str:
    """`error:` or `warning:`, in colour on a terminal unless NO_COLOR is set (no-color.org)."""
    text = f"{severity}:"
    if stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb":
        return f"{_COLOURS[severity]}{text}\x1b[0m"
    return text


def finding_line(finding: Finding, stream: TextIO) -> str:
    return f"{severity_prefix(finding.severity, stream)} {finding.subject}: {finding.message}"


log: Final = logging.getLogger("reconcile")

# In a run over several clusters of a fleet: the cluster whose output is being written.
_CLUSTER: Final = contextvars.ContextVar[str | None]("cluster", default=None)


class Prefixed:
    """A text stream that starts every line with `prefix` (a fleet cluster's name)."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self.stream = stream
        self.prefix = prefix
        self._at_start = True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self._at_start:
                self.stream.write(self.prefix)
            self.stream.write(piece)
            self._at_start = piece.endswith("\n")
        return len(text)

    def writelines(self, lines: Iterator[str] | list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


@contextmanager
def for_cluster(name: str | None) -> Iterator[None]:
    """Notes and warnings logged inside name `name` first (`<cluster>: warning: ...`)."""
    token = _CLUSTER.set(name)
    try:
        yield
    finally:
        _CLUSTER.reset(token)


class _Stderr(logging.Handler):
    """Notes as `note: ...`, warnings as `warning: ...` (coloured on a terminal), on the
    stderr of the moment (so a test runner's capture sees them). A record made with
    `extra={"plain": True}` is written as it is (a `file:line:col: warning:` diagnostic)."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stderr
        message = record.getMessage()
        if not getattr(record, "plain", False):
            tag = "note:" if record.levelno < logging.WARNING else None
            message = f"{tag or severity_prefix(Severity.WARNING, stream)} {message}"
        cluster = _CLUSTER.get()
        stream.write((f"{cluster}: " if cluster else "") + message + "\n")


_HANDLER: Final = _Stderr()


def configure_logging(*, verbose: int, quiet: bool) -> None:
    """-q: errors only (they are not logged: always shown); default: notes and warnings;
    -v: also each request to the API server, one line each (kube/client/cluster.py)."""
    if _HANDLER not in log.handlers:
        log.addHandler(_HANDLER)
        log.propagate = False
    log.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
