"""Diagnostics (user mistakes, collected and reported together) and the error hierarchy.

A `Diagnostic` is a problem with the input that the user can fix in a file: it carries
where (file:line:col), what (summary) and what is allowed (detail). Errors raised as
exceptions are the ones that stop an operation: the cluster refused, could not be
reached, or a saved plan no longer matches it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


class Severity(enum.StrEnum):
    """How bad a diagnostic or a plan's finding is."""

    ERROR = "error"
    WARNING = "warning"
    # A plan's finding worth knowing that needs no action (`note:`): never an exit 1.
    NOTE = "note"


@dataclass(frozen=True, order=True)
class Source:
    """A position in a desired-state file; line and column count from 1."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.column or 1}"


def nearest(
    file: str,
    positions: Mapping[tuple[str | int, ...], tuple[int, int]],
    path: tuple[str | int, ...],
    default: Source,
) -> Source:
    """Where `path` is written in `file`, or the nearest value enclosing it that is."""
    for end in range(len(path), 0, -1):
        if path[:end] in positions:
            return Source(file, *positions[path[:end]])
    return default


@dataclass(frozen=True)
class Diagnostic:
    severity: Severity
    summary: str
    source: Source | None = None
    detail: str = ""

    @property
    def message(self) -> str:
        return f"{self.summary}: {self.detail}" if self.detail else self.summary

    def __str__(self) -> str:
        prefix = f"{self.source}: " if self.source else ""
        tag = "" if self.severity is Severity.ERROR else f"{self.severity}: "
        return f"{prefix}{tag}{self.message}"


def error(summary: str, source: Source | None = None, detail: str = "") -> Diagnostic:
    return Diagnostic(Severity.ERROR, summary, source, detail)


def warning(summary: str, source: Source | None = None, detail: str = "") -> Diagnostic:
    return Diagnostic(Severity.WARNING, summary, source, detail)


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diagnostics)


def sort_key(diagnostic: Diagnostic) -> tuple[str, int, int, str]:
    source = diagnostic.source or Source("")
    return (source.file, source.line, source.column, diagnostic.summary)


def relative(path: Path, base: Path | None = None) -> str:
    """A path as the user should see it: relative to the working directory when inside it."""
    base = base or Path.cwd()
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


# scheme://user:password@host: the user info, which may hold a password.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")


def without_userinfo(text: str) -> str:
    """`https://user:pass@host` -> `https://host`, wherever a URL appears in `text`."""
    return _USERINFO.sub(r"\1", text)


class ReconcileError(Exception):
    """Something stopped an operation; the message is for the user as it stands."""


class InvalidInput(ReconcileError):
    """The desired state has errors; nothing was sent to the cluster."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__(f"{sum(1 for d in diagnostics if d.severity is Severity.ERROR)} error(s)")
        self.diagnostics = diagnostics


class ConfigError(ReconcileError):
    """No usable kubeconfig, context or credentials."""


class InvalidName(ReconcileError):
    """A node, namespace or object name the API server would refuse: never put in a URL."""


class ClusterUnreachable(ReconcileError):
    """The API server could not be reached or did not answer in time."""


class ApiError(ReconcileError):
    """The API server answered with a failure Status; reason and message are the server's."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        causes: tuple[dict[str, str], ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{message} ({status} {reason})" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes
        self.retry_after = retry_after


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: a resourceVersion precondition failed, or a server-side apply field conflict.

    `after_lost_answer` is set when an earlier try of the same write went out and its answer
    was lost: the write that moved the resourceVersion may then have been our own."""

    after_lost_answer: bool = False


class Invalid(ApiError):
    """422: the server refused the object as invalid."""


class TooManyRequests(ApiError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget."""


class EmptyPrune(ReconcileError):
    """`--prune` would delete everything reconcile manages: a person must say so."""


class PlanRefused(ReconcileError):
    """A saved plan that does not belong to this cluster or desired/ tree, or asks for
    what neither desired/ nor the inventory can justify."""


class StalePlan(ReconcileError):
    """A saved plan was computed from a state of the cluster that has moved since."""
