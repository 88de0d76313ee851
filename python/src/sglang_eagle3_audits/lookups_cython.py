"""The run-time lookups of a Cython source (.pyx, .pxi, .pxd), read with Python's tokenizer (lookups.py says what
counts as a lookup)."""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
import warnings
from collections.abc import Iterator

from sglang_eagle3.errors import BadInput

from .lookups import call_lookup, env_lookups, env_names, literal_lookups, resolver


def lookups_in_cython(source: str, filename: str) -> Iterator[tuple[str, str, int]]:
    """(kind, name, line) of every lookup in a Cython source (.pyx, .pxi, .pxd).

    Cython is Python's tokens with C declarations added, so Python's tokenizer reads it. Each
    call, os.environ[...] and "X" in os.environ is cut out of the text and parsed as a Python
    expression, then judged as in a Python module, through the file's import and cimport
    aliases; a call whose arguments hold Cython-only syntax (<char*>x) keeps its first
    argument's text. Functions (def, cdef, cpdef with a body) are scopes, as in Python."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in (tokenize.COMMENT, tokenize.NL)]  # fmt: skip
    except (tokenize.TokenError, SyntaxError) as err:
        raise BadInput(f"cannot read the Cython source {filename}: {err}") from None
    lines = source.splitlines(keepends=True)
    resolve = resolver(cython_aliases(tokens))
    for scope in cython_scopes(tokens):
        found, env, unresolved = [], [], []
        for i in scope:
            token = tokens[i]
            if token.type == tokenize.STRING and not docstring(tokens, i):
                value = string_value(token.string)
                if value is not None:
                    found += literal_lookups(value, token.start[0])
            expression = cython_expression(tokens, i, lines)
            if expression is None:
                continue
            for node in ast.walk(expression):
                if isinstance(node, ast.Call) and (lookup := call_lookup(node, resolve, {})):
                    found.append((*lookup, token.start[0]))
                variables, dynamic = env_names(node, resolve)
                env += [(variable, token.start[0]) for variable in variables]
                if dynamic is not None:  # a Cython source's names are not followed: listed
                    unresolved.append(("unresolved", f"env {dynamic}", token.start[0]))
        yield from found
        yield from env_lookups(found, env)
        yield from unresolved


def cython_aliases(tokens: list) -> dict[str, str]:
    """import, cimport, from ... import and from ... cimport, each with its "as", as import_aliases() reads Python's."""
    names = {}
    for line in logical_lines(tokens):
        words = [t.string for t in line if t.type in (tokenize.NAME, tokenize.OP) and t.string not in "()"]
        if words[:1] == ["from"] and ("import" in words or "cimport" in words):
            at = words.index("import") if "import" in words else words.index("cimport")
            module = "".join(words[1:at])
            for item in " ".join(words[at + 1 :]).split(","):
                parts = item.split()
                if parts and parts[0] != "*":
                    names[parts[-1]] = f"{module}.{parts[0]}"
        elif words[:1] in (["import"], ["cimport"]):
            for item in " ".join(words[1:]).replace(" . ", ".").split(","):
                parts = item.split()
                if parts:
                    names[parts[-1] if len(parts) == 3 else parts[0].split(".")[0]] = (
                        parts[0] if len(parts) == 3 else parts[0].split(".")[0]
                    )
    return names


def logical_lines(tokens: list) -> Iterator[list]:
    line = []
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if line:
                yield line
            line = []
        elif token.type not in (tokenize.INDENT, tokenize.DEDENT):
            line.append(token)


def cython_scopes(tokens: list) -> list[list[int]]:
    """Token indexes of the module and of each function (a def, cdef or cpdef line ending in ':'
    and followed by an indented body), each without those of the functions nested in it."""
    scopes, stack = [[]], [(0, -1)]  # (scope index, indentation depth where it ends)
    depth, pending, start = 0, False, True
    for i, token in enumerate(tokens):
        if token.type == tokenize.INDENT:
            depth += 1
            if pending:
                scopes.append([])
                stack.append((len(scopes) - 1, depth - 1))
                pending = False
            continue
        if token.type == tokenize.DEDENT:
            depth -= 1
            while stack[-1][1] >= depth and len(stack) > 1:
                stack.pop()
            continue
        if start and token.string in ("def", "cdef", "cpdef", "async"):
            end = next(j for j in range(i, len(tokens)) if tokens[j].type in (tokenize.NEWLINE, tokenize.ENDMARKER))
            words = [t.string for t in tokens[i:end]]
            pending = "(" in words and words[-1:] == [":"]
        elif token.type == tokenize.NEWLINE:
            pass
        elif start:
            pending = False
        start = token.type == tokenize.NEWLINE
        scopes[stack[-1][0]].append(i)
    return scopes


def docstring(tokens: list, i: int) -> bool:
    """A string that is a statement of its own (a docstring), not a value."""
    before = tokens[i - 1].type if i else tokenize.NEWLINE
    after = tokens[i + 1].type if i + 1 < len(tokens) else tokenize.NEWLINE
    return before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) and after == tokenize.NEWLINE


def string_value(text: str) -> str | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None  # an f-string's start: its parts are tokens of their own
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else None


def cython_expression(tokens: list, i: int, lines: list[str]) -> ast.AST | None:
    """The Python expression starting at token i when it is a call (name(...), a.b(...)), a
    subscript of a name (os.environ[...]) or "X" in name; None otherwise."""
    token = tokens[i]
    if token.type == tokenize.STRING and i + 2 < len(tokens) and tokens[i + 1].string in ("in", "not"):
        j = i + (3 if tokens[i + 1].string == "not" else 2)
        end = dotted_end(tokens, j)
        return parse_expression(tokens, i, end - 1, lines)
    if token.type != tokenize.NAME or (i and tokens[i - 1].string == "."):
        return None
    if i and declared(tokens, i):
        return None
    end = dotted_end(tokens, i)
    if end >= len(tokens) or tokens[end].string not in ("(", "["):
        return None
    close = matching(tokens, end)
    if close is None:
        return None
    expression = parse_expression(tokens, i, close, lines)
    if expression is None and tokens[end].string == "(":
        # Cython-only syntax in the arguments: keep the callee and the first argument's text
        first = [t for t in tokens[end + 1 : close] if t.type != tokenize.NL]
        text = source_text(tokens, end + 1, close - 1, lines) if first else ""
        callee = source_text(tokens, i, end - 1, lines)
        argument = text.split(",")[0] if text else ""
        expression = parse_expression_text(f"{callee}(__cython__)")
        if expression is not None and argument:
            expression.args = [ast.Name(id=argument.strip())]
    return expression


def declared(tokens: list, i: int) -> bool:
    """Token i names a function being defined or declared (def f(, cdef int f(, void *dlopen(
    in a cdef extern block), not called: in Python a name before a call is a keyword or an operator."""
    before = tokens[i - 1]
    if before.type == tokenize.NAME:
        return not keyword.iskeyword(before.string)
    if before.string in ("*", "&") and i >= 2 and tokens[i - 2].type == tokenize.NAME:
        start = tokens[i - 3] if i >= 3 else None
        return start is None or start.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NAME)
    return False


def dotted_end(tokens: list, i: int) -> int:
    """The index after a dotted name (a.b.c) starting at i."""
    j = i + 1
    while j + 1 < len(tokens) and tokens[j].string == "." and tokens[j + 1].type == tokenize.NAME:
        j += 2
    return j


def matching(tokens: list, open_index: int) -> int | None:
    pairs = {"(": ")", "[": "]", "{": "}"}
    depth = 0
    for j in range(open_index, len(tokens)):
        if tokens[j].string in pairs:
            depth += 1
        elif tokens[j].string in pairs.values():
            depth -= 1
            if depth == 0:
                return j
    return None


def source_text(tokens: list, first: int, last: int, lines: list[str]) -> str:
    (row, col), (end_row, end_col) = tokens[first].start, tokens[last].end
    if row == end_row:
        return lines[row - 1][col:end_col]
    return lines[row - 1][col:] + "".join(lines[row : end_row - 1]) + lines[end_row - 1][:end_col]


def parse_expression(tokens: list, first: int, last: int, lines: list[str]) -> ast.AST | None:
    return parse_expression_text(source_text(tokens, first, last, lines))


def parse_expression_text(text: str) -> ast.AST | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(" ".join(text.split()), mode="eval").body
    except SyntaxError:
        return None
