"""schemas/ is generated from the models and must not drift from them."""

from __future__ import annotations

import json
from pathlib import Path

from reconcile.desired.models import json_schemas
from reconcile.engine.plan import all_schemas
from tests.support import REPO, run_cli


def test_schema_files_match_the_models() -> None:
    assert "plan.schema.json" in all_schemas()
    for name, schema in all_schemas().items():
        on_disk = json.loads((REPO / "schemas" / name).read_text())
        assert on_disk == schema, f"schemas/{name} is stale: run `reconcile schemas`"


def test_schemas_check_command_reports_drift(tmp_path: Path) -> None:
    assert run_cli("schemas", "--check", cwd=REPO).code == 0
    stale = run_cli("schemas", "--check", "--dir", str(tmp_path), cwd=REPO)
    assert stale.code == 1
    assert "out of date" in stale.stderr
    assert run_cli("schemas", "--dir", str(tmp_path), cwd=REPO).code == 0
    assert run_cli("schemas", "--check", "--dir", str(tmp_path), cwd=REPO).code == 0


def test_every_project_file_in_desired_points_editors_at_its_schema() -> None:
    for path in sorted((REPO / "desired").rglob("*.yaml")):
        text = path.read_text()
        if "apiVersion: reconcile.dev/" not in text:
            continue  # plain Kubernetes manifests
        first = text.splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        target = (path.parent / first.split("$schema=", 1)[1]).resolve()
        assert target.exists(), f"{path}: {target} does not exist"


def test_schema_rejects_what_the_loader_rejects() -> None:
    schema = json_schemas()["nodefeatures.schema.json"]
    assert schema["additionalProperties"] is False
    labels = schema["properties"]["labels"]
    assert labels["additionalProperties"] is False
    [value] = labels["patternProperties"].values()
    assert value["anyOf"][0]["maxLength"] == 63
    assert value["anyOf"][1] == {"type": "null"}
