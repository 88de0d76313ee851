"""What a wheel's code looks up at run time by itself: a program on PATH, a library opened by name, a fixed path, a
toolchain or cache directory named by an environment variable (the dynamic linker's loads are wheel_libraries').

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

What is read: every .py (with ast), every Cython source the wheel ships (.pyx, .pxi, .pxd: lookups_cython.py),
and every Cython-compiled extension module whose source the wheel does not ship (its strings: the read-only data,
with Cython 3.1's zlib-compressed string table unpacked, and the C functions it imports). A compiled module's
lookups are named "<compiled MODULE> WHAT" where its strings cannot tell the argument (cuda-bindings 13's modules
load their library through cuda.pathfinder, whose argument the string table does not delimit). Native libraries
that are not Python modules (libtorch, libnccl) are the dynamic linker's. A name read where a constant is needed is
followed to its constants (constants.Constants); what is not is listed as unresolved, never left out.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

from sglang_eagle3.errors import BadInput
from sglang_eagle3.source.constants import Constants, import_aliases, resolved_name

from .closure import Contents

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
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError:
        from .base import MISSING_ELFTOOLS

        raise BadInput(MISSING_ELFTOOLS) from None
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


def wheel_sources(contents: Contents) -> Iterator[tuple[str, str | bytes]]:
    """(path, text) of every Python and Cython source in the wheel, and (path, bytes) of every
    compiled Cython module whose source is not among them (the file name Cython embeds)."""
    names = sorted(contents.names)
    sources = {n for n in names if n.endswith((".py", *CYTHON_SOURCES))}
    for name in names:
        if name in sources:
            yield name, contents.text(name)
        elif EXTENSION.search(name):
            data = contents.read(name, keep=False)
            if b"__pyx_" not in data:
                continue  # C, C++ or Rust: the dynamic linker's, and the ELF audit's
            # Cython embeds its source's file name (as built: python/tvm_ffi/cython/core.pyx)
            embedded = {m.decode() for m in re.findall(rb"[\w/.-]+\.(?:pyx|py)(?=\x00)", data)}
            if not any(e == n or e.endswith("/" + n) for e in embedded for n in sources):
                yield name, data
