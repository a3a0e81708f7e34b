"""action.yml, the composite action the repository's workflows use (`uses: ./`) and other
repositories use as `example/reconcile@<tag>`: what the workflows pass exists, the install
step installs what `version` says with the dependencies constraints.txt pins, `--prune` is
passed exactly when `prune` is true (false by default, as in the CLI), every action it and
the workflows use is pinned by commit, the comment is one comment updated in place, and the
verdict fails the job on what must not merge. Its steps run here as bash, with stand-ins
for `python -m pip`, `reconcile` and `gh`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the steps are bash")

WORKFLOWS = REPO / ".github" / "workflows"


def _action() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "action.yml").read_text())
    return document


def _step(name: str) -> dict[str, Any]:
    [step] = [s for s in _action()["runs"]["steps"] if name in (s.get("name"), s.get("id"))]
    return dict(step)


def _run(step: dict[str, Any], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A step as the runner runs `shell: bash`, its env given (expressions resolved by the
    caller), and the runner's files in `work`."""
    assert step["shell"] == "bash"
    assert set(env) <= set(step.get("env", {})) | {"PATH", "GITHUB_REPOSITORY"}
    full = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "RUNNER_TEMP": str(work),
        "GITHUB_OUTPUT": str(work / "output"),
        "GITHUB_STEP_SUMMARY": str(work / "summary.md"),
        **env,
    }
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=work,
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _stand_in(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(script)
    path.chmod(0o755)


def test_the_workflows_use_the_action_with_inputs_it_declares() -> None:
    action = _action()
    assert action["runs"]["using"] == "composite"
    inputs = action["inputs"]
    assert {"command", "desired", "kubeconfig", "comment", "version"} <= set(inputs)
    assert set(action["outputs"]) >= {"exit-code", "drift"}
    used = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job["steps"]:
                if step.get("uses") == "./":
                    assert set(step["with"]) <= set(inputs), path.name
                    used[path.name] = step["with"]["command"]
    assert used == {"plan.yml": "plan", "apply.yml": "apply"}


def test_every_input_the_action_reads_is_declared_and_every_declared_one_is_read() -> None:
    text = (REPO / "action.yml").read_text()
    read = set(re.findall(r"\$\{\{\s*inputs\.([\w-]+)", text))
    read |= set(re.findall(r"\binputs\.([\w-]+)\s*==", text))
    assert read == set(_action()["inputs"])


@pytest.mark.parametrize(
    ("version", "installed"),
    [
        ("", "{action}"),
        ("0.1.0", "reconcile-gpu==0.1.0"),
        ("v0.1.0", "reconcile-gpu==0.1.0"),
        ("reconcile-gpu>=0.1,<0.2", "reconcile-gpu>=0.1,<0.2"),
        (
            "git+https://github.com/example/reconcile@main",
            "git+https://github.com/example/reconcile@main",
        ),
    ],
)
def test_the_install_step_installs_what_version_says(
    version: str, installed: str, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "python", f'#!/bin/sh\necho "$@" > {tmp_path}/pip-args\n')
    _stand_in(bin_dir, "reconcile", "#!/bin/sh\necho reconcile, version 0.1.0\n")
    action_path = str(tmp_path / "action")
    result = _run(
        _step("install reconcile"),
        tmp_path,
        {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "VERSION": version,
            "ACTION_PATH": action_path,
        },
    )
    assert result.returncode == 0, result.stderr
    expected = installed.format(action=action_path)
    constraints = f"-c {action_path}/constraints.txt"
    assert (tmp_path / "pip-args").read_text() == (
        f"-m pip install --quiet {constraints} {expected}\n"
    )


def test_apply_without_a_kubeconfig_fails_and_says_so(tmp_path: Path) -> None:
    env = {"COMMAND": "apply", "DESIRED": "desired", "KUBECONFIG_DATA": ""}
    env |= {"PLAN_FILE": "", "PLAN_KEY": "", "PRUNE": "false"}
    result = _run(_step("run"), tmp_path, env)
    assert result.returncode == 0, result.stderr  # the verdict step fails the job
    said = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert said["exit-code"] == "2" and said["drift"] == "false" and said["plan"] == ""
    assert "no kubeconfig" in Path(said["report"]).read_text()
    unknown = _run(_step("run"), tmp_path, {**env, "COMMAND": "destroy"})
    assert unknown.returncode == 1
    assert "command must be plan or apply" in unknown.stdout


def test_the_prune_default_is_the_clis() -> None:
    """One default: the CLI's plan and apply remove nothing unless given --prune, and the
    action passes it only when its input says so."""
    import click

    from reconcile.cli import main

    assert _action()["inputs"]["prune"]["default"] == "false"
    # With the group's own settings, as the command line makes it: a bare Context would
    # leave the commands' help option (which click caches) without its `-h`.
    context = click.Context(main, **main.context_settings)
    for name in ("plan", "apply"):
        command = main.get_command(context, name)
        assert command is not None
        assert command.make_context(name, [], parent=context).params["prune"] is False


@pytest.mark.parametrize("command", ["plan", "apply"])
@pytest.mark.parametrize("prune", ["true", "false"])
def test_prune_is_passed_only_when_the_input_is_true(
    command: str, prune: str, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    calls = tmp_path / "calls"
    _stand_in(bin_dir, "reconcile", f'#!/bin/sh\necho "$@" >> {calls}\n')
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "COMMAND": command,
        "DESIRED": "desired",
        "KUBECONFIG_DATA": "apiVersion: v1\nkind: Config\n",
        "PLAN_FILE": "",
        "PLAN_KEY": "",
        "PRUNE": prune,
    }
    result = _run(_step("run"), tmp_path, env)
    assert result.returncode == 0, result.stderr
    [run] = [line.split() for line in calls.read_text().splitlines() if line.startswith(command)]
    assert ("--prune" in run) is (prune == "true")
    assert not {"--allow-empty-prune", "--prune-namespace-contents"} & set(run)
    assert not (tmp_path / "reconcile" / "kubeconfig").exists()


def test_a_prune_input_that_is_not_true_or_false_fails_before_anything_runs(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "reconcile", f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "COMMAND": "apply",
        "DESIRED": "desired",
        "KUBECONFIG_DATA": "apiVersion: v1\n",
        "PLAN_FILE": "",
        "PLAN_KEY": "",
        "PRUNE": "yes",
    }
    result = _run(_step("run"), tmp_path, env)
    assert result.returncode == 1
    assert "::error::prune must be true or false, not 'yes'" in result.stdout
    assert not (tmp_path / "ran").exists()


# `uses: owner/repo@<commit> # vX.Y.Z`: what runs is the commit, whatever the tag later
# points at; the comment says which release it is. `./` is this repository's own action,
# `example/reconcile` the name the documentation gives it in another repository, whose
# commits the examples cannot know.
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
_PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
_VERSION_COMMENT = re.compile(r"^\s+# v\d+(\.\d+){1,2}$")
_OURS = ("./", "example/reconcile@")


def _documented_workflows() -> list[tuple[str, str]]:
    """(where, text) of every YAML block of the documentation that holds a `uses:`."""
    found = []
    for page in sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")]):
        blocks = re.findall(r"^```ya?ml\n(.*?)^```", page.read_text(), flags=re.M | re.S)
        for number, block in enumerate(blocks):
            if any(_USES.match(line) for line in block.splitlines()):
                found.append((f"{page.relative_to(REPO)} block {number}", block))
    return found


def test_every_action_used_is_pinned_by_commit_with_its_version_in_a_comment() -> None:
    sources = [("action.yml", (REPO / "action.yml").read_text())]
    sources += [(str(p.relative_to(REPO)), p.read_text()) for p in sorted(WORKFLOWS.glob("*.yml"))]
    documented = _documented_workflows()
    assert {where.split(" block")[0] for where, _ in documented} >= {"docs/github-action.md"}
    pinned = 0
    for where, text in [*sources, *documented]:
        for line in text.splitlines():
            match = _USES.match(line)
            if match is None:
                continue
            ref, rest = match["ref"], match["rest"]
            if ref.startswith(_OURS):
                continue
            assert _PINNED.match(ref), f"{where}: {line.strip()} is not pinned by a commit"
            assert _VERSION_COMMENT.match(rest), f"{where}: {line.strip()} names no version"
            pinned += 1
    assert pinned >= 20


@pytest.mark.parametrize(
    ("command", "code", "passes"),
    [
        ("plan", "0", True),
        ("plan", "1", True),  # drift is what a pull request is for
        ("plan", "2", False),
        ("plan", "3", False),  # an error finding: must not merge
        ("apply", "0", True),
        ("apply", "2", False),
    ],
)
def test_the_verdict(command: str, code: str, passes: bool, tmp_path: Path) -> None:
    result = _run(_step("verdict"), tmp_path, {"COMMAND": command, "CODE": code})
    assert (result.returncode == 0) is passes


GH = r"""#!/usr/bin/env python3
# `gh api` as the comment step calls it, over a JSON file of comments.
import json, re, sys
from pathlib import Path
store = Path(__file__).with_name("comments.json")
comments = json.loads(store.read_text()) if store.exists() else []
args = sys.argv[1:]
assert args[0] == "api", args
method = args[args.index("--method") + 1] if "--method" in args else "GET"
if method == "GET":
    marker = re.search(r'startswith\("(.*?)"\)', args[args.index("--jq") + 1]).group(1)
    for c in comments:
        if c["body"].startswith(marker):
            print(c["id"])
    sys.exit(0)
body = Path(args[args.index("-F") + 1].split("=@", 1)[1]).read_text()
if method == "PATCH":
    [c] = [c for c in comments if str(c["id"]) == args[args.index("PATCH") + 1].rsplit("/", 1)[1]]
    c["body"] = body
else:
    comments.append({"id": 100 + len(comments), "body": body})
store.write_text(json.dumps(comments))
print("https://github.com/example/state/pull/7#issuecomment")
"""


def test_the_report_is_one_comment_updated_in_place_per_desired_tree(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "gh", GH)
    store = bin_dir / "comments.json"
    store.write_text(json.dumps([{"id": 1, "body": "LGTM"}]))
    report = tmp_path / "report.md"
    (tmp_path / "reconcile").mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_REPOSITORY": "example/state",
        "GH_TOKEN": "t",
        "PR": "7",
        "FORK": "false",
        "DESIRED": "desired",
        "REPORT": str(report),
    }

    def comment(text: str, desired: str = "desired") -> list[dict[str, Any]]:
        report.write_text(text)
        result = _run(_step("comment"), tmp_path, {**env, "DESIRED": desired})
        assert result.returncode == 0, result.stderr
        found: list[dict[str, Any]] = json.loads(store.read_text())
        return found

    first = comment("#### reconcile plan\n\none drift\n")
    assert [c["id"] for c in first] == [1, 101]
    assert first[1]["body"] == "<!-- reconcile: desired -->\n#### reconcile plan\n\none drift\n"
    second = comment("#### reconcile plan\n\nin sync\n")
    assert [c["id"] for c in second] == [1, 101]
    assert second[1]["body"].endswith("in sync\n")
    other = comment("another tree\n", desired="clusters/prod desired")
    assert [c["id"] for c in other] == [1, 101, 102]
    assert other[2]["body"].startswith("<!-- reconcile: clusters/prod_desired -->\n")


def test_a_forks_read_only_token_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _stand_in(bin_dir, "gh", "#!/bin/sh\necho 'HTTP 403: Resource not accessible' >&2\nexit 1\n")
    (tmp_path / "reconcile").mkdir()
    report = tmp_path / "report.md"
    report.write_text("plan\n")
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_REPOSITORY": "example/state",
        "GH_TOKEN": "t",
        "PR": "7",
        "DESIRED": "desired",
        "REPORT": str(report),
    }
    forked = _run(_step("comment"), tmp_path, {**env, "FORK": "true"})
    assert forked.returncode == 0
    assert "::warning::" in forked.stdout
    assert _run(_step("comment"), tmp_path, {**env, "FORK": "false"}).returncode != 0
