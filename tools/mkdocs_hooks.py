"""MkDocs hooks (mkdocs.yml `hooks:`) for the documentation site.

- Before the build: the generated reference pages must be what `tools/gen_docs.py` writes
  now; a stale one is a warning, which `--strict` makes a failed build.
- On each page, a table cell's code span written `a\\|b` (GitHub needs the backslash
  there, where a bare pipe would end the cell) becomes `a|b`, which Python-Markdown, which
  leaves pipes in code spans alone, would otherwise show with its backslash.
- On each page: a relative link to a file of the repository outside docs/
  (`../deploy/README.md`, `../../schemas/plan.schema.json`) reads on GitHub as it is; on
  the site it becomes a link to that file in `repo_url`, once it is known to exist (a link
  to a missing file is a warning, as MkDocs warns of a missing page).
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # MkDocs loads this file by path: the tools package beside it
    sys.path.insert(0, str(ROOT))

from tools import gen_docs  # noqa: E402

log = logging.getLogger("mkdocs.hooks.reconcile")

# A Markdown inline link's target: ](target) or ](target "title").
_LINK: Final = re.compile(r"\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_FENCE: Final = re.compile(r"^\s*(```|~~~)")
_SCHEME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CODE_SPAN: Final = re.compile(r"(`+)(.+?)\1")
_TABLE_ROW: Final = re.compile(r"^\s*\|")


def on_pre_build(config: Any) -> None:
    for path in gen_docs.stale():
        log.warning(
            "%s is out of date with the package: run python tools/gen_docs.py",
            path.relative_to(ROOT),
        )


def repository_link(target: str, page: Path, docs: Path, repo_url: str) -> str | None:
    """The repo_url link for a relative `target` written in `page` that leaves `docs`, or
    None when the target is a page of the site (MkDocs checks those) or not relative."""
    if not target or target.startswith(("#", "/")) or _SCHEME.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve()
    if resolved == docs or docs in resolved.parents:
        return None
    if resolved != ROOT and ROOT not in resolved.parents:
        log.warning("%s: link %s leads out of the repository", page.relative_to(ROOT), target)
        return None
    if not resolved.exists():
        log.warning(
            "%s: link %s names %s, which does not exist",
            page.relative_to(ROOT),
            target,
            resolved.relative_to(ROOT),
        )
        return None
    kind = "tree" if resolved.is_dir() else "blob"
    relative = resolved.relative_to(ROOT).as_posix()
    return f"{repo_url.rstrip('/')}/{kind}/main/{relative}" + (f"#{anchor}" if anchor else "")


def unescape_table_pipes(line: str) -> str:
    if not _TABLE_ROW.match(line):
        return line
    return _CODE_SPAN.sub(lambda m: m[1] + m[2].replace("\\|", "|") + m[1], line)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    source = docs / page.file.src_path
    repo_url = config["repo_url"] or ""

    def rewrite(match: re.Match[str]) -> str:
        link = repository_link(match["target"], source, docs, repo_url)
        if link is None:
            return match.group(0)
        return f"]({link}{match['title'] or ''})"

    out = []
    fenced = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else unescape_table_pipes(_LINK.sub(rewrite, line)))
    return "\n".join(out)
