"""The differential suite's cases: published CRDs (tests/data/differential/manifest.yaml), a
valid custom resource of each (samples.yaml), and mutations derived from each rule of the
CRD's schema, judged offline by `reconcile validate` and by a real API server
(tools/differential.py records the server's verdicts in verdicts.json).

The generator is deterministic: the schema is walked in key order and the candidates of each
rule are sampled with a fixed seed, so the same files always give the same cases (each case
carries a digest of its body; a recorded verdict is only compared with the case it was
recorded for).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import re2
import yaml

DATA: Final = Path(__file__).resolve().parent / "data" / "differential"
MANIFEST: Final = DATA / "manifest.yaml"
SAMPLES: Final = DATA / "samples.yaml"
VERDICTS: Final = DATA / "verdicts.json"
NAMESPACE: Final = "differential"
SEED: Final = 45
# Cases sampled per rule and CRD (after the walk), and how deep the walk goes below spec.
PER_RULE: Final = 4
DEPTH: Final = 7
UNKNOWN: Final = "zzUnknownField"

Json = Any


@dataclass(frozen=True)
class Crd:
    file: str  # relative to DATA
    repo: str
    path: str
    commit: str
    document: dict[str, Any]

    @property
    def stem(self) -> str:
        return Path(self.file).stem

    @property
    def group(self) -> str:
        return str(self.document["spec"]["group"])

    @property
    def names(self) -> dict[str, Any]:
        return dict(self.document["spec"]["names"])

    @property
    def namespaced(self) -> bool:
        return bool(self.document["spec"]["scope"] == "Namespaced")

    @property
    def version(self) -> dict[str, Any]:
        return next(v for v in self.document["spec"]["versions"] if v.get("storage"))

    @property
    def schema(self) -> dict[str, Any]:
        return dict(self.version["schema"]["openAPIV3Schema"])

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version['name']}"


@dataclass(frozen=True)
class Case:
    id: str  # "<crd stem>/<rule>/<n>": stable while the files and the generator are
    crd: Crd
    rule: str  # the schema rule the mutation breaks (or "sample", "valid", "cel")
    path: str  # the field changed
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def digest(self) -> str:
        text = json.dumps(self.body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def crds() -> tuple[Crd, ...]:
    manifest = yaml.safe_load(MANIFEST.read_text())
    found = []
    for entry in manifest["crds"]:
        document = yaml.load((DATA / entry["file"]).read_text(), Loader=yaml.CSafeLoader)
        found.append(Crd(entry["file"], entry["repo"], entry["path"], entry["commit"], document))
    return tuple(found)


# -- values a schema accepts ------------------------------------------------------------

_STRINGS: Final = (
    "a",
    "abc",
    "example",
    "a.example.com",
    "example.com/a",
    "v1",
    "1",
    "10",
    "1Gi",
    "5m",
    "30s",
    "1h",
    "http",
    "Abc",
    "a-b",
    "a_b",
    "/a",
    "0.1",
    "2024-01-01T00:00:00Z",
    "A1",
)
_FORMATS: Final = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "duration": "1h",
    "uri": "https://example.com",
    "email": "a@example.com",
    "hostname": "a.example.com",
    "ipv4": "10.0.0.1",
    "ipv6": "::1",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "byte": "YQ==",
}


def _matches(schema: dict[str, Any], text: str) -> bool:
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            if re2.search(pattern, text) is None:
                return False
        except re2.error:
            return False
    if len(text) > schema.get("maxLength", len(text)):
        return False
    return len(text) >= int(schema.get("minLength", 0))


def valid_string(schema: dict[str, Any]) -> str | None:
    """A string the schema's pattern, length bounds and format take; None when none is known."""
    if "enum" in schema:
        return str(schema["enum"][0])
    if isinstance(schema.get("default"), str):
        return str(schema["default"])
    candidates = list(_STRINGS)
    fmt = schema.get("format")
    if fmt in _FORMATS:
        candidates.insert(0, _FORMATS[fmt])
    for text in candidates:
        if _matches(schema, text):
            return text
    return None


def synth(schema: dict[str, Any], depth: int = 0) -> Json:
    """A small value of the schema: the required fields only, each a value the schema takes."""
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if "enum" in schema:
        return copy.deepcopy(schema["enum"][0])
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    kind = schema.get("type")
    if kind == "string":
        return valid_string(schema) or "a"
    if kind == "integer":
        return int(max(schema.get("minimum", 1), 1 if schema.get("minimum") is None else 0))
    if kind == "number":
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "array":
        count = schema.get("minItems", 0)
        items = schema.get("items") or {}
        return [synth(items, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        value: dict[str, Any] = {}
        if depth > 12:
            return value
        for key in schema.get("required") or ():
            child = (schema.get("properties") or {}).get(key, {})
            value[key] = synth(child, depth + 1)
        return value
    return "a"


# -- paths ------------------------------------------------------------------------------

Path_ = tuple[str | int, ...]
_SEGMENT: Final = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_path(text: str) -> Path_:
    return tuple(name if name else int(index) for name, index in _SEGMENT.findall(text))


def show_path(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _child_schema(schema: dict[str, Any], part: str | int) -> dict[str, Any]:
    if isinstance(part, int):
        return dict(schema.get("items") or {})
    properties = schema.get("properties") or {}
    if part in properties:
        return dict(properties[part])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else {}


def set_at(body: dict[str, Any], schema: dict[str, Any], path: Path_, value: Json) -> None:
    """Set the field at PATH, creating what leads to it from the schema (required fields
    filled in), so that the one change is the mutation."""
    node: Any = body
    node_schema = schema
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        child_schema = _child_schema(node_schema, part)
        if isinstance(part, int):
            while len(node) <= part:
                node.append(synth(child_schema))
            if last:
                node[part] = value
            elif not isinstance(node[part], (dict, list)):
                node[part] = synth(child_schema)
        elif last:
            node[part] = value
        elif not isinstance(node.get(part), (dict, list)):
            node[part] = synth(child_schema)
            if isinstance(path[depth + 1], int) and not isinstance(node[part], list):
                node[part] = []
        if not last:
            node = node[part]
            node_schema = child_schema


def unset_at(body: dict[str, Any], path: Path_) -> None:
    node: Any = body
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


# -- the walk ---------------------------------------------------------------------------


def _walk(
    schema: dict[str, Any], path: Path_, depth: int
) -> Iterator[tuple[Path_, dict[str, Any]]]:
    yield path, schema
    if depth >= DEPTH or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if schema.get("x-kubernetes-embedded-resource"):
        return
    for key in sorted(schema.get("properties") or {}):
        if path == () and key in ("apiVersion", "kind", "metadata", "status"):
            continue
        yield from _walk(schema["properties"][key], (*path, key), depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _walk(items, (*path, 0), depth + 1)


def _wrong_type(schema: dict[str, Any]) -> Json:
    if schema.get("x-kubernetes-int-or-string"):
        return True
    return {
        "string": 12345,
        "integer": "twelve",
        "number": "twelve",
        "boolean": "yes",
        "object": "an object",
        "array": {"an": "array"},
    }.get(str(schema.get("type")))


def _mutations(schema: dict[str, Any], path: Path_) -> Iterator[tuple[str, Path_, Json]]:
    """(rule, path, value) for each rule of one schema node: each value breaks that rule."""
    kind = schema.get("type")
    wrong = _wrong_type(schema)
    if wrong is not None and path:
        yield "type", path, wrong
    if "enum" in schema and kind == "string":
        yield "enum", path, "zz-not-in-enum"
    if isinstance(schema.get("pattern"), str) and (
        kind == "string" or schema.get("x-kubernetes-int-or-string")
    ):
        yield "pattern", path, "!! not a match !!"
        good = valid_string({k: v for k, v in schema.items() if k not in ("enum", "default")})
        if good is not None:
            yield "pattern-newline", path, good + "\n"
            yield "valid", path, good
    if kind == "string" and "maxLength" in schema:
        yield "maxLength", path, "a" * (int(schema["maxLength"]) + 1)
    if kind == "string" and schema.get("minLength", 0) > 0:
        yield "minLength", path, "a" * (int(schema["minLength"]) - 1)
    if kind == "string" and schema.get("format") in _FORMATS:
        yield "format", path, "not a " + str(schema["format"])
    if kind in ("integer", "number"):
        if "maximum" in schema:
            top = schema["maximum"]
            yield "maximum", path, top if schema.get("exclusiveMaximum") else top + 1
            yield "valid", path, top - 1 if schema.get("exclusiveMaximum") else top
        if "minimum" in schema:
            low = schema["minimum"]
            yield "minimum", path, low if schema.get("exclusiveMinimum") else low - 1
    if kind == "array":
        items = dict(schema.get("items") or {})
        item = synth(items)
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            yield "list-set", path, [item, copy.deepcopy(item)]
        if list_type == "map":
            yield "list-map", path, [item, copy.deepcopy(item)]
        if "maxItems" in schema:
            yield (
                "maxItems",
                path,
                [copy.deepcopy(item) for _ in range(int(schema["maxItems"]) + 1)],
            )
        if schema.get("minItems", 0) > 0:
            yield "minItems", path, []
    if kind == "object" or "properties" in schema:
        if path:
            yield "valid-object", path, synth(schema)
        if schema.get("properties") and not schema.get("x-kubernetes-preserve-unknown-fields"):
            value = synth(schema)
            value[UNKNOWN] = "x"
            yield "unknown-field", path, value
        for key in schema.get("required") or ():
            value = synth(schema)
            value.pop(key, None)
            yield "required", path, value
        if "maxProperties" in schema:
            yield (
                "maxProperties",
                path,
                {f"k{i}": "v" for i in range(int(schema["maxProperties"]) + 1)},
            )
        if schema.get("minProperties", 0) > 0:
            yield "minProperties", path, {}
    if "default" in schema and not schema.get("nullable") and path:
        yield "null-default", path, None
    if schema.get("nullable") and path:
        yield "valid-null", path, None


def _body(crd: Crd, spec: dict[str, Any], name: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if crd.namespaced:
        metadata["namespace"] = NAMESPACE
    return {
        "apiVersion": crd.api_version,
        "kind": crd.names["kind"],
        "metadata": metadata,
        **copy.deepcopy(spec),
    }


@functools.cache
def _samples() -> dict[str, Any]:
    return dict(yaml.safe_load(SAMPLES.read_text()))


def cases_of(crd: Crd) -> list[Case]:
    sample = _samples()[crd.file]
    base = {"spec": sample["spec"]}
    schema = crd.schema
    prefix = crd.names["singular"] or crd.names["kind"].lower()
    found: list[Case] = []

    def add(rule: str, path: str, body: dict[str, Any]) -> None:
        number = sum(1 for c in found if c.rule == rule)
        name = f"{prefix}-{rule}-{number}".lower()[:63]
        body["metadata"]["name"] = name
        found.append(Case(f"{crd.stem}/{rule}/{number}", crd, rule, path, body))

    add("sample", "", _body(crd, base, "x"))
    for edit in sample.get("cases") or ():
        body = _body(crd, base, "x")
        for text, value in (edit.get("set") or {}).items():
            set_at(body, schema, parse_path(text), copy.deepcopy(value))
        for text in edit.get("unset") or ():
            unset_at(body, parse_path(text))
        add("cel", str(edit["name"]), body)

    by_rule: dict[str, list[tuple[Path_, Json]]] = {}
    spec_schema = dict((schema.get("properties") or {}).get("spec") or {})
    for path, node in _walk(spec_schema, ("spec",), 0):
        for rule, where, value in _mutations(node, path):
            by_rule.setdefault(rule, []).append((where, value))
    chooser = random.Random(f"{SEED}/{crd.file}")
    for rule in sorted(by_rule):
        candidates = by_rule[rule]
        picked = chooser.sample(range(len(candidates)), min(PER_RULE, len(candidates)))
        for index in sorted(picked):
            where, value = candidates[index]
            body = _body(crd, base, "x")
            set_at(body, schema, where, copy.deepcopy(value))
            add(rule, show_path(where), body)
    return found


@functools.cache
def all_cases() -> tuple[Case, ...]:
    return tuple(case for crd in crds() for case in cases_of(crd))


# -- the offline verdict ----------------------------------------------------------------


def write_tree(root: Path, cases: list[Case] | tuple[Case, ...]) -> dict[str, Case]:
    """A desired/ tree of the cases' CRDs and one file per case; {file: case}."""
    workloads = root / "desired" / "workloads"
    (workloads / "cases").mkdir(parents=True, exist_ok=True)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    (workloads / "namespace.yaml").write_text(yaml.safe_dump(namespace))
    written: set[str] = set()
    files: dict[str, Case] = {}
    for number, case in enumerate(cases):
        if case.crd.file not in written:
            written.add(case.crd.file)
            target = workloads / "crds" / case.crd.file.replace("/", "_")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text((DATA / case.crd.file).read_text())
        name = f"desired/workloads/cases/{number:04d}.yaml"
        (root / name).write_text(json.dumps(case.body, indent=1) + "\n")
        files[name] = case
    return files


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "accept", "refuse" or "crash"
    message: str = ""


def offline_verdicts(root: Path, cases: list[Case] | tuple[Case, ...]) -> dict[str, Verdict]:
    """`reconcile validate -o json` over one tree of all the cases, in process: {case id: verdict}.

    A run that fails as a whole (an internal error) is split until each failure is one case's."""
    from click.testing import CliRunner

    from reconcile.cli import main

    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("desired"):
        import shutil

        shutil.rmtree(old)
    files = write_tree(root, cases)
    runner = CliRunner()
    outcome = runner.invoke(
        main,
        ["validate", "--desired", str(root / "desired"), "-o", "json"],
        env={"NO_COLOR": "1", "KUBECONFIG": str(root / "none"), "HOME": str(root)},
        catch_exceptions=True,
    )
    report: dict[str, Any] | None = None
    if outcome.exit_code in (0, 2):
        try:
            report = json.loads(outcome.stdout)
        except ValueError:
            report = None
    if report is None:
        if len(cases) == 1:
            text = (outcome.stderr or outcome.stdout or repr(outcome.exception)).strip()
            return {cases[0].id: Verdict("crash", text[:500])}
        half = len(cases) // 2
        return {
            **offline_verdicts(root / "a", cases[:half]),
            **offline_verdicts(root / "b", cases[half:]),
        }
    errors: dict[str, list[str]] = {}
    for item in report["diagnostics"]:
        if item["severity"] != "error":
            continue
        file = (
            str(Path(item["file"]).relative_to(root))
            if Path(item["file"]).is_absolute()
            else item["file"]
        )
        file = file[file.index("desired/") :] if "desired/" in file else file
        errors.setdefault(file, []).append(item["summary"])
    verdicts: dict[str, Verdict] = {}
    for file, case in files.items():
        found = errors.pop(file, [])
        if any("internal error" in text for text in found):
            verdicts[case.id] = Verdict("crash", "; ".join(found))
        else:
            verdicts[case.id] = Verdict("refuse" if found else "accept", "; ".join(found))
    if errors:  # an error in a CRD or elsewhere: no case's verdict can be trusted
        raise AssertionError(f"errors outside the cases: {errors}")
    return verdicts


def recorded() -> dict[str, Any]:
    return dict(json.loads(VERDICTS.read_text()))


# -- the server's verdict ---------------------------------------------------------------

CRD_PATH: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class Server:
    """A real API server, reached through the official client's connection and kubeconfig."""

    def __init__(self, kubeconfig: Path | str) -> None:
        from kubernetes import config

        self.api_client = config.new_client_from_config(str(kubeconfig), persist_config=False)

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        self.api_client.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        payload = None if body is None else json.dumps(body)
        response = self.api_client.rest_client.pool_manager.request(
            method,
            self.api_client.configuration.host + path,
            body=payload,
            headers=headers,
            preload_content=True,
            timeout=60,
        )
        try:
            return response.status, json.loads(response.data) if response.data else None
        except ValueError:
            return response.status, response.data.decode(errors="replace")

    def apply(self, path: str, body: dict[str, Any], dry_run: bool) -> tuple[int, Any]:
        """What `kubectl apply --server-side [--dry-run=server]` sends: an apply patch."""
        query = "?fieldManager=kubectl&force=true" + ("&dryRun=All" if dry_run else "")
        return self.request("PATCH", path + query, body, "application/apply-patch+yaml")

    def install(self, selected: list[Crd] | tuple[Crd, ...], timeout: float = 120) -> list[str]:
        """Create (or update) the CRDs for real and wait until each is Established, and the
        namespace of the namespaced cases (VERDICTS.md: a resource sent in the first moments
        after its CRD is created may skip validation); the paths of what was not there."""
        import time

        created = []
        for crd in selected:
            name = crd.document["metadata"]["name"]
            if self.request("GET", f"{CRD_PATH}/{name}")[0] == 404:
                created.append(f"{CRD_PATH}/{name}")
            status, body = self.apply(f"{CRD_PATH}/{name}", crd.document, dry_run=False)
            if status >= 300:
                raise RuntimeError(f"CRD {name} refused: {body}")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        if self.request("GET", f"/api/v1/namespaces/{NAMESPACE}")[0] == 404:
            created.append(f"/api/v1/namespaces/{NAMESPACE}")
        self.apply(f"/api/v1/namespaces/{NAMESPACE}", namespace, dry_run=False)
        deadline = time.monotonic() + timeout
        for crd in selected:
            name = crd.document["metadata"]["name"]
            while True:
                status, body = self.request("GET", f"{CRD_PATH}/{name}")
                conditions = (body or {}).get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not Established after {timeout} s")
                time.sleep(0.2)
        # Established, then discovered: the first requests after it may still miss the
        # resource, so each CRD's list is read once before the dry runs.
        for crd in selected:
            while self.request("GET", _collection(crd))[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{crd.names['plural']} not served")
                time.sleep(0.2)
        return created

    def uninstall(self, created: list[str]) -> None:
        """Delete what `install` created (the server finishes it in the background)."""
        for path in created:
            self.request("DELETE", path)

    def verdict(self, case: Case) -> Verdict:
        status, body = self.apply(f"{_collection(case.crd)}/{case.name}", case.body, dry_run=True)
        if status < 300:
            return Verdict("accept")
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        # 400, 409, 422; and a 500 for what server-side apply cannot merge (duplicate keys
        # of a list-type map: "failed to create typed patch object"), which kubectl reports
        # as the refusal it is.
        if 400 <= status < 500 or "failed to create typed patch object" in message:
            return Verdict("refuse", message)
        raise RuntimeError(f"{case.id}: HTTP {status}: {message}")

    def verdicts(
        self, cases: list[Case] | tuple[Case, ...], workers: int = 8
    ) -> dict[str, Verdict]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            return dict(zip((c.id for c in cases), pool.map(self.verdict, cases), strict=True))

    def version(self) -> str:
        status, body = self.request("GET", "/version")
        return str(body.get("gitVersion")) if status == 200 else "unknown"


def _collection(crd: Crd) -> str:
    where = f"/namespaces/{NAMESPACE}" if crd.namespaced else ""
    return f"/apis/{crd.api_version}{where}/{crd.names['plural']}"


# -- the figure -------------------------------------------------------------------------


def outcome(offline: Verdict, server: str) -> str:
    """agree, false accept (offline accepts what the server refuses), false refusal, crash."""
    if offline.verdict == "crash":
        return "crash"
    if offline.verdict == server:
        return "agree"
    return "false accept" if offline.verdict == "accept" else "false refusal"


def figure(offline: dict[str, Verdict], server: dict[str, str]) -> dict[str, int]:
    counts = {"agree": 0, "false accept": 0, "false refusal": 0, "crash": 0}
    for case_id, verdict in server.items():
        counts[outcome(offline[case_id], verdict)] += 1
    return counts
