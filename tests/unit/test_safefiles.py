"""Reading only regular files, writing without following links, credentials created 0600."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconcile.diagnostics import ReconcileError
from reconcile.files import (
    UnsafeFile,
    check_root,
    linked_root,
    read_regular,
    walk,
    write_inside,
    write_private,
)

SECRET = "token-that-must-stay-put"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the tree, standing in for ~/.kube/config."""
    path = tmp_path / "outside" / "config"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "desired"
    (path / "nodes").mkdir(parents=True)
    return path


@pytest.fixture
def umask_zero() -> Iterator[None]:
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_walk_names_what_is_not_a_regular_file_and_never_follows_links(
    root: Path, outside: Path
) -> None:
    (root / "nodes" / "a.yaml").write_text("a")
    (root / "nodes" / "link.env").symlink_to(outside)
    (root / "nodes" / "inside.yaml").symlink_to(root / "nodes" / "a.yaml")
    (root / "workloads").symlink_to(outside.parent, target_is_directory=True)
    os.mkfifo(root / "nodes" / "pipe.env")
    (root / ".git").mkdir()
    (root / ".git" / "link").symlink_to(outside)  # hidden: never looked at
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(root / "nodes" / "sock"))

        found = {str(Path(p).relative_to(root)): what for p, what in walk(root)}

    assert found == {
        "nodes/a.yaml": None,
        "nodes/inside.yaml": "a symbolic link",
        "nodes/link.env": "a symbolic link",
        "nodes/pipe.env": "a FIFO (named pipe)",
        "nodes/sock": "a socket",
        "workloads": "a symbolic link",
    }


def test_read_regular_refuses_links_and_pipes_without_blocking(root: Path, outside: Path) -> None:
    link = root / "nodes" / "link.env"
    link.symlink_to(outside)
    pipe = root / "nodes" / "pipe.env"
    os.mkfifo(pipe)

    with pytest.raises(UnsafeFile, match="a symbolic link") as refused:
        read_regular(link)
    assert SECRET not in str(refused.value)
    with pytest.raises(UnsafeFile, match="a FIFO"):
        read_regular(pipe)  # opened non-blocking: a pipe with no writer cannot hang this
    with pytest.raises(UnsafeFile, match="a character device"):
        read_regular(Path("/dev/null"))


def test_write_inside_replaces_a_file_keeping_its_mode(root: Path) -> None:
    path = root / "nodes" / "n.yaml"
    path.write_text("old")
    path.chmod(0o640)

    write_inside(root, path, "new")

    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["n.yaml"]  # no temporary left


def test_write_inside_creates_missing_directories(tmp_path: Path) -> None:
    root = tmp_path / "desired"

    write_inside(root, root / "nodes" / "n.yaml", "text")

    assert (root / "nodes" / "n.yaml").read_text() == "text"


def test_write_inside_never_writes_through_a_link(root: Path, outside: Path) -> None:
    dangling = root / "nodes" / "dangling.yaml"
    dangling.symlink_to(outside.parent / "created-outside.yaml")
    pointing = root / "nodes" / "pointing.yaml"
    pointing.symlink_to(outside)

    for target in (dangling, pointing):
        with pytest.raises(UnsafeFile, match="is a symbolic link: refusing to write through it"):
            write_inside(root, target, "labels: {}")

    assert outside.read_text() == SECRET
    assert not (outside.parent / "created-outside.yaml").exists()


def test_write_inside_refuses_a_linked_directory_and_paths_outside(
    root: Path, outside: Path
) -> None:
    (root / "workloads").symlink_to(outside.parent, target_is_directory=True)

    with pytest.raises(UnsafeFile, match="workloads is a symbolic link"):
        write_inside(root, root / "workloads" / "config", "x")
    with pytest.raises(UnsafeFile, match="is outside"):
        write_inside(root, root / "nodes" / ".." / ".." / "outside" / "config", "x")
    with pytest.raises(UnsafeFile, match="is outside"):
        write_inside(root, outside, "x")

    assert outside.read_text() == SECRET


@pytest.mark.usefixtures("umask_zero")
def test_write_private_creates_the_file_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "kubeconfig"

    write_private(path, SECRET)

    assert path.read_text() == SECRET
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_private_replaces_a_readable_file_with_a_private_one(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    path.chmod(0o644)
    before = path.stat().st_ino

    write_private(path, SECRET)

    assert path.read_text() == SECRET
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != before  # a new file: whoever had the old one open sees nothing


def test_write_private_refuses_to_follow_a_link(tmp_path: Path, outside: Path) -> None:
    link = tmp_path / "kubeconfig"
    link.symlink_to(outside)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "elsewhere")

    for path in (link, dangling):
        with pytest.raises(UnsafeFile, match="is a symbolic link: refusing to write credentials"):
            write_private(path, "token")

    assert outside.read_text() == SECRET
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_write_private_refuses_a_file_owned_by_someone_else(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("theirs")
    os.chown(path, 12345, 12345)

    with pytest.raises(UnsafeFile, match=r"belongs to another user \(uid 12345\)"):
        write_private(path, SECRET)

    assert path.read_text() == "theirs"


def test_write_errors_are_reconcile_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")

    with pytest.raises(ReconcileError, match="cannot write"):
        write_private(blocker / "kubeconfig", SECRET)


def test_a_root_that_links_out_of_its_directory_is_refused_a_link_beside_or_above_is_not(
    root: Path, tmp_path: Path
) -> None:
    (tmp_path / "checkout").mkdir()
    escaping = tmp_path / "checkout" / "desired"
    escaping.symlink_to(root, target_is_directory=True)
    (tmp_path / "up").symlink_to(tmp_path, target_is_directory=True)
    beside = tmp_path / "repo"
    beside.symlink_to(root, target_is_directory=True)
    itself = tmp_path / "checkout" / "self"
    itself.symlink_to(tmp_path / "checkout", target_is_directory=True)

    assert not linked_root(root)
    assert not linked_root(tmp_path / "missing")  # its reader says so in its own words
    assert not linked_root(tmp_path / "up" / "desired")
    assert not linked_root(beside)
    assert linked_root(escaping)
    assert linked_root(itself)  # the whole checkout, .git and all, is no tree
    check_root(root)
    check_root(beside)
    with pytest.raises(UnsafeFile, match=r"desired: not a directory: a symbolic link out of"):
        check_root(escaping)
