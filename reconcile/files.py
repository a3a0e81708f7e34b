"""Files that are what they seem: reading only regular files, writing without following links.

`desired/` comes from pull requests. git stores symbolic links, so a link under
`desired/nodes/` pointing at `~/.kube/config` or `/proc/self/environ` would turn a secret
into a label, or into a validation message posted on the pull request. Everything here
looks at a path with lstat (never following a link), opens with O_NOFOLLOW, and checks
the opened file is the regular file that was looked at. A FIFO is never opened for
reading without O_NONBLOCK, so it cannot hang a run.

The same holds for `desired/` itself: a tree whose root is a link (to another checkout, to
`/etc`) is refused before anything under it is listed.

Writes go to a temporary file in the target's directory and are renamed over it: a
rename replaces a link instead of writing through it, and a reader never sees half a
file. Files that hold credentials are created 0600 from the start.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from reconcile.diagnostics import ReconcileError

_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


class UnsafeFile(ReconcileError):
    """A path that is not a regular file where one is needed, or that leads outside."""


def describe(mode: int) -> str:
    """What a non-regular file is, for messages: `a symbolic link`, `a FIFO (named pipe)`..."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


# What a tree's root that is a link is told, wherever it is refused.
ROOT_REFUSED = "not a directory: a symbolic link out of the directory it is in"
ROOT_ALLOWED = (
    "desired/ must be a directory, or a link to a directory beside it as git-sync's checkout "
    "link is (/git/repo -> /git/.worktrees/<hash>); pass --desired the directory itself"
)


def linked_root(root: Path) -> bool:
    """Whether `root` is itself a symbolic link whose target leaves the directory the link
    is in (a checkout's `desired -> ../../elsewhere`). A link to a directory below it, as
    git-sync swaps one to each new checkout, is followed; the components above `root`
    are followed as for any path."""
    try:
        if not stat.S_ISLNK(os.lstat(root).st_mode):
            return False
    except OSError:
        return False
    parent = os.path.realpath(root.parent)
    target = os.path.realpath(root)
    return os.path.commonpath([parent, target]) != parent or target == parent


def check_root(root: Path) -> None:
    """UnsafeFile naming `root` when it is itself a link (to another tree, to `/etc`):
    refused as a link inside the tree is, and nothing under it is read."""
    if linked_root(root):
        raise UnsafeFile(f"{root}: {ROOT_REFUSED}: {ROOT_ALLOWED}")


def walk(root: Path) -> Iterator[tuple[str, str | None]]:
    """Every entry under `root` that is not a directory, in sorted order (by path
    components), with None for a regular file and what it is otherwise. Hidden files and
    directories are skipped; links are reported, never followed (a link to a directory
    too). Paths are text, `root` joined with `/`: a Path per file costs more than reading
    a small file, at 10,000 node files."""
    found = [
        (path, problem or (None if stat.S_ISREG(mode) else describe(mode)))
        for path, mode, _, problem in _entries(root, sizes=False)
    ]
    yield from sorted(found, key=lambda item: item[0].split("/"))


def fingerprint(root: Path) -> tuple[object, ...]:
    """What changes whenever a file under `root` may have: the resolved root (a link
    that git-sync swaps to a new checkout) and each entry's path, size and modification
    time. Nothing is read or parsed."""
    entries = sorted((path, size, problem) for path, _, size, problem in _entries(root))
    return (os.path.realpath(root), *entries)


def _entries(
    root: Path, *, sizes: bool = True
) -> Iterator[tuple[str, int, tuple[int, int], str | None]]:
    """(path, mode, (size, mtime), problem) of every entry under `root` that is not a
    directory, unsorted; hidden ones skipped, links never followed. Without `sizes`, a
    regular file or directory is known from the directory listing alone (no stat per
    file; its size and mtime are 0) and only the others are examined."""
    pending = [str(root)]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError as e:
            yield directory, 0, (0, 0), f"a directory that cannot be read ({e.strerror})"
            continue
        for entry in listed:
            if entry.name.startswith("."):
                continue
            path = entry.path
            try:
                if not sizes and entry.is_file(follow_symlinks=False):
                    yield path, stat.S_IFREG, (0, 0), None
                    continue
                if not sizes and entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                    continue
                status = entry.stat(follow_symlinks=False)
            except OSError as e:
                yield path, 0, (0, 0), f"cannot be examined ({e.strerror})"
                continue
            if stat.S_ISDIR(status.st_mode):
                pending.append(path)
            else:
                yield path, status.st_mode, (status.st_size, status.st_mtime_ns), None


def read_regular(path: str | Path) -> bytes:
    """The bytes of `path`, which must be a regular file itself (not a link to one)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise UnsafeFile(describe(mode)) from None
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeFile(describe(status.st_mode))
        # One read when the file is as fstat saw it (asking one byte more finds its end);
        # a file that grew or read short is read on to its end.
        data = os.read(fd, status.st_size + 1)
        if len(data) == status.st_size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _inside(root: Path, path: Path) -> tuple[str, ...]:
    """The parts of `path` below `root`, or UnsafeFile when it is not below it."""
    # First lexically (resolve() would follow the very links this is about), then
    # resolved, for a root reached through a link of its own (/tmp -> /private/tmp);
    # the caller checks every component below the root with lstat either way.
    lexical = (Path(os.path.normpath(root.absolute())), Path(os.path.normpath(path.absolute())))
    for base, target in (lexical, (root.resolve(), path.resolve())):
        with contextlib.suppress(ValueError):
            parts = target.relative_to(base).parts
            if parts and ".." not in parts:
                return parts
    raise UnsafeFile(f"{path} is outside {root}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write a temporary file next to `path`, then rename it over `path`."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        Path(temporary).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(temporary).unlink()
        raise


def write_inside(root: Path, path: Path, text: str) -> None:
    """Write `path`, which must lie inside the directory `root`, with no link on the way:
    every directory between them is checked (and created when missing), and an existing
    link, FIFO or device at `path` is refused, never written through."""
    parts = _inside(root, path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        current = root
        for part in parts[:-1]:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                current.mkdir()
                continue
            if not stat.S_ISDIR(mode):
                raise UnsafeFile(f"{current} is {describe(mode)}: refusing to write through it")
        target = current / parts[-1]
        try:
            existing = os.lstat(target)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise UnsafeFile(
                f"{target} is {describe(existing.st_mode)}: refusing to write through it"
            )
        mode = stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask()
        _replace(target, text.encode("utf-8"), mode)
    except OSError as e:
        raise ReconcileError(f"cannot write {path}: {e.strerror or e}") from None


def write_private(path: Path, text: str) -> None:
    """Create or replace `path` as a file only its owner can read (0600), for credentials:
    never through a link, never reusing a file that belongs to someone else."""
    try:
        try:
            existing = os.lstat(path)
        except FileNotFoundError:
            existing = None
        if existing is not None:
            if not stat.S_ISREG(existing.st_mode):
                raise UnsafeFile(
                    f"{path} is {describe(existing.st_mode)}: "
                    "refusing to write credentials through it"
                )
            if existing.st_uid != os.getuid():
                raise UnsafeFile(
                    f"{path} belongs to another user (uid {existing.st_uid}): "
                    "refusing to write credentials into it"
                )
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, text.encode("utf-8"), 0o600)
    except OSError as e:
        raise ReconcileError(f"cannot write {path}: {e.strerror or e}") from None
