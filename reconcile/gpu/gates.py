"""Gates between a rollout's batches: what must hold before the next batch starts.

- `bake`: the batch stays healthy for a while (each node Ready, not recorded failed, no
  operator state label at a failed value);
- `job`: a Job from desired/gates/ run on each node of the batch, pinned to it by
  `spec.template.spec.nodeName`, must complete (the place for a `dcgmi diag` run);
- `prom`: an instant Prometheus query, `$NODES` replaced by the batch's node names as a
  regular expression (`n1|n2`), must return no series, or only zeros: every value of a
  vector, a matrix (a range query) or a scalar; a string or NaN is not zero.

A gate that cannot tell (the query fails, its answer is not understood, the Job is not
done in time) halts the rollout: it fails closed. Each gate says why it halted in one
line, quoting at most a short, masked excerpt of what it was answered.
"""

from __future__ import annotations

import copy
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from reconcile.desired.models import Manifest
from reconcile.desired.reserved import ROLLOUT_FAILED
from reconcile.diagnostics import ReconcileError, without_userinfo
from reconcile.gpu import disruptive
from reconcile.gpu.rollout import Batch, Gate
from reconcile.gpu.upgrade import NodeOps, poll_intervals
from reconcile.kube.api import ObjectApi
from reconcile.kube.objects import ApiResource, LiveNode

BAKE_POLL_SECONDS: Final = 2.0
JOB_POLL_SECONDS: Final = 2.0
PROMETHEUS_TIMEOUT_SECONDS: Final = 30.0
GATE_LABEL: Final = "reconcile.dev/rollout-gate"
JOBS: Final = ApiResource("batch", "v1", "jobs", "Job", True)


def all_of(gates: Sequence[Gate]) -> Gate | None:
    """One gate asking each in turn, halting at the first that halts (None: no gate)."""
    if not gates:
        return None

    def gate(batch: Batch) -> str | None:
        for one in gates:
            if (halted := one(batch)) is not None:
                return halted
        return None

    return gate


def bake(seconds: float, ops: NodeOps, catalogue: disruptive.Catalogue | None = None) -> Gate:
    """The batch watched for `seconds`: it halts when one of its nodes stops being Ready,
    is recorded failed, or has an operator state label turn to a failed value."""

    states = (catalogue or disruptive.Catalogue.packaged()).states()

    def gate(batch: Batch) -> str | None:
        deadline = ops.clock() + seconds
        ops.note(f"baking: batch {batch.number} ({', '.join(batch.nodes)}) for {seconds:g}s")
        while True:
            for name in batch.nodes:
                if problem := _unhealthy(ops.cluster.get_node(name), states):
                    return f"{name} {problem} during the {seconds:g}s bake of batch {batch.number}"
            if ops.clock() >= deadline:
                return None
            ops.sleep(min(BAKE_POLL_SECONDS, max(0.0, deadline - ops.clock())))

    return gate


def _unhealthy(live: LiveNode, states: Sequence[disruptive.StateLabel]) -> str | None:
    if not live.ready:
        return "is not Ready"
    if ROLLOUT_FAILED in live.annotations:
        return f"failed ({live.annotations[ROLLOUT_FAILED]})"
    for state in states:
        if live.labels.get(state.label) in state.failed:
            return f"reports {state.label}={live.labels[state.label]}"
    return None


@dataclass(frozen=True)
class JobGate:
    """A Job from desired/gates/ (`manifest`) created on each node of a batch and waited
    for up to `timeout` seconds: every one must complete."""

    manifest: Manifest
    cluster: ObjectApi
    ops: NodeOps
    timeout: float

    @property
    def shown(self) -> str:
        return f"gate job={self.manifest.source.file}"

    def __call__(self, batch: Batch) -> str | None:
        created = []
        for node in batch.nodes:
            try:
                job = self.cluster.create_object(JOBS, self._pinned(node, batch))
            except ReconcileError as e:
                return f"{self.shown}: could not create its Job on {node}: {e}"
            created.append((node, str(job["metadata"]["name"])))
            self.ops.note(f"{self.shown}: Job {self.manifest.namespace}/{created[-1][1]} on {node}")
        deadline = self.ops.clock() + self.timeout
        waiting = list(created)
        pauses = poll_intervals(JOB_POLL_SECONDS)
        while waiting:
            for node, name in list(waiting):
                outcome = _finished(self.cluster.get_object(JOBS, self.manifest.namespace, name))
                if outcome == "Complete":
                    waiting.remove((node, name))
                elif outcome is not None:
                    return (
                        f"{self.shown}: Job {self.manifest.namespace}/{name} on {node} failed "
                        f"({outcome})"
                    )
            if not waiting:
                return None
            if self.ops.clock() >= deadline:
                names = ", ".join(f"{name} on {node}" for node, name in waiting)
                return (
                    f"{self.shown}: not complete after {self.timeout:g}s (--gate-timeout): {names}"
                )
            self.ops.sleep(next(pauses))
        return None

    def _pinned(self, node: str, batch: Batch) -> dict[str, Any]:
        """The Job for `node`: named after the file's Job (`<name>-` and a suffix the
        server picks), pinned to the node, labelled with the gate and the batch."""
        body = copy.deepcopy(self.manifest.body)
        metadata = body.setdefault("metadata", {})
        metadata["generateName"] = f"{str(metadata.pop('name'))[:40]}-"
        metadata.pop("resourceVersion", None)
        metadata["labels"] = {
            **(metadata.get("labels") or {}),
            GATE_LABEL: str(metadata["generateName"]).rstrip("-"),
            "reconcile.dev/rollout-batch": str(batch.number),
        }
        pod = body.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
        pod["nodeName"] = node
        # The node may still carry the rollout's cordon or a GPU taint: the gate runs there.
        pod.setdefault("tolerations", []).append({"operator": "Exists"})
        return body


def _finished(job: dict[str, Any] | None) -> str | None:
    """`Complete`, the reason it failed, or None while it runs (a Job gone is a failure)."""
    if job is None:
        return "it was deleted"
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Complete"
        if condition.get("type") == "Failed":
            return str(condition.get("message") or condition.get("reason") or "Failed")
    return None


def nodes_pattern(nodes: Sequence[str]) -> str:
    """The batch's node names as a PromQL regular expression in a double-quoted string
    (`n1|n2`; a dot escaped as `\\\\.`, which the string reads as `\\.`)."""
    return "|".join(name.replace(".", "\\\\.") for name in nodes)


@dataclass(frozen=True)
class PromGate:
    """An instant query on the Prometheus at `url` after each batch: no series, or only
    zeros, lets the next batch start. Every kind of answer is judged by its values (a
    vector's samples, every sample of every series of a matrix, a scalar); a string, a
    value that is not a number (NaN included) or an answer not understood halts."""

    query: str
    url: str
    fetch: Callable[[str], bytes] | None = None

    def __post_init__(self) -> None:
        check_prometheus_url(self.url)

    def __call__(self, batch: Batch) -> str | None:
        query = self.query.replace("$NODES", nodes_pattern(batch.nodes))
        address = f"{self.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        shown = f"gate prom={self.query}"
        where = without_userinfo(self.url)
        try:
            body = (self.fetch or _get)(address)
        except (OSError, ValueError) as e:
            return f"{shown}: Prometheus at {where} did not answer: {excerpt(str(e))}"
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return f"{shown}: Prometheus at {where} answered something not JSON: {_quoted(body)}"
        try:
            nonzero = _not_zero(answer)
        except _NotUnderstood as e:
            return f"{shown}: Prometheus at {where} gave an answer not understood ({e}): " + (
                _quoted(body)
            )
        except _Refused as e:
            return f"{shown}: Prometheus refused the query: {e}"
        if nonzero:
            listed = excerpt("; ".join(nonzero[:5]) + (" ..." if len(nonzero) > 5 else ""))
            return f"{shown}: {len(nonzero)} series not zero after batch {batch.number}: {listed}"
        return None


# The most of an answer a halt message quotes, and the most of an answer read at all.
EXCERPT_CHARS: Final = 200
ANSWER_BYTES_LIMIT: Final = 64 * 1024 * 1024
_SCHEMES: Final = ("http", "https")


def check_prometheus_url(url: str) -> str:
    """`url` when it is an http:// or https:// address with a host (ReconcileError
    otherwise: a file:// or ftp:// address is never read)."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme.lower() not in _SCHEMES or not parts.hostname:
        raise ReconcileError(
            f"--prometheus-url {excerpt(without_userinfo(url))}: not an address of Prometheus "
            "(give http://HOST[:PORT][/PATH] or https://...; no other scheme is read)"
        )
    return url


class _NotUnderstood(Exception):
    """The answer is not the Prometheus HTTP API's (or not a number where one must be)."""


class _Refused(Exception):
    """Prometheus answered `status: error`; the message is its `error`, excerpted."""


def _not_zero(answer: Any) -> list[str]:
    """Each series of `answer` (a query's JSON) with a value other than zero, as
    `series = value` (masked); raises _NotUnderstood or _Refused."""
    if not isinstance(answer, dict):
        raise _NotUnderstood("not a JSON object")
    status = answer.get("status")
    if status == "error":
        said = answer.get("error") or answer.get("errorType") or "no error given"
        raise _Refused(excerpt(str(said)))
    if status != "success":
        raise _NotUnderstood(f"status {excerpt(repr(status), 40)}, not success")
    data = answer.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise _NotUnderstood("no data.result")
    kind, result = data.get("resultType"), data["result"]
    if kind == "vector":
        return [
            f"{_series(metric)} = {value}"
            for metric, samples in _each_series(result, "value")
            for value in samples[:1]
            if _number(value) != 0
        ]
    if kind == "matrix":
        found = []
        for metric, samples in _each_series(result, "values"):
            # Every sample counts; the first that is not zero is the one shown.
            values = [value for value in samples if _number(value) != 0]
            if values:
                found.append(f"{_series(metric)} = {values[0]}")
        return found
    if kind == "scalar":
        [value] = _samples([result])
        return [f"scalar = {value}"] if _number(value) != 0 else []
    if kind == "string":
        raise _NotUnderstood("a string, not a number")
    raise _NotUnderstood(f"resultType {excerpt(repr(kind), 40)}")


def _each_series(result: Any, field: str) -> list[tuple[dict[str, Any], list[str]]]:
    """Each series of a vector (`value`: one sample) or matrix (`values`) as its labels
    and its values, in order."""
    if not isinstance(result, list):
        raise _NotUnderstood("data.result is not a list")
    found = []
    for series in result:
        if not isinstance(series, dict) or not isinstance(series.get("metric", {}), dict):
            raise _NotUnderstood("a series is not an object with metric labels")
        if field not in series:
            raise _NotUnderstood(f"a series has no {field}")
        samples = series[field] if field == "values" else [series[field]]
        if not isinstance(samples, list):
            raise _NotUnderstood(f"a series' {field} is not a list")
        found.append((series.get("metric") or {}, _samples(samples)))
    return found


def _samples(samples: list[Any]) -> list[str]:
    """The values of `[timestamp, "value"]` pairs, as the API writes them."""
    values = []
    for sample in samples:
        if not isinstance(sample, list) or len(sample) != 2:
            raise _NotUnderstood("a sample is not [timestamp, value]")
        values.append(sample[1])
    return values


def _number(value: Any) -> float:
    """A sample's value as a number (the API writes it as a string); NaN or anything
    else that is not a number is not understood: it cannot say all is well."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _NotUnderstood("a value is not a number")
    try:
        number = float(value)
    except ValueError:
        raise _NotUnderstood(f"value {excerpt(repr(value), 40)} is not a number") from None
    if math.isnan(number):
        raise _NotUnderstood("a value is NaN")
    return number


def _series(metric: dict[str, Any]) -> str:
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


# What looks like a credential in a text an answer carries: the value after a name like
# token or password, a bearer or basic scheme's value, a JWT, a long opaque run of letters
# and digits (API keys, base64 secrets). A URL's user info is dropped before these.
_CREDENTIALS: Final = (
    re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s\"',;]+"),
    re.compile(
        r"(?i)((?:api[_-]?key|access[_-]?key|token|secret|password|passwd|pwd|auth"
        r"|authorization|credentials?|cookie|session)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&}]+"
    ),
    re.compile(r"\beyJ[\w-]+\.[\w-]+\.[\w-]*"),
    re.compile(r"(?=[A-Za-z0-9+/=_]*[0-9])(?=[A-Za-z0-9+/=_]*[A-Za-z])[A-Za-z0-9+/=_]{32,}"),
)


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` on one line, whatever looks like a credential struck out as `***`, cut to
    `limit` characters (`...` marks the cut)."""
    if len(text) > 8 * limit:
        # Masked and shortened from a head of the text only (an answer may be megabytes);
        # the word cut in half at its end is dropped, so no part of a secret is left.
        text = re.sub(r"[^\s\"',;:{}\[\]]*$", "", text[: 8 * limit])
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    line = without_userinfo(line)
    for pattern in _CREDENTIALS:
        line = pattern.sub(_mask, line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _mask(match: re.Match[str]) -> str:
    return "".join(g for g in match.groups() if g is not None) + "***"


def _quoted(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return f"{excerpt(text)!r}" if text.strip() else "an empty answer"


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed to http:// and https:// only (urllib's own also follows ftp://)."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme.lower() not in _SCHEMES:
            raise ValueError(f"redirected to a {urllib.parse.urlsplit(newurl).scheme}:// address")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _get(address: str) -> bytes:
    """The body Prometheus answers at `address` (an http:// or https:// one only); an
    error status's body too when it is the API's JSON (400 for a query that does not
    parse, 422 for one that cannot run), so the halt can say what Prometheus said."""
    if urllib.parse.urlsplit(address).scheme.lower() not in _SCHEMES:
        raise ValueError("not an http:// or https:// address")
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    try:
        with opener.open(address, timeout=PROMETHEUS_TIMEOUT_SECONDS) as response:
            return _read(response)
    except urllib.error.HTTPError as e:
        body = _read(e)
        if e.headers.get_content_type() == "application/json" and body.strip():
            return body
        raise


def _read(response: Any) -> bytes:
    body = bytes(response.read(ANSWER_BYTES_LIMIT + 1))
    if len(body) > ANSWER_BYTES_LIMIT:
        raise ValueError(f"an answer larger than {ANSWER_BYTES_LIMIT // (1024 * 1024)} MiB")
    return body
