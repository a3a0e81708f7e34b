"""Go `regexp` semantics for the patterns of CustomResourceDefinition schemas, with RE2.

The API server compiles a schema's `pattern` with Go's `regexp.Compile` and matches a value
with `MatchString`: RE2 syntax, a search (unanchored), `$` at the end of the text only, linear
time. Python's `re` differs on all of these (`$` matches before a final newline, `(a+)+$`
backtracks exponentially, `\\p{L}` and `\\z` are errors), so patterns run in google-re2.

RE2 and Go agree on what they accept except `\\C` (any byte: RE2 accepts, Go refuses) and
`(?<name>...)` (Go accepts it from 1.22, so do servers from v1.30: both accept). Compile
errors are worded as Go words them (`regexp/syntax` ErrorCode strings), as the server
prints them when it refuses the CRD:
`error parsing regexp: missing closing ): `(a``.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

# RE2's error code texts (re2/re2.cc) -> Go's regexp/syntax ErrorCode strings.
_GO_CODES: Final = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "trailing \\": "trailing backslash at end of expression",
    "invalid named capture group": "invalid named capture",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid UTF-8": "invalid UTF-8",
    "pattern too large - compile failed": "expression too large",
    "bad nesting depth": "expression nests too deeply",
}

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # RE2 logs each failed compile to stderr otherwise


class PatternError(ValueError):
    """A pattern Go's regexp does not compile; str() is Go's error text."""


def _escaped_c(pattern: str) -> bool:
    """Whether `pattern` holds the escape `\\C` (not an escaped backslash then C)."""
    i = 0
    while i < len(pattern) - 1:
        if pattern[i] == "\\":
            if pattern[i + 1] == "C":
                return True
            i += 2
        else:
            i += 1
    return False


def _go_error(message: str) -> str:
    code, _, arg = message.partition(": ")
    return f"error parsing regexp: {_GO_CODES.get(code, code)}: `{arg}`"


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Any:
    if _escaped_c(pattern):
        return PatternError("error parsing regexp: invalid escape sequence: `\\C`")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        text = e.args[0] if e.args else ""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return PatternError(_go_error(str(text)))


def compile_error(pattern: str) -> str | None:
    """Go's compile error for `pattern`, or None when it compiles."""
    found = _compiled(pattern)
    return str(found) if isinstance(found, PatternError) else None


def compiled(pattern: str) -> Any:
    """`pattern` compiled as Go's regexp compiles it (RE2, cached); PatternError with Go's
    text if it does not compile."""
    found = _compiled(pattern)
    if isinstance(found, PatternError):
        raise found
    return found


def search(pattern: str, text: str) -> bool:
    """Go's `regexp.MustCompile(pattern).MatchString(text)`; PatternError if it does not
    compile."""
    return compiled(pattern).search(text) is not None
