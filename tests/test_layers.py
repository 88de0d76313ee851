"""The package's layers, every module in one, and no import cycle; the audits beside it, which it never imports.

    base          the package's constants, the exit statuses, the error every command raises, hiding secrets,
                  files read safely and written atomically, the pinned stacks, progress lines: sglang_eagle3
                  (__init__), exit_status, errors, redaction, files, stacks, progress_lines
    source/       reads SGLang's source: never imports, writes or runs it (read with ast: test_source_only_reads)
    trees/        gets and changes a tree: a release fetched and unpacked, the patch series applied
    host/         facts about the host: its GPUs and their links (nvidia-smi), its CUDA driver, a free port
    serving/      settings, launch plan, launcher, credentials, entry points
    models/       a model's files: pinned weights (lock, fetch, verify, the hub), a config.json and safetensors headers
    judging/      probe, draft checks, preflight: judge a setup from what source/ and models/ read, running the
                  tree's own small functions on stand-ins where reading cannot say (capture rule, parse(), ...)
    bench/        the benchmark, the A/B gate, the sweep
    cli support   what the command modules share: cli_common, options (the settings define their defaults)
    commands      the click commands: commands/ (one module per command group), cli (the top-level group that
                  holds them), __main__ (the program)
    audits        the sibling package sglang_eagle3_audits (the audits of the stacks' real wheels, a maintainers'
                  tool): it reads with the package's layers up to judging; no module of sglang_eagle3 imports it

A module may import from its own layer and the layers below it (BELOW); the imports are read
with ast, those inside functions too. A module no layer claims fails the test: give it one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PKG = REPO / "python" / "src" / "sglang_eagle3"
AUDITS = REPO / "python" / "src" / "sglang_eagle3_audits"
PACKAGES = (PKG.name, AUDITS.name)
# The modules that are not in a folder of their own, by layer.
TOP_LEVEL = {
    "sglang_eagle3": "base",
    "sglang_eagle3.exit_status": "base",
    "sglang_eagle3.errors": "base",
    "sglang_eagle3.redaction": "base",  # what a secret looks like, and hiding it
    "sglang_eagle3.files": "base",  # files read safely and written atomically
    "sglang_eagle3.progress_lines": "base",  # progress on stderr while a first run fetches, unpacks or audits
    "sglang_eagle3.stacks": "base",  # the pinned stacks (nix/pins.json), the one list of SGLang releases
    "sglang_eagle3.cli_common": "cli support",
    "sglang_eagle3.options": "cli support",
    "sglang_eagle3.cli": "commands",
    "sglang_eagle3.__main__": "commands",  # the program: signals answered, then the commands loaded
}
FOLDERS = ("source", "trees", "host", "serving", "models", "judging", "bench", "commands")
BELOW = {
    "base": set(),
    "source": {"base"},
    "trees": {"base", "source"},  # a tree is found and read (source/) before it is fetched or patched
    "host": {"base"},
    "serving": {"base"},
    "models": {"base", "serving"},  # serving.credentials: the systemd credential of the hub token
    "judging": {"base", "source", "trees", "host", "serving", "models"},  # models.draft_inputs: the model's config.json
    "bench": {"base", "source", "trees", "host", "serving", "models", "judging"},
    "cli support": {"base", "serving"},
    "commands": {"base", "source", "trees", "host", "serving", "models", "judging", "bench", "cli support"},
    # No layer of sglang_eagle3 has "audits" below it: the tool never imports them.
    "audits": {"base", "source", "trees", "host", "serving", "models", "judging"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The sglang_eagle3 and sglang_eagle3_audits modules (or packages) a file imports, resolved to absolute names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base) if node.level else node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                as_path = PKG.parent / candidate.replace(".", "/")
                found.add(candidate if as_path.with_suffix(".py").exists() or as_path.is_dir() else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES and m != name}


def layer(module: str) -> str:
    """The layer of a module: its folder's, TOP_LEVEL's for the others."""
    parts = module.split(".")
    if parts[0] == AUDITS.name:
        return "audits"
    if len(parts) > 1 and parts[1] in FOLDERS:
        return parts[1]
    if module not in TOP_LEVEL:
        raise AssertionError(f"{module} is in no layer: add it to TOP_LEVEL (tests/test_layers.py)")
    return TOP_LEVEL[module]


GRAPH = {module_name(p): imports(p) for package in (PKG, AUDITS) for p in package.rglob("*.py")}


def test_every_module_is_in_a_layer_and_every_layer_is_checked():
    assert {layer(m) for m in GRAPH} == set(BELOW)
    assert set(TOP_LEVEL) <= set(GRAPH), "TOP_LEVEL names a module that is gone"


def test_each_layer_imports_only_its_own_and_the_ones_below():
    wrong = [
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in GRAPH.items()
        for d in deps
        if layer(d) not in BELOW[layer(m)] | {layer(m)}
    ]
    assert wrong == []


def test_no_import_cycle():
    def cycle_from(start, path, seen):
        for dep in sorted(GRAPH.get(start, ())):
            if dep in path:
                return [*path[path.index(dep) :], dep]
            if dep not in seen:
                seen.add(dep)
                if found := cycle_from(dep, [*path, dep], seen):
                    return found
        return None

    cycles = [c for m in sorted(GRAPH) if (c := cycle_from(m, [m], {m}))]
    assert cycles == [], " -> ".join(cycles[0])


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("sglang_eagle3.source.model_calls", "sglang_eagle3.judging.speculative_support"),  # a layer above
        ("sglang_eagle3.source.tree", "sglang_eagle3.trees.patchset"),  # reading a tree into changing it
        ("sglang_eagle3.source.secret_exits", "sglang_eagle3.trees.release"),  # ... or into fetching one
        ("sglang_eagle3.trees.release", "sglang_eagle3.judging.preflight"),  # getting a tree into judging it
        ("sglang_eagle3.trees.patchset", "sglang_eagle3.serving.settings"),  # ... or into the settings
        ("sglang_eagle3.options", "sglang_eagle3.models.hub"),  # cli support into a feature
        ("sglang_eagle3.errors", "sglang_eagle3.serving.settings"),  # base into anything
        ("sglang_eagle3.exit_status", "sglang_eagle3.cli_common"),
        ("sglang_eagle3.models.fetch", "sglang_eagle3.judging.preflight"),
        ("sglang_eagle3.serving.launcher", "sglang_eagle3.bench.ab"),
        ("sglang_eagle3.bench.ab", "sglang_eagle3.options"),  # a feature into the commands' plumbing
        ("sglang_eagle3.cli_common", "sglang_eagle3.cli"),
        ("sglang_eagle3.bench.sweep", "sglang_eagle3.commands.bench"),  # a feature into a command
        ("sglang_eagle3.judging.patch_check", "sglang_eagle3_audits.secret_exits"),  # the tool into the audits
        ("sglang_eagle3.commands.patch", "sglang_eagle3_audits"),
        ("sglang_eagle3.stacks", "sglang_eagle3_audits.closure"),
        ("sglang_eagle3_audits.closure", "sglang_eagle3.cli_common"),  # the audits into the commands' plumbing
        ("sglang_eagle3_audits.registry", "sglang_eagle3.commands.patch"),
    ],
)
def test_the_layer_check_sees_a_breach(monkeypatch, module, imported):
    monkeypatch.setitem(GRAPH, module, GRAPH[module] | {imported})
    with pytest.raises(AssertionError):
        test_each_layer_imports_only_its_own_and_the_ones_below()


def test_the_tool_never_imports_the_audits():
    """The audits are a sibling package (their lines counted apart, their dependencies pyelftools and the network
    the tool never needs): no module of sglang_eagle3 imports one of sglang_eagle3_audits, at any depth."""
    assert {m for m in GRAPH if layer(m) == "audits"}, "the audits' modules are read"
    wrong = [f"{m} imports {d}" for m, deps in GRAPH.items() if layer(m) != "audits" for d in deps
             if layer(d) == "audits"]  # fmt: skip
    assert wrong == []


def test_the_audit_rule_sees_a_breach(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.source.secret_exits", {"sglang_eagle3_audits.closure"})
    with pytest.raises(AssertionError, match="sglang_eagle3.source.secret_exits imports sglang_eagle3_audits"):
        test_the_tool_never_imports_the_audits()


def test_a_module_in_no_layer_fails(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.helpers", set())
    with pytest.raises(AssertionError, match="in no layer"):
        test_every_module_is_in_a_layer_and_every_layer_is_checked()


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.source.model_class", {"sglang_eagle3.source.eagle3"})
    with pytest.raises(AssertionError):
        test_no_import_cycle()


# -- source/ only reads ----------------------------------------------------------------------------------------------
# source/ reads SGLang's source; it never imports it, writes a file or runs a program or the tree's code. Getting and
# changing a tree is trees/'s; running the tree's code (its capture method, environ parse(), what a draft inherits)
# is judging's. The rules, each with a breach below that the check must catch:
NO_IMPORT = {"subprocess", "shutil", "tempfile", "importlib", "runpy"}  # run programs, copy/scratch trees, import
NO_CALL = {"exec", "eval", "compile", "__import__"}  # run code
NO_METHOD = {"write_text", "write_bytes"}  # write files
NO_WRITER = {"write_atomic", "atomic_file", "place"}  # the package's own writers (files.py)
READ_MODES = {"r", "rb", "rt"}
# importlib's one use that imports nothing: the spec of a top-level name (locating the importable sglang; a dotted
# name would import its parent packages).
FINDS_ONLY = "importlib.util.find_spec"
# Breaches kept on purpose, each with why; the test fails once one is gone, so the entry goes with it.
EXEMPT = {
    # its scan cache moves to the audits' one scan cache in issue 47 (plan 1.3); the scan itself only reads
    "secret_exits.py": {"write_atomic()"},
}


def _mode(call: ast.Call) -> object:
    """open()'s mode: open(file, mode) or path.open(mode)."""
    at = 0 if isinstance(call.func, ast.Attribute) else 1
    mode = call.args[at] if len(call.args) > at else next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None:
        return "r"
    return mode.value if isinstance(mode, ast.Constant) else "(not a constant)"


def source_breaches(text: str) -> set[str]:
    """What in a module's text breaks "source/ only reads"."""
    found = set()
    tree = ast.parse(text)
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == FINDS_ONLY:
            name = node.args[0] if node.args else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and "." not in name.value:
                allowed.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in NO_IMPORT and not (alias.name == "importlib.util" and alias.asname is None):
                    found.add(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in NO_IMPORT and not node.level:
            found.add(f"import {node.module}")
        elif isinstance(node, ast.Attribute) and ast.unparse(node).startswith("importlib."):
            if ast.unparse(node) == FINDS_ONLY and id(node) in allowed:
                continue
            if ast.unparse(node) not in ("importlib.util",) and not FINDS_ONLY.startswith(ast.unparse(node)):
                found.add(f"use {ast.unparse(node)}")
            elif ast.unparse(node) == FINDS_ONLY:
                found.add("importlib.util.find_spec() of a dotted or computed name")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if isinstance(func, ast.Name) and name in NO_CALL:
                found.add(f"call {name}()")
            elif isinstance(func, ast.Attribute) and name in NO_METHOD:
                found.add(f".{name}()")
            elif name in NO_WRITER:
                found.add(f"{name}()")
            elif name == "open" and str(_mode(node)) not in READ_MODES:
                found.add(f"open() with mode {_mode(node)!r}")
    return found


def test_source_only_reads():
    """No module of source/ imports, writes or runs (the rules above), but for EXEMPT's named breaches; and every
    exempt breach is still there (else its entry goes)."""
    wrong, stale = [], []
    for path in sorted((PKG / "source").glob("*.py")):
        found, allowed = source_breaches(path.read_text()), EXEMPT.get(path.name, set())
        wrong += [f"source/{path.name}: {b}" for b in sorted(found - allowed)]
        stale += [f"source/{path.name}: {b}" for b in sorted(allowed - found)]
    assert wrong == [], (
        "source/ reads SGLang's source only; move this to trees/ (getting or changing a tree) or judging/"
    )
    assert stale == [], "an EXEMPT breach is gone: drop it from EXEMPT (tests/test_layers.py)"
    assert set(EXEMPT) <= {p.name for p in (PKG / "source").glob("*.py")}, "EXEMPT names a module not in source/"


@pytest.mark.parametrize(
    ("text", "breach"),
    [
        ("import subprocess", "import subprocess"),
        ("import shutil as sh", "import shutil"),
        ("from tempfile import TemporaryDirectory", "import tempfile"),
        ("import importlib", "import importlib"),
        ("from importlib import import_module", "import importlib"),
        (
            "import importlib.util\nimportlib.util.spec_from_file_location('m', 'm.py')",
            "use importlib.util.spec_from_file_location",
        ),
        (
            "import importlib.util\nimportlib.util.find_spec('sglang.srt')",
            "importlib.util.find_spec() of a dotted or computed name",
        ),
        (
            "import importlib.util\nimportlib.util.find_spec(name)",
            "importlib.util.find_spec() of a dotted or computed name",
        ),
        ("import runpy", "import runpy"),
        ("exec('x = 1')", "call exec()"),
        ("eval('1')", "call eval()"),
        ("code = compile(tree, 'f', 'exec')", "call compile()"),
        ("__import__('sglang')", "call __import__()"),
        ("path.write_text('x')", ".write_text()"),
        ("path.write_bytes(b'x')", ".write_bytes()"),
        ("write_atomic(path, 'x')", "write_atomic()"),
        ("files.atomic_file(path)", "atomic_file()"),
        ("open(path, 'w')", "open() with mode 'w'"),
        ("path.open('a')", "open() with mode 'a'"),
        ("open(path, mode='r+')", "open() with mode 'r+'"),
        ("open(path, mode)", "open() with mode '(not a constant)'"),
    ],
)
def test_the_source_check_sees_a_breach(monkeypatch, tmp_path, text, breach):
    assert breach in source_breaches(text)
    planted = tmp_path / "source"
    planted.mkdir()
    (planted / "planted.py").write_text(text + "\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path)
    with pytest.raises(AssertionError, match="reads SGLang's source only"):
        test_source_only_reads()


@pytest.mark.parametrize(
    "text",
    [
        "import importlib.util\nspec = importlib.util.find_spec('sglang')",  # finds, does not import
        "text = path.read_text()",
        "with open(path) as f: f.read()",
        "with path.open('rb') as f: f.read()",
        "tree = ast.parse(text); value = ast.literal_eval(node)",
        "re.compile('x')",  # a method called compile is not the builtin
    ],
)
def test_reading_is_no_breach(text):
    assert source_breaches(text) == set()


# -- what a command loads --------------------------------------------------------------------------------------


def loaded_by(*words: str) -> set[str]:
    """The modules the program imports to run ``sglang-eagle3 WORDS``, as Python's own -X importtime lists them."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "sglang_eagle3.cli", *words], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize(
    "words, not_loaded",
    [
        (["models", "--help"], {"serving.settings", "commands.bench", "commands.serve", "commands.patch"}),
        (["patch", "list"], {"commands.bench", "commands.models", "commands.serve"}),
        (
            ["--version"],
            {
                "commands.patch",
                "commands.probe",
                "commands.settings",
                "commands.serve",
                "commands.bench",
                "commands.models",
                "serving.settings",
                "pydantic",
            },
        ),  # fmt: skip
    ],
)
def test_a_command_loads_its_own_module_and_not_the_others(words, not_loaded):
    """cli.py imports a command's module when that command runs (click's lazily loaded subcommands); the settings
    model and pydantic load only with a command that reads the settings. `--help` lists every command, so it loads
    them all: the check that the names are real."""
    qualified = {name if name == "pydantic" else f"sglang_eagle3.{name}" for name in not_loaded}
    assert not qualified & loaded_by(*words)
    assert qualified <= loaded_by("--help") | {"pydantic"}
