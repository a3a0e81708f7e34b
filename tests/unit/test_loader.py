"""Reading desired/: what is accepted, and every refused input with its file:line:col."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from reconcile.desired.reader import load_desired
from reconcile.diagnostics import Diagnostic, Severity

NODE = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeFeatures
metadata:
  name: {name}
labels:
{labels}"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "desired" / "nodes").mkdir(parents=True)
    (tmp_path / "desired" / "drivers").mkdir()
    return tmp_path / "desired"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def node_file(tree: Path, name: str, labels: str, file: str | None = None) -> Path:
    body = NODE.format(name=name, labels=textwrap.indent(textwrap.dedent(labels), "  "))
    return write(tree / "nodes" / (file or f"{name}.yaml"), body)


def errors(tree: Path) -> list[str]:
    _, problems = load_desired(tree)
    return [str(p) for p in problems if p.severity is Severity.ERROR]


def only_error(tree: Path) -> str:
    found = errors(tree)
    assert len(found) == 1, found
    return found[0]


def test_valid_node_is_loaded_with_null_meaning_absent(tree: Path) -> None:
    node_file(
        tree,
        "n1",
        'nvidia.com/gpu.count: "4"\nnvidia.com/gpu.present: null\nexample.com/empty: ""\n',
    )

    state, problems = load_desired(tree)

    assert problems == []
    assert state.nodes["n1"].labels == {
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.present": None,
        "example.com/empty": "",
    }
    assert str(state.nodes["n1"].source_of("nvidia.com/gpu.count")) == "desired/nodes/n1.yaml:6:3"


def test_shipped_desired_state_is_valid() -> None:
    state, problems = load_desired(Path(__file__).parents[2] / "desired")
    assert [str(p) for p in problems] == []
    assert sorted(state.nodes) == ["lab-node-0", "lab-node-1", "lab-node-2"]
    assert len(state.matrix) == 3


def test_invalid_value_says_why_and_suggests_the_sanitized_value(tree: Path) -> None:
    node_file(tree, "n1", 'nvidia.com/gpu.product: "NVIDIA A100-SXM4-40GB"\n')

    message = only_error(tree)

    assert message.startswith(
        "desired/nodes/n1.yaml:6:27: labels.nvidia.com/gpu.product: invalid label value "
        '"NVIDIA A100-SXM4-40GB": a valid label must be an empty string or consist of'
    )
    assert message.endswith('(sanitized: "NVIDIA-A100-SXM4-40GB")')


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("nvidia.com/gpu product", "name part must consist of alphanumeric characters"),
        ("Nvidia.com/gpu", "prefix part a lowercase RFC 1123 subdomain"),
        ("/gpu", "prefix part must be non-empty"),
        ("a/b/c", "a valid label key must consist of"),
        ("nvidia.com/" + "x" * 64, "name part must be no more than 63 bytes"),
        ("x" * 254 + "/gpu", "prefix part must be no more than 253 bytes"),
    ],
)
def test_invalid_key_points_at_the_key(tree: Path, key: str, problem: str) -> None:
    node_file(tree, "n1", f'"{key}": "true"\n')

    message = only_error(tree)

    assert message.startswith(f"desired/nodes/n1.yaml:6:3: invalid label key {json.dumps(key)}: ")
    assert problem in message


@pytest.mark.parametrize(
    ("written", "reads_as"),
    [
        ("4", "an integer (4)"),
        ("07", "an integer (7)"),
        ("22.10", "a number (22.1)"),
        ("true", "a boolean (True)"),
        ("2024-01-01", "a date"),
    ],
)
def test_unquoted_non_string_values_are_refused_with_a_quoting_hint(
    tree: Path, written: str, reads_as: str
) -> None:
    node_file(tree, "n1", f"nvidia.com/cuda.driver.rev: {written}\n")

    message = only_error(tree)

    assert message.startswith(
        "desired/nodes/n1.yaml:6:31: labels.nvidia.com/cuda.driver.rev: must be a string"
    )
    assert f"YAML reads {written} as {reads_as}" in message
    assert message.endswith(f'quote it to keep it exactly as written: "{written}"')


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("!!int abc", 'YAML cannot read "abc" as an integer (!!int)'),
        ("!!bool 'x'", 'YAML cannot read "x" as a boolean (!!bool)'),
        ("!!timestamp abc", 'YAML cannot read "abc" as a date (!!timestamp)'),
        ("!!float x", 'YAML cannot read "x" as a number (!!float)'),
        ("!!null gone", 'YAML cannot read "gone" as null (!!null)'),
        ("9" * 5000, 'YAML cannot read "' + "9" * 64 + '"...(5000 bytes) as an integer (!!int)'),
    ],
)
def test_a_value_its_tag_cannot_hold_is_a_diagnostic(
    tree: Path, written: str, problem: str
) -> None:
    node_file(tree, "n1", f"nvidia.com/cuda.driver.rev: {written}\n")

    assert only_error(tree) == (
        f"desired/nodes/n1.yaml:6:31: {problem}: "
        "quote it to keep it as text; an explicit tag must fit its value"
    )


def test_deep_nesting_is_a_diagnostic_not_a_recursion_error(tree: Path) -> None:
    write(tree / "workloads" / "deep.yaml", "a: " + "[" * 600 + "]" * 600 + "\n")

    message = only_error(tree)

    assert message.startswith("desired/workloads/deep.yaml:1:")
    assert "nested deeper than 100 levels" in message


def test_nesting_a_manifest_needs_is_accepted(tree: Path) -> None:
    write(tree / "workloads" / "deep.yaml", "a: " + "[" * 99 + "]" * 99 + "\n")

    assert "nested deeper" not in " ".join(errors(tree))


def test_every_duplicate_key_is_reported_not_just_the_first(tree: Path) -> None:
    node_file(tree, "n1", 'a.io/x: "1"\na.io/y: "2"\na.io/x: "3"\na.io/y: "4"\n')

    found = errors(tree)

    assert found == [
        'desired/nodes/n1.yaml:8:3: duplicate key "a.io/x": first defined on line 6; a key may appear once',
        'desired/nodes/n1.yaml:9:3: duplicate key "a.io/y": first defined on line 7; a key may appear once',
    ]


def test_the_same_node_declared_twice_names_both_places(tree: Path) -> None:
    node_file(tree, "n1", 'a.io/x: "1"\n')
    node_file(tree, "n1", 'a.io/y: "1"\n', file="n1-again.yaml")

    message = only_error(tree)

    assert message == (
        "desired/nodes/n1.yaml:4:9: node n1 is declared twice: first declared at "
        "desired/nodes/n1-again.yaml:4:9; declare each node in one file"
    )


def test_yaml_and_env_for_the_same_node_are_a_duplicate(tree: Path) -> None:
    node_file(tree, "n1", 'a.io/x: "1"\n')
    write(tree / "nodes" / "n1.env", "a.io/y=1\n")

    assert "node n1 is declared twice" in only_error(tree)


def test_unknown_field_lists_what_is_allowed(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml", NODE.format(name="n1", labels='  a.io/x: "1"\n') + "lable: {}\n"
    )

    assert only_error(tree) == (
        "desired/nodes/n1.yaml:7:1: unknown field 'lable': allowed here: apiVersion, kind, metadata, optional, labels, annotations, taints"
    )


def test_unknown_field_in_metadata(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n').replace(
            "  name: n1\n", "  name: n1\n  namespace: x\n"
        ),
    )

    assert (
        only_error(tree)
        == "desired/nodes/n1.yaml:5:3: unknown field 'metadata.namespace': allowed here: name"
    )


def test_unknown_kind(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml",
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeLabels\nmetadata: {name: n1}\n",
    )

    assert only_error(tree) == (
        'desired/nodes/n1.yaml:2:7: unknown kind "NodeLabels": allowed in desired/nodes/: '
        "kind NodeFeatures, apiVersion reconcile.dev/v1alpha1"
    )


def test_kind_in_the_wrong_directory(tree: Path) -> None:
    write(tree / "drivers" / "n1.yaml", NODE.format(name="n1", labels='  a.io/x: "1"\n'))

    assert only_error(tree).startswith(
        "desired/drivers/n1.yaml:2:7: kind NodeFeatures does not belong in desired/drivers/"
    )


def test_wrong_api_version(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n').replace("v1alpha1", "v1"),
    )

    assert (
        only_error(tree)
        == "desired/nodes/n1.yaml:1:13: apiVersion must be 'reconcile.dev/v1alpha1'"
    )


def test_a_bad_node_name_is_refused_and_facts_are_optional(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml",
        "apiVersion: reconcile.dev/v1alpha1\nkind: NodeFeatures\nmetadata: {name: Node_1}\n",
    )

    found = errors(tree)

    assert len(found) == 1  # labels, annotations and taints may each be left out
    assert found[0].startswith(
        'desired/nodes/n1.yaml:3:18: metadata.name: invalid name "Node_1": a lowercase RFC 1123'
    )


def test_malformed_yaml(tree: Path) -> None:
    write(tree / "nodes" / "n1.yaml", "apiVersion: [unclosed\nkind: NodeFeatures\n")

    message = only_error(tree)

    assert message.startswith("desired/nodes/n1.yaml:2:5: malformed YAML:")


@pytest.mark.parametrize("content", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_files_are_refused(tree: Path, content: str) -> None:
    write(tree / "nodes" / "n1.yaml", content)

    assert only_error(tree).startswith("desired/nodes/n1.yaml:1:1: empty file")


def test_alias_bomb_is_refused_without_expanding(tree: Path) -> None:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    bomb += [
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    write(tree / "nodes" / "n1.yaml", "\n".join(bomb) + "\n")

    found = errors(tree)

    assert found[0] == (
        "desired/nodes/n1.yaml:1:4: YAML anchors and aliases are not allowed: write the value out "
        "in full (desired state is reviewed line by line)"
    )


def test_merge_keys_are_refused(tree: Path) -> None:
    write(tree / "nodes" / "n1.yaml", NODE.format(name="n1", labels="  <<: {a.io/x: '1'}\n"))

    assert "YAML merge keys (<<) are not allowed" in only_error(tree)


def test_all_problems_of_all_files_are_reported_in_one_run(tree: Path) -> None:
    node_file(tree, "n1", "a.io/x: 4\n")
    node_file(tree, "n2", '"bad key": "1"\nb.io/y: "white space"\n')
    write(tree / "drivers" / "m.csv", "driver_branch,kernel\n")

    found = errors(tree)

    assert [f.split(":")[0] for f in found] == [
        "desired/drivers/m.csv",
        "desired/nodes/n1.yaml",
        "desired/nodes/n2.yaml",
        "desired/nodes/n2.yaml",
    ]


def test_env_file_is_the_nfd_local_feature_format(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.env",
        "# facts reported by the worker\nnvidia.com/gpu.count=2\ncustom-gpu-training\nkernel.flag=\n",
    )

    state, problems = load_desired(tree)

    assert problems == []
    assert state.nodes["n1"].labels == {
        "nvidia.com/gpu.count": "2",
        "feature.node.kubernetes.io/custom-gpu-training": "true",
        "feature.node.kubernetes.io/kernel.flag": "",
    }


def test_env_file_problems_have_lines(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.env",
        "nvidia.com/gpu.count=2\nnvidia.com/gpu.product=NVIDIA A10\nnvidia.com/gpu.count=3\n",
    )

    found = errors(tree)

    assert found[0].startswith(
        'desired/nodes/n1.env:2:24: labels.nvidia.com/gpu.product: invalid label value "NVIDIA A10"'
    )
    assert found[1] == (
        'desired/nodes/n1.env:3:1: duplicate key "nvidia.com/gpu.count": first defined on line 1; a key may appear once'
    )


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        # A key without a prefix takes NFD's; a "/" in a value or a second in a key is refused.
        ("gpu=a/b\n", None),
        ("gpu=true\nnvidia.com/x/y=1\n", None),
        ("# a/b\nnvidia.com/gpu.count=2\n", {"nvidia.com/gpu.count": "2"}),
        ("nvidia.com/gpu.present\n", {"nvidia.com/gpu.present": "true"}),
        (" nvidia.com/gpu.count = 2\n", None),
        ("nvidia.com/gpu.count=2 \n", {"nvidia.com/gpu.count": "2"}),
        (
            "nvidia.com/gpu.count=2\r\nnvidia.com/mig=\r\n",
            {"nvidia.com/gpu.count": "2", "nvidia.com/mig": ""},
        ),
        ("nvidia.com/gpu.count=2=3\n", None),
        ("nvidia.com/a=1\nnvidia.com/a=1\n", None),
    ],
)
def test_env_file_shapes(tree: Path, text: str, labels: dict[str, str] | None) -> None:
    """A .env line is `key=value` (a bare key is "true", an unprefixed one NFD's), read
    after the line is stripped; anything else is one error naming the file."""
    write(tree / "nodes" / "n1.env", text)

    state, problems = load_desired(tree)

    if labels is None:
        assert [p.severity for p in problems] == [Severity.ERROR], problems
        assert problems[0].source is not None and problems[0].source.file == "desired/nodes/n1.env"
    else:
        assert problems == []
        assert state.nodes["n1"].labels == labels


def test_matrix_csv_is_read(tree: Path) -> None:
    write(
        tree / "drivers" / "m.csv",
        "driver_branch,kernel,os_tag\n550,5.15.0-119-generic,ubuntu22.04\n",
    )

    state, problems = load_desired(tree)

    assert problems == []
    assert state.matrix_tags == {"550-5.15.0-119-generic-ubuntu22.04"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "branch,kernel,os\n",
            "desired/drivers/m.csv:1:1: bad CSV header 'branch,kernel,os': the first line must be exactly driver_branch,kernel,os_tag",
        ),
        (
            "driver_branch,kernel,os_tag\n550,,ubuntu22.04\n",
            "desired/drivers/m.csv:2:1: blank field kernel: every column needs a value",
        ),
        (
            "driver_branch,kernel,os_tag\n550,5.15.0-119-generic\n",
            "desired/drivers/m.csv:2:1: expected 3 fields, found 2: driver_branch,kernel,os_tag",
        ),
        (
            "driver_branch,kernel,os_tag\n550,k1,ubuntu22.04\n535,k2,ubuntu22.04\n550,k1,ubuntu22.04\n",
            "desired/drivers/m.csv:4:1: duplicate support-matrix row 550-k1-ubuntu22.04: first listed at desired/drivers/m.csv:2:1",
        ),
        (
            "driver_branch,kernel,os_tag\nr550,k1,ubuntu22.04\n",
            "desired/drivers/m.csv:2:1: driver_branch: String should match pattern '^[0-9]+$'",
        ),
    ],
)
def test_matrix_csv_refusals(tree: Path, content: str, expected: str) -> None:
    write(tree / "drivers" / "m.csv", content)

    assert only_error(tree) == expected


def test_matrix_yaml_duplicate_across_files(tree: Path) -> None:
    write(
        tree / "drivers" / "a.yaml",
        "apiVersion: reconcile.dev/v1alpha1\nkind: DriverSupportMatrix\nmetadata: {name: a}\n"
        "rows:\n- {branch: '550', kernel: k1, osTag: ubuntu22.04}\n",
    )
    write(tree / "drivers" / "b.csv", "driver_branch,kernel,os_tag\n550,k1,ubuntu22.04\n")

    assert only_error(tree) == (
        "desired/drivers/b.csv:2:1: duplicate support-matrix row 550-k1-ubuntu22.04: first listed at desired/drivers/a.yaml:5:3"
    )


def test_file_that_is_not_utf8(tree: Path) -> None:
    (tree / "nodes" / "n1.yaml").write_bytes(b"labels: {a: \xff}\n")

    assert only_error(tree).startswith("desired/nodes/n1.yaml:1:13: file is not UTF-8 text")


@pytest.mark.parametrize(
    ("area", "content", "where"),
    [
        ("nodes/n1.yaml", NODE.format(name="n1", labels="  a.io/x: caf\xc3\xa9\xff\n"), "6:15"),
        ("nodes/n1.env", "a.io/x=1\r\n\xff=1\r\n", "2:1"),
        ("drivers/m.csv", "driver_branch,kernel,os_tag\n550,k\x80,ubuntu22.04\n", "2:6"),
        ("workloads/w.json", '{"a": "\xc3\xa9\xc3\xa9\xfe"}', "1:10"),
    ],
)
def test_a_file_that_is_not_utf8_is_refused_at_its_first_bad_byte(
    tree: Path, area: str, content: str, where: str
) -> None:
    path = tree / area
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("latin-1"))

    assert only_error(tree) == (
        f"desired/{area}:{where}: file is not UTF-8 text: the byte here is not UTF-8 "
        "(invalid start byte): save the file as UTF-8"
    )


@pytest.mark.parametrize(
    ("text", "where", "code"),
    [
        ('a.io/x: "1"\n# a NUL: \x00\n', "7:12", "0000"),
        ('a.io/x: "1\x7f"\n', "6:13", "007F"),
        ('a.io/x: "é"\na.io/y: "\x1b"\n', "7:12", "001B"),
    ],
)
def test_a_control_character_is_refused_where_it_is(
    tree: Path, text: str, where: str, code: str
) -> None:
    node_file(tree, "n1", text)

    assert only_error(tree) == (
        f"desired/nodes/n1.yaml:{where}: character U+{code} is not allowed in YAML: YAML "
        "refuses control characters (NUL, DEL, ...) anywhere in a file, quoted or not: remove it"
    )


@pytest.mark.parametrize("break_", ["\u2028", "\u2029", "\x85"])
def test_positions_count_lines_as_an_editor_does(tree: Path, break_: str) -> None:
    """YAML reads U+2028, U+2029 and U+0085 as line breaks; an editor shows them inside
    a line, and that is where a message must point."""
    node_file(tree, "n1", f'# a note{break_}# more\na.io/x: "1"\na.io/y: 4\n')
    node_file(tree, "n2", f'a.io/x: "1" # a note{break_}  a.io/x: "2"\n')

    found = errors(tree)
    assert found[0] == (
        "desired/nodes/n1.yaml:8:11: labels.a.io/y: must be a string, but YAML reads 4 as "
        'an integer (4): quote it to keep it exactly as written: "4"'
    )
    assert found[1].startswith("desired/nodes/n2.yaml:6:2")  # past the break, on its line
    assert len(found) == 2


def test_missing_desired_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    assert errors(tmp_path / "nowhere") == [
        "desired state directory not found: nowhere: pass --desired DIR or run from the directory that holds desired/"
    ]


def test_stray_files_are_warned_about_not_loaded(tree: Path) -> None:
    write(tree / "labels.yaml", "x: 1\n")
    write(tree / "README.md", "# notes\n")

    _, problems = load_desired(tree)

    assert problems == [
        Diagnostic(
            Severity.WARNING,
            "file ignored",
            problems[0].source,
            "desired state lives in nodes/*.yaml|*.env, groups/*.yaml, drivers/*.yaml|*.csv, "
            "workloads/**.yaml, gates/*.yaml and disruptive/*.yaml",
        )
    ]
    assert str(problems[0].source) == "desired/labels.yaml"


def test_several_documents_in_one_file(tree: Path) -> None:
    write(
        tree / "nodes" / "all.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n')
        + "---\n"
        + NODE.format(name="n2", labels='  a.io/x: "2"\n'),
    )

    state, problems = load_desired(tree)

    assert problems == []
    assert sorted(state.nodes) == ["n1", "n2"]


def test_links_pipes_and_devices_are_refused_at_line_one_without_being_read(
    tree: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "kubeconfig"
    secret.write_text("SECRET_TOKEN=abc123\n")
    node_file(tree, "n1", 'a.io/x: "1"\n')
    (tree / "nodes" / "kc.env").symlink_to(secret)
    (tree / "nodes" / "same.yaml").symlink_to(tree / "nodes" / "n1.yaml")  # inside, still refused
    (tree / "nodes" / "gone.env").symlink_to(tmp_path / "missing")
    (tree / "workloads").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(tree / "nodes" / "pipe.env")  # opening it would block: it is never opened

    state, problems = load_desired(tree)

    detail = "desired/ holds regular files only (no links, pipes or devices); put the content itself here"
    assert [str(p) for p in problems] == [
        f"desired/nodes/gone.env:1:1: not a regular file: a symbolic link: {detail}",
        f"desired/nodes/kc.env:1:1: not a regular file: a symbolic link: {detail}",
        f"desired/nodes/pipe.env:1:1: not a regular file: a FIFO (named pipe): {detail}",
        f"desired/nodes/same.yaml:1:1: not a regular file: a symbolic link: {detail}",
        f"desired/workloads:1:1: not a regular file: a symbolic link: {detail}",
    ]
    assert list(state.nodes) == ["n1"]


def test_a_tree_that_is_a_link_out_of_its_directory_is_refused_and_nothing_under_it_read(
    tree: Path, tmp_path: Path
) -> None:
    from reconcile.desired import fleet

    node_file(tree, "n1", 'a.io/x: "1"\n')
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "linked").symlink_to(tree, target_is_directory=True)
    linked = Path("checkout") / "linked"

    detail = (
        "desired/ must be a directory, or a link to a directory beside it as git-sync's "
        "checkout link is (/git/repo -> /git/.worktrees/<hash>); pass --desired the directory "
        "itself"
    )
    refused = f"{linked}: not a directory: a symbolic link out of the directory it is in"
    state, problems = load_desired(linked)
    assert [str(p) for p in problems] == [f"{refused}: {detail}"]
    assert state.nodes == {}
    # A fleet's clusters.yaml behind the link is not read either.
    (tree / "clusters.yaml").write_text("apiVersion: reconcile.dev/v1alpha1\nkind: Fleet\n")
    found, state, problems = fleet.load(linked)
    assert found is None
    assert [str(p) for p in problems] == [f"{refused}: {detail}"]


def test_a_tree_that_is_a_link_beside_it_is_followed_as_git_syncs(
    tree: Path, tmp_path: Path
) -> None:
    node_file(tree, "n1", 'a.io/x: "1"\n')
    (tmp_path / "repo").symlink_to(tree, target_is_directory=True)  # /git/repo -> /git/<hash>

    state, problems = load_desired(Path("repo"))

    assert problems == []
    assert list(state.nodes) == ["n1"]


def test_a_link_further_up_the_path_of_the_tree_is_followed(tree: Path, tmp_path: Path) -> None:
    node_file(tree, "n1", 'a.io/x: "1"\n')
    (tmp_path / "checkout").symlink_to(tmp_path, target_is_directory=True)  # as git-sync's

    state, problems = load_desired(Path("checkout") / "desired")

    assert problems == []
    assert list(state.nodes) == ["n1"]


@pytest.mark.parametrize(
    "key",
    [
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    ],
)
@pytest.mark.parametrize("value", ['"linux"', "null"])
def test_labels_the_kubelet_owns_may_not_be_set_or_deleted(
    tree: Path, key: str, value: str
) -> None:
    node_file(tree, "n1", f'a.io/x: "1"\n{key}: {value}\n')

    assert only_error(tree) == (
        f'desired/nodes/n1.yaml:7:3: label key "{key}" may not be declared: the kubelet '
        "(or cloud provider) rewrites it on every node; changing it breaks scheduling"
    )


def test_kubelet_owned_labels_are_refused_in_env_files(tree: Path) -> None:
    write(tree / "nodes" / "n2.env", "gpu=true\nkubernetes.io/os=windows\n")

    assert only_error(tree) == (
        'desired/nodes/n2.env:2:1: label key "kubernetes.io/os" may not be declared: the '
        "kubelet (or cloud provider) rewrites it on every node; changing it breaks scheduling"
    )


NODE_DETAIL = (
    "declare a node's labels, annotations and taints in desired/nodes/<name>.yaml "
    "(kind NodeFeatures) or a NodeGroup in desired/groups/"
)


def test_a_node_manifest_among_the_workloads_is_refused_at_its_kind(tree: Path) -> None:
    write(
        tree / "workloads" / "node.yaml",
        """\
        apiVersion: v1
        kind: Namespace
        metadata: {name: team}
        ---
        apiVersion: v1
        kind:   Node
        metadata:
          name: n3
          labels:
            topology.kubernetes.io/zone: z1
        ---
        {apiVersion: v1, kind: Node}
        """,
    )

    state, problems = load_desired(tree)

    assert [str(p) for p in problems] == [
        f"desired/workloads/node.yaml:6:9: kind Node may not be declared in desired/workloads: "
        f"{NODE_DETAIL}",
        f"desired/workloads/node.yaml:12:24: kind Node may not be declared in "
        f"desired/workloads: {NODE_DETAIL}",
    ]
    assert [m.kind for m in state.manifests] == ["Namespace"]


def test_a_kind_named_node_in_another_api_group_is_not_a_node(tree: Path) -> None:
    write(
        tree / "workloads" / "crd.yaml",
        "apiVersion: example.com/v1\nkind: Node\nmetadata: {name: n1, namespace: team}\n",
    )

    assert errors(tree) == []


RECONCILE_ANNOTATIONS = [
    "reconcile.dev/managed-labels",
    "reconcile.dev/managed-annotations",
    "reconcile.dev/managed-taints",
    "reconcile.dev/upgrade-target",
    "reconcile.dev/upgrade-was-cordoned",
    "reconcile.dev/rollout-phase",
    "reconcile.dev/rollout-was-cordoned",
    "reconcile.dev/rollout-checks",
    "reconcile.dev/rollout-failed",
    "reconcile.dev/rollout-phase-since",
]
CONTROLLER_TAINTS = [
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "node.cloudprovider.kubernetes.io/shutdown",
]
GROUP = """\
apiVersion: reconcile.dev/v1alpha1
kind: NodeGroup
metadata:
  name: pool
selector:
  matchLabels: {{pool: a}}
{facts}"""


@pytest.mark.parametrize("kind", ["nodes", "groups"])
@pytest.mark.parametrize("key", RECONCILE_ANNOTATIONS)
@pytest.mark.parametrize("value", ['"x"', "null"])
def test_annotations_reconcile_writes_itself_may_not_be_declared(
    tree: Path, kind: str, key: str, value: str
) -> None:
    facts = f"annotations:\n  example.com/owner: ml\n  {key}: {value}\n"
    if kind == "nodes":
        write(tree / "nodes" / "n1.yaml", NODE.format(name="n1", labels='  a.io/x: "1"\n') + facts)
        where = "desired/nodes/n1.yaml:9:3"
    else:
        write(tree / "groups" / "pool.yaml", GROUP.format(facts=facts))
        where = "desired/groups/pool.yaml:9:3"

    message = only_error(tree)

    assert message.startswith(f'{where}: annotation key "{key}" may not be declared: ')
    instead = (
        "run `reconcile upgrade` instead"
        if "upgrade" in key
        else "run `reconcile rollout` instead"
        if "rollout" in key
        else "declare the facts"
    )
    assert instead in message


@pytest.mark.parametrize("kind", ["nodes", "groups"])
@pytest.mark.parametrize("key", CONTROLLER_TAINTS)
@pytest.mark.parametrize("absent", [False, True])
def test_taints_kubernetes_controllers_own_may_not_be_declared(
    tree: Path, kind: str, key: str, absent: bool
) -> None:
    taint = f"{{key: {key}, effect: NoSchedule{', absent: true' if absent else ''}}}"
    facts = f"taints:\n- {{key: example.com/gpu, effect: NoSchedule}}\n- {taint}\n"
    if kind == "nodes":
        write(tree / "nodes" / "n1.yaml", NODE.format(name="n1", labels='  a.io/x: "1"\n') + facts)
        where = "desired/nodes/n1.yaml:9:9"
    else:
        write(tree / "groups" / "pool.yaml", GROUP.format(facts=facts))
        where = "desired/groups/pool.yaml:9:9"

    message = only_error(tree)

    assert message.startswith(f'{where}: taints.1.key: taint key "{key}" may not be declared: ')
    assert "kubectl cordon" in message


def test_taints_an_administrator_sets_stay_allowed(tree: Path) -> None:
    write(
        tree / "nodes" / "n1.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n')
        + "taints:\n- {key: node.kubernetes.io/out-of-service, effect: NoExecute}\n"
        + "- {key: nvidia.com/gpu, effect: NoSchedule}\n",
    )

    state, problems = load_desired(tree)

    assert problems == []
    assert set(state.nodes["n1"].taints) == {
        "node.kubernetes.io/out-of-service:NoExecute",
        "nvidia.com/gpu:NoSchedule",
    }


def test_the_reserved_annotations_are_the_ones_reconcile_writes() -> None:
    from reconcile.desired.reserved import RECONCILE_ANNOTATIONS as RESERVED
    from reconcile.engine.facts import INVENTORIES
    from reconcile.gpu.journal import FOREIGN_MARKERS, JOURNAL

    # The journal, and the markers of earlier versions a node may still carry: declaring
    # one would forge a rollout's state.
    assert set(RESERVED) == {*INVENTORIES, JOURNAL, *FOREIGN_MARKERS}


def test_node_role_labels_stay_allowed(tree: Path) -> None:
    node_file(tree, "n1", 'node-role.kubernetes.io/gpu: ""\nnode-role.kubernetes.io/worker: null\n')

    state, problems = load_desired(tree)

    assert problems == []
    assert state.nodes["n1"].labels == {
        "node-role.kubernetes.io/gpu": "",
        "node-role.kubernetes.io/worker": None,
    }


GATEWAYS = """\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
"""


def test_objects_are_told_apart_by_group_kind_namespace_and_name(tree: Path) -> None:
    write(tree / "workloads" / "gateways.yaml", GATEWAYS)
    state, problems = load_desired(tree)
    assert [str(p) for p in problems if p.severity is Severity.ERROR] == []
    assert [m.identity.group for m in state.manifests] == [
        "networking.istio.io",
        "gateway.networking.k8s.io",
    ]


def test_one_object_in_two_versions_of_its_group_is_declared_twice(tree: Path) -> None:
    write(
        tree / "workloads" / "gateways.yaml",
        GATEWAYS.replace("gateway.networking.k8s.io/v1", "networking.istio.io/v1beta1"),
    )
    assert "Gateway/default/edge is declared twice" in only_error(tree)


def test_a_fleet_file_that_is_not_utf8_is_refused_at_its_first_bad_byte(tree: Path) -> None:
    from reconcile.desired import fleet

    (tree / "clusters.yaml").write_bytes(b"kind: Fleet\nmetadata:\n  name: f\xe9\n")

    _, _, problems = fleet.load(tree)

    assert [str(p) for p in problems] == [
        "desired/clusters.yaml:3:10: file is not UTF-8 text: the byte here is not UTF-8 "
        "(invalid continuation byte): save the file as UTF-8"
    ]


HUGE = 5_000_000


@pytest.mark.parametrize(
    ("area", "content", "expected"),
    [
        (
            "nodes/n1.yaml",
            NODE.format(name="n1", labels=f"  a.io/x: {'v' * HUGE}\n"),
            'desired/nodes/n1.yaml:6:11: labels.a.io/x: invalid label value "'
            + "v" * 64
            + f'"...({HUGE} bytes): must be no more than 63 bytes (sanitized: "'
            + "v" * 63
            + '")',
        ),
        (
            "nodes/n1.yaml",
            NODE.format(name="n1", labels=f"  a.io/x: {'7' * 4000}\n"),
            "desired/nodes/n1.yaml:6:11: labels.a.io/x: must be a string, but YAML reads "
            + "7" * 64
            + "...(4000 bytes) as an integer ("
            + "7" * 64
            + "...(4000 bytes)): quote it",
        ),
        (
            "nodes/n1.env",
            f"a.io/{'k' * HUGE}=1\n",
            'desired/nodes/n1.env:1:1: invalid label key "a.io/'
            + "k" * 315
            + f'"...({HUGE + 5} bytes)',
        ),
        (
            "workloads/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: d\n"
            f"  labels:\n    a.io/x: {'w' * HUGE}\n",
            'desired/workloads/cm.yaml:7:5: ConfigMap "c" is invalid: metadata.labels: Invalid '
            'value: "' + "w" * 320 + f'"...({HUGE} bytes): must be no more than 63 bytes',
        ),
        (
            "nodes/n1.yaml",
            NODE.format(name="n1", labels="  a.io/x: x\n")
            + f"taints:\n- {{key: a.io/t, effect: {'E' * HUGE}}}\n",
            'desired/nodes/n1.yaml:8:25: taints.0.effect: Unsupported value: "'
            + "E" * 64
            + f'"...({HUGE} bytes): supported values: "NoExecute"',
        ),
        (
            "nodes/n1.yaml",
            NODE.format(name="n1", labels="  a.io/x: x\n") + f"? {'f' * HUGE}\n: 1\n",
            f"desired/nodes/n1.yaml:7:3: unknown field '{'f' * 320}...({HUGE} bytes)': allowed here",
        ),
    ],
)
def test_a_huge_value_is_never_echoed_whole(
    tree: Path, area: str, content: str, expected: str
) -> None:
    """Cut after its first characters, its size said: the message stays a line."""
    path = tree / area
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)

    message = only_error(tree)

    assert message.startswith(expected)
    assert len(message) < 2000


def test_values_of_normal_size_are_shown_whole(tree: Path) -> None:
    node_file(tree, "n1", f'a.io/x: "{"v" * 64}"\n')

    assert only_error(tree).startswith(
        f'desired/nodes/n1.yaml:6:11: labels.a.io/x: invalid label value "{"v" * 64}": '
    )


def _group(tree: Path, name: str, selector: str, annotation: str, size: int) -> None:
    write(
        tree / "groups" / f"{name}.yaml",
        GROUP.format(facts=f"annotations:\n  {annotation}: {'v' * size}\n")
        .replace("name: pool", f"name: {name}")
        .replace("  matchLabels: {pool: a}\n", selector),
    )


@pytest.mark.parametrize(
    ("narrow", "wide", "known"),
    [
        ("  matchLabels: {pool: a}\n", "  {}\n", True),
        ("  matchLabels: {pool: a}\n", "  matchLabels: {pool: a}\n", True),
        ("  matchLabels: {pool: a, gpu: x}\n", "  matchLabels: {pool: a}\n", True),
        (
            "  matchLabels: {pool: a}\n",
            "  matchExpressions: [{key: pool, operator: In, values: [a, b]}]\n",
            True,
        ),
        (
            "  matchLabels: {pool: a}\n",
            "  matchExpressions: [{key: pool, operator: Exists}]\n",
            True,
        ),
        (
            "  matchLabels: {pool: a}\n",
            "  matchExpressions: [{key: pool, operator: NotIn, values: [b]}]\n",
            True,
        ),
        ("  matchLabels: {pool: a}\n", "  matchLabels: {gpu: x}\n", False),
        ("  matchLabels: {pool: a}\n", "  matchLabels: {pool: b}\n", False),
    ],
)
def test_the_annotation_budget_is_counted_across_groups_that_certainly_overlap(
    tree: Path, narrow: str, wide: str, known: bool
) -> None:
    _group(tree, "narrow", narrow, "example.com/a", 150_000)
    _group(tree, "wide", wide, "example.com/b", 150_000)

    found = [e for e in errors(tree) if e.startswith("desired/groups/narrow.yaml")]

    if known:
        [message] = found
        assert message.startswith(
            "desired/groups/narrow.yaml:8:3: the annotations of a node group narrow selects "
            "would total 300"
        )
        assert "counted with group wide (desired/groups/wide.yaml)" in message
    else:
        assert found == []  # known only on the live nodes: plan checks each


def test_the_annotation_budget_of_a_node_counts_groups_that_select_every_node(
    tree: Path,
) -> None:
    _group(tree, "everywhere", "  {}\n", "example.com/b", 150_000)
    write(
        tree / "nodes" / "n1.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n')
        + f"annotations:\n  example.com/a: {'v' * 150_000}\n",
    )

    assert errors(tree) == [
        "desired/nodes/n1.yaml:8:3: the annotations of node n1 would total 300"
        + str(
            len("example.com/a")
            + len("example.com/b")
            + len("reconcile.dev/managed-labels")
            + len("a.io/x")
            + len("reconcile.dev/managed-annotations")
            + len("example.com/a,example.com/b")
        ).rjust(3, "0")
        + " bytes, over the API server's limit of 262144: counted with group everywhere "
        "(desired/groups/everywhere.yaml) (whose selectors take in every node it selects) and "
        "reconcile's inventories: the API server would refuse every update of the node "
        "(metadata.annotations: Too long); declare less"
    ]


def test_the_annotation_budget_counts_reconciles_inventories(tree: Path) -> None:
    key = "example.com/a"
    room = 256 * 1024 - len(key)
    write(
        tree / "nodes" / "n1.yaml",
        NODE.format(name="n1", labels='  a.io/x: "1"\n') + f"annotations:\n  {key}: {'v' * room}\n",
    )

    [message] = errors(tree)

    assert message.startswith("desired/nodes/n1.yaml:8:3: the annotations of node n1 would total")


def test_a_manifests_annotations_are_counted_in_bytes_as_the_api_server_counts_them(
    tree: Path,
) -> None:
    value = "é" * (128 * 1024)  # 131,072 characters, 262,144 bytes
    write(
        tree / "workloads" / "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: d\n"
        f"  annotations:\n    a: {value}\n",
    )

    assert only_error(tree) == (
        'desired/workloads/cm.yaml:7:5: ConfigMap "c" is invalid: metadata.annotations: '
        "Too long: may not be more than 262144 bytes"
    )


GATE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: diag, namespace: gpu-ops}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: diag, image: dcgm:4}]
"""


def test_a_gate_is_a_job_that_is_run_by_a_rollout_never_applied(tree: Path) -> None:
    write(tree / "gates" / "diag.yaml", GATE_JOB)

    state, problems = load_desired(tree)

    assert problems == []
    assert [(g.kind, g.name, g.source.file) for g in state.gates] == [
        ("Job", "diag", "desired/gates/diag.yaml")
    ]
    assert state.manifests == ()


def test_a_gate_that_is_not_a_lone_unpinned_job_is_refused_where_it_is(tree: Path) -> None:
    write(tree / "gates" / "pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    pinned = GATE_JOB.replace("restartPolicy: Never", "restartPolicy: Never\n      nodeName: n1")
    write(tree / "gates" / "pinned.yaml", pinned)
    write(tree / "gates" / "two.yaml", GATE_JOB + "---\n" + GATE_JOB)

    found = errors(tree)

    assert found == [
        "desired/gates/pinned.yaml:8:17: a gate's Job names no node: the rollout pins it to "
        "each node of a batch: remove spec.template.spec.nodeName",
        "desired/gates/pod.yaml:1:1: a gate is a Job (apiVersion: batch/v1, kind: Job): "
        "desired/gates/ holds the Jobs `reconcile rollout --gate job=FILE` runs",
        "desired/gates/two.yaml:10:1: a gate file holds one Job; this one holds 2 documents: "
        "put each gate in a file of its own",
    ]


def test_a_disruptive_fact_names_a_key_or_a_prefix_and_is_declared_once(tree: Path) -> None:
    write(
        tree / "disruptive" / "site.yaml",
        """\
        apiVersion: reconcile.dev/v1alpha1
        kind: DisruptiveFacts
        metadata: {name: site}
        facts:
        - {key: example.com/fabric.config, disrupts: the fabric manager restarts}
        - {key: example.com/fabric.config, disrupts: again}
        - {key: example.com/a, prefix: example.com/b., disrupts: both}
        """,
    )

    assert errors(tree) == [
        "desired/disruptive/site.yaml:7:3: facts.2: give exactly one of key and prefix"
    ]
    site = tree / "disruptive" / "site.yaml"
    site.write_text(site.read_text().replace("key: example.com/a, ", ""))
    assert errors(tree) == [
        "desired/disruptive/site.yaml:6:3: disruptive fact example.com/fabric.config is "
        "declared twice: first declared at desired/disruptive/site.yaml:5:3"
    ]
