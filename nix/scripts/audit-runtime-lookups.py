#!/usr/bin/env python3
"""Record what the server's code looks up at run time: nix/stacks/sglang-0.5.9/runtime-lookups.json.

The ELF audit (audit-wheel-libraries.py) sees what the dynamic linker loads. It cannot see
what the code finds by itself while it runs: a program on PATH, a library opened by name, a
fixed path such as /sbin/ldconfig, a toolchain named by an environment variable. This
generator reads every wheel of the stack's server closure, resolved from its uv.lock as the
ELF audit resolves it (wheel-closure.json: the same extras, the same dropped packages, the
same swapped CUDA builds, read through a proxy named in the data), and lists every lookup:

- program: the first argument of subprocess.run/Popen/call/check_call/check_output/
  getoutput/getstatusoutput, os.system, os.popen, os.exec*, os.spawn*, shutil.which: the
  program's name when it is a literal (first element of a list, first word of a string);
  otherwise "<dynamic> " and the expression's source text. A shell script written as a
  string literal ("#!/bin/sh ... exec numactl ..."): its interpreter (a path) and the
  program each line runs.
- library: the first argument of ctypes.CDLL/PyDLL, ctypes.cdll.LoadLibrary,
  ctypes.util.find_library, torch.ops.load_library, and cuda.pathfinder's
  load_nvidia_dynamic_lib (named "cuda.pathfinder:<its library name>"); C's dlopen
  called from Cython; and dlopen("...") inside string literals (C source Python compiles).
- path: string literals (not docstrings) that are absolute paths under /sbin, /bin, /usr,
  /opt, /run, /dev, /etc, /lib, /lib64, or that name a lib64 directory. /proc, /sys and
  /tmp are left out: the kernel and every service provide them.
- env: environment variables read by a literal name (os.environ[...], os.environ.get,
  os.getenv, "X" in os.environ, C's getenv from Cython, and helpers named env_* or
  *_env_var, as Triton's knobs) when the name is in TOOLCHAIN_ENV or CACHE_ENV, or when the
  name ends in PATH/HOME/ROOT/LIB/LIBS/BIN/ARCH_LIST/CACHE_DIR/DIR and is read in the same
  function as a program or library lookup. SGLang's feature flags are not lookups.

What is read: every .py (with ast), every Cython source the wheel ships (.pyx, .pxi, .pxd,
with Python's tokenizer: Cython shares Python's tokens, and each call found in it is parsed
as a Python expression), and every Cython-compiled extension module whose source the wheel
does not ship (its strings: the read-only data, with Cython 3.1's zlib-compressed string
table unpacked, and the C functions it imports). A compiled module's lookups are named
"<compiled MODULE> WHAT" where its strings cannot tell the argument (cuda-bindings 13's
modules load their library through cuda.pathfinder, whose argument the string table does
not delimit). Native libraries that are not Python modules (libtorch, libnccl) are the
dynamic linker's and the ELF audit's.

A lookup's key is (package, kind, name), stable across versions; its locations (file:line,
or file:strings for a compiled module) are information only. Wheels are downloaded from the
URLs in uv.lock (sha256 checked). tests/test_runtime_lookups.py proves the data covers the
closure and every lookup is provided by nix/runtime-env.json (its shared entries plus the
stack's own, "stacks") or is not needed, with a reason; a reason that holds only because the
environment sets something names that entry (its "relies"), and the entry must exist.

    python nix/scripts/audit-runtime-lookups.py [--stack VERSION] [--cache DIR] [--check]

A stack (nix/pins.json "stacks") names its uv.lock and the directory of its policy and data
(0.5.9, the default: python/uv.lock and nix/; 0.5.23: nix/stacks/sglang-0.5.23/).

Needs: packaging and pyelftools (in the test environment), the repository's sglang_eagle3 package (its
source/index.py resolves names through imports, as the start-up gate audit does); network access to PyPI.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import importlib.util
import io
import json
import keyword
import re
import sys
import tokenize
import tomllib
import urllib.error
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from elftools.elf.elffile import ELFFile

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "src"))
from sglang_eagle3.source.constants import Constants, import_aliases, resolved_name  # noqa: E402 - the repository's, found above

ENV = REPO / "nix" / "runtime-env.json"
SECTIONS = ("programs", "libraries", "environment", "paths", "caches")

PROGRAM_CALLS = {
    "subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
    "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
    "os.system", "os.popen", "shutil.which",
}  # fmt: skip
PROGRAM_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn")
PATHFINDER = "cuda.pathfinder.load_nvidia_dynamic_lib"
LIBRARY_CALLS = {
    "ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary", "ctypes.pydll.LoadLibrary",
    "ctypes.util.find_library", "torch.ops.load_library", PATHFINDER,
}  # fmt: skip
ENV_GETTERS = {"os.getenv", "os.environ.get", "os.environ.setdefault", "os.environ.pop", "libc.stdlib.getenv"}
TOOLCHAIN_ENV = {
    "PATH", "LD_LIBRARY_PATH", "CC", "CXX", "NVCC", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT",
    "CUDA_LIB_PATH", "CUDACXX", "TORCH_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST",
    "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUDART_PATH",
    "TRITON_LIBDEVICE_PATH", "TRITON_CUPTI_LIB_PATH", "NCCL_LIBRARY", "SGLANG_NCCL_SO_PATH", "FLASHINFER_NVCC",
}  # fmt: skip
# Where code writes what it builds or downloads (under ProtectHome and a read-only store these
# must name a writable directory): read wherever they are read, like TOOLCHAIN_ENV.
CACHE_ENV = re.compile(
    r"^(HOME|XDG_CACHE_HOME|HF_HOME|TRITON_HOME)$|(^|_)(CACHE_DIR|CACHE_HOME|CACHE_ROOT|WORKSPACE_BASE|EXTENSIONS_DIR)$"
)
ENV_SUFFIX = re.compile(r"(^|_)(PATH|HOME|ROOT|LIB|LIBS|BIN|ARCH_LIST|DIR)$")
FIXED_PATH = re.compile(
    r"/(sbin|bin|usr|opt|run|dev|etc|lib|lib64)(/[\w.+@*-]*)*/?|([\w.$(){}/-]*/)?lib64(/[\w.-]*)*|~/[\w.+@-][\w.+@/-]*"
)
DLOPEN = re.compile(r'dlopen\(\s*"([^"]+)"')
SONAME = re.compile(r"lib[\w+-]+\.so(\.\d+)*")
CYTHON_SOURCES = (".pyx", ".pxi", ".pxd")
EXTENSION = re.compile(r"\.(cpython-\d+[\w-]*|abi3)\.so$")


def star_names(module: str) -> dict[str, str]:
    """What ``from MODULE import *`` binds that this audit looks for (pynvml's ``from ctypes import *``): the lookup
    functions by their bare names."""
    known = PROGRAM_CALLS | LIBRARY_CALLS
    return {n.rsplit(".", 1)[1]: n for n in known if n.rsplit(".", 1)[0] == module}


def resolver(imported: dict[str, str]):
    """resolve(node) -> the dotted name it refers to, through the module's imports."""
    return functools.partial(resolved_name, aliases=imported)


def literal_or_dynamic(node: ast.AST | None, first_word: bool) -> str:
    """The looked-up name: a literal's value (its first word for a command line), else the source text."""
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        node = node.elts[0]  # its first word too: ["hl-smi --query | grep Total"] with shell=True
    if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
        node = ast.Constant(node.value.decode(errors="replace"))  # C's dlopen(b"libcuda.so.1") from Cython
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
        return node.value.split()[0] if first_word else node.value
    text = ast.unparse(node) if node is not None else "?"
    return "<dynamic> " + (text if len(text) <= 80 else text[:77] + "...")


def first_argument(call: ast.Call, keyword: str) -> ast.AST | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def env_key(node: ast.AST, resolve) -> ast.AST | None:
    """The key expression when node reads the environment (os.environ[...], os.getenv(...), "X" in os.environ, C's
    getenv from Cython, helpers named env_* or *_env_var); None when it does not."""
    if isinstance(node, ast.Call):
        name = resolve(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if name in ENV_GETTERS or last.startswith("env_") or last.endswith("_env_var"):
            return node.args[0] if node.args and not isinstance(node.args[0], ast.Starred) else None
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and resolve(node.value) == "os.environ":
        return node.slice
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn):
        return node.left if resolve(node.comparators[0]) == "os.environ" else None
    return None


def env_names(node: ast.AST, resolve, values=None) -> tuple[list[str], str | None]:
    """(the variables node reads from the environment, by a literal name or a name the source binds to constants:
    constants.Constants, through ``values``; the key's source when node reads one it cannot resolve)."""
    key = env_key(node, resolve)
    if key is None:
        return [], None
    if isinstance(key, ast.Constant) and isinstance(key.value, str | bytes):
        return [key.value.decode() if isinstance(key.value, bytes) else key.value], None
    found = values(key) if values is not None else None
    if found and all(isinstance(v, str | bytes) for v in found):
        return [v.decode() if isinstance(v, bytes) else v for v in found], None
    return [], ast.unparse(key)


def env_name(node: ast.AST, resolve) -> str | None:
    """The variable's name when node reads the environment by a literal name."""
    names, _ = env_names(node, resolve)
    return names[0] if names else None


def call_lookup(call: ast.Call, resolve, assigned: dict[str, ast.AST]) -> tuple[str, str] | None:
    """(kind, name) of a program or library lookup made by this call; assigned: the scope's name = [...] lists."""
    found = call_lookups(call, resolve, assigned)
    return found[0] if found else None


def call_lookups(call: ast.Call, resolve, assigned: dict[str, ast.AST], values=None) -> list[tuple[str, str]]:
    """(kind, name) of each program or library lookup this call makes: one per value where its argument is a name
    the source binds to constants (``values``: constants.Constants for the call's scope); "<dynamic> ..." where
    it is not resolved. assigned: the scope's name = [...] lists (a command's first word)."""
    name = resolve(call.func)
    if name in PROGRAM_CALLS or (name or "").startswith(PROGRAM_PREFIXES):
        argument = first_argument(call, "args" if name.startswith("subprocess") else "cmd")
        if name.startswith("os.spawn") and len(call.args) > 1:
            argument = call.args[1]  # spawn*(mode, path, ...)
        if isinstance(argument, ast.Name) and argument.id in assigned:
            argument = assigned[argument.id]  # command = ["ninja", ...]; subprocess.run(command)
        return [("program", n) for n in followed(argument, values, first_word=True)]  # a string is a command line
    if name in LIBRARY_CALLS:
        found = followed(first_argument(call, "libname" if name == PATHFINDER else "name"), values, False)
        return [("library", f"cuda.pathfinder:{f}" if name == PATHFINDER else f) for f in found]
    if name in ("dlopen", "libc.dlfcn.dlopen", "posix.dlfcn.dlopen") or (name or "").endswith("._lib.dlfcn.dlopen"):
        return [("library", n) for n in followed(first_argument(call, "filename"), values, False)]  # C's, from Cython
    return []


def followed(node: ast.AST | None, values, first_word: bool) -> list[str]:
    """The looked-up names: a literal's, or those of a name the source binds to constants (a command list's first
    word); otherwise "<dynamic> " and the expression's source (literal_or_dynamic)."""
    direct = literal_or_dynamic(node, first_word)
    if not direct.startswith("<dynamic> ") or values is None or node is None:
        return [direct]
    found = values(node)
    if not found:
        return [direct]
    names = []
    for value in found:
        if isinstance(value, tuple | list) and value:
            value = value[0]
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if not isinstance(value, str) or not value.strip():
            return [direct]
        names.append(value.split()[0] if first_word else value)
    return sorted(set(names))


def literal_lookups(text: str, line: int) -> list[tuple[str, str, int]]:
    """The lookups a string literal makes: fixed paths, dlopen in C source, a shell script's programs."""
    found = [("path", p, line) for p in fixed_paths(text)]
    found += [("library", m, line) for m in DLOPEN.findall(text)]
    return found + [(kind, name, line) for kind, name in script_lookups(text)]


def env_lookups(scope_lookups, env) -> list[tuple[str, str, int]]:
    """The variables worth recording among those a scope reads (see the module's docstring)."""
    looks_up = any(kind in ("program", "library") for kind, _, _ in scope_lookups)
    return [("env", v, line) for v, line in env
            if v in TOOLCHAIN_ENV or CACHE_ENV.search(v) or (looks_up and ENV_SUFFIX.search(v))]  # fmt: skip


def lookups_in_module(source: str, filename: str) -> Iterator[tuple[str, str, int]]:
    """(kind, name, line) of every lookup in one module's source; ("unresolved", "env EXPRESSION", line) for each
    environment variable read by a name it cannot resolve to constants."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the wheels' invalid escape sequences are theirs to fix
        tree = ast.parse(source, filename)
    scopes, owners, imported = module_scopes(tree)
    resolve = resolver(imported)
    flow = Constants(tree)
    for nodes, owner in zip(scopes, owners, strict=True):
        found, env, unresolved = [], [], []
        values = functools.partial(flow.values, scope=owner)
        assigned = {
            n.targets[0].id: n.value
            for n, _ in nodes
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.List)
        }
        for node, parent in nodes:
            if isinstance(node, ast.Call):
                found += [(*lookup, node.lineno) for lookup in call_lookups(node, resolve, assigned, values)]
            variables, dynamic = env_names(node, resolve, values)
            env += [(variable, node.lineno) for variable in variables]
            if dynamic is not None:
                unresolved.append(("unresolved", f"env {dynamic}", node.lineno))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not isinstance(parent, ast.Expr):
                found += literal_lookups(node.value, node.lineno)
        yield from found
        yield from env_lookups(found, env)
        yield from unresolved


# The nodes a lookup is read from; the rest are only walked through.
LOOKUP_NODES = (ast.Call, ast.Subscript, ast.Compare, ast.Constant, ast.Assign)


def module_scopes(tree: ast.Module) -> tuple[list[list[tuple[ast.AST, ast.AST]]], list[ast.AST], dict[str, str]]:
    """([(node, parent) of the module, then of each function, without the functions nested in
    it], the module and each function node, the module's import aliases), in one walk: the wheels hold millions
    of nodes."""
    scopes: list[list] = [[]]
    owners: list[ast.AST] = [tree]
    imports = []
    stack = [(tree, None, 0)]
    while stack:
        node, parent, scope = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scopes.append([])
            owners.append(node)
            scope = len(scopes) - 1
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, LOOKUP_NODES):
            scopes[scope].append((node, parent))
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                stack.append((value, node, scope))
            elif isinstance(value, list):
                stack.extend((item, node, scope) for item in value if isinstance(item, ast.AST))
    return scopes, owners, import_aliases(imports, star=star_names)


def fixed_paths(text: str) -> list[str]:
    """The fixed paths a string literal names, when the whole literal (or a word of a command) is a path."""
    if len(text) > 200 or "\n" in text:
        return []
    return [word for word in text.split() if FIXED_PATH.fullmatch(word)]


SHELLS = {"sh", "bash", "dash", "zsh"}


def script_lookups(text: str) -> list[tuple[str, str]]:
    """A shell script held in a string ("#!/bin/sh\nexec numactl ..."): its interpreter, and for
    a shell the program each line runs (after exec and VAR=value words); a line starting with
    a substitution ({executable} in an f-string) names no program here."""
    if not text.startswith("#!/"):
        return []
    lines = text.splitlines()
    interpreter = lines[0][2:].split()
    found = [("path", interpreter[0])]
    if interpreter[0] == "/usr/bin/env" and len(interpreter) > 1:
        found.append(("program", interpreter[1]))
    if Path(interpreter[-1]).name not in SHELLS:
        return found
    for line in lines[1:]:
        words = [w for w in line.split() if w != "exec" and not re.fullmatch(r"\w+=\S*", w)]
        if words and not words[0].startswith("#") and re.fullmatch(r"[\w./+-]+", words[0]):
            found.append(("program", words[0]))
    return found


# -- Cython sources --------------------------------------------------------------------------------


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
        raise SystemExit(f"cannot read the Cython source {filename}: {err}") from None
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


# -- compiled Cython modules whose source the wheel does not ship ------------------------------------

# A lookup function named among a compiled module's strings, beside the module it comes from.
# Cython 3.1 packs the constants into one string without separators, so these are found as
# substrings: names long enough not to occur by chance (not subprocess.run or .call).
COMPILED_CALLS = {
    "cuda.pathfinder.load_nvidia_dynamic_lib": ("library", "cuda.pathfinder", ("load_nvidia_dynamic_lib",)),
    "ctypes": ("library", "ctypes", ("CDLL", "PyDLL", "LoadLibrary", "find_library")),
    "subprocess": ("program", "subprocess", ("Popen", "check_output", "check_call", "getoutput")),
    "shutil.which": ("program", "shutil", ("which",)),
}


def lookups_in_extension(data: bytes, filename: str) -> Iterator[tuple[str, str, int]]:
    """(kind, name, 0) of the lookups a compiled Cython module's strings show: sonames, fixed
    paths and TOOLCHAIN_ENV/CACHE_ENV names among them; C's dlopen or getenv among its imported
    functions; a lookup function of COMPILED_CALLS among its Python constants, named
    "<compiled MODULE> FUNCTION" (the constants do not say which is the argument)."""
    strings, imported = extension_strings(data)
    module = EXTENSION.sub("", filename).replace("/", ".")
    text = "\0".join(strings)
    for match in SONAME.finditer(text):
        yield "library", match.group(), 0
    for string in strings:  # whole strings only: binary data has printable runs too
        if FIXED_PATH.fullmatch(string) and re.search(r"\w/\w|^~/\w{2}", string):
            yield "path", string, 0
    for name in re.findall(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])", text):
        if (name in TOOLCHAIN_ENV or CACHE_ENV.search(name)) and len(name) >= 4:  # "CC" occurs by chance
            yield "env", name, 0
    for function in ("dlopen", "getenv"):
        if function in imported:
            yield ("library" if function == "dlopen" else "env"), f"<compiled {module}> {function}", 0
    for what, (kind, module_name, functions) in COMPILED_CALLS.items():
        if module_name in text and any(f in text for f in functions):
            yield kind, f"<compiled {module}> {what}", 0


def extension_strings(data: bytes) -> tuple[list[str], set[str]]:
    """(the printable strings of the read-only data, with each zlib stream in it unpacked (Cython
    3.1 compresses a module's string constants into one), the C functions the module imports)."""
    elf = ELFFile(io.BytesIO(data))
    rodata = b"".join(s.data() for s in elf.iter_sections() if s.name.startswith(".rodata"))
    strings = [s.decode() for s in re.findall(rb"[\x20-\x7e]{3,}", rodata)]
    for match in re.finditer(rb"\x78[\x01\x5e\x9c\xda]", rodata):
        unpack = zlib.decompressobj()
        try:
            text = unpack.decompress(rodata[match.start() :], 1 << 24)
        except zlib.error:
            continue
        if unpack.eof and len(text) >= 16:
            strings += [s.decode() for s in re.findall(rb"[\x20-\x7e]{3,}", text)]
    symbols = elf.get_section_by_name(".dynsym")
    imported = {s.name for s in symbols.iter_symbols() if s["st_shndx"] == "SHN_UNDEF"} if symbols else set()
    return strings, imported


# -- a wheel ------------------------------------------------------------------------------------------


def wheel_sources(wheel: Path) -> Iterator[tuple[str, str | bytes]]:
    """(path, text) of every Python and Cython source in the wheel, and (path, bytes) of every
    compiled Cython module whose source is not among them (the file name Cython embeds)."""
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(archive.namelist())
        sources = {n for n in names if n.endswith((".py", *CYTHON_SOURCES))}
        for name in names:
            if name in sources:
                yield name, archive.read(name).decode("utf-8", errors="replace")
            elif EXTENSION.search(name):
                data = archive.read(name)
                if b"__pyx_" not in data:
                    continue  # C, C++ or Rust: the dynamic linker's, and the ELF audit's
                # Cython embeds its source's file name (as built: python/tvm_ffi/cython/core.pyx)
                embedded = {m.decode() for m in re.findall(rb"[\w/.-]+\.(?:pyx|py)(?=\x00)", data)}
                if not any(e == n or e.endswith("/" + n) for e in embedded for n in sources):
                    yield name, data


def scan(sources) -> dict[str, dict]:
    """{"kind name": {"kind", "name", "locations"}} over (path, text or bytes) pairs."""
    return scan_all(sources)[0]


def scan_all(sources) -> tuple[dict[str, dict], dict[str, dict]]:
    """(the lookups, as scan() gives them; the environment variables read by a name the scanner cannot resolve to
    constants, {"env EXPRESSION": {"kind": "env", "expression", "locations"}}: listed, never left out)."""
    lookups: dict[str, dict] = {}
    unresolved: dict[str, dict] = {}
    for path, source in sources:
        if isinstance(source, bytes):
            found, where = set(lookups_in_extension(source, path)), "strings"
        elif path.endswith(CYTHON_SOURCES):
            found, where = list(lookups_in_cython(source, path)), None
        else:
            try:
                found, where = list(lookups_in_module(source, path)), None
            except SyntaxError:
                continue  # templates shipped as .py (e.g. Jinja) are not Python the server runs
        for kind, name, line in sorted(found):
            if kind == "unresolved":
                what, _, expression = name.partition(" ")
                entry = unresolved.setdefault(name, {"kind": what, "expression": expression, "locations": []})
            else:
                entry = lookups.setdefault(f"{kind} {name}", {"kind": kind, "name": name, "locations": []})
            location = f"{path}:{where or line}"
            if location not in entry["locations"]:
                entry["locations"].append(location)
    return dict(sorted(lookups.items())), dict(sorted(unresolved.items()))


def wheel_audit():
    """The ELF audit's uv.lock reader and downloader, shared so both audits read the same wheels."""
    spec = importlib.util.spec_from_file_location("audit_wheels", REPO / "nix" / "scripts" / "audit-wheel-libraries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def server_closure(stack: str | None = None) -> dict[str, dict]:
    """name -> {"package": its uv.lock entry, "proxy": why another build is read, if so}: every
    wheel of the stack's server closure, resolved from uv.lock as the ELF audit resolves it
    (wheel-closure.json: root, extras, dropped packages, cu130 swaps)."""
    audit = wheel_audit()
    files = audit.stack_files(stack)
    policy = json.loads(files["policy"].read_text())
    lock = tomllib.loads(files["lock"].read_text())
    environment = audit.marker_environment(policy["python"])
    closure, _ = audit.resolve_closure(lock, policy["root"]["package"], policy["root"]["extras"], environment)
    wheels = {}
    for name, package in sorted(closure.items()):
        if audit.dropped(name, policy) or {"editable", "virtual", "directory"} & set(package.get("source", {})):
            continue  # not installed by Nix, or this project itself (its own code, not a wheel)
        swap = policy["cudaWheels"].get(name, {})
        proxy = swap.get("proxy")
        if swap and not proxy:  # a pin PyPI has (cuDNN's CUDA 13 build): the lock's build holds the same kind of files
            proxy = (f"the lock's build is scanned; the closure has nix/pins.json's {swap['pin']} instead, the same"
                     " library's CUDA 13 build: shared libraries and headers, no Python")  # fmt: skip
        wheels[name] = {"package": package, "proxy": proxy}
    return wheels


def inventory(cache: Path, stack: str | None = None) -> dict:
    audit = wheel_audit()
    files = audit.stack_files(stack)
    packages = {}
    for name, wheel_of in server_closure(stack).items():
        package = wheel_of["package"]
        wheel = audit.best_wheel(package, "cp312")
        path = audit.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)
        lookups, unresolved = scan_all(wheel_sources(path))
        record = {"version": package["version"], "wheel": path.name, "lookups": lookups}
        if unresolved:
            record["unresolved"] = unresolved
        if wheel_of["proxy"]:
            record["proxy"] = wheel_of["proxy"]
        packages[name] = record
        print(f"  {name} {package['version']}: {len(record['lookups'])} lookups", file=sys.stderr)
    return {
        "_comment": " ".join(
            [
                "GENERATED by nix/scripts/audit-runtime-lookups.py from every wheel of the server closure of",
                f"{files['lock'].relative_to(REPO)} (resolved as {files['policy'].relative_to(REPO)} says);",
                "do not edit. For each package: every program, library, fixed path, toolchain and cache",
                "environment variable its Python and Cython code looks up at run time, keyed 'kind name', with",
                f"where (information only). The dispositions are in {files['lookupPolicy'].relative_to(REPO)}.",
            ]
        ),
        "packages": packages,
    }


def reason(value, policy: dict) -> tuple[str, list[str]]:
    """(text, entries it relies on) of a notNeeded value or a rule's reason: a reason id, a text,
    or {"why": text, "relies": ["environment.CUDA_HOME", ...]}."""
    value = policy["reasons"].get(value, value) if isinstance(value, str) else value
    if isinstance(value, dict):
        return value["why"], list(value.get("relies", []))
    return value, []


def disposition(package: str, key: str, lookup: dict, policy: dict) -> tuple[str, str] | None:
    """("provided", "programs.nvidia-smi") or ("notNeeded", reason) for one lookup; None when it has none."""
    full = f"{package} {key}"
    if full in policy["provided"]:
        return "provided", policy["provided"][full]
    if full in policy["notNeeded"]:
        return "notNeeded", reason(policy["notNeeded"][full], policy)[0]
    rules = [next((r for r in policy["rules"] if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r)), None)
             for loc in lookup["locations"]]  # fmt: skip
    if all(rules):  # every place it is made is code the server does not run
        return "notNeeded", "; ".join(sorted({reason(policy["rules"][r], policy)[0] for r in rules}))
    return None


def stack_env(env: dict, stack: str | None = None) -> dict:
    """nix/runtime-env.json as one stack sees it: the shared sections plus its own additions
    (env["stacks"][version]), as nix/runtime-env.nix renders it for that stack's wrapper."""
    version = stack or json.loads(wheel_audit().PINS.read_text())["stack"]["default"]
    own = env.get("stacks", {}).get(version, {})
    merged = {section: dict(env[section]) for section in SECTIONS}
    for section, entries in own.items():
        if section not in SECTIONS:
            raise SystemExit(f"nix/runtime-env.json stacks.{version}.{section}: not a section ({', '.join(SECTIONS)})")
        for name, value in entries.items():
            if name in env[section]:
                raise SystemExit(
                    f"nix/runtime-env.json stacks.{version}.{section}.{name}: already defined for every stack; "
                    "define it once (remove one of the two)"
                )
            merged[section][name] = value
    return merged


def problems(data: dict, policy: dict, env: dict) -> list[str]:
    """Everything that keeps the inventory from being accounted for; empty when it is."""
    found = []
    entries = {f"{section}.{name}" for section in SECTIONS for name in env[section]}
    keys = {f"{p} {k}" for p, record in data["packages"].items() for k in record["lookups"]}
    used_rules = set()
    for package, record in data["packages"].items():
        for key, lookup in record["lookups"].items():
            answer = disposition(package, key, lookup, policy)
            if answer is None:
                found.append(f"{package} {key} ({lookup['locations'][0]}): no disposition")
            elif answer[0] == "provided" and answer[1] not in entries:
                found.append(f"{package} {key}: provided by {answer[1]}, which nix/runtime-env.json lacks")
            if f"{package} {key}" not in policy["provided"] and f"{package} {key}" not in policy["notNeeded"]:
                used_rules.update(r for loc in lookup["locations"] for r in policy["rules"]
                                  if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r))  # fmt: skip
    both = set(policy["provided"]) & set(policy["notNeeded"])
    found += [f"{key}: both provided and notNeeded" for key in sorted(both)]
    stale = (set(policy["provided"]) | set(policy["notNeeded"])) - keys
    found += [f"{key}: disposition of a lookup the wheels no longer make" for key in sorted(stale)]
    found += [f"rule {rule} disposes of no lookup" for rule in policy["rules"] if rule not in used_rules]
    used = [*policy["rules"].values(), *policy["notNeeded"].values()]
    used_ids = {v for v in used if isinstance(v, str)}
    found += [f"reason {r} is not used" for r in policy["reasons"] if r not in used_ids]
    found += [f"rule {r}: unknown reason {v}" for r, v in policy["rules"].items() if v not in policy["reasons"]]
    for text, relies in {json.dumps(reason(v, policy)): reason(v, policy) for v in used}.values():
        found += [f"reason too short to show why: {text!r}"] if len(text) <= 40 else []
        found += [f"reason relies on {e}, which nix/runtime-env.json lacks: {text!r}" for e in relies
                  if e not in entries]  # fmt: skip
        found += [f"reason names {e} without relying on it (add \"relies\": [\"{e}\"]): {text!r}"
                  for e in sorted(entries - set(relies)) if names_entry(text, e)]  # fmt: skip
    found += [f"nix/runtime-env.json {e}: no why" for e in sorted(entries) if not entry(env, e).get("why")]
    return found


def coverage(data: dict, closure: dict[str, dict]) -> list[str]:
    """The wheels of the server closure (server_closure) the data does not scan, at the version the
    lock pins, and the packages it scans that the closure no longer has; empty when they agree."""
    found = [f"{name} {wheel['package']['version']}: a wheel of the server closure the data does not scan"
             for name, wheel in closure.items() if name not in data["packages"]]  # fmt: skip
    found += [f"{name}: scanned, but not in the server closure" for name in data["packages"] if name not in closure]
    for name, wheel in closure.items():
        scanned, pinned = data["packages"].get(name, {}).get("version"), wheel["package"]["version"]
        if scanned and scanned != pinned:
            found.append(f"{name}: scanned at {scanned}, the lock pins {pinned}")
    return found


def names_entry(text: str, dotted_name: str) -> bool:
    """Whether a reason's text names an entry of the environment ("sets CUDA_HOME", "on PATH beside
    nvcc", "/run/opengl-driver/lib"): a reason that holds because of an entry says so in "relies"."""
    name = dotted_name.partition(".")[2]
    return re.search(rf"(?<![\w.$/-]){re.escape(name)}(?![\w+-])", text) is not None


def entry(env: dict, dotted_name: str) -> dict:
    section, _, name = dotted_name.partition(".")
    return env[section][name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="A stack of nix/pins.json (default: the default stack).")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument("--check", action="store_true", help="Exit 1 if the stack's runtime-lookups.json differs.")
    args = parser.parse_args()
    stacks = [v for v in json.loads(wheel_audit().PINS.read_text())["stacks"] if not v.startswith("_")]
    if args.stack is not None and args.stack not in stacks:
        parser.error(f"no stack {args.stack!r} in nix/pins.json (stacks: {', '.join(stacks)})")
    files = wheel_audit().stack_files(args.stack)
    output = files["lookups"]
    policy = json.loads(files["lookupPolicy"].read_text())
    data = inventory(args.cache, args.stack)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check and output.read_text() != text:
        raise SystemExit(f"{output} is stale: run {Path(__file__).relative_to(REPO)}")
    if not args.check:
        output.write_text(text)
        print(f"wrote {output.relative_to(REPO)}", file=sys.stderr)
    found = coverage(data, server_closure(args.stack))
    found += problems(data, policy, stack_env(json.loads(ENV.read_text()), args.stack))
    if found:
        raise SystemExit("not accounted for:\n  " + "\n  ".join(found))
    print(f"{output.relative_to(REPO)}: every lookup is provided or not needed")


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-runtime-lookups: {err} (this generator needs network access to PyPI)") from None
