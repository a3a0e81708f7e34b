"""The Go text/template subset that NodeFeatureRule `labelsTemplate` and `varsTemplate` use.

nfd-master parses each template with text/template, sprig's functions (less env,
expandenv and getHostByName) and `missingkey=error`, executes it on the matched features
and reads `key=value` lines from the result (pkg/apis/nfd/template/template.go,
NFD_COMMIT). This module implements what rules write: text, `{{- -}}` trimming, comments,
`if`/`else if`/`else`, `range` (with `$k, $v :=`), `with`, variables, pipelines, field
chains on maps (a missing key is an error, as missingkey=error makes it), parenthesized
pipelines, Go's built-in functions (and, or, not, len, index, eq, ne, lt, le, gt, ge,
print, printf, println) and the common sprig string, list and arithmetic functions. A
template using anything else fails to parse here with a message saying so: an unsupported
construct is an error, never a silently different label.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from reconcile.kube import regexp

MAX_TEMPLATE_SIZE: Final = 64 * 1024


class TemplateError(ValueError):
    """A template that does not parse or execute; str() says where and why."""


# ---- lexing -------------------------------------------------------------------------

_TOKEN: Final = re.compile(
    r"""\s*(?:
      (?P<str>"(?:[^"\\\n]|\\.)*")
    | (?P<raw>`[^`]*`)
    | (?P<num>[+-]?(?:0[xX][0-9a-fA-F_]+|[0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?))
    | (?P<decl>:=)
    | (?P<assign>=)
    | (?P<punct>[|(),])
    | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+)
    | (?P<dot>\.)
    | (?P<var>\$[A-Za-z0-9_]*)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str
    text: str


def _go_rune(c: str) -> str:
    """Go's %#U of a printable rune: U+003D '='."""
    return f"U+{ord(c):04X} {c!r}" if c.isprintable() else f"U+{ord(c):04X}"


def _tokens(action: str, line: int) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(action):
        if action[pos:].strip() == "":
            break
        m = _TOKEN.match(action, pos)
        if m is None or m.end() == pos:
            raise TemplateError(
                f"template: :{line}: unexpected {action[pos:].strip()[:1]!r} in command"
            )
        kind = m.lastgroup or ""
        text = m.group(kind)
        if kind in ("field", "var", "ident") and m.end() < len(action):
            # lex.go atTerminator: a name ends at a space, a delimiter or `.,|:()`.
            after = action[m.end()]
            if not after.isspace() and after not in ".,|:()":
                raise TemplateError(f"template: :{line}: bad character {_go_rune(after)}")
        # A field chain may follow a variable or a closing paren directly: `$x.Name`.
        if (
            kind == "field"
            and out
            and out[-1].kind in ("var", "close")
            and not m.group(0)[0].isspace()
        ):
            out.append(_Tok("chain", text))
        elif kind == "punct":
            out.append(_Tok({"|": "pipe", "(": "open", ")": "close", ",": "comma"}[text], text))
        else:
            out.append(_Tok(kind, text))
        pos = m.end()
    return out


# ---- the tree -------------------------------------------------------------------------


@dataclass
class _Arg:
    kind: str  # field, dot, var, ident, lit, pipe
    value: Any
    chain: tuple[str, ...] = ()


@dataclass
class _Pipe:
    decl: tuple[str, ...]
    commands: list[list[_Arg]]
    assign: bool = False


@dataclass
class _Node:
    kind: str  # text, action, if, range, with
    text: str = ""
    pipe: _Pipe | None = None
    body: list[_Node] | None = None
    otherwise: list[_Node] | None = None
    line: int = 1


_KEYWORDS: Final = frozenset(
    {"if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"}
)


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    body = text[1:-1]
    escapes = {
        "n": "\n",
        "t": "\t",
        "r": "\r",
        "\\": "\\",
        '"': '"',
        "'": "'",
        "a": "\a",
        "b": "\b",
        "f": "\f",
        "v": "\v",
        "0": "\0",
    }
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in escapes:
                out.append(escapes[nxt])
                i += 2
                continue
            if nxt in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[nxt]
                out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
                i += 2 + width
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _number(text: str) -> int | float:
    clean = text.replace("_", "")
    if re.fullmatch(r"[+-]?0[xX][0-9a-fA-F]+", clean):
        return int(clean, 16)
    if re.fullmatch(r"[+-]?[0-9]+", clean):
        return int(clean)
    return float(clean)


class _Parser:
    def __init__(self, toks: list[_Tok], line: int) -> None:
        self.toks = toks
        self.i = 0
        self.line = line

    def error(self, message: str) -> TemplateError:
        return TemplateError(f"template: :{self.line}: {message}")

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def pipeline(self, context: str, *, decl: bool = True, closing: bool = False) -> _Pipe:
        names: list[str] = []
        assign = False
        if decl and self.peek() is not None and self.peek().kind == "var":  # type: ignore[union-attr]
            save = self.i
            names.append(self.take().text)
            if self.peek() is not None and self.peek().kind == "comma" and context == "range":  # type: ignore[union-attr]
                self.take()
                if self.peek() is None or self.peek().kind != "var":  # type: ignore[union-attr]
                    raise self.error("range can only initialize variables")
                names.append(self.take().text)
            tok = self.peek()
            if tok is not None and tok.kind in ("decl", "assign"):
                assign = tok.kind == "assign"
                self.take()
            else:
                names, self.i = [], save
        commands: list[list[_Arg]] = []
        command: list[_Arg] = []
        while (tok := self.peek()) is not None:
            if tok.kind == "close":
                if closing:
                    break
                raise self.error("unexpected right paren")
            self.take()
            if tok.kind == "pipe":
                if not command:
                    raise self.error("missing command")
                commands.append(command)
                command = []
            elif tok.kind == "open":
                inner = self.pipeline(context, decl=True, closing=True)
                if self.peek() is None:
                    raise self.error("unclosed left paren")
                self.take()
                chain: tuple[str, ...] = ()
                if self.peek() is not None and self.peek().kind == "chain":  # type: ignore[union-attr]
                    chain = tuple(self.take().text[1:].split("."))
                command.append(_Arg("pipe", inner, chain))
            elif tok.kind == "field":
                command.append(_Arg("field", None, tuple(tok.text[1:].split("."))))
            elif tok.kind == "dot":
                command.append(_Arg("dot", None))
            elif tok.kind == "var":
                chain = ()
                if self.peek() is not None and self.peek().kind == "chain":  # type: ignore[union-attr]
                    chain = tuple(self.take().text[1:].split("."))
                command.append(_Arg("var", tok.text, chain))
            elif tok.kind in ("str", "raw"):
                command.append(_Arg("lit", _unquote(tok.text)))
            elif tok.kind == "num":
                command.append(_Arg("lit", _number(tok.text)))
            elif tok.kind == "ident":
                if tok.text in ("true", "false"):
                    command.append(_Arg("lit", tok.text == "true"))
                elif tok.text == "nil":
                    command.append(_Arg("lit", None))
                elif tok.text in _KEYWORDS:
                    raise self.error(f"unexpected <{tok.text}> in command")
                elif tok.text not in FUNCTIONS:
                    raise self.error(
                        f'function "{tok.text}" not defined (or not among the functions reconcile implements)'
                    )
                else:
                    command.append(_Arg("ident", tok.text))
            else:
                raise self.error(f"unexpected {tok.text!r} in {context}")
        if command:
            commands.append(command)
        elif commands:
            raise self.error("missing command")
        if not commands:
            raise self.error(f"missing value for {context}")
        return _Pipe(tuple(names), commands, assign)


_ACTION: Final = re.compile(r"\{\{(-\s)?")


def _actions(source: str) -> Iterator[tuple[str, str | None, int]]:
    """(text before, action content or None at the end, line) with trimming applied."""
    pos = 0
    trim_next = False
    while True:
        start = source.find("{{", pos)
        if start < 0:
            text = source[pos:]
            yield (text.lstrip() if trim_next else text), None, source.count("\n", 0, pos) + 1
            return
        text = source[pos:start]
        if trim_next:
            text = text.lstrip()
        inner_start = start + 2
        if source.startswith("- ", inner_start) or source[inner_start : inner_start + 2] in (
            "-\t",
            "-\n",
            "-\r",
        ):
            text = text.rstrip()
            inner_start += 2
        line = source.count("\n", 0, start) + 1
        # Find the closing }} outside quoted strings.
        j = inner_start
        quote = ""
        while j < len(source):
            c = source[j]
            if quote:
                if c == "\\" and quote == '"':
                    j += 2
                    continue
                if c == quote:
                    quote = ""
            elif c in '"`':
                quote = c
            elif source.startswith("}}", j):
                break
            j += 1
        else:
            raise TemplateError(f"template: :{line}: unclosed action")
        inner = source[inner_start:j]
        trim_next = False
        if inner.endswith((" -", "\t-", "\n-")):
            inner = inner[:-2]
            trim_next = True
        yield text, inner, line
        pos = j + 2


def parse(source: str) -> list[_Node]:
    """The template's tree; TemplateError as text/template's Parse words it."""
    root: list[_Node] = []
    stack: list[tuple[_Node, list[_Node]]] = []  # (block node, the list being filled)
    current = root
    for text, inner, line in _actions(source):
        if text:
            current.append(_Node("text", text=text, line=line))
        if inner is None:
            break
        stripped = inner.strip()
        if stripped.startswith("/*"):
            if not stripped.endswith("*/"):
                raise TemplateError(f"template: :{line}: unclosed comment")
            continue
        toks = _tokens(inner, line)
        if not toks:
            raise TemplateError(f"template: :{line}: missing value for command")
        p = _Parser(toks, line)
        head = toks[0]
        word = head.text if head.kind == "ident" else ""
        if word in ("if", "range", "with"):
            p.take()
            node = _Node(word, pipe=p.pipeline(word), body=[], line=line)
            current.append(node)
            stack.append((node, current))
            assert node.body is not None
            current = node.body
        elif word == "else":
            if not stack or stack[-1][0].otherwise is not None:
                raise TemplateError(f"template: :{line}: unexpected {{{{else}}}}")
            node = stack[-1][0]
            node.otherwise = []
            p.take()
            nested = p.peek()
            if nested is not None and nested.kind == "ident" and nested.text in ("if", "with"):
                # `else if P`: an if (or with) inside the else branch, closed by the same end.
                p.take()
                inner_node = _Node(nested.text, pipe=p.pipeline(nested.text), body=[], line=line)
                node.otherwise.append(inner_node)
                stack[-1] = (node, stack[-1][1])
                stack.append((inner_node, _CHAINED))
                assert inner_node.body is not None
                current = inner_node.body
            else:
                if p.peek() is not None:
                    raise TemplateError(f"template: :{line}: unexpected {p.peek().text!r} in else")  # type: ignore[union-attr]
                current = node.otherwise
        elif word == "end":
            if len(toks) > 1:
                raise TemplateError(f"template: :{line}: unexpected {toks[1].text!r} in end")
            if not stack:
                raise TemplateError(f"template: :{line}: unexpected {{{{end}}}}")
            while True:
                _, parent = stack.pop()
                if parent is not _CHAINED:
                    break
            current = parent
        elif word in _KEYWORDS:
            raise TemplateError(
                f"template: :{line}: {{{{{word}}}}} is not among the template actions reconcile implements"
            )
        else:
            current.append(_Node("action", pipe=p.pipeline("command"), line=line))
    if stack:
        raise TemplateError(f"template: :{stack[-1][0].line}: unexpected EOF")
    return root


_CHAINED: Final[list[_Node]] = []  # marks an `else if` block: its end closes its parent too


# ---- values and functions ------------------------------------------------------------


def show(value: Any) -> str:
    """Go's fmt %v of a template value."""
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{show(value[k])}" for k in sorted(value)) + "]"
    return str(value)


def truth(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, (bool, int, float, str, list, dict)):
        return bool(value)
    return True


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(key, "")
        elif isinstance(item, (list, str)):
            if not isinstance(key, int) or not 0 <= key < len(item):
                raise TemplateError(f"error calling index: index out of range: {key}")
            item = item[key]
        else:
            raise TemplateError(
                f"error calling index: can't index item of type {type(item).__name__}"
            )
    return item


def _printf(fmt: str, *args: Any) -> str:
    out: list[str] = []
    it = iter(args)
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            verb = fmt[i + 1]
            i += 2
            if verb == "%":
                out.append("%")
                continue
            arg = next(it, None)
            if verb == "q":
                out.append('"' + show(arg).replace("\\", "\\\\").replace('"', '\\"') + '"')
            elif verb == "d" and isinstance(arg, int):
                out.append(str(arg))
            else:
                out.append(show(arg))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _num(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return int(value)
    try:
        return int(str(value))
    except ValueError:
        return 0


def _cmp(a: Any, b: Any, name: str) -> tuple[Any, Any]:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a, b
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    raise TemplateError(f"error calling {name}: incompatible types for comparison")


def _ordered(a: Any, b: Any, name: str) -> bool:
    x, y = _cmp(a, b, name)
    return bool({"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[name])


def _eq(a: Any, *others: Any) -> bool:
    return any(a == b for b in others)


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    # text/template's builtins
    "and": lambda *a: next((v for v in a if not truth(v)), a[-1]),
    "or": lambda *a: next((v for v in a if truth(v)), a[-1]),
    "not": lambda a: not truth(a),
    "len": len,
    "index": _index,
    "eq": _eq,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: _ordered(a, b, "lt"),
    "le": lambda a, b: _ordered(a, b, "le"),
    "gt": lambda a, b: _ordered(a, b, "gt"),
    "ge": lambda a, b: _ordered(a, b, "ge"),
    "print": lambda *a: "".join(show(v) for v in a),
    "println": lambda *a: " ".join(show(v) for v in a) + "\n",
    "printf": _printf,
    # sprig (v3), the string, list and arithmetic functions rules use
    "upper": lambda s: show(s).upper(),
    "lower": lambda s: show(s).lower(),
    "title": lambda s: show(s).title(),
    "trim": lambda s: show(s).strip(),
    "trimAll": lambda c, s: show(s).strip(show(c)),
    "trimPrefix": lambda p, s: show(s).removeprefix(show(p)),
    "trimSuffix": lambda p, s: show(s).removesuffix(show(p)),
    "replace": lambda old, new, s: show(s).replace(show(old), show(new)),
    "contains": lambda sub, s: show(sub) in show(s),
    "hasPrefix": lambda p, s: show(s).startswith(show(p)),
    "hasSuffix": lambda p, s: show(s).endswith(show(p)),
    "quote": lambda *a: " ".join(
        '"' + show(v).replace('"', '\\"') + '"' for v in a if v is not None
    ),
    "squote": lambda *a: " ".join("'" + show(v) + "'" for v in a if v is not None),
    "toString": show,
    "default": lambda d, *v: v[0] if v and truth(v[0]) else d,
    "empty": lambda v: not truth(v),
    "repeat": lambda n, s: show(s) * _num(n),
    "nospace": lambda s: "".join(show(s).split()),
    "substr": lambda a, b, s: show(s)[_num(a) : _num(b)] if _num(b) >= 0 else show(s)[_num(a) :],
    "trunc": lambda n, s: show(s)[: _num(n)] if _num(n) >= 0 else show(s)[_num(n) :],
    "join": lambda sep, items: show(sep).join(show(v) for v in items),
    "splitList": lambda sep, s: show(s).split(show(sep)),
    "list": lambda *a: list(a),
    "first": lambda a: a[0] if a else None,
    "last": lambda a: a[-1] if a else None,
    "atoi": _num,
    "int": _num,
    "int64": _num,
    "add": lambda *a: sum(_num(v) for v in a),
    "add1": lambda a: _num(a) + 1,
    "sub": lambda a, b: _num(a) - _num(b),
    "mul": lambda *a: __import__("math").prod(_num(v) for v in a),
    "div": lambda a, b: int(_num(a) / _num(b)),
    "mod": lambda a, b: _num(a) % _num(b),
    "max": lambda *a: max(_num(v) for v in a),
    "min": lambda *a: min(_num(v) for v in a),
    "regexMatch": lambda pattern, s: regexp.search(show(pattern), show(s)),
}


# ---- execution ------------------------------------------------------------------------


class _Run:
    def __init__(self) -> None:
        self.out: list[str] = []

    def field(self, receiver: Any, chain: tuple[str, ...], line: int) -> Any:
        value = receiver
        for name in chain:
            if isinstance(value, Mapping):
                if name not in value:
                    raise TemplateError(
                        f'template: :{line}: executing "" at <.{".".join(chain)}>: map has no entry for key "{name}"'
                    )
                value = value[name]
            elif value is None:
                raise TemplateError(
                    f'template: :{line}: executing "" at <.{".".join(chain)}>: nil pointer evaluating interface {{}}.{name}'
                )
            else:
                raise TemplateError(
                    f'template: :{line}: executing "" at <.{".".join(chain)}>: can\'t evaluate field {name} in type {type(value).__name__}'
                )
        return value

    def arg(self, a: _Arg, dot: Any, scope: dict[str, Any], line: int) -> Any:
        if a.kind == "lit":
            return a.value
        if a.kind == "dot":
            return dot
        if a.kind == "field":
            return self.field(dot, a.chain, line)
        if a.kind == "var":
            if a.value not in scope:
                raise TemplateError(f"template: :{line}: undefined variable: {a.value}")
            return self.field(scope[a.value], a.chain, line)
        if a.kind == "pipe":
            return self.field(self.pipe(a.value, dot, dict(scope), line), a.chain, line)
        raise TemplateError(f"template: :{line}: {a.value} is not a value")

    def pipe(self, p: _Pipe, dot: Any, scope: dict[str, Any], line: int) -> Any:
        value: Any = None
        for n, command in enumerate(p.commands):
            head = command[0]
            if head.kind == "ident":
                args = [self.arg(a, dot, scope, line) for a in command[1:]]
                if n > 0:
                    args.append(value)
                try:
                    value = FUNCTIONS[head.value](*args)
                except TemplateError as e:
                    raise TemplateError(
                        f'template: :{line}: executing "" at <{head.value}>: {e}'
                    ) from e
                except (TypeError, ValueError, ZeroDivisionError) as e:
                    raise TemplateError(
                        f'template: :{line}: executing "" at <{head.value}>: error calling {head.value}: {e}'
                    ) from e
            else:
                if len(command) > 1 or n > 0:
                    raise TemplateError(f"template: :{line}: can't give argument to non-function")
                value = self.arg(head, dot, scope, line)
        if p.decl:
            scope[p.decl[0]] = value
        return value

    def run(self, nodes: list[_Node], dot: Any, scope: dict[str, Any]) -> None:
        for node in nodes:
            if node.kind == "text":
                self.out.append(node.text)
                continue
            assert node.pipe is not None
            if node.kind == "action":
                value = self.pipe(node.pipe, dot, scope, node.line)
                if not node.pipe.decl:
                    self.out.append(show(value))
            elif node.kind in ("if", "with"):
                inner = dict(scope)
                value = self.pipe(node.pipe, dot, inner, node.line)
                if truth(value):
                    self.run(node.body or [], value if node.kind == "with" else dot, inner)
                elif node.otherwise is not None:
                    self.run(node.otherwise, dot, inner)
            elif node.kind == "range":
                self.range(node, dot, scope)

    def range(self, node: _Node, dot: Any, scope: dict[str, Any]) -> None:
        assert node.pipe is not None
        names = node.pipe.decl
        plain = _Pipe((), node.pipe.commands)
        value = self.pipe(plain, dot, dict(scope), node.line)
        items: list[tuple[Any, Any]]
        if value is None:
            items = []
        elif isinstance(value, Mapping):
            items = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list):
            items = list(enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [(i, i) for i in range(value)]
        else:
            raise TemplateError(f"template: :{node.line}: range can't iterate over {show(value)}")
        if not items:
            if node.otherwise is not None:
                self.run(node.otherwise, dot, dict(scope))
            return
        for key, item in items:
            inner = dict(scope)
            if len(names) == 1:
                inner[names[0]] = item
            elif len(names) == 2:
                inner[names[0]], inner[names[1]] = key, item
            self.run(node.body or [], item, inner)


def execute(tree: list[_Node], data: Any) -> str:
    run = _Run()
    run.run(tree, data, {"$": data})
    return "".join(run.out)


def new_helper(source: str) -> list[_Node]:
    """template.go NewHelper: the size cap, then the parse; TemplateError with its message."""
    if len(source.encode()) > MAX_TEMPLATE_SIZE:
        raise TemplateError(
            f"template exceeds maximum allowed size: {len(source.encode())} bytes > {MAX_TEMPLATE_SIZE} limit"
        )
    try:
        return parse(source)
    except TemplateError as e:
        raise TemplateError(f"invalid template: {e}") from e


def parse_error(source: str) -> str | None:
    """NewHelper's error for this template (validate.Template's); None when it parses."""
    try:
        new_helper(source)
    except TemplateError as e:
        return str(e)
    return None


def expand_map(source: str, data: Any) -> dict[str, str]:
    """template.go ExpandMap: the `key=value` lines of the executed template."""
    try:
        tree = new_helper(source)
    except TemplateError as e:
        raise TemplateError(f"failed to parse template: {e}") from e
    try:
        expanded = execute(tree, data)
    except TemplateError as e:
        raise TemplateError(f"failed to expand template: {e}") from e
    out: dict[str, str] = {}
    for item in expanded.split("\n"):
        trimmed = item.strip()
        if trimmed:
            key, sep, value = trimmed.partition("=")
            if not sep:
                raise TemplateError(
                    f"failed to expand template: missing value in expanded template line {trimmed!r}, (format must be '<key>=<value>')"
                )
            out[key] = value
    return out


def check(source: str) -> str | None:
    """The parse error nfd-master would meet for this template; None when it parses."""
    problem = parse_error(source)
    return None if problem is None else f"failed to parse template: {problem}"
